//! Every name the operator writes into the cluster, in one place.

/// API group of the TrainCluster resource.
pub const API_GROUP: &str = "slices.dev";
/// The kind of the custom resource (what its pods' controller references name).
pub const TRAIN_CLUSTER_KIND: &str = "TrainCluster";
/// The one field manager used for every write (server-side apply and status).
pub const FIELD_MANAGER: &str = "slice-operator";
/// Reported as `app.kubernetes.io/managed-by` and as the event reporting controller.
pub const OPERATOR_NAME: &str = "slice-operator";

// Labels on every pod the operator creates (one prefix: `slices.dev/`).
pub const LABEL_PREFIX: &str = "slices.dev/";
pub const LABEL_CLUSTER: &str = "slices.dev/cluster";
pub const LABEL_ROLE: &str = "slices.dev/role";
pub const LABEL_GROUP: &str = "slices.dev/group";
pub const LABEL_REPLICA_INDEX: &str = "slices.dev/replica-index";
pub const LABEL_HOST_INDEX: &str = "slices.dev/host-index";
pub const LABEL_EPOCH: &str = "slices.dev/epoch";
/// Unique per group incarnation; also the exclusive-placement key.
pub const LABEL_GROUP_KEY: &str = "slices.dev/group-key";
/// The slice (node pool or node) a group was pinned to, if any.
pub const LABEL_SLICE: &str = "slices.dev/slice";
/// Incarnation number of a group (also part of `TPU_NAME`).
pub const LABEL_INCARNATION: &str = "slices.dev/incarnation";
/// The membership (`Multislice` or `Independent`) the pod was created under.
pub const LABEL_MEMBERSHIP: &str = "slices.dev/membership";
/// Hash of what the pod was rendered from (its group's template, TPU shape, membership and
/// head address): a pod whose hash is not its group's current one is outdated and replaced.
pub const LABEL_TEMPLATE_HASH: &str = "slices.dev/template-hash";
/// Hash of the labels and annotations the pod's template gave it: a pod whose hash is not
/// its template's current one is patched in place (labels and annotations restart nothing).
pub const LABEL_METADATA_HASH: &str = "slices.dev/metadata-hash";
/// Annotation listing the label and annotation keys the pod took from its template (JSON
/// `{"labels": [...], "annotations": [...]}`): a key the template no longer has is removed
/// from the pod by the next label patch, and no one else's key ever is.
pub const ANNOTATION_TEMPLATE_KEYS: &str = "slices.dev/template-keys";
pub const ROLE_WORKER: &str = "worker";
pub const ROLE_HEAD: &str = "head";
/// Placeholder pods holding a hot spare slice (`slices.spares`).
pub const ROLE_SPARE: &str = "spare";
/// Which placeholder set of its group a spare pod belongs to (part of its name).
pub const LABEL_SPARE_INDEX: &str = "slices.dev/spare-index";
/// On the placeholders of a request for a slice (`spec.provisioning`), as opposed to a hot
/// spare's.
pub const LABEL_CAPACITY: &str = "slices.dev/capacity";
/// How many slices a ProvisioningRequest of ours asks for (`spec.provisioning.mode: Queued`).
pub const LABEL_REQUEST_SLICES: &str = "slices.dev/request-slices";
/// On worker pods created on a ProvisioningRequest's capacity: the request's name (the
/// planner reads labels, not annotations, of pods).
pub const LABEL_PROVISIONING_REQUEST: &str = "slices.dev/provisioning-request";
/// The annotations that make a pod consume a ProvisioningRequest's capacity: the cluster
/// autoscaler reads the `cluster-autoscaler.kubernetes.io/` keys (GKE's docs) and, newer,
/// the `autoscaling.x-k8s.io/` ones; pods carry both.
pub const ANNOTATIONS_CONSUME_REQUEST: &[&str] = &[
    "cluster-autoscaler.kubernetes.io/consume-provisioning-request",
    "autoscaling.x-k8s.io/consume-provisioning-request",
];
/// The class of the request a pod consumes (with [`ANNOTATIONS_CONSUME_REQUEST`]).
pub const ANNOTATIONS_REQUEST_CLASS: &[&str] = &[
    "cluster-autoscaler.kubernetes.io/provisioning-class-name",
    "autoscaling.x-k8s.io/provisioning-class-name",
];
/// The PriorityClass of placeholder pods, installed by the chart (value
/// [`SPARE_PRIORITY_VALUE`], `preemptionPolicy: Never`).
pub const SPARE_PRIORITY_CLASS: &str = "slice-operator-spare";
/// Below every default-priority workload, so a spare never keeps one out; above the cluster
/// autoscaler's expendable cutoff (-10), so the autoscaler keeps a spare's nodes.
pub const SPARE_PRIORITY_VALUE: i32 = -5;
/// Placeholders do nothing: they stop at once on SIGTERM, and the swap waits no longer.
pub const SPARE_GRACE_SECONDS: i64 = 5;
/// What a placeholder runs in the worker image: nothing, until told to stop.
pub const SPARE_COMMAND: &[&str] = &[
    "sh",
    "-c",
    "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done",
];

pub const LABEL_APP_NAME: &str = "app.kubernetes.io/name";
pub const LABEL_APP_INSTANCE: &str = "app.kubernetes.io/instance";
pub const LABEL_APP_COMPONENT: &str = "app.kubernetes.io/component";
pub const LABEL_APP_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const APP_NAME: &str = "traincluster";
/// The `app.kubernetes.io/` labels the operator sets on every pod: never taken from a
/// template.
pub const APP_LABELS: &[&str] = &[
    LABEL_APP_NAME,
    LABEL_APP_INSTANCE,
    LABEL_APP_COMPONENT,
    LABEL_APP_MANAGED_BY,
];

// GKE node labels, resources and taints the operator reads.
pub const NODE_LABEL_ACCELERATOR: &str = "cloud.google.com/gke-tpu-accelerator";
pub const NODE_LABEL_TOPOLOGY: &str = "cloud.google.com/gke-tpu-topology";
pub const NODE_LABEL_NODEPOOL: &str = "cloud.google.com/gke-nodepool";
/// The machine type; GKE TPU machine types end in `-<chips>t` (e.g. `ct6e-standard-4t`).
pub const NODE_LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// A node's own name as a label: pins a single-host slice's pod to its node.
pub const NODE_LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// The zone: the brake on mass node loss looks at each zone's share of NotReady nodes.
pub const NODE_LABEL_ZONE: &str = "topology.kubernetes.io/zone";
/// The node labels the operator reads; the lean node view keeps only these.
pub const NODE_LABELS_READ: &[&str] = &[
    NODE_LABEL_ZONE,
    NODE_LABEL_ACCELERATOR,
    NODE_LABEL_TOPOLOGY,
    NODE_LABEL_NODEPOOL,
    NODE_LABEL_INSTANCE_TYPE,
];
pub const TPU_RESOURCE: &str = "google.com/tpu";
/// `status.reason` a kubelet writes on a pod it refused at admission (before any container
/// ran): the node's fault, not the job's. Matched exactly, or as a prefix where it ends
/// in `*` (`OutOf<resource>`, the taint reasons).
pub const KUBELET_REJECTION_REASONS: &[&str] = &[
    "OutOf*",
    "UnexpectedAdmissionError",
    "NodeAffinity",
    "NodeSelectorMismatching",
    "Taint*",
    "TopologyAffinityError",
    "SMTAlignmentError",
    "NodePorts",
    "PodOSNotSupported",
    "InvalidNodeInfo",
    "NodeShutdown",
    "Evicted",
    "NodeLost",
];
/// The pod condition the platform sets on a pod it is about to terminate (preemption,
/// eviction, taint manager, pod GC, node shutdown).
pub const CONDITION_DISRUPTION_TARGET: &str = "DisruptionTarget";
/// `status.reason` values only the platform writes on a pod it ended: the kubelet's node-
/// pressure eviction (`Evicted`, with a message in [`NODE_PRESSURE_EVICTION_MESSAGES`]),
/// graceful node shutdown (`Terminated`, `NodeShutdown`), the
/// node controller's lost node (`NodeLost`), a kubelet's preemption for a critical pod
/// (`Preempting`).
pub const PLATFORM_POD_REASONS: &[&str] = &[
    "Evicted",
    "Terminated",
    "NodeShutdown",
    "NodeLost",
    "Preempting",
];
/// How a kubelet's eviction for node pressure begins its message (`Evicted` for the pod's
/// own ephemeral-storage or emptyDir limits begins otherwise, and is the job's doing).
pub const NODE_PRESSURE_EVICTION_MESSAGES: &[&str] =
    &["The node was low on resource", "The node had condition"];
pub const TAINT_IMPENDING_TERMINATION: &str = "cloud.google.com/impending-node-termination";
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The cluster autoscaler's taint on a node it is removing.
pub const TAINT_TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";

// The worker environment contract (see docs/env-contract.md).
pub const ENV_TPU_WORKER_ID: &str = "TPU_WORKER_ID";
pub const ENV_TPU_WORKER_HOSTNAMES: &str = "TPU_WORKER_HOSTNAMES";
pub const ENV_TPU_NAME: &str = "TPU_NAME";
pub const ENV_TPU_ACCELERATOR_TYPE: &str = "TPU_ACCELERATOR_TYPE";
pub const ENV_TPU_TOPOLOGY: &str = "TPU_TOPOLOGY";
pub const ENV_MEGASCALE_NUM_SLICES: &str = "MEGASCALE_NUM_SLICES";
pub const ENV_MEGASCALE_SLICE_ID: &str = "MEGASCALE_SLICE_ID";
pub const ENV_MEGASCALE_COORDINATOR_ADDRESS: &str = "MEGASCALE_COORDINATOR_ADDRESS";
pub const ENV_MEGASCALE_PORT: &str = "MEGASCALE_PORT";
pub const ENV_TPU_PROCESS_ADDRESSES: &str = "TPU_PROCESS_ADDRESSES";
pub const ENV_TPU_PROCESS_PORT: &str = "TPU_PROCESS_PORT";
/// Keeps JAX from querying the GCE metadata server (it checks only that the key is set).
pub const ENV_TPU_SKIP_MDS_QUERY: &str = "TPU_SKIP_MDS_QUERY";
/// The head pod's stable DNS name (`<cluster>-head.<cluster>-headless`), on every worker of a
/// cluster with a head.
pub const ENV_HEAD_HOST: &str = "SLICES_HEAD_HOST";
/// `SLICES_HEAD_PORT_<NAME>`: each named container port of the head template.
pub const ENV_HEAD_PORT_PREFIX: &str = "SLICES_HEAD_PORT_";
/// Where Ray workers find the head (`<head host>:<port named gcs>`), as Ray reads it.
pub const ENV_RAY_ADDRESS: &str = "RAY_ADDRESS";
/// Where JAX finds its coordinator, when the head is it (`<head host>:<port named
/// jax-coordinator>`); JAX reads it before any cluster detection.
pub const ENV_JAX_COORDINATOR_ADDRESS: &str = "JAX_COORDINATOR_ADDRESS";
/// The head port whose number goes into `RAY_ADDRESS` (Ray's GCS port, named as KubeRay does).
pub const HEAD_PORT_RAY_GCS: &str = "gcs";
/// The head port that makes the head the JAX coordinator (`JAX_COORDINATOR_ADDRESS`).
pub const HEAD_PORT_JAX_COORDINATOR: &str = "jax-coordinator";
/// Framework variables the operator sets from the head, where a template's own value wins
/// (and is reported once when it differs).
pub const ENV_USER_WINS: &[&str] = &[ENV_RAY_ADDRESS, ENV_JAX_COORDINATOR_ADDRESS];
/// User values for these are dropped from TPU worker templates: each would override the
/// operator's contract inside JAX (the process list).
pub const ENV_RESERVED: &[&str] = &[ENV_TPU_PROCESS_ADDRESSES, ENV_TPU_PROCESS_PORT];
/// Prefix of keys the operator owns: user values under it are dropped, never merged.
pub const ENV_MEGASCALE_PREFIX: &str = "MEGASCALE_";
pub const MEGASCALE_PORT: u16 = 8081;
pub const TPU_PROCESS_PORT: u16 = 8476;

/// Suffix of the per-cluster headless Service (`<cluster>-headless`).
pub const HEADLESS_SERVICE_SUFFIX: &str = "-headless";
/// Suffix of the head pod name (`<cluster>-head`).
pub const HEAD_SUFFIX: &str = "-head";

/// Generated pod names are `<cluster>-<group>-<replica>-<host>`; replica and host indexes get
/// up to this many digits each, so cluster + group names may use 63 - 3 - 2*4 characters.
pub const INDEX_DIGITS_RESERVED: usize = 4;
pub const MAX_CLUSTER_PLUS_GROUP_NAME: usize = 63 - 3 - 2 * INDEX_DIGITS_RESERVED;

/// ProvisioningRequests are listed, not watched: a group with one is looked at again this
/// often (seconds).
pub const REQUEST_POLL_SECONDS: i64 = 15;
/// The wait before a new request after one failed or timed out (capacity was not found:
/// asking again at once finds none either), in seconds.
pub const REQUEST_RETRY_NO_CAPACITY_SECONDS: i64 = 60;
/// The wait before a new request after capacity that was there went (expired, revoked).
pub const REQUEST_RETRY_LOST_CAPACITY_SECONDS: i64 = 10;
/// Requests given up in a row double the wait, at most this many times (16 x).
pub const REQUEST_BACKOFF_MAX_DOUBLINGS: u32 = 4;
