//! What a node offers the scheduler's filters beyond its health: its labels (every one a
//! `nodeSelector` or required node affinity may name) and its `NoSchedule`/`NoExecute`
//! taints. The planner compares them with a group's pod template, so a slice this job's
//! pods could never run on is neither counted nor chosen (see `inventory::fit`).
//!
//! A GKE node carries some 25 labels. Kept as a map that is about 50 allocations a node;
//! here they are one string, `key=value` lines in key order (neither a label's key nor its
//! value can hold `=` or a line break), so 12,800 nodes cost one allocation each.

use std::collections::BTreeMap;

use crate::constants::{
    NODE_LABEL_HOSTNAME, TAINT_IMPENDING_TERMINATION, TAINT_NOT_READY, TAINT_UNREACHABLE,
};

/// A node's labels and scheduling taints, as the scheduler's filters read them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeTraits {
    labels: Box<str>,
    taints: Box<[NodeTaint]>,
}

/// A `NoSchedule` or `NoExecute` taint (a `PreferNoSchedule` one never keeps a pod off).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeTaint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

impl std::fmt::Display for NodeTaint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.value.is_empty() {
            true => write!(f, "{}:{}", self.key, self.effect),
            false => write!(f, "{}={}:{}", self.key, self.value, self.effect),
        }
    }
}

impl NodeTraits {
    /// `labels` minus the hostname (which differs on every node; the planner reads the
    /// node's name for it), and the taints that filter pods. The node-lifecycle taints are
    /// left out: they make a node not ready, which the slice's health already says.
    pub fn new<'a>(
        labels: impl IntoIterator<Item = (&'a String, &'a String)>,
        taints: impl IntoIterator<Item = NodeTaint>,
    ) -> NodeTraits {
        let sorted: BTreeMap<&str, &str> = labels
            .into_iter()
            .filter(|(k, _)| k.as_str() != NODE_LABEL_HOSTNAME)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut text = String::new();
        for (k, v) in sorted {
            text.push_str(k);
            text.push('=');
            text.push_str(v);
            text.push('\n');
        }
        let lifecycle = [
            TAINT_NOT_READY,
            TAINT_UNREACHABLE,
            TAINT_IMPENDING_TERMINATION,
        ];
        let taints = taints
            .into_iter()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .filter(|t| !lifecycle.contains(&t.key.as_str()))
            .collect();
        NodeTraits {
            labels: text.into(),
            taints,
        }
    }

    /// The value of label `key`, if the node has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.lines().find_map(|line| {
            let (k, v) = line.split_once('=')?;
            (k == key).then_some(v)
        })
    }

    pub fn taints(&self) -> &[NodeTaint] {
        &self.taints
    }
}
