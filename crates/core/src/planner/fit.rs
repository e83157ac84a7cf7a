//! Which slices of a group's shape its pods could run on at all: the template's node
//! selector, required node affinity and tolerations against each slice's nodes. A slice
//! they could not run on is neither counted nor chosen, and the status says why.

use super::state::Planner;
use crate::api::validate::ResolvedGroup;
use crate::fit::PodNeeds;
use crate::inventory::Slice;

/// Unfit slices named in a group's status; the rest are counted.
const UNFIT_LISTED: usize = 8;

/// What the group's pods ask of their nodes.
pub(super) fn needs<'g>(group: &ResolvedGroup<'g>) -> PodNeeds<'g> {
    PodNeeds::of(group.spec.template.spec.as_ref(), group.shape.is_some())
}

/// The group's pods could run on every node of the slice.
pub(super) fn fits(slice: &Slice, needs: &PodNeeds<'_>) -> bool {
    slice.misfit(needs).is_none()
}

impl Planner<'_> {
    /// Slices of the group's shape its pods could not run on, and why (for `kubectl
    /// describe`): at most [`UNFIT_LISTED`], then how many more.
    pub(super) fn unfit_slices(&self, group: &ResolvedGroup<'_>) -> Vec<String> {
        let Some(shape) = &group.shape else {
            return Vec::new();
        };
        let needs = needs(group);
        let accelerator = shape.generation.accelerator_label();
        let topology = shape.topology.to_string();
        let mut unfit = self
            .inventory
            .slices()
            .filter(|s| s.matches(accelerator, &topology, shape.hosts))
            .filter_map(|s| Some(format!("{}: {}", s.id, s.misfit(&needs)?)));
        let mut listed: Vec<String> = unfit.by_ref().take(UNFIT_LISTED).collect();
        let more = unfit.count();
        if more > 0 {
            listed.push(format!("and {more} more"));
        }
        listed
    }
}
