//! The slice topologies GKE offers per generation. Any other topology can never be
//! provisioned, so a spec naming one is refused rather than waited on forever.
//!
//! Sources: Cloud TPU "TPU versions"/"Types and topologies" and GKE "Plan TPUs in GKE".
//! v5e and v6e (2D) come in a fixed list of shapes. v4, v5p and v7x (3D) take `AxBxC`
//! shapes whose every dimension is at most 4 or a multiple of 4 (e.g. `2x2x1`, `2x2x4`,
//! `4x4x8`, `8x16x16`); that rule is checked here, and GKE's capacity limits per zone are
//! left to GKE.

use super::types::{Generation, Topology};

/// The 2D shapes of v5e and v6e slices.
pub const TOPOLOGIES_2D: &[&str] = &["1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"];

/// None when GKE offers `topology` for `generation`, else what it does offer.
pub fn not_offered(generation: Generation, topology: &Topology) -> Option<String> {
    match generation.topology_dims() {
        2 => {
            let text = topology.to_string();
            (!TOPOLOGIES_2D.contains(&text.as_str())).then(|| {
                format!(
                    "topology {text} is not offered by GKE for {}; choose one of {}",
                    generation.accelerator_label(),
                    TOPOLOGIES_2D.join(", ")
                )
            })
        }
        _ => {
            let fits = topology.dims().iter().all(|d| *d <= 4 || d % 4 == 0);
            (!fits).then(|| {
                format!(
                    "topology {topology} is not offered by GKE for {}: each dimension must be 1, 2, 4 or a multiple of 4 (e.g. 2x2x1, 2x2x4, 2x4x4, 4x4x4, 4x4x8, 4x8x8, 8x8x8)",
                    generation.accelerator_label()
                )
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(generation: Generation, text: &str) -> Option<String> {
        not_offered(generation, &Topology::parse(text).unwrap())
    }

    #[test]
    fn every_2d_shape_gke_offers_passes_and_others_list_them() {
        for g in [Generation::V5e, Generation::V6e] {
            for t in TOPOLOGIES_2D {
                assert_eq!(check(g, t), None, "{g:?} {t}");
            }
        }
        let refused = check(Generation::V6e, "4x5").expect("4x5 is no v6e shape");
        assert_eq!(
            refused,
            "topology 4x5 is not offered by GKE for tpu-v6e-slice; choose one of 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16"
        );
        assert!(check(Generation::V5e, "2x8").is_some());
    }

    #[test]
    fn three_d_shapes_follow_the_rule() {
        for t in [
            "2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "8x16x16", "12x12x24",
        ] {
            assert_eq!(check(Generation::V5p, t), None, "{t}");
        }
        for t in ["2x2x6", "3x4x5", "4x4x10"] {
            assert!(check(Generation::V4, t).is_some(), "{t}");
        }
    }
}
