//! Hundreds of randomly mutated TrainClusters at once, sent as raw JSON to the in-process API
//! emulator with the operator at the chart's settings. Each must be rejected at admission
//! (4xx) or get a status phase in bounded time; once settled, nothing is written for 20 s
//! (no status rewritten, no refused create tried again); the valid ones come up as they
//! would alone. Templates the API server refuses as pods (in a worker group or the head) are
//! `Invalid`, as the emulator refuses them as kube-apiserver does.
//!
//! Seeded: the seed is printed; `FUZZ_SEED=<seed>` replays a run, `FUZZ_COUNT=<n>` changes
//! the number of objects (300 by default).
//!
//! Runs on a real control plane as the e2e scenarios do (`KUBEBUILDER_ASSETS`, see
//! docs/reliability.md). Writes are then seen as the operator's write counters and the
//! stored objects' resourceVersions; on the emulator also request by request, with the
//! events each object got.

#[path = "e2e/harness.rs"]
mod harness;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::{Env, EnvOptions, label};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::{Value, json};
use slice_core::api::{Phase, TrainCluster};
use slice_core::constants::*;
use slice_emulator::EmulatorOptions;
use slice_sim::NodePoolSpec;

const V6E: &str = "tpu-v6e-slice";
/// The slice shapes that get node pools: (accelerator, topology, hosts).
const PROVISIONED: [(&str, &str, u32); 2] = [(V6E, "2x2", 1), (V6E, "4x4", 4)];

/// SplitMix64: small, seedable, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

fn seed() -> u64 {
    std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// A valid spec: one v6e group of 2x2 (one host) or 4x4 (four hosts) slices, min = max.
fn base(rng: &mut Rng, name: &str, namespace: &str) -> Value {
    let topology = if rng.below(4) == 0 { "4x4" } else { "2x2" };
    let slices = 1 + rng.below(2);
    json!({
        "apiVersion": "slices.dev/v1alpha1",
        "kind": "TrainCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "membership": rng.pick(&["Multislice", "Independent"]),
            "elastic": {"resizeIntervalSeconds": 3},
            "failurePolicy": {"backoffSeconds": 1, "nodeNotReadyGraceSeconds": 2},
            "workerGroups": [{
                "name": "workers",
                "tpu": {"accelerator": V6E, "topology": topology},
                "slices": {"min": slices, "max": slices},
                "template": {"spec": {"containers": [{
                    "name": "main",
                    "image": "python:3.11",
                    "resources": {"limits": {"google.com/tpu": "4"}},
                }]}},
            }],
        },
    })
}

/// Removes `key` from the object at `v` (if it is one).
fn remove(v: &mut Value, key: &str) {
    if let Some(map) = v.as_object_mut() {
        map.remove(key);
    }
}

/// True while the object still has the base's structure down to the first container, so
/// that every mutation below can address its field (earlier ones may have replaced a level).
fn well_formed(tc: &Value) -> bool {
    let object_or_absent = |v: &Value| v.is_object() || v.is_null();
    let group = &tc["spec"]["workerGroups"][0];
    let container = &group["template"]["spec"]["containers"][0];
    tc["spec"].is_object()
        && tc["metadata"]["name"].is_string()
        && group.is_object()
        && object_or_absent(&group["tpu"])
        && object_or_absent(&group["slices"])
        && group["template"]["spec"]["containers"].is_array()
        && container.is_object()
        && object_or_absent(&container["resources"])
        && object_or_absent(&container["resources"]["limits"])
}

/// Mutations every run has (as the first objects): a worker and a head container the API
/// server refuses as a pod.
const WORKER_REFUSED_AS_POD: usize = 39;
const HEAD_REFUSED_AS_POD: usize = 40;

/// Applies one random mutation; returns its name.
fn mutate(rng: &mut Rng, tc: &mut Value) -> String {
    let choice = rng.below(43);
    mutate_as(rng, tc, choice)
}

/// Applies mutation number `choice`; returns its name.
fn mutate_as(rng: &mut Rng, tc: &mut Value, choice: usize) -> String {
    if !well_formed(tc) {
        return "(none: an earlier mutation replaced the structure)".into();
    }
    let spec = &mut tc["spec"];
    let group = &mut spec["workerGroups"][0];
    let (what, value): (&str, Value) = match choice {
        // slices
        0 => {
            let max = group["slices"]["max"].as_i64().unwrap_or(1);
            group["slices"]["min"] = json!(max.saturating_add(1 + rng.below(3) as i64));
            ("slices.min > max", Value::Null)
        }
        1 => {
            let v = rng.pick(&[json!(-1), json!(i32::MIN), json!(-0.5)]);
            group["slices"]["min"] = v.clone();
            ("slices.min negative", v)
        }
        2 => {
            let v = rng.pick(&[
                json!(1001),
                json!(4_294_967_296u64),
                json!(u64::MAX),
                json!(1e30),
                json!(i64::MAX),
            ]);
            group["slices"]["max"] = v.clone();
            ("slices.max huge", v)
        }
        3 => {
            group["slices"]["max"] = json!(0);
            ("slices.max 0", Value::Null)
        }
        4 => {
            let v = rng.pick(&[json!("1"), json!(1.5), json!(true), json!([1]), Value::Null]);
            group["slices"]["min"] = v.clone();
            ("slices.min wrong type", v)
        }
        5 => {
            let v = rng.pick(&[json!("1-2"), json!(2), json!([1, 2]), Value::Null]);
            group["slices"] = v.clone();
            ("slices wrong type", v)
        }
        6 => {
            remove(group, "slices");
            ("slices missing", Value::Null)
        }
        7 => {
            group["slices"] = json!({"min": 2, "max": 2});
            ("slices 2..2 (valid)", Value::Null)
        }
        // topology
        8 | 9 => {
            let v = rng.pick(&[
                json!(""),
                json!("4x"),
                json!("x4"),
                json!("0x4"),
                json!("4*4"),
                json!("4X4"),
                json!(" 4x4"),
                json!("4x4 "),
                json!("-4x4"),
                json!("4x4x4x4"),
                json!("four"),
                json!("4x0"),
                json!("\u{0664}x\u{0664}"),
                json!("4x4\n"),
            ]);
            group["tpu"]["topology"] = v.clone();
            ("topology malformed", v)
        }
        10 => {
            let v = rng.pick(&[
                json!("1x1"),
                json!("3x3"),
                json!("2x2x2"),
                json!("99999999999x1"),
                json!("7x1"),
            ]);
            group["tpu"]["topology"] = v.clone();
            ("topology impossible", v)
        }
        11 => {
            let v = rng.pick(&[json!("4x8"), json!("8x8"), json!("2x2"), json!("4x4")]);
            group["tpu"]["topology"] = v.clone();
            ("topology other shape (valid)", v)
        }
        12 => {
            let v = rng.pick(&[json!(44), json!(["4", "4"]), json!({"x": 4}), json!(true)]);
            group["tpu"]["topology"] = v.clone();
            ("topology wrong type", v)
        }
        13 => {
            remove(&mut group["tpu"], "topology");
            ("topology missing", Value::Null)
        }
        // accelerator
        14 => {
            let v = rng.pick(&[
                json!("tpu-v9-slice"),
                json!(""),
                json!("TPU-V6E-SLICE"),
                json!("tpu-v6e-slice "),
                json!("nvidia-h100-80gb"),
            ]);
            group["tpu"]["accelerator"] = v.clone();
            ("accelerator unknown", v)
        }
        15 => {
            let v = rng.pick(&[json!(6), Value::Null, json!([]), json!({})]);
            group["tpu"]["accelerator"] = v.clone();
            ("accelerator wrong type", v)
        }
        16 => {
            let v = rng.pick(&[
                json!("tpu-v5p-slice"),
                json!("tpu-v4-podslice"),
                json!("tpu-v5-lite-podslice"),
                json!("tpu7x"),
            ]);
            group["tpu"]["accelerator"] = v.clone();
            ("accelerator other generation", v)
        }
        17 => {
            remove(&mut group["tpu"], "accelerator");
            ("accelerator missing", Value::Null)
        }
        // tpu / hostsPerGroup
        18 => {
            remove(group, "tpu");
            ("tpu missing", Value::Null)
        }
        19 => {
            let v = rng.pick(&[json!("v6e"), json!(4), json!([])]);
            group["tpu"] = v.clone();
            ("tpu wrong type", v)
        }
        20 => {
            // With tpu: both set (CEL). Without: out of range, the wrong type, or a valid
            // non-TPU group (whose template still asks for google.com/tpu).
            let with_tpu = rng.below(3) == 0;
            let v = if with_tpu {
                json!(2)
            } else {
                remove(group, "tpu");
                rng.pick(&[json!(0), json!(-1), json!("2"), json!(4097), json!(2)])
            };
            group["hostsPerGroup"] = v.clone();
            ("hostsPerGroup", v)
        }
        21 => {
            let v = rng.pick(&[json!(0), json!(9), json!(-4), json!("4"), json!(1.5)]);
            group["tpu"]["chipsPerHost"] = v.clone();
            ("chipsPerHost out of range", v)
        }
        22 => {
            let v = rng.pick(&[json!(1), json!(3), json!(8), json!(4)]);
            group["tpu"]["chipsPerHost"] = v.clone();
            ("chipsPerHost in range", v)
        }
        // template
        23 => {
            let v = rng.pick(&[
                json!("not-a-list"),
                json!([]),
                Value::Null,
                json!([{"image": "x"}]),
                json!([{"name": 5}]),
                json!([{"name": "main", "image": 7}]),
                json!({"name": "main"}),
            ]);
            group["template"]["spec"]["containers"] = v.clone();
            ("template containers malformed", v)
        }
        24 => {
            let v = rng.pick(&[
                json!("four"),
                json!("2"),
                json!("-4"),
                json!("4.5"),
                json!(4),
                json!("1e3"),
                json!({"n": 4}),
            ]);
            group["template"]["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"] =
                v.clone();
            ("template tpu limit", v)
        }
        25 => {
            let containers = group["template"]["spec"]["containers"]
                .as_array_mut()
                .unwrap();
            containers.push(json!({"name": "side", "image": "x",
                "resources": {"limits": {"google.com/tpu": "8"}}}));
            (
                "template second container with other tpu count",
                Value::Null,
            )
        }
        26 => {
            remove(&mut group["template"]["spec"]["containers"][0], "resources");
            ("template without tpu limits (valid)", Value::Null)
        }
        27 => {
            let v = rng.pick(&[json!("pod"), json!({}), json!({"spec": "x"}), json!(3)]);
            group["template"] = v.clone();
            ("template replaced", v)
        }
        28 => {
            let v = rng.pick(&[
                json!({"labels": "x"}),
                json!({"labels": {"a": 1}}),
                json!(5),
            ]);
            group["template"]["metadata"] = v.clone();
            ("template metadata malformed", v)
        }
        // workerGroups
        29 => {
            let v = rng.pick(&[json!([]), json!({}), json!("workers"), Value::Null]);
            spec["workerGroups"] = v.clone();
            ("workerGroups replaced", v)
        }
        30 => {
            let mut copy = spec["workerGroups"][0].clone();
            let valid = rng.below(2) == 0;
            if valid {
                copy["name"] = json!("extra");
            }
            spec["workerGroups"].as_array_mut().unwrap().push(copy);
            if valid {
                ("second group (valid)", Value::Null)
            } else {
                ("duplicate group name", Value::Null)
            }
        }
        31 => {
            let v = rng.pick(&[
                json!("Bad_Name"),
                json!(""),
                json!("a".repeat(41)),
                json!(7),
                json!("-w"),
            ]);
            group["name"] = v.clone();
            ("group name invalid", v)
        }
        32 => {
            let one = spec["workerGroups"][0].clone();
            spec["workerGroups"] = json!(
                (0..17)
                    .map(|i| {
                        let mut g = one.clone();
                        g["name"] = json!(format!("g{i}"));
                        g
                    })
                    .collect::<Vec<_>>()
            );
            ("17 groups", Value::Null)
        }
        // policies and the rest of the spec
        33 => {
            let v = rng.pick(&[
                json!("Sometimes"),
                json!("multislice"),
                json!(3),
                Value::Null,
            ]);
            spec["membership"] = v.clone();
            ("membership invalid", v)
        }
        34 => {
            let (field, v) = rng.pick(&[
                ("resizeIntervalSeconds", json!(-5)),
                ("resizeIntervalSeconds", json!("fast")),
                ("resizeIntervalSeconds", json!(86401)),
                ("allowedSliceCounts", json!([5])),
                ("allowedSliceCounts", json!([1, 2])),
                ("allowedSliceCounts", json!("all")),
                ("allowedSliceCounts", json!([-1])),
                ("waitForReadySlices", json!("yes")),
                ("waitForReadySlices", json!(false)),
            ]);
            spec["elastic"][field] = v.clone();
            ("elastic field", json!({field: v}))
        }
        35 => {
            let (field, v) = rng.pick(&[
                ("maxRestarts", json!(-1)),
                ("maxRestarts", json!(4_294_967_296u64)),
                ("maxRestarts", json!("many")),
                ("backoffSeconds", json!(3601)),
                ("maxPreemptions", json!(-1)),
                ("maxPreemptions", Value::Null),
                ("nodeNotReadyGraceSeconds", json!(1.5)),
            ]);
            spec["failurePolicy"][field] = v.clone();
            ("failurePolicy field", json!({field: v}))
        }
        36 => {
            let v = rng.pick(&[json!(true), json!("yes"), json!(1)]);
            spec["suspend"] = v.clone();
            ("suspend", v)
        }
        37 => {
            let v = rng.pick(&[
                json!("x"),
                json!({"template": "x"}),
                json!({"template": {"spec": {"containers": 3}}}),
            ]);
            spec["head"] = v.clone();
            ("head malformed", v)
        }
        38 => {
            let v = rng.pick(&[
                json!(null),
                json!([]),
                json!("spec"),
                json!({"replicas": 3}),
            ]);
            match v {
                Value::Object(extra) => {
                    spec["replicas"] = extra["replicas"].clone();
                    ("unknown spec field (pruned)", Value::Null)
                }
                other => {
                    tc["spec"] = other.clone();
                    ("spec replaced", other)
                }
            }
        }
        // what the API server refuses in a pod, in a worker or the head template
        WORKER_REFUSED_AS_POD => {
            let container = &mut group["template"]["spec"]["containers"][0];
            let v = container_fault(rng, container);
            ("worker container refused as a pod", v)
        }
        HEAD_REFUSED_AS_POD => {
            let mut container = json!({"name": "head", "image": "python:3.11"});
            let v = container_fault(rng, &mut container);
            spec["head"] = json!({"template": {"spec": {"containers": [container]}}});
            ("head container refused as a pod", v)
        }
        41 => {
            let v = rng.pick(&[
                json!({"ports": [{"name": "http", "containerPort": 8080, "protocol": "UDP"}]}),
                json!({"env": [{"name": "my.var-1 x", "value": "y"}]}),
                json!({"resources": {"limits": {"google.com/tpu": "4", "cpu": "2"},
                    "requests": {"google.com/tpu": "4", "cpu": "1500m"}}}),
            ]);
            let container = &mut group["template"]["spec"]["containers"][0];
            for (k, x) in v.as_object().unwrap() {
                container[k] = x.clone();
            }
            ("worker container edge (valid)", v)
        }
        _ => {
            let name = tc["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let v = rng.pick(&[
                json!(format!("{name}-{}", "a".repeat(50))),
                json!(name.to_uppercase()),
                json!(format!("{name}.dotted")),
            ]);
            tc["metadata"]["name"] = v.clone();
            ("metadata.name invalid", v)
        }
    };
    if value.is_null() {
        what.to_string()
    } else {
        format!("{what}: {value}")
    }
}

/// Breaks `container` (an object) the way the API server refuses in a pod; returns what.
fn container_fault(rng: &mut Rng, container: &mut Value) -> Value {
    let v = rng.pick(&[
        json!({"name": "a-"}),
        json!({"name": "Main"}),
        json!({"name": ""}),
        json!({"image": ""}),
        json!({"ports": [{"containerPort": 0}]}),
        json!({"ports": [{"containerPort": 70000}]}),
        json!({"ports": [{"name": "HTTP", "containerPort": 80}]}),
        json!({"ports": [{"containerPort": 80, "protocol": "HTTP"}]}),
        json!({"ports": [{"name": "p", "containerPort": 80}, {"name": "p", "containerPort": 81}]}),
        json!({"env": [{"name": "A=B", "value": "x"}]}),
        json!({"env": [{"name": "", "value": "x"}]}),
        json!({"volumeMounts": [{"name": "data", "mountPath": "/data"}]}),
        json!({"resources": {"limits": {"cpu": "lots"}}}),
        json!({"resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}}),
        json!({"resources": {"limits": {"memory": "-1Gi"}}}),
    ]);
    if let Some(map) = container.as_object_mut() {
        for (k, x) in v.as_object().unwrap() {
            map.insert(k.clone(), x.clone());
        }
        if v.get("image") == Some(&json!("")) {
            map.remove("image");
        }
    }
    v
}

/// What an object that was accepted must settle as, decided from the stored object with the
/// operator's own types and validation (as if it were alone with the provisioned pools).
#[derive(Clone, Debug, PartialEq)]
enum Expect {
    /// Not a TrainCluster for the operator's types: Invalid, reported as malformed.
    Malformed,
    /// Fails the operator's validation: Invalid.
    Invalid,
    Suspended,
    /// Every group has provisioned slices: Running with this many groups, slices and pods.
    Running {
        groups: u32,
        slices: u32,
        pods: usize,
    },
    /// A shape without node pools: waits (WaitingForSlices); groups of another cluster
    /// shape that has node pools run meanwhile (`pods` of them).
    Waiting {
        groups: u32,
        slices: u32,
        pods: usize,
    },
    /// A shape without node pools and `waitForReadySlices: false`: its pods are created and
    /// wait (for an autoscaler) in Pending; those of groups with node pools run.
    Unscheduled {
        groups: u32,
        slices: u32,
        pods: usize,
        running: usize,
    },
}

fn expect(object: &Value) -> Expect {
    let Ok(tc) = serde_json::from_value::<TrainCluster>(object.clone()) else {
        return Expect::Malformed;
    };
    let Ok(groups) = slice_core::api::validate::resolve(&tc) else {
        return Expect::Invalid;
    };
    if tc.spec.suspend {
        return Expect::Suspended;
    }
    // A group without tpu (hostsPerGroup) is not placed on slices: alone, it just runs.
    let provisioned = |g: &slice_core::api::validate::ResolvedGroup<'_>| {
        g.spec.tpu.as_ref().is_none_or(|tpu| {
            PROVISIONED
                .iter()
                .any(|(a, t, h)| tpu.accelerator == *a && tpu.topology == *t && g.hosts == *h)
        })
    };
    let pods =
        |g: &slice_core::api::validate::ResolvedGroup<'_>| (g.spec.slices.max * g.hosts) as usize;
    if !groups.iter().all(provisioned) {
        if !tc.spec.elastic.wait_for_ready_slices {
            return Expect::Unscheduled {
                groups: groups.len() as u32,
                slices: groups.iter().map(|g| g.spec.slices.max).sum(),
                pods: groups.iter().map(pods).sum(),
                running: groups.iter().filter(|g| provisioned(g)).map(pods).sum(),
            };
        }
        let running: Vec<_> = groups.iter().filter(|g| provisioned(g)).collect();
        return Expect::Waiting {
            groups: groups.len() as u32,
            slices: running.iter().map(|g| g.spec.slices.max).sum(),
            pods: running.iter().map(|g| pods(g)).sum(),
        };
    }
    Expect::Running {
        groups: groups.len() as u32,
        slices: groups.iter().map(|g| g.spec.slices.max).sum(),
        pods: groups.iter().map(pods).sum(),
    }
}

/// `value` with every null-valued object field removed (kube-apiserver prunes them before
/// defaulting, for fields not marked nullable, which none of ours is).
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Slices of each provisioned shape the objects that resolve would need.
fn demand(objects: &[&Value]) -> BTreeMap<&'static str, u32> {
    let mut need = BTreeMap::new();
    for object in objects {
        // As stored: the API server drops nulls of non-nullable fields, then defaults them.
        let Ok(tc) = serde_json::from_value::<TrainCluster>(without_nulls(object)) else {
            continue;
        };
        let Ok(groups) = slice_core::api::validate::resolve(&tc) else {
            continue;
        };
        for g in &groups {
            // More than the schema's maxima is rejected at admission.
            if g.spec.slices.max > 1000 || g.hosts > 4096 {
                continue;
            }
            let Some(tpu) = &g.spec.tpu else {
                // A non-TPU group's pods may still ask for chips: room for one per node.
                *need.entry("2x2").or_insert(0) += g.spec.slices.max * g.hosts;
                continue;
            };
            for (a, t, h) in PROVISIONED {
                if tpu.accelerator == a && tpu.topology == t && g.hosts == h {
                    *need.entry(t).or_insert(0) += g.spec.slices.max;
                }
            }
        }
    }
    need
}

fn phase_of(object: &Value) -> Option<Phase> {
    serde_json::from_value(object["status"]["phase"].clone()).ok()
}

fn settled(expect: &Expect, object: &Value) -> bool {
    let Some(phase) = phase_of(object) else {
        return false;
    };
    let status = &object["status"];
    match expect {
        Expect::Malformed => {
            phase == Phase::Invalid
                && status["conditions"].as_array().is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c["reason"] == "MalformedSpec"
                            && c["message"].as_str().is_some_and(|m| {
                                m.contains("does not match the TrainCluster schema")
                            })
                    })
                })
        }
        Expect::Invalid => {
            phase == Phase::Invalid
                && status["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "SpecValid" && c["status"] == "False")
                })
        }
        Expect::Suspended => phase == Phase::Suspended,
        Expect::Waiting { .. } => phase == Phase::WaitingForSlices,
        Expect::Unscheduled { .. } => phase == Phase::Pending,
        Expect::Running { slices, .. } => {
            phase == Phase::Running && status["readySlices"] == json!(slices)
        }
    }
}

/// How long nothing may be written once everything settled: longer than the first retry of
/// a refused create (10 s) and than the operator's own timers of a settled cluster.
const QUIET_SECONDS: u64 = 20;

/// The annotation the test itself writes to make the operator reconcile.
const TOUCHED: &str = "fuzz.slices.dev/touched";

/// Writes since `mark` other than lease renewals and the test's own annotation patches;
/// a status write is shown as the fields it changed. A refused create is a write too: none
/// is tried again once settled.
fn unexpected_writes(emulator: &slice_emulator::Emulator, mark: u64) -> Vec<String> {
    let all = emulator.requests().all();
    emulator
        .requests()
        .writes_since_list(mark)
        .into_iter()
        .filter(|r| !r.path.contains("/leases/"))
        .filter(|r| !(r.method == "PATCH" && r.body.contains(TOUCHED)))
        .map(|r| {
            let previous = all
                .iter()
                .rfind(|p| p.seq < r.seq && p.path == r.path && p.is_write() && p.status < 300)
                .and_then(|p| p.body_json());
            match (r.path.ends_with("/status"), previous, r.body_json()) {
                (true, Some(before), Some(after)) => format!(
                    "{} {}: changed {}",
                    r.method,
                    r.path,
                    changed_fields(&before, &after, "").join(", ")
                ),
                _ => format!(
                    "{} {} {}",
                    r.method,
                    r.path,
                    r.body.chars().take(300).collect::<String>()
                ),
            }
        })
        .collect()
}

/// `path: before -> after` for every leaf that differs (lastTransitionTime aside).
fn changed_fields(before: &Value, after: &Value, path: &str) -> Vec<String> {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
            keys.into_iter()
                .flat_map(|k| {
                    let (x, y) = (
                        b.get(k).unwrap_or(&Value::Null),
                        a.get(k).unwrap_or(&Value::Null),
                    );
                    changed_fields(x, y, &format!("{path}.{k}"))
                })
                .collect()
        }
        (Value::Array(b), Value::Array(a)) if b.len() == a.len() => b
            .iter()
            .zip(a)
            .enumerate()
            .flat_map(|(i, (x, y))| changed_fields(x, y, &format!("{path}[{i}]")))
            .collect(),
        (x, y) if x == y => Vec::new(),
        (x, y) => vec![format!("{path}: {x} -> {y}")],
    }
}

/// The operator's counters of what it writes (and of writes that failed): a settled
/// cluster moves none of them.
const WRITE_COUNTERS: [&str; 5] = [
    "slice_operator_status_writes_total",
    "slice_operator_reconcile_errors_total",
    "slice_operator_creates_refused_total",
    "slice_operator_groups_created_total",
    "slice_operator_groups_deleted_total",
];

/// What the operator's writes change, seen the same way on any cluster.
#[derive(Debug, PartialEq)]
struct Footprint {
    counters: BTreeMap<&'static str, u64>,
    /// Each stored TrainCluster's and headless Service's resourceVersion (only the test and
    /// the operator write those).
    versions: BTreeMap<String, String>,
}

async fn footprint(env: &Env, api: &Api<DynamicObject>) -> Footprint {
    let mut counters = BTreeMap::new();
    for name in WRITE_COUNTERS {
        counters.insert(name, harness::metric_value(env, name).await);
    }
    let versions = api
        .list(&ListParams::default())
        .await
        .expect("list TrainClusters")
        .items
        .into_iter()
        .map(|o| (o.name_any(), o.resource_version().unwrap_or_default()));
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(env.client.clone(), &env.namespace);
    let services = services
        .list(&ListParams::default())
        .await
        .expect("list Services")
        .items
        .into_iter()
        .map(|s| {
            (
                format!("Service {}", s.name_any()),
                s.resource_version().unwrap_or_default(),
            )
        });
    Footprint {
        counters,
        versions: versions.chain(services).collect(),
    }
}

/// What moved between two footprints, one line per counter or object.
fn footprint_changes(before: &Footprint, after: &Footprint) -> Vec<String> {
    let counters = before.counters.iter().filter_map(|(name, was)| {
        let now = after.counters[name];
        (now != *was).then(|| format!("{name}: {was} -> {now}"))
    });
    let versions = after.versions.iter().filter_map(|(name, now)| {
        let was = before.versions.get(name);
        (was != Some(now)).then(|| format!("{name}: resourceVersion {was:?} -> {now}"))
    });
    counters.chain(versions).collect()
}

/// Every pod: its cluster, where it is pinned, where it is bound, its phase (for failures).
async fn where_pods_are(env: &Env) -> String {
    let pods = env.pods().list(&ListParams::default()).await.unwrap().items;
    let mut lines: Vec<String> = pods
        .iter()
        .map(|p| {
            let spec = p.spec.as_ref().unwrap();
            format!(
                "  pod {} (cluster {}) pinned {:?} bound {:?} phase {:?}",
                p.metadata.name.as_deref().unwrap_or_default(),
                label(p, LABEL_CLUSTER),
                spec.node_selector.as_ref().and_then(|s| s
                    .get("kubernetes.io/hostname")
                    .or_else(|| s.get(NODE_LABEL_NODEPOOL))),
                spec.node_name,
                p.status.as_ref().and_then(|s| s.phase.clone()),
            )
        })
        .collect();
    lines.sort();
    format!("pods:\n{}", lines.join("\n"))
}

struct Case {
    name: String,
    mutations: Vec<String>,
    sent: Value,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_mutated_train_clusters_are_rejected_or_settle_and_stay_quiet() {
    let seed = seed();
    let count: usize = std::env::var("FUZZ_COUNT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    println!("spec fuzz: seed {seed}, {count} objects (replay: FUZZ_SEED={seed})");
    let mut rng = Rng(seed);

    let options = EnvOptions {
        emulator: EmulatorOptions {
            request_log_limit: 400_000,
            request_body_limit: 4096,
            ..Default::default()
        },
        ..Default::default()
    };
    let env = Env::start_with("fuzz", &[], options).await;
    // Only on the emulator: every request recorded.
    let emulator = env.emulator.as_ref();

    // Generate, then give the pools every valid object could need at once.
    let cases: Vec<Case> = (0..count)
        .map(|i| {
            let name = format!("f-{i:03}");
            let mut sent = base(&mut rng, &name, &env.namespace);
            let forced = [WORKER_REFUSED_AS_POD, HEAD_REFUSED_AS_POD].get(i).copied();
            let mutations = match (forced, rng.below(7)) {
                (Some(choice), _) => vec![mutate_as(&mut rng, &mut sent, choice)],
                (None, 0) => Vec::new(), // a valid control
                (None, n) => (0..1 + n % 3)
                    .map(|_| mutate(&mut rng, &mut sent))
                    .collect(),
            };
            Case {
                name,
                mutations,
                sent,
            }
        })
        .collect();
    let need = demand(&cases.iter().map(|c| &c.sent).collect::<Vec<_>>());
    let mut pools = Vec::new();
    for (accelerator, topology, _) in PROVISIONED {
        for p in 0..need.get(topology).copied().unwrap_or(0) {
            pools.push(NodePoolSpec::new(
                &env.pool(&format!("s{topology}-{p:03}")),
                accelerator,
                topology,
            ));
        }
    }
    env.add_pools(&pools).await;
    println!(
        "spec fuzz: {} node pools ({need:?}), {} nodes",
        pools.len(),
        env.own_nodes().await.len()
    );

    // All at once, as raw JSON.
    let resource = ApiResource::erase::<TrainCluster>(&());
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &resource);
    let started = Instant::now();
    let results: Vec<(usize, Result<(), kube::Error>)> = futures::stream::iter(0..cases.len())
        .map(|i| {
            let api = api.clone();
            let body = cases[i].sent.clone();
            async move {
                let object: DynamicObject = serde_json::from_value(body).expect("a DynamicObject");
                (
                    i,
                    api.create(&PostParams::default(), &object)
                        .await
                        .map(|_| ()),
                )
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let mut failures = Vec::new();
    let mut accepted = BTreeSet::new();
    let mut rejections: BTreeMap<u16, usize> = BTreeMap::new();
    for (i, result) in results {
        match result {
            Ok(()) => {
                accepted.insert(cases[i].name.clone());
            }
            Err(kube::Error::Api(e)) if (400..500).contains(&e.code) => {
                *rejections.entry(e.code).or_insert(0) += 1;
            }
            Err(e) => failures.push(format!(
                "{}: create failed other than with a 4xx: {e} ({:?})",
                cases[i].name, cases[i].mutations
            )),
        }
    }
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
    let by_name: BTreeMap<&str, &Case> = cases.iter().map(|c| (c.name.as_str(), c)).collect();

    // Every accepted object gets a phase, then the phase it would have alone.
    let list = || async {
        api.list(&ListParams::default())
            .await
            .expect("list TrainClusters")
            .items
            .into_iter()
            .map(|o| {
                let name = o.metadata.name.clone().unwrap_or_default();
                (name, serde_json::to_value(&o).unwrap())
            })
            .collect::<BTreeMap<String, Value>>()
    };
    let stored = list().await;
    assert_eq!(
        stored.keys().cloned().collect::<BTreeSet<_>>(),
        accepted,
        "seed {seed}: stored objects are exactly the accepted ones"
    );
    let expected: BTreeMap<String, Expect> =
        stored.iter().map(|(n, o)| (n.clone(), expect(o))).collect();
    // Each accepted object costs the operator a few writes (its status, its pods, events):
    // a bound that grows with their number, as on a small real API server it takes longer.
    let deadline = Duration::from_secs(30) + Duration::from_millis(200) * accepted.len() as u32;
    let mut first_phase = BTreeMap::<String, Duration>::new();
    let mut unphased = accepted.clone();
    while !unphased.is_empty() && started.elapsed() < deadline {
        for (name, object) in list().await {
            if phase_of(&object).is_some() && unphased.remove(&name) {
                first_phase.insert(name, started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await; // polling, not a sync
    }
    let phases = started.elapsed();
    // From here on every problem is collected, so one run reports all of them.
    let mut problems: Vec<String> = Vec::new();
    if !unphased.is_empty() {
        problems.push(format!(
            "{} of {} accepted objects got no phase within {deadline:?}: {unphased:?}",
            unphased.len(),
            accepted.len()
        ));
    }
    let mut slowest: Vec<(Duration, String)> =
        first_phase.into_iter().map(|(n, t)| (t, n)).collect();
    slowest.sort();
    slowest.reverse();
    slowest.truncate(5);
    println!("spec fuzz: slowest to get a phase: {slowest:?}");
    let mut last = BTreeMap::new();
    let settle = Instant::now();
    while settle.elapsed() < deadline {
        last = list().await;
        if expected.iter().all(|(n, e)| settled(e, &last[n])) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let unsettled: Vec<String> = expected
        .iter()
        .filter(|(n, e)| !settled(e, &last[*n]))
        .map(|(n, e)| {
            format!(
                "{n}: expected {e:?}, status {} after mutations {:?}\n  sent: {}",
                last[n]["status"],
                by_name[n.as_str()].mutations,
                by_name[n.as_str()].sent["spec"]
            )
        })
        .collect();
    if !unsettled.is_empty() {
        problems.push(format!(
            "{} of {} accepted objects did not settle as they would alone within {deadline:?}:\n{}\n{}",
            unsettled.len(),
            accepted.len(),
            unsettled.join("\n"),
            where_pods_are(&env).await
        ));
    }
    let settled_in = started.elapsed();

    // The valid ones run whole, as alone: every host of every slice, Running.
    let pods: Vec<Pod> = env
        .pods()
        .list(&ListParams::default().labels(&format!("{LABEL_ROLE}={ROLE_WORKER}")))
        .await
        .unwrap()
        .items;
    let mut pods_of: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for pod in &pods {
        pods_of
            .entry(label(pod, LABEL_CLUSTER))
            .or_default()
            .push(pod);
    }
    for (name, e) in &expected {
        let mine = pods_of.remove(name).unwrap_or_default();
        let (want, want_running) = match e {
            Expect::Running { pods, .. } => (*pods, *pods),
            Expect::Unscheduled { pods, running, .. } => (*pods, *running),
            Expect::Waiting { pods, .. } => (*pods, *pods),
            _ => (0, 0),
        };
        let running = mine
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .count();
        if (mine.len(), running) != (want, want_running) {
            problems.push(format!(
                "{name} ({e:?}, mutations {:?}): {} pods, {running} Running; want {want}, {want_running} Running",
                by_name[name.as_str()].mutations,
                mine.len()
            ));
        }
    }
    if !pods_of.is_empty() {
        problems.push(format!("pods of no accepted cluster: {:?}", pods_of.keys()));
    }

    // Quiet, left alone: nothing is written over a window once all is settled (a write
    // loop on a timer shows up here). An observation window, not a synchronisation.
    let quiet = emulator.map(|e| e.requests().mark());
    let before = footprint(&env, &api).await;
    assert!(
        before.counters["slice_operator_status_writes_total"] > 0,
        "the operator's write counters are read: {before:?}"
    );
    tokio::time::sleep(Duration::from_secs(QUIET_SECONDS)).await;
    let mut writes = footprint_changes(&before, &footprint(&env, &api).await);
    if let (Some(emulator), Some(mark)) = (emulator, quiet) {
        writes.extend(unexpected_writes(emulator, mark));
    }
    if !writes.is_empty() {
        problems.push(format!(
            "{} writes in a quiet window after everything settled:\n{}",
            writes.len(),
            writes.join("\n")
        ));
    }
    // Quiet, reconciled again: a metadata change the operator does not act on makes every
    // object go through a reconcile; a settled object's reconcile writes nothing.
    let completed =
        || harness::metric_value(&env, "slice_operator_reconcile_duration_seconds_count");
    let reconciled = completed().await;
    let touched = emulator.map(|e| e.requests().mark());
    let mut before = footprint(&env, &api).await;
    let touch = json!({"metadata": {"annotations": {TOUCHED: "1"}}});
    for name in &accepted {
        let patched = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&touch))
            .await
            .unwrap();
        let version = patched.resource_version().unwrap_or_default();
        before.versions.insert(name.clone(), version);
    }
    env.wait_for(
        "a reconcile of every touched object",
        Duration::from_secs(60),
        || async { (completed().await >= reconciled + accepted.len() as u64).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await; // observation window, as above
    let mut writes = footprint_changes(&before, &footprint(&env, &api).await);
    if let (Some(emulator), Some(mark)) = (emulator, touched) {
        writes.extend(unexpected_writes(emulator, mark));
    }
    if !writes.is_empty() {
        problems.push(format!(
            "{} writes by reconciles of settled objects (after a metadata-only change):\n{}",
            writes.len(),
            writes.join("\n")
        ));
    }

    // Over the whole run no event was repeated: an invalid object is reported by exactly
    // one event; otherwise each reason is written at most once per group, and GroupCreated
    // once per replica created (the recorder folds those into one series, a PATCH each).
    let all = emulator.map(|e| e.requests().all()).unwrap_or_default();
    for (name, e) in expected.iter().filter(|_| emulator.is_some()) {
        let events: Vec<(String, String)> = all
            .iter()
            .filter(|r| r.is_write() && r.path.contains("/events"))
            .filter(|r| {
                r.body.contains(&format!("\"name\":\"{name}\""))
                    || r.path.contains(&format!("/events/{name}."))
            })
            .map(|r| {
                let reason = r
                    .body_json()
                    .map(|b| b["reason"].clone())
                    .unwrap_or_default();
                (r.method.clone(), reason.as_str().unwrap_or("?").to_string())
            })
            .collect();
        let mut by_reason: BTreeMap<&str, u32> = BTreeMap::new();
        for (_, reason) in &events {
            *by_reason.entry(reason.as_str()).or_insert(0) += 1;
        }
        let ok = match e {
            Expect::Malformed | Expect::Invalid => events.len() == 1,
            // Groups created while their pods wait for an autoscaler, or while another group
            // waits for slices, are announced as any.
            Expect::Running { groups, slices, .. }
            | Expect::Waiting { groups, slices, .. }
            | Expect::Unscheduled { groups, slices, .. } => by_reason.iter().all(|(reason, n)| {
                *n <= if *reason == "GroupCreated" {
                    *slices
                } else {
                    *groups
                }
            }),
            _ => by_reason.values().all(|n| *n <= 1),
        };
        if !ok {
            problems.push(format!(
                "{name} ({e:?}, mutations {:?}): repeated events: {events:?}",
                by_name[name.as_str()].mutations
            ));
        }
    }

    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for e in expected.values() {
        let kind = format!("{e:?}");
        *kinds
            .entry(kind.split([' ', '{']).next().unwrap().to_string())
            .or_insert(0) += 1;
    }
    println!(
        "spec fuzz: {} rejected {rejections:?}, {} accepted {kinds:?}; phases in {:.1} s, settled in {:.1} s",
        count - accepted.len(),
        accepted.len(),
        phases.as_secs_f64(),
        settled_in.as_secs_f64()
    );
    assert!(
        problems.is_empty(),
        "seed {seed} (replay: FUZZ_SEED={seed}): {} problems:\n{}",
        problems.len(),
        problems.join("\n\n")
    );
    // The run exercised every outcome.
    for kind in ["Malformed", "Invalid", "Running"] {
        assert!(
            kinds.contains_key(kind),
            "seed {seed}: no {kind} object in {kinds:?}"
        );
    }
    assert!(!rejections.is_empty(), "seed {seed}: nothing rejected");
    for forced in ["f-000", "f-001"] {
        assert!(
            matches!(expected.get(forced), Some(Expect::Invalid)),
            "seed {seed}: {forced} (a template refused as a pod) settles Invalid: {:?}",
            expected.get(forced)
        );
    }
    env.stop().await;
}
