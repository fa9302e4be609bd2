"""A flex-start TPU node pool on GKE, set up flag by flag as the `gcloud` commands of GKE's
flex-start training page, and optionally with GKE's queued provisioning (``queued_provisioning``;
its Kueue objects are ``QueuedProvisioning``'s)."""

import re
from typing import Any, Mapping, Optional, Sequence

import pulumi
import pulumi_gcp as gcp
from pydantic import with_config
from typing_extensions import NotRequired, TypedDict

from ..domain.catalogue import CatalogueError
from ..domain.cost_estimate import Priced
from ..domain.node_pool_plan import TpuNodePoolPlan, plan_from
from ..validation import ARGUMENTS, Problems, check_arguments, gcp_labels

RESERVATION_NAME_KEY = "compute.googleapis.com/reservation-name"


@with_config(ARGUMENTS)
class FlexStartTpuNodePoolArgs(TypedDict):
    cluster: pulumi.Input[str]
    """Name of the GKE cluster (``GkeTpuCluster.cluster_name``)."""
    cluster_region: str
    """Region of the cluster; every node location must lie in it."""
    machine_type: str
    """GKE TPU machine type, e.g. ``ct6e-standard-4t``."""
    topology: str
    """Slice topology, e.g. ``4x4`` (v5e/v6e) or ``2x2x4`` (v4, v5p, tpu7x)."""
    node_locations: Sequence[str]
    """Zones of the nodes; one zone for a multi-host slice."""
    service_account_email: pulumi.Input[str]
    """Identity of the nodes (``GkeTpuCluster.node_service_account_email``)."""
    slices: NotRequired[int]
    """Slices the pool may hold at once (default 1). A multi-host slice is a node pool of its own,
    so N multi-host slices are N GKE node pools; single-host slices share one pool of up to N
    nodes."""
    flex_start: NotRequired[bool]
    """Provision with flex-start (default True)."""
    spot: NotRequired[bool]
    """Spot VMs instead (only with flex_start False)."""
    reservation: NotRequired[Optional[str]]
    """Consume this reservation (only with flex_start False)."""
    max_run_duration: NotRequired[Optional[str]]
    """Delete nodes after this long, e.g. ``72h``; at most 7 days with flex-start. On a queued
    pool it is the ProvisioningRequests' ``maxRunDurationSeconds`` (``QueuedProvisioning``)."""
    queued_provisioning: NotRequired[bool]
    """Obtain nodes only through GKE's queued provisioning (default False): a workload waits in
    its Kueue queue until GKE can bring up its whole slice at once, instead of starting on part
    of it. Multi-host flex-start pools only; declare the pool's ``QueuedProvisioning`` too."""
    kueue_queue: NotRequired[bool]
    """Admit the pool's workloads whole, one after another, through a Kueue queue of the pool's
    chips (default False; implied by queued_provisioning): a multislice JobSet starts only when
    all its slices fit, and more workloads than slices wait their turn. Declare the pool's
    ``QueuedProvisioning`` too (it then makes no ProvisioningRequests)."""
    ladder: NotRequired[Sequence[str]]
    """Capacities GKE tries in order, e.g. ``["spot", "flex-start"]`` (two or more of
    ``flex-start``, ``spot``, ``reserved``, ``on-demand``; then flex_start and spot False): one set
    of node pools per rung, ``{node_pool_name}-{spot|flex|reserved|ondemand}``, joined to the
    pool's ComputeClass. Declare the pool's ``TpuComputeClass`` too."""
    node_pool_name: NotRequired[str]
    """GKE node pool name (of the first slice; further slices add ``-1``, ``-2``, ...); the
    component's name when omitted."""
    labels: NotRequired[Mapping[str, str]]
    """Labels on the nodes' VMs."""
    project: NotRequired[pulumi.Input[str]]
    """Google Cloud project; the provider's project when omitted."""


class TpuNodePoolSelection(TypedDict):
    """The pool a training Job runs on, as plain values (``FlexStartTpuNodePool.selection``): the
    same values the pool was declared with, from which the Job derives the slice shape, the node
    selector and the GKE pool names. Plain, not outputs: whether the Job is one Pod or an Indexed
    Job with a headless Service must be known when it is declared, in every language."""

    node_pool_name: str
    """GKE name of the pool (of its first slice)."""
    machine_type: str
    """GKE TPU machine type, e.g. ``ct6e-standard-4t``."""
    topology: str
    """Slice topology, e.g. ``4x4``."""
    node_locations: Sequence[str]
    """Zones of the pool's nodes."""
    cluster_region: str
    """Region of the cluster."""
    slices: NotRequired[int]
    """Slices the pool may hold at once (default 1)."""
    flex_start: NotRequired[bool]
    """The pool provisions with flex-start (default True)."""
    spot: NotRequired[bool]
    """The pool's nodes are Spot VMs (default False)."""
    reservation: NotRequired[Optional[str]]
    """The reservation the pool consumes, if any."""
    max_run_duration: NotRequired[Optional[str]]
    """How long the pool's nodes live, e.g. ``72h`` (a queued pool's queue asks GKE for it)."""
    queued_provisioning: NotRequired[bool]
    """The pool obtains nodes only through GKE's queued provisioning (default False): its
    workloads go through its Kueue queue."""
    kueue_queue: NotRequired[bool]
    """The pool's workloads go through its Kueue queue, admitted by quota (default False)."""
    ladder: NotRequired[Sequence[str]]
    """The capacities the pool's ComputeClass tries in order; absent for a pool of one capacity."""


def plan_selection(problems: Problems, selection: TpuNodePoolSelection) -> TpuNodePoolPlan:
    """The plan of the pool ``selection`` (a component's ``node_pool``) describes; if it is
    none, the arguments are refused with the problems found so far."""
    try:
        return plan_from(selection["node_pool_name"], selection)
    except CatalogueError as exc:
        problems.add("node_pool", str(exc))
        raise problems.error() from None


def plan_for(problems: Problems, name: str, args: FlexStartTpuNodePoolArgs) -> TpuNodePoolPlan:
    """Check the arguments' values and derive the pool's settings, or refuse the arguments."""
    gcp_labels(problems, args.get("labels", {}))
    try:
        plan = plan_from(args.get("node_pool_name", name), args)
    except CatalogueError as exc:
        problems.add((), str(exc))  # it says which arguments do not go together
    problems.raise_any()
    return plan


class FlexStartTpuNodePool(pulumi.ComponentResource):
    """TPU slice node pools that start empty and scale from zero to the slices they may hold.

    The flags of GKE's flex-start training page map to the node pool as:
    ``--flex-start`` -> ``node_config.flex_start``;
    ``--enable-autoscaling --num-nodes 0 --min-nodes 0 --max-nodes N`` -> ``initial_node_count``
    and ``autoscaling``; ``--reservation-affinity=none`` -> ``NO_RESERVATION``;
    ``--tpu-topology`` -> COMPACT ``placement_policy`` (multi-host only);
    ``--no-enable-autorepair`` -> ``management.auto_repair`` (flex-start and multi-host);
    ``--enable-queued-provisioning`` -> ``queued_provisioning`` (a queued pool only).

    Children: ``{name}-pool`` (``gcp.container.NodePool``) for the first slice, and for further
    multi-host slices ``{name}-pool-1``, ``{name}-pool-2``, ... With a ``ladder``, per rung instead:
    ``{name}-pool-{spot|flex|reserved|ondemand}`` and its ``-1``, ``-2``, ...
    """

    node_pool_name: pulumi.Output[str]
    """GKE name of the first slice's pool."""
    node_pool_names: pulumi.Output[list[str]]
    """GKE names of every pool, one per multi-host slice."""
    max_nodes: pulumi.Output[int]
    """Nodes of all the pools together."""
    accelerator_label: pulumi.Output[str]
    """The nodes' ``cloud.google.com/gke-tpu-accelerator`` label."""
    topology: pulumi.Output[str]
    """The nodes' ``cloud.google.com/gke-tpu-topology`` label."""

    def __init__(
        self, name: str, args: FlexStartTpuNodePoolArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        problems = check_arguments("FlexStartTpuNodePool", name, args, FlexStartTpuNodePoolArgs, opts)
        plan = plan_for(problems, name, args)
        super().__init__("tpu-training:gke:FlexStartTpuNodePool", name, {}, opts)
        # Python-only attributes: annotated here, not on the class, whose annotations are the
        # provider schema's outputs.
        self.plan: TpuNodePoolPlan = plan
        """The pool's derived settings and slice shape (VMs, chips per VM, labels)."""
        self.selection: TpuNodePoolSelection = {
            "node_pool_name": plan.name,
            "machine_type": plan.shape.machine_type.name,
            "topology": plan.shape.topology,
            "node_locations": list(plan.node_locations),
            "cluster_region": args["cluster_region"],
            "slices": plan.slices,
            "flex_start": plan.flex_start,
            "spot": plan.spot,
            "reservation": plan.reservation,
            "max_run_duration": args.get("max_run_duration"),
            "queued_provisioning": plan.queued_provisioning,
            "kueue_queue": plan.kueue_queue,
        }
        """What a ``TpuTrainingJob`` on this pool takes as its ``node_pool``."""
        if plan.ladder:
            self.selection["ladder"] = list(plan.ladder)

        # A ladder's rungs each get the pools a pool of that capacity would have, named after the
        # rung ({name}-pool-spot, {name}-pool-spot-1, ...), so reordering the rungs moves nothing.
        members = [(f"{name}-pool-{rung.name[len(plan.name) + 1 :]}", rung) for rung in plan.rungs]
        declared = [
            (base if index == 0 else f"{base}-{index}", pool_name, member)
            for base, member in (members or [(f"{name}-pool", plan)])
            for index, pool_name in enumerate(member.pool_names)
        ]
        self.pools = [
            _declare_pool(resource_name, pool_name, args, member, pulumi.ResourceOptions(parent=self))
            for resource_name, pool_name, member in declared
        ]
        self.priced: list[Priced] = [
            _priced(resource_name, args, member) for resource_name, _, member in declared
        ]
        """The billable resources declared, as ``cost_estimate.estimate`` prices them."""
        self.pool = self.pools[0]
        self.node_pool_name = self.pool.name
        self.node_pool_names = pulumi.Output.all(*(pool.name for pool in self.pools)).apply(list)
        self.max_nodes = pulumi.Output.from_input(plan.max_nodes)
        self.accelerator_label = pulumi.Output.from_input(plan.shape.accelerator_label)
        self.topology = pulumi.Output.from_input(plan.shape.topology)
        self.register_outputs(
            {
                "node_pool_name": self.node_pool_name,
                "node_pool_names": self.node_pool_names,
                "max_nodes": self.max_nodes,
                "accelerator_label": self.accelerator_label,
                "topology": self.topology,
            }
        )


def _autoscaling_fields(plan: TpuNodePoolPlan) -> dict[str, Any]:
    """The pool's autoscaling, by the Pulumi field names (snake_case)."""
    if plan.zonal_limits:
        return {
            "min_node_count": plan.min_nodes,
            "max_node_count": plan.max_nodes_per_pool,
            "location_policy": plan.location_policy,
        }
    # Per-zone limits would multiply the cap by the number of zones: state the pool's totals.
    return {
        "total_min_node_count": plan.min_nodes,
        "total_max_node_count": plan.max_nodes_per_pool,
        "location_policy": plan.location_policy,
    }


def _autoscaling(plan: TpuNodePoolPlan) -> gcp.container.NodePoolAutoscalingArgs:
    return gcp.container.NodePoolAutoscalingArgs(**_autoscaling_fields(plan))


def _camel(name: str) -> str:
    return re.sub(r"_(\w)", lambda found: found[1].upper(), name)


def _priced(resource_name: str, args: FlexStartTpuNodePoolArgs, plan: TpuNodePoolPlan) -> Priced:
    """What ``_declare_pool`` declares, as far as ``cost_estimate.estimate`` reads it (the
    engine's field names), from the same plan."""
    node_config: dict[str, Any] = {
        "machineType": plan.shape.machine_type.name,
        "labels": dict(plan.node_labels),
    }
    if plan.flex_start:
        node_config["flexStart"] = True
    if plan.spot:
        node_config["spot"] = True
    if plan.reservation:
        node_config["reservationAffinity"] = {"consumeReservationType": "SPECIFIC_RESERVATION"}
    return Priced(
        "gcp:container/nodePool:NodePool",
        resource_name,
        {
            "location": args["cluster_region"],
            "nodeLocations": list(plan.node_locations),
            "initialNodeCount": plan.initial_node_count,
            "autoscaling": {_camel(key): value for key, value in _autoscaling_fields(plan).items()},
            "nodeConfig": node_config,
        },
    )


def _reservation_affinity(plan: TpuNodePoolPlan) -> gcp.container.NodePoolNodeConfigReservationAffinityArgs:
    if plan.reservation:
        return gcp.container.NodePoolNodeConfigReservationAffinityArgs(
            consume_reservation_type="SPECIFIC_RESERVATION",
            key=RESERVATION_NAME_KEY,
            values=[plan.reservation],
        )
    return gcp.container.NodePoolNodeConfigReservationAffinityArgs(
        consume_reservation_type=plan.reservation_affinity
    )


def _declare_pool(
    resource_name: str,
    pool_name: str,
    args: FlexStartTpuNodePoolArgs,
    plan: TpuNodePoolPlan,
    opts: pulumi.ResourceOptions,
) -> gcp.container.NodePool:
    """One GKE node pool: the single-host pool, or the pool of one multi-host slice."""
    return gcp.container.NodePool(
        resource_name,
        name=pool_name,
        cluster=args["cluster"],
        location=args["cluster_region"],
        project=args.get("project"),
        node_locations=list(plan.node_locations),
        initial_node_count=plan.initial_node_count,
        autoscaling=_autoscaling(plan),
        placement_policy=(
            gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", tpu_topology=plan.placement_topology)
            if plan.placement_topology
            else None
        ),
        # Auto-upgrade stays on: a release channel does not allow it off. The cluster's maintenance
        # exclusion is what keeps upgrades away from running slices (see GkeTpuCluster).
        management=gcp.container.NodePoolManagementArgs(auto_repair=plan.auto_repair, auto_upgrade=True),
        # Nodes only through ProvisioningRequests (which Kueue makes): ForceNew, so turning it on
        # or off replaces the pool (terraform-provider-google resource_container_node_pool.go
        # schemaNodePool `queued_provisioning`). GKE taints the nodes `cloud.google.com/gke-queued`
        # itself; no taint is declared here.
        queued_provisioning=(
            gcp.container.NodePoolQueuedProvisioningArgs(enabled=True) if plan.queued_provisioning else None
        ),
        node_config=gcp.container.NodePoolNodeConfigArgs(
            machine_type=plan.shape.machine_type.name,
            flex_start=plan.flex_start or None,
            max_run_duration=plan.node_max_run_duration,
            spot=plan.spot or None,
            reservation_affinity=_reservation_affinity(plan),
            service_account=args["service_account_email"],
            # Access is decided by the account's IAM roles, not by OAuth scopes.
            oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
            # Training Pods get their own identity through the GKE metadata server.
            workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                mode="GKE_METADATA"
            ),
            resource_labels=dict(args.get("labels", {})),
            # Every slice's nodes carry the pool's name, which the Job selects: a slice added
            # or removed leaves the running Job's Pod template as it was. Changing these labels
            # updates the pool in place (terraform-provider-google google/services/container/
            # node_config.go: `labels` has no ForceNew; nodePoolNodeConfigUpdate sends
            # UpdateNodePoolRequest.Labels), which GKE applies "without re-creating the node pool
            # and disrupting running workloads" (GKE docs, how-to/update-existing-nodepools).
            labels=plan.node_labels,
            # A ladder rung's pool joins the pool's ComputeClass by its label and this taint.
            taints=[gcp.container.NodePoolNodeConfigTaintArgs(**taint) for taint in plan.node_taints] or None,
        ),
        opts=opts,
    )
