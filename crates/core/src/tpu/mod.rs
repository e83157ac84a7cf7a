//! TPU slice math: accelerator labels, topologies, chips per host and hosts per slice.
//!
//! Pure and table-driven; see `docs/env-contract.md` for where each fact comes from.

mod offered;
mod types;
pub use offered::{TOPOLOGIES_2D, not_offered};
pub use types::{Generation, MULTI_HOST_CHIPS, ShapeError, Topology};

/// The resolved shape of one slice: what every replica group is made of.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SliceShape {
    pub generation: Generation,
    pub topology: Topology,
    pub chips_per_host: u32,
    pub hosts: u32,
}

impl SliceShape {
    /// Resolve a slice shape. `chips_per_host` comes from the pod's `google.com/tpu` request
    /// or an explicit field; `None` falls back to the generation default.
    pub fn resolve(
        accelerator: &str,
        topology: &str,
        chips_per_host: Option<u32>,
    ) -> Result<SliceShape, ShapeError> {
        let generation = Generation::from_accelerator_label(accelerator)
            .ok_or_else(|| ShapeError::UnknownAccelerator(accelerator.to_string()))?;
        let topology = Topology::parse(topology)?;
        let want = generation.topology_dims();
        if topology.dims().len() != want {
            return Err(ShapeError::WrongDimensions {
                generation,
                topology: topology.to_string(),
                got: topology.dims().len(),
                want,
                example: if want == 2 { "4x4" } else { "2x2x4" },
            });
        }
        let chips = topology.chips();
        let chips_per_host =
            chips_per_host.unwrap_or_else(|| generation.default_chips_per_host(chips));
        if !generation
            .allowed_chips_per_host()
            .contains(&chips_per_host)
        {
            return Err(ShapeError::ChipsPerHostNotOffered {
                generation,
                chips_per_host,
                allowed: generation.allowed_chips_per_host(),
            });
        }
        if chips < chips_per_host || chips % chips_per_host != 0 {
            return Err(ShapeError::NotDivisible {
                topology: topology.to_string(),
                chips,
                chips_per_host,
            });
        }
        if chips_per_host != MULTI_HOST_CHIPS && chips != chips_per_host {
            return Err(ShapeError::SingleHostOnly {
                generation,
                chips_per_host,
                topology: topology.to_string(),
                single: generation.single_host_topology(chips_per_host),
            });
        }
        Ok(SliceShape {
            generation,
            hosts: chips / chips_per_host,
            topology,
            chips_per_host,
        })
    }

    pub fn chips(&self) -> u32 {
        self.topology.chips()
    }

    pub fn is_multi_host(&self) -> bool {
        self.hosts > 1
    }

    /// Ray's pod type, e.g. `v6e-16` or `v4-32` (chips x TensorCores per chip).
    pub fn pod_type(&self) -> String {
        let cores = self.chips() * self.generation.cores_per_chip();
        format!("{}-{}", self.generation.pod_type_prefix(), cores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (accelerator, topology, chips per host given, chips, chips/host, hosts, pod type)
    type ShapeRow = (
        &'static str,
        &'static str,
        Option<u32>,
        u32,
        u32,
        u32,
        &'static str,
    );

    #[test]
    fn table_of_supported_shapes() {
        let table: &[ShapeRow] = &[
            ("tpu-v6e-slice", "1x1", None, 1, 1, 1, "v6e-1"),
            ("tpu-v6e-slice", "2x2", None, 4, 4, 1, "v6e-4"),
            ("tpu-v6e-slice", "2x4", Some(8), 8, 8, 1, "v6e-8"),
            ("tpu-v6e-slice", "2x4", Some(4), 8, 4, 2, "v6e-8"),
            ("tpu-v6e-slice", "2x4", None, 8, 4, 2, "v6e-8"),
            ("tpu-v6e-slice", "4x4", None, 16, 4, 4, "v6e-16"),
            ("tpu-v6e-slice", "4x8", None, 32, 4, 8, "v6e-32"),
            ("tpu-v6e-slice", "8x8", None, 64, 4, 16, "v6e-64"),
            ("tpu-v6e-slice", "16x16", None, 256, 4, 64, "v6e-256"),
            (
                "tpu-v5-lite-podslice",
                "4x4",
                None,
                16,
                4,
                4,
                "v5litepod-16",
            ),
            (
                "tpu-v5-lite-podslice",
                "2x4",
                Some(8),
                8,
                8,
                1,
                "v5litepod-8",
            ),
            ("tpu-v4-podslice", "2x2x1", None, 4, 4, 1, "v4-8"),
            ("tpu-v4-podslice", "2x2x4", None, 16, 4, 4, "v4-32"),
            ("tpu-v4-podslice", "4x4x4", None, 64, 4, 16, "v4-128"),
            ("tpu-v5p-slice", "2x2x4", None, 16, 4, 4, "v5p-32"),
            ("tpu-v5p-slice", "8x8x8", None, 512, 4, 128, "v5p-1024"),
            ("tpu7x", "2x2x1", None, 4, 4, 1, "tpu7x-8"),
            ("tpu7x", "2x2x2", None, 8, 4, 2, "tpu7x-16"),
            ("tpu7x", "4x4x4", Some(4), 64, 4, 16, "tpu7x-128"),
        ];
        for (acc, topo, cph, chips, want_cph, hosts, pod_type) in table {
            let shape = SliceShape::resolve(acc, topo, *cph)
                .unwrap_or_else(|e| panic!("{acc} {topo} {cph:?}: {e}"));
            assert_eq!(shape.chips(), *chips, "{acc} {topo}");
            assert_eq!(shape.chips_per_host, *want_cph, "{acc} {topo}");
            assert_eq!(shape.hosts, *hosts, "{acc} {topo}");
            assert_eq!(shape.is_multi_host(), *hosts > 1);
            assert_eq!(shape.pod_type(), *pod_type, "{acc} {topo}");
        }
    }

    #[test]
    fn impossible_combinations_explain_the_fix() {
        let cases: &[(&str, &str, Option<u32>, &str)] = &[
            ("tpu-v9-slice", "4x4", None, "use one of tpu-v4-podslice"),
            ("tpu-v6e-slice", "4by4", None, "of the form AxB or AxBxC"),
            ("tpu-v6e-slice", "0x4", None, "of the form AxB or AxBxC"),
            ("tpu-v6e-slice", "4x4x4x4", None, "of the form AxB"),
            ("tpu-v6e-slice", "2x2x4", None, "use 2 (e.g. 4x4)"),
            ("tpu-v5p-slice", "4x4", None, "use 3 (e.g. 2x2x4)"),
            (
                "tpu-v5p-slice",
                "2x2x4",
                Some(8),
                "set the container's google.com/tpu",
            ),
            (
                "tpu-v6e-slice",
                "1x1",
                Some(4),
                "not a whole number of 4-chip hosts",
            ),
            (
                "tpu-v6e-slice",
                "2x4",
                Some(3),
                "hosts have [1, 4, 8] chips, not 3",
            ),
            (
                "tpu-v4-podslice",
                "1x1x2",
                None,
                "not a whole number of 4-chip hosts",
            ),
            // 1- and 8-chip machines are single-host slices only: no multi-host slice of them.
            (
                "tpu-v6e-slice",
                "2x2",
                Some(1),
                "1-chip hosts come only as a single-host slice of 1 chip (topology 1x1), not 2x2",
            ),
            (
                "tpu-v6e-slice",
                "4x4",
                Some(1),
                "set the container's google.com/tpu request (or tpu.chipsPerHost) to 4",
            ),
            (
                "tpu-v5-lite-podslice",
                "4x4",
                Some(8),
                "8-chip hosts come only as a single-host slice of 8 chips (topology 2x4), not 4x4",
            ),
        ];
        for (acc, topo, cph, fragment) in cases {
            let err = SliceShape::resolve(acc, topo, *cph).expect_err(topo);
            let text = err.to_string();
            assert!(text.contains(fragment), "{acc} {topo}: {text}");
        }
    }

    #[test]
    fn topology_round_trips() {
        for text in ["4x4", "2x2x4", "16x16", "8x8x8"] {
            assert_eq!(Topology::parse(text).unwrap().to_string(), text);
        }
    }

    #[test]
    fn labels_round_trip() {
        for generation in Generation::ALL {
            assert_eq!(
                Generation::from_accelerator_label(generation.accelerator_label()),
                Some(generation)
            );
        }
    }
}
