//! The operator's labels of one pod, read once.

use crate::lean::LeanPod;

/// The operator's labels of one pod, parsed once (the planner looks at 64,000 of them).
#[derive(Clone, Copy, Debug)]
pub struct PodFacts<'a> {
    pub pod: &'a LeanPod,
    pub cluster: Option<&'a str>,
    pub role: Option<&'a str>,
    pub group: Option<&'a str>,
    pub replica: Option<u32>,
    pub host: Option<u64>,
    pub epoch: Option<u64>,
    pub incarnation: Option<u64>,
    pub slice: Option<&'a str>,
    pub template_hash: Option<&'a str>,
    pub membership: Option<&'a str>,
    /// The placeholder set of a spare pod (`slices.dev/spare-index`).
    pub spare: Option<u32>,
}

impl<'a> PodFacts<'a> {
    pub fn of(pod: &'a LeanPod) -> PodFacts<'a> {
        let mut facts = PodFacts {
            pod,
            cluster: None,
            role: None,
            group: None,
            replica: None,
            host: None,
            epoch: None,
            incarnation: None,
            slice: None,
            template_hash: None,
            membership: None,
            spare: None,
        };
        // One string, in order (`OwnLabels`): no map to walk, and each name is matched by its
        // length and bytes against constants (64,000 pods a plan).
        for (name, value) in pod.labels.iter() {
            facts.read(name.as_bytes(), value);
        }
        facts
    }

    /// Take in the value of the label `slices.dev/<suffix>`.
    fn read(&mut self, suffix: &[u8], v: &'a str) {
        match suffix.len() {
            4 if suffix == b"role" => self.role = Some(v),
            5 if suffix == b"group" => self.group = Some(v),
            5 if suffix == b"epoch" => self.epoch = v.parse().ok(),
            5 if suffix == b"slice" => self.slice = Some(v),
            7 if suffix == b"cluster" => self.cluster = Some(v),
            10 if suffix == b"host-index" => self.host = v.parse().ok(),
            10 if suffix == b"membership" => self.membership = Some(v),
            11 if suffix == b"incarnation" => self.incarnation = v.parse().ok(),
            11 if suffix == b"spare-index" => self.spare = v.parse().ok(),
            13 if suffix == b"replica-index" => self.replica = v.parse().ok(),
            13 if suffix == b"template-hash" => self.template_hash = Some(v),
            _ => {}
        }
    }
}
