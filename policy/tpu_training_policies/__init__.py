"""CrossGuard policies for what this project promises.

Private, versioned checkpoint buckets in the TPUs' own region; TPU VMs and GKE clusters with the
secure defaults the components set; TPU node pools that follow the flex-start rules of
``node_pool_plan``; training Pods that ask for their node's chips on a node pool the stack declares.

``__main__.py`` serves these to the Pulumi CLI; the tests call each policy's ``validate`` with the
arguments the analyzer builds. Constructing ``PolicyPack`` starts a server, so only ``__main__.py``
does it.

What a policy sees (pulumi_policy's analyzer): a resource policy gets the resource's inputs, a stack
policy every resource's outputs; keys are camelCase, numbers arrive as floats, and maps and lists are
read-only ``Mapping``/``Sequence`` proxies that raise ``UnknownValueError`` on a value not known
during preview (the analyzer then reports that the policy could not run, instead of guessing).
"""

from __future__ import annotations

from pulumi_policy import Policy
from tpu_training_components.domain.job_manifests import (
    PRIVILEGED_OPT_IN_ANNOTATION,
    SKIP_AWAIT_ANNOTATION,
    TPU_RESOURCE,
)
from tpu_training_components.domain.node_pool_plan import (
    NODE_POOL_LABEL,
    POOL_NODE_LABEL,
)
from tpu_training_components.domain.recovery import GENERATION_LABEL

from .buckets import (
    no_force_destroy,
    noncurrent_versions_expire,
    public_access_prevention,
    uniform_access,
    versioning,
)
from .clusters import (
    no_legacy_abac,
    node_service_account,
    private_nodes,
    release_channel,
    shielded_nodes,
    workload_identity,
)
from .labels import LABELS, managed_labels
from .node_pools import (
    auto_repair_off,
    flex_start_without_reservation,
    interruptible_capacity,
    scales_from_zero,
    slice_placement,
    tpu_pool_check,
)
from .pods import not_privileged, skip_await
from .resources import (
    ADVISORY,
    BUCKET,
    CLUSTER,
    JOB,
    JOBSET,
    MANAGED_LABELS,
    MANDATORY,
    NODE_POOL,
    POD_SPECS,
    TPU_VM,
    resource_policy,
    stack_policy,
)
from .stack import (
    bucket_in_tpu_region,
    selects_declared_pool,
    tpu_request,
)
from .tpu_vms import (
    no_external_ip,
    recovery_label,
    vm_service_account,
)

PACK_NAME = "tpu-training"


POLICIES: list[Policy] = [
    resource_policy(
        "checkpoint-bucket-uniform-access",
        "Checkpoint buckets use uniform bucket-level access: IAM alone decides who reads and writes "
        "checkpoints, with no object ACLs as a second, easily forgotten path.",
        (BUCKET,),
        uniform_access,
        MANDATORY,
    ),
    resource_policy(
        "checkpoint-bucket-public-access-prevention",
        "Checkpoint buckets enforce public access prevention: checkpoints and datasets are never "
        "public, whatever IAM binding a later change adds.",
        (BUCKET,),
        public_access_prevention,
        MANDATORY,
    ),
    resource_policy(
        "checkpoint-bucket-versioning",
        "Checkpoint buckets keep object versions: a checkpoint overwritten by a crashing or preempted "
        "run survives as a noncurrent version, so training can resume from it.",
        (BUCKET,),
        versioning,
        MANDATORY,
    ),
    stack_policy(
        "checkpoint-bucket-in-tpu-region",
        "Checkpoint buckets are in the region of the TPUs that use them (the bucket a TPU VM's or "
        "training Pod's CHECKPOINT_DIR names; any other bucket, the region of a TPU VM zone or GKE "
        "cluster of the stack): a cross-region checkpoint is slower to write and read, and costs "
        "egress on every save and restore.",
        bucket_in_tpu_region,
        MANDATORY,
    ),
    resource_policy(
        "tpu-vm-no-external-ip",
        "TPU VMs have no external IP addresses: training reads from and writes to Cloud Storage "
        "only, through Private Google Access and Cloud NAT, and a public address is an open door.",
        (TPU_VM,),
        no_external_ip,
        MANDATORY,
    ),
    resource_policy(
        "tpu-vm-no-default-service-account",
        "TPU VMs run as a dedicated service account, never the default compute service account "
        "(PROJECT_NUMBER-compute@developer.gserviceaccount.com, also used when none is given), "
        "which is an Editor of the whole project.",
        (TPU_VM,),
        vm_service_account,
        MANDATORY,
    ),
    resource_policy(
        "tpu-vm-recovery-label",
        f"TPU VMs carry the '{GENERATION_LABEL}' label: recovery re-creates a preempted VM by bumping "
        "it, and reads it back from the live node to know what was deployed.",
        (TPU_VM,),
        recovery_label,
        MANDATORY,
    ),
    resource_policy(
        "gke-private-nodes",
        "GKE nodes have no public IP addresses (private nodes on the cluster, and no node pool that "
        "turns them off): they reach images and Google APIs through Cloud NAT and Private Google "
        "Access.",
        (CLUSTER, NODE_POOL),
        private_nodes,
        MANDATORY,
    ),
    resource_policy(
        "gke-workload-identity",
        "GKE clusters enable Workload Identity, and no node pool exposes the node's metadata "
        "server: training Pods act as their own Google service account, never as the node's.",
        (CLUSTER, NODE_POOL),
        workload_identity,
        MANDATORY,
    ),
    resource_policy(
        "gke-shielded-nodes",
        "GKE clusters use shielded nodes: a node proves its identity with secure boot and a vTPM "
        "before it may join the cluster.",
        (CLUSTER,),
        shielded_nodes,
        MANDATORY,
    ),
    resource_policy(
        "gke-no-legacy-abac",
        "GKE clusters leave legacy ABAC off: access is decided by IAM and RBAC, never by the legacy "
        "attribute-based policy that grants broad rights.",
        (CLUSTER,),
        no_legacy_abac,
        MANDATORY,
    ),
    resource_policy(
        "gke-no-default-node-service-account",
        "GKE nodes run as a dedicated service account, never the default compute service account, "
        "which is an Editor of the whole project (node pools, inline pools, the default pool even when "
        "it is removed once the cluster is made, and node auto-provisioning).",
        (CLUSTER, NODE_POOL),
        node_service_account,
        MANDATORY,
    ),
    resource_policy(
        "tpu-node-pool-flex-start-no-reservation",
        "Flex-start TPU node pools consume no reservation (NO_RESERVATION) and are neither Spot nor "
        "preemptible: flex-start is a provisioning model of its own and GKE refuses the mix.",
        (NODE_POOL,),
        tpu_pool_check(flex_start_without_reservation),
        MANDATORY,
    ),
    resource_policy(
        "tpu-node-pool-scales-from-zero",
        "Flex-start TPU node pools autoscale from zero, with no fixed or initial node count: "
        "flex-start brings up exactly what a waiting workload asks for, and an idle slice costs "
        "nothing.",
        (NODE_POOL,),
        tpu_pool_check(scales_from_zero),
        MANDATORY,
    ),
    resource_policy(
        "tpu-node-pool-slice-placement",
        "TPU node pools have the placement their slice needs: a multi-host pool holds one slice "
        "with COMPACT placement of its tpuTopology in one zone, at most that slice's VMs (the hosts "
        "share an interconnect); a single-host pool gives no topology, which GKE refuses there.",
        (NODE_POOL,),
        tpu_pool_check(slice_placement),
        MANDATORY,
    ),
    resource_policy(
        "tpu-node-pool-auto-repair-off",
        "Flex-start and multi-host TPU node pools turn auto-repair off: a repair re-creates nodes, "
        "flex-start capacity may not come back, and in a multi-host pool it re-creates the whole "
        "slice under a running job.",
        (NODE_POOL,),
        tpu_pool_check(auto_repair_off),
        MANDATORY,
    ),
    resource_policy(
        "training-pod-not-privileged",
        "Training Pods run no privileged container unless their Job opts in with the annotation "
        f'{PRIVILEGED_OPT_IN_ANNOTATION}: "true": the TPU device plugin exposes the chips without '
        "it on current GKE, and a privileged container owns its node.",
        tuple(POD_SPECS),
        not_privileged,
        MANDATORY,
    ),
    stack_policy(
        "training-pod-tpu-request",
        f"Training Pods request {TPU_RESOURCE} equal to the chips of one VM of the node pool they "
        "run on: GKE schedules one Pod per TPU VM, and a Pod that asks for more never schedules "
        "while one that asks for fewer leaves chips idle.",
        tpu_request,
        MANDATORY,
    ),
    stack_policy(
        "training-pod-selects-declared-pool",
        f"Training Pods select, by {POOL_NODE_LABEL} (the label every slice of one pool gives its "
        f"nodes) or by {NODE_POOL_LABEL}, only node pools this stack declares, whose nodes carry the "
        "accelerator, topology and capacity labels the Pods select: another pool of the same shape "
        "(another stack's) is not this Job's capacity, and a mismatch never schedules.",
        selects_declared_pool,
        MANDATORY,
    ),
    resource_policy(
        "checkpoint-bucket-noncurrent-versions-expire",
        "Versioned checkpoint buckets delete noncurrent versions after a while: otherwise every "
        "overwritten checkpoint is kept, and billed, forever. Advisory: a team may keep versions on "
        "purpose (audits, a retention policy of its own).",
        (BUCKET,),
        noncurrent_versions_expire,
        ADVISORY,
    ),
    resource_policy(
        "checkpoint-bucket-no-force-destroy",
        "Checkpoint buckets are not force-destroyed: with forceDestroy, destroying the stack deletes "
        "every checkpoint in the bucket. Advisory: a scratch stack may want a clean teardown.",
        (BUCKET,),
        no_force_destroy,
        ADVISORY,
    ),
    resource_policy(
        "tpu-interruptible-capacity",
        "TPUs run on Spot, preemptible, flex-start or reserved capacity, which this project's "
        "recovery and checkpointing are built for, rather than on-demand at the highest price. "
        "Advisory: on-demand quota or a committed-use discount can make it the right choice.",
        (TPU_VM, NODE_POOL),
        interruptible_capacity,
        ADVISORY,
    ),
    resource_policy(
        "gke-release-channel",
        "GKE clusters follow the REGULAR or STABLE release channel: versions arrive tested, inside "
        "the maintenance window. Advisory: RAPID may be needed for the newest TPU features.",
        (CLUSTER,),
        release_channel,
        ADVISORY,
    ),
    resource_policy(
        "managed-labels",
        f"Buckets, TPU VMs, clusters and node pools carry the stack's labels ({', '.join(MANAGED_LABELS)}), "
        "so billing exports attribute TPU spend to a stack. Advisory: an organisation may label by "
        "a scheme of its own.",
        tuple(LABELS),
        managed_labels,
        ADVISORY,
    ),
    resource_policy(
        "training-job-skip-await",
        f'Training Jobs are annotated {SKIP_AWAIT_ANNOTATION}: "true" and not '
        "pulumi.com/replaceUnready: otherwise `pulumi up` waits for a days-long Job to finish and "
        "fails after 10 minutes, or replaces a Job that is still training. Advisory: a short Job "
        "may be worth waiting for.",
        (JOB, JOBSET),
        skip_await,
        ADVISORY,
    ),
]
"""Every policy of the pack, mandatory ones first."""
