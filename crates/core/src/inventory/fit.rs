//! Could a group's pods run on every node of a slice (see `crate::fit`).

use super::types::Slice;
use crate::constants::NODE_LABEL_HOSTNAME;
use crate::fit::PodNeeds;

impl Slice {
    /// Why pods with `needs` could not run on some node of the slice, if they could not.
    ///
    /// Each distinct set of its nodes' labels and taints is checked once. A requirement on
    /// the node's name (its hostname label, `metadata.name`) is checked against every node
    /// with every set: a slice whose nodes differ in labels may then be refused where the
    /// scheduler would have found a way, never the other way round.
    pub fn misfit(&self, needs: &PodNeeds<'_>) -> Option<String> {
        let by_name = needs.reads_node_name(NODE_LABEL_HOSTNAME);
        let names: &[String] = match by_name {
            true => &self.nodes,
            false => std::slice::from_ref(self.nodes.first()?),
        };
        for traits in &self.traits {
            for name in names {
                let label = |key: &str| match key {
                    NODE_LABEL_HOSTNAME => Some(name.as_str()),
                    _ => traits.label(key),
                };
                if let Some(refusal) = needs.refusal(label, traits.taints(), name) {
                    let node = match (by_name, self.traits.len()) {
                        (true, _) => format!("node {name}"),
                        (false, 1) => "its nodes".to_string(),
                        (false, _) => "some of its nodes".to_string(),
                    };
                    return Some(format!("{refusal} ({node})"));
                }
            }
        }
        None
    }
}
