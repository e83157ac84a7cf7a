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

impl<'a> Planner<'a> {
    /// The slices of the group's shape (accelerator, topology, hosts), in name order; none
    /// for a group without TPU.
    pub(super) fn slices_of_shape(&self, group: &ResolvedGroup<'_>) -> Vec<&'a Slice> {
        let Some(shape) = &group.shape else {
            return Vec::new();
        };
        let accelerator = shape.generation.accelerator_label();
        let topology = shape.topology.to_string();
        let inventory: &'a crate::inventory::Inventory = self.inventory;
        inventory
            .slices()
            .filter(|s| s.matches(accelerator, &topology, shape.hosts))
            .collect()
    }

    /// The slices of the group's shape its pods could run on.
    pub(super) fn fitting_slices(&self, group: &ResolvedGroup<'_>) -> Vec<&'a Slice> {
        let needs = needs(group);
        let mut slices = self.slices_of_shape(group);
        slices.retain(|s| fits(s, &needs));
        slices
    }

    /// Slices of the group's shape its pods could not run on, and why (for `kubectl
    /// describe`): at most [`UNFIT_LISTED`], then how many more.
    pub(super) fn unfit_slices(&self, group: &ResolvedGroup<'_>) -> Vec<String> {
        let needs = needs(group);
        let unfit = self
            .slices_of_shape(group)
            .into_iter()
            .filter_map(|s| Some(format!("{}: {}", s.id, s.misfit(&needs)?)));
        first_few(unfit, UNFIT_LISTED)
    }
}

/// The first `n` of `items`, then how many more (`and 3 more`).
pub(super) fn first_few(mut items: impl Iterator<Item = String>, n: usize) -> Vec<String> {
    let mut listed: Vec<String> = items.by_ref().take(n).collect();
    let more = items.count();
    if more > 0 {
        listed.push(format!("and {more} more"));
    }
    listed
}
