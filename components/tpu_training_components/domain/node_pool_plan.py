"""How a GKE TPU node pool must be set up: the rules of GKE's flex-start training page, as data and
arithmetic.

Pure Python with no Pulumi import. ``plan_tpu_node_pool`` turns a machine type, a topology and the
pool's zones into every setting the node pool needs (autoscaling bounds, placement, repair,
reservation affinity) or raises ``NodePoolError`` saying which combination is invalid and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping, Optional, Sequence

from .catalogue import CatalogueError, SliceShape, region_of_zone, slice_shape
from .gcp_locations import zone_problem
from .naming import dns_label_problem
from .tpu_availability import flex_start_problem, zone_warning

FLEX_START_MIN_GKE_VERSION = "1.33.0-gke.1712000"
"""The first GKE version with flex-start for TPU node pools."""

FLEX_START_MAX_RUN_SECONDS = 7 * 24 * 3600
"""Flex-start nodes live at most seven days (GKE's flex-start training page)."""

QUEUED_PROVISIONING_MIN_GKE_VERSION = "1.34"
"""GKE's TPU tutorial for flex-start with queued provisioning and Kueue, "Optimize AI training on
TPUs with DWS and Kueue" (docs.cloud.google.com/kubernetes-engine/docs/tutorials/ray-kueue-dws,
last updated 2026-04-10): "GKE_VERSION: The GKE version of your cluster. Use version 1.34 or
later." The pool cannot see the cluster's version: the stack's config checks it."""

MAX_DURATION_SECONDS = 315_576_000_000
"""The longest duration the API's protobuf Duration holds: "Must be from -315,576,000,000 to
+315,576,000,000 inclusive" (google/protobuf/duration.proto)."""

MAX_NODES_PER_POOL_ZONE = 1_000
MAX_NODES_PER_CLUSTER = 15_000
"""GKE "Quotas and limits" (https://cloud.google.com/kubernetes-engine/quotas), Standard clusters:
1,000 nodes per node pool in each zone, 15,000 nodes per cluster (65,000 only for clusters set up
for it, which this stack does not declare)."""


# Generations whose multi-host slices GKE places with a workload policy, not COMPACT placement.
WORKLOAD_POLICY_GENERATIONS = frozenset({"tpu7x"})

# Node labels GKE sets, by which a Pod picks the capacity its pool was provisioned with:
# - flex-start: GKE "Run a small batch workload with flex-start" selects
#   `cloud.google.com/gke-flex-start: "true"`, and Cluster Toolkit's TPU flex-start test lists TPU
#   nodes by it (tools/cloud-build/.../test-gke-tpu-flex-autoscaling.yml);
# - Spot: GKE "Spot VMs" and xpk 1.16.0 (src/xpk/core/capacity.py:184) `cloud.google.com/gke-spot`;
# - a reservation: GKE "Consuming reserved zonal resources" and xpk 1.16.0 (capacity.py:188)
#   `cloud.google.com/reservation-name: NAME`.
# On-demand nodes carry none of these, so an on-demand pool's Pods select none.
FLEX_START_NODE_LABEL = "cloud.google.com/gke-flex-start"
SPOT_NODE_LABEL = "cloud.google.com/gke-spot"
RESERVATION_NODE_LABEL = "cloud.google.com/reservation-name"
ACCELERATOR_NODE_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_NODE_LABEL = "cloud.google.com/gke-tpu-topology"
QUEUED_PROVISIONING_TAINT = "cloud.google.com/gke-queued"
"""GKE taints every node of a queued-provisioning pool with this key (``NoSchedule``) itself, so
that only the workloads it provisioned the nodes for land there: "DWS flex-start nodes are
specially marked (tainted) by GKE [...] your job must explicitly tolerate the
cloud.google.com/gke-queued taint" (GKE tutorial ray-kueue-dws, whose TPU workers tolerate it
with ``operator: Exists``); Cluster Toolkit's gke-node-pool module "adds the
cloud.google.com/gke-queued taint" (modules/compute/gke-node-pool/README.md at
1047080375afbb44da4b596be314634e7486af4a)."""
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
"""GKE's label of a node's pool: one value per GKE node pool, so per multi-host slice."""
POOL_NODE_LABEL = "tpu-training/node-pool"
"""Our label on every node of every slice of one pool, its value the pool's name. A Job selects
its pool by it rather than by listing the slices' GKE pool names, so adding or removing a slice
changes nothing in the Job's Pod template (which pulumi-kubernetes would replace the running Job
for). It is a Kubernetes node label (``node_config.labels``), which GKE updates in place."""

COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
"""The node selector by which a Pod asks for a custom ComputeClass, and the node label and taint
(``NoSchedule``, value the class's name) by which a manually created node pool joins one (GKE
"About custom ComputeClasses", concepts/about-custom-compute-classes; ``compute_class``)."""

LADDER_RUNGS: tuple[str, ...] = ("flex-start", "spot", "reserved", "on-demand")
"""The capacities a pool's ladder may try: the consumption options a ComputeClass priority rule
can describe (``flexStart``, ``spot``, ``reservations``, or none of them: on-demand)."""
RUNG_POOL_SUFFIX: Mapping[str, str] = {
    "flex-start": "flex",
    "spot": "spot",
    "reserved": "reserved",
    "on-demand": "ondemand",
}
"""A rung's GKE node pools are ``{pool}-{suffix}`` (and ``-1``, ``-2``, ... for further multi-host
slices): named by the capacity, not by the position, so reordering a ladder renames nothing."""

_RESERVATION_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")

MAX_NODE_POOL_NAME = 40
"""GKE node pool names: 1-40 lowercase letters, digits or '-', starting with a letter."""


class NodePoolError(CatalogueError):
    """An invalid node pool combination; the message says what was given and what is allowed."""


@dataclass(frozen=True)
class TpuNodePoolPlan:
    """Every setting of one TPU node pool, derived from its slice shape and provisioning."""

    name: str
    """GKE name of the pool of the first slice; the others add ``-1``, ``-2``, ..."""
    shape: SliceShape
    slices: int
    node_locations: tuple[str, ...]
    flex_start: bool
    spot: bool
    reservation: Optional[str]
    max_run_seconds: Optional[int]
    queued_provisioning: bool = False
    """Nodes only through GKE's queued provisioning: a ProvisioningRequest, which Kueue makes for
    each workload it admits, brings up a whole slice at once or nothing (``QueuedProvisioning``)."""
    kueue_queue: bool = False
    """The pool's workloads are admitted whole, one after another, through a Kueue queue of the
    pool's chips (``QueuedProvisioning`` without a ProvisioningRequest): how xpk runs every
    JobSet, and GKE's "Orchestrate Multislice workloads using JobSet and Kueue". Implied by
    ``queued_provisioning``."""

    ladder: tuple[str, ...] = ()
    """The capacities GKE tries, in order, through the pool's custom ComputeClass
    (``compute_class``): one set of node pools per rung (``rungs``). Empty for a pool of one
    capacity, which is what ``flex_start``, ``spot`` and ``reservation`` then describe."""
    member_of: Optional[str] = None
    """For a rung's own plan (``rungs``): the ladder pool it belongs to, whose name its nodes
    carry as ``POOL_NODE_LABEL`` and ``COMPUTE_CLASS_LABEL``."""

    # Flex-start starts empty and lets the autoscaler bring up exactly what a workload asks for.
    initial_node_count: int = 0
    min_nodes: int = 0
    # ANY scales up in whichever of the pool's zones has capacity, which is what flex-start is
    # for; BALANCED would hold back to keep zones even.
    location_policy: Literal["ANY"] = "ANY"

    @property
    def max_nodes(self) -> int:
        """Nodes of all slices together: VMs per slice times slices (GKE's flex-start training page:
        ``ct6e-standard-4t`` + ``4x4`` -> 4); for a ladder, of every rung's pools together, which is
        the autoscaler's ceiling (the Pods ask for one rung's worth at a time)."""
        return self.shape.vms * self.slices * max(1, len(self.ladder))

    @property
    def compute_class(self) -> Optional[str]:
        """The custom ComputeClass of a pool with a ladder, named after the pool; None without."""
        return self.name if self.ladder else None

    @property
    def rungs(self) -> tuple[TpuNodePoolPlan, ...]:
        """One plan per rung of the ladder, in its order: the rung's node pools, set up as a pool of
        that single capacity would be (placement, repair, reservation affinity), named
        ``{pool}-{suffix}`` and joined to the ComputeClass. Empty without a ladder."""
        return tuple(
            replace(
                self,
                name=f"{self.name}-{RUNG_POOL_SUFFIX[rung]}",
                flex_start=rung == "flex-start",
                spot=rung == "spot",
                reservation=self.reservation if rung == "reserved" else None,
                ladder=(),
                member_of=self.name,
                kueue_queue=False,
            )
            for rung in self.ladder
        )

    @property
    def multi_host(self) -> bool:
        return self.shape.multi_host

    @property
    def pool_names(self) -> tuple[str, ...]:
        """GKE node pools of this plan. A multi-host pool holds exactly one slice, so N slices
        are N pools, as xpk (``{cluster}-np-{i}``, src/xpk/core/nodepool.py) and Cluster Toolkit
        (``count = max(num_node_pools, num_slices)``, modules/compute/gke-node-pool) make them.
        The first keeps the plain name, so going from 1 to N slices leaves a running slice alone.
        Single-host slices are one VM each: one pool holds all of them. A ladder's are its rungs'."""
        if self.ladder:
            return tuple(name for rung in self.rungs for name in rung.pool_names)
        if not self.multi_host:
            return (self.name,)
        return (self.name, *(f"{self.name}-{index}" for index in range(1, self.slices)))

    @property
    def max_nodes_per_pool(self) -> int:
        """The autoscaler's ceiling of each pool: one slice's VMs for a multi-host pool, all the
        slices' VMs for the single-host pool."""
        return self.shape.vms if self.multi_host else self.slices

    @property
    def zonal_limits(self) -> bool:
        """Whether the limits are per zone. GKE applies ``min/max_node_count`` in *each* zone of
        the pool, so a pool over several zones would multiply its cap; there the limits are the
        pool's totals (``total_*``). A pool in one zone keeps per-zone limits, which mean the
        same and which Cluster Toolkit requires for TPU flex-start ("required to workaround a
        Terraform provider bug", modules/compute/gke-node-pool/main.tf)."""
        return len(self.node_locations) == 1

    @property
    def capacity(self) -> Literal["flex-start", "spot", "reservation", "on-demand"]:
        if self.flex_start:
            return "flex-start"
        if self.spot:
            return "spot"
        return "reservation" if self.reservation else "on-demand"

    @property
    def node_selector(self) -> dict[str, str]:
        """The node labels a Pod of this pool selects: its capacity type's label (none for
        on-demand), the TPU accelerator and the topology. A pool with a ladder selects its
        ComputeClass instead of a capacity: GKE picks the rung, and a capacity label would pin
        one. The same whatever the ladder's order or rungs, so editing the ladder leaves its
        Jobs' Pod template alone."""
        if self.compute_class is not None:
            return {
                COMPUTE_CLASS_LABEL: self.compute_class,
                ACCELERATOR_NODE_LABEL: self.shape.accelerator_label,
                TOPOLOGY_NODE_LABEL: self.shape.topology,
            }
        capacity = {
            "flex-start": {FLEX_START_NODE_LABEL: "true"},
            "spot": {SPOT_NODE_LABEL: "true"},
            "reservation": {RESERVATION_NODE_LABEL: self.reservation or ""},
            "on-demand": {},
        }[self.capacity]
        return {
            **capacity,
            ACCELERATOR_NODE_LABEL: self.shape.accelerator_label,
            TOPOLOGY_NODE_LABEL: self.shape.topology,
        }

    @property
    def tolerations(self) -> tuple[dict[str, str], ...]:
        """The taints of the pool's nodes a Pod must tolerate besides the TPU one, which GKE
        adds to TPU Pods itself: GKE's queued-provisioning taint, on a queued pool only; the
        ComputeClass's taint, on a pool with a ladder (GKE documents the taint on pools that join a
        class; tolerating it here does not depend on GKE adding the toleration itself)."""
        if self.compute_class is not None:
            return (
                {
                    "key": COMPUTE_CLASS_LABEL,
                    "operator": "Equal",
                    "value": self.compute_class,
                    "effect": "NoSchedule",
                },
            )
        if not self.queued_provisioning:
            return ()
        # As GKE's tutorial writes it: any value of the key.
        return ({"key": QUEUED_PROVISIONING_TAINT, "operator": "Exists", "effect": "NoSchedule"},)

    @property
    def queue_name(self) -> Optional[str]:
        """The Kueue LocalQueue (and ClusterQueue) that admits this pool's workloads, named after
        the pool; None for a pool without a queue (neither ``kueue_queue`` nor queued provisioning)."""
        return self.name if self.queued_provisioning or self.kueue_queue else None

    @property
    def node_max_run_duration(self) -> Optional[str]:
        """``node_config.max_run_duration`` of the pool's node pools. A queued pool's nodes live
        as long as the ProvisioningRequest that brought them asks (its ``maxRunDurationSeconds``
        parameter, "If you don't specify a value [...] the default is seven days", GKE "About
        flex-start provisioning mode", concepts/dws), so there the duration goes to the queue's
        ProvisioningRequestConfig instead (``kueue_manifests``)."""
        return None if self.queued_provisioning else self.max_run_duration

    @property
    def node_labels(self) -> dict[str, str]:
        """The Kubernetes labels the pool gives every node of every slice: the Job's selector. A
        rung's nodes carry the ladder pool's name, and the ComputeClass label by which GKE counts
        a manually created pool as the class's."""
        if self.member_of is not None:
            return {POOL_NODE_LABEL: self.member_of, COMPUTE_CLASS_LABEL: self.member_of}
        return {POOL_NODE_LABEL: self.name}

    @property
    def node_taints(self) -> tuple[dict[str, str], ...]:
        """Taints of a rung's nodes: the ComputeClass's, so only Pods of the class land there (GKE's
        manual-pool setup for a class: label and taint ``cloud.google.com/compute-class=NAME``).
        None on any other pool."""
        if self.member_of is None:
            return ()
        return ({"key": COMPUTE_CLASS_LABEL, "value": self.member_of, "effect": "NO_SCHEDULE"},)

    @property
    def zone_warnings(self) -> tuple[str, ...]:
        """Zones our availability tables do not list for this generation (and capacity)."""
        if self.ladder:
            return tuple(dict.fromkeys(warning for rung in self.rungs for warning in rung.zone_warnings))
        generation = self.shape.machine_type.generation.name
        found = (zone_warning(generation, zone, flex_start=self.flex_start) for zone in self.node_locations)
        return tuple(warning for warning in found if warning)

    @property
    def size_warnings(self) -> tuple[str, ...]:
        """A multi-host slice of more VMs than GKE's per-zone node pool limit: Google documents
        such slices (v5p 16x16x24 is 1,536 VMs), so only a warning."""
        if self.multi_host and self.shape.vms > MAX_NODES_PER_POOL_ZONE:
            return (
                f"a {self.shape.topology} slice is {self.shape.vms} VMs in one node pool and zone, above "
                f"GKE's general limit of {MAX_NODES_PER_POOL_ZONE} nodes per pool and zone; check "
                f"your quota before `pulumi up`",
            )
        return ()

    @property
    def placement_topology(self) -> Optional[str]:
        """COMPACT placement with the topology, for multi-host slices only: a single-host pool
        with a topology in its placement policy is rejected by GKE."""
        return self.shape.topology if self.multi_host else None

    @property
    def auto_repair(self) -> bool:
        """Off for every flex-start pool (xpk 1.16.0 adds ``--no-enable-autorepair`` to every
        flex-start pool, src/xpk/core/capacity.py:141; Cluster Toolkit refuses flex-start with
        auto-repair on, modules/compute/gke-node-pool/main.tf: "enable_flex_start needs node
        auto_repair set to false"): a repair re-creates nodes, and flex-start capacity may not
        come back. Off for every multi-host pool too (GKE's flex-start training page): repairing one
        node re-creates the whole slice under a running job."""
        return not (self.multi_host or self.flex_start)

    @property
    def reservation_affinity(self) -> str:
        if self.reservation:
            return "SPECIFIC_RESERVATION"
        # Flex-start neither uses nor needs reservations (GKE's flex-start training page's
        # --reservation-affinity=none).
        return "NO_RESERVATION"

    @property
    def max_run_duration(self) -> Optional[str]:
        """``max_run_seconds`` as the API's duration string, e.g. ``"259200s"``."""
        return None if self.max_run_seconds is None else f"{self.max_run_seconds}s"


_DURATION = re.compile(r"^([1-9][0-9]*)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str, key: str = "maxRunDuration") -> int:
    """``"72h"`` -> 259200. Units: s, m, h, d. The error names ``key``."""
    match = _DURATION.fullmatch(value)
    if match is None:
        raise NodePoolError(
            f"{key} {value!r} is not a duration; write a whole number and a unit "
            f"(s, m, h or d), e.g. '72h' or '7d'"
        )
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds > MAX_DURATION_SECONDS:
        raise NodePoolError(
            f"{key} {value!r} is {seconds}s, longer than the longest duration the API "
            f"takes ({MAX_DURATION_SECONDS}s)"
        )
    return seconds


def node_pool_name_problem(name: str) -> Optional[str]:
    """Why ``name`` cannot name a GKE node pool, or None."""
    return dns_label_problem("node pool name", name, MAX_NODE_POOL_NAME)


def plan_tpu_node_pool(
    *,
    name: str,
    machine_type: str,
    topology: str,
    node_locations: Sequence[str],
    cluster_region: str,
    slices: int = 1,
    flex_start: bool = True,
    spot: bool = False,
    reservation: Optional[str] = None,
    max_run_duration: Optional[str] = None,
    queued_provisioning: bool = False,
    kueue_queue: bool = False,
    ladder: Sequence[str] = (),
) -> TpuNodePoolPlan:
    """Validate a TPU node pool and derive its settings, or raise ``NodePoolError``. With a
    ``ladder`` (two capacities or more, in the order GKE is to try them) ``flex_start`` and
    ``spot`` must be False: the rungs say the capacity (``TpuNodePoolPlan.rungs``)."""
    rungs = tuple(ladder)
    if rungs:
        _check_ladder(name, rungs, flex_start=flex_start, spot=spot, queued=queued_provisioning)
    shape = slice_shape(machine_type, topology)
    shown = slices if slices.bit_length() <= 64 else f"{'-' if slices < 0 else ''}(a number beyond 2**64)"
    if slices < 1:
        raise NodePoolError(f"slices {shown} must be at least 1")
    # Checked before any per-slice work: a billion slices would be a billion pool names.
    if shape.vms * slices > MAX_NODES_PER_CLUSTER:
        raise NodePoolError(
            f"slices {shown} of {shape.vms} VM(s) each are more nodes than GKE's limit of "
            f"{MAX_NODES_PER_CLUSTER} nodes per cluster; at most {MAX_NODES_PER_CLUSTER // shape.vms} "
            f"slices of {topology} {machine_type}"
        )
    if flex_start or "flex-start" in rungs:
        problem = flex_start_problem(shape.machine_type.generation.name)
        if problem:
            raise NodePoolError(f"{machine_type}: {problem}")
    zones = tuple(node_locations)
    if not zones:
        raise NodePoolError("nodeLocations is empty; give the zone (or zones) the TPU nodes run in")
    for zone in zones:
        problem = zone_problem(zone)
        if problem:
            raise NodePoolError(f"node location {problem}")
        if region_of_zone(zone) != cluster_region:
            raise NodePoolError(
                f"node location {zone!r} is outside the cluster's region {cluster_region!r}; "
                f"use zones of {cluster_region} (e.g. {cluster_region}-a)"
            )
    if len(set(zones)) != len(zones):
        raise NodePoolError(f"nodeLocations {list(zones)} repeats a zone")
    if shape.multi_host and shape.machine_type.generation.name in WORKLOAD_POLICY_GENERATIONS:
        raise NodePoolError(
            f"a multi-host {shape.machine_type.generation.name} slice ({topology}) is placed by a "
            f"workload policy, not COMPACT placement, which this version does not declare yet; "
            f"use a single-host topology ({shape.machine_type.name} takes 2x2x1)"
        )
    if shape.multi_host and len(zones) > 1:
        raise NodePoolError(
            f"a {topology} slice of {machine_type} spans {shape.vms} VMs, which must sit in one "
            f"zone to share the slice's interconnect; give one node location, not {list(zones)}"
        )
    if flex_start and spot:
        raise NodePoolError("flexStart and spot exclude each other: flex-start is its own provisioning model")
    if flex_start and reservation:
        raise NodePoolError(
            f"flexStart cannot consume reservation {reservation!r}: flex-start neither uses nor "
            f"needs reservations; set flexStart: false to use the reservation"
        )
    if spot and reservation:
        raise NodePoolError(f"spot nodes cannot consume reservation {reservation!r}")
    if rungs and ("reserved" in rungs) != (reservation is not None):
        raise NodePoolError(
            f"ladder {list(rungs)} has a 'reserved' rung but no reservation to consume; name it in "
            f"reservation"
            if reservation is None
            else f"reservation {reservation!r} is consumed only by a 'reserved' rung, and ladder "
            f"{list(rungs)} has none; add 'reserved' to the ladder, or remove reservation"
        )
    # The name also becomes the Pods' `cloud.google.com/reservation-name` selector value.
    if reservation is not None and not _RESERVATION_NAME.fullmatch(reservation):
        raise NodePoolError(
            f"reservation {reservation!r} must be the name of a reservation in this project: 1-63 "
            f"lowercase letters, digits or '-', starting with a letter (shared reservations of other "
            f"projects are not supported yet)"
        )
    if queued_provisioning:
        _check_queued(shape, flex_start)
    seconds = None
    if max_run_duration is not None:
        seconds = parse_duration(max_run_duration)
        if (flex_start or "flex-start" in rungs) and seconds > FLEX_START_MAX_RUN_SECONDS:
            raise NodePoolError(
                f"maxRunDuration {max_run_duration!r} is longer than flex-start's limit of 7 days "
                f"({FLEX_START_MAX_RUN_SECONDS}s)"
            )
    plan = TpuNodePoolPlan(
        name=name,
        shape=shape,
        slices=slices,
        node_locations=zones,
        flex_start=flex_start,
        spot=spot,
        reservation=reservation,
        max_run_seconds=seconds,
        queued_provisioning=queued_provisioning,
        kueue_queue=kueue_queue,
        ladder=rungs,
    )
    if not plan.multi_host and plan.max_nodes_per_pool > MAX_NODES_PER_POOL_ZONE * len(zones):
        raise NodePoolError(
            f"{slices} single-host slices are {slices} nodes in {len(zones)} zone(s), above GKE's limit "
            f"of {MAX_NODES_PER_POOL_ZONE} nodes per node pool in each zone; add zones or split the pool"
        )
    for member in plan.rungs or (plan,):
        for pool_name in member.pool_names:
            problem = node_pool_name_problem(pool_name)
            if problem:
                extra = (
                    f" (the pool of slice {member.pool_names.index(pool_name)}"
                    f"{' of rung ' + repr(plan.ladder[plan.rungs.index(member)]) if plan.ladder else ''})"
                    if pool_name != name
                    else ""
                )
                raise NodePoolError(f"{problem}{extra}")
    return plan


PLAN_REQUIRED = ("machine_type", "topology", "node_locations", "cluster_region")
PLAN_OPTIONAL = (
    "slices",
    "flex_start",
    "spot",
    "reservation",
    "max_run_duration",
    "queued_provisioning",
    "kueue_queue",
    "ladder",
)
"""The arguments of ``plan_tpu_node_pool`` besides the name, by the names a pool's component
arguments, its selection (``TpuNodePoolSelection``) and the stack's ``nodePools`` entries use too."""


def plan_from(name: str, values: Mapping[str, Any]) -> TpuNodePoolPlan:
    """``plan_tpu_node_pool`` from any mapping that holds its arguments by name: the one place
    that lists them, for the component, a Job's selection of a pool and the stack's config alike.
    An optional argument that is absent takes its default; a required one raises ``KeyError``."""
    return plan_tpu_node_pool(
        name=name,
        **{key: values[key] for key in PLAN_REQUIRED},
        **{key: values[key] for key in PLAN_OPTIONAL if key in values},
    )


COMPUTE_CLASS_RESERVED_PREFIXES = ("gke", "autopilot")
"""GKE "Control autoscaled node attributes with custom ComputeClasses"
(how-to/node-attributes-compute-classes), Limitations: "The name of a ComputeClass can't start
with gke or autopilot"."""


def _check_ladder(name: str, rungs: tuple[str, ...], *, flex_start: bool, spot: bool, queued: bool) -> None:
    """What GKE's ComputeClass can try in order (its CRD, ``compute_class``): each rung once, of
    the capacities a priority rule describes; never queued provisioning, which comes through
    ProvisioningRequests and has no field in a priority rule."""
    if flex_start or spot or queued:
        raise NodePoolError(
            "a ladder says the capacity of each rung: give flex_start, spot and queued_provisioning "
            "False with it"
        )
    if len(rungs) < 2:
        raise NodePoolError(
            f"a ladder tries two capacities or more; {list(rungs)} is one (give it as the pool's own)"
        )
    for rung in rungs:
        if rung == "flex-start-queued":
            raise NodePoolError(
                "'flex-start-queued' cannot be a rung of a ladder: queued provisioning brings nodes "
                "only through ProvisioningRequests, and a ComputeClass priority rule has no field for "
                "it (GKE ComputeClass CRD reference, reference/crds/computeclass); use 'flex-start', "
                "or give the pool provisioning: flex-start-queued alone"
            )
        if rung not in LADDER_RUNGS:
            raise NodePoolError(f"ladder rung {rung!r} is not a capacity; allowed: {', '.join(LADDER_RUNGS)}")
    repeated = sorted({rung for rung in rungs if rungs.count(rung) > 1})
    if repeated:
        raise NodePoolError(f"ladder {list(rungs)} repeats {', '.join(repeated)}; each capacity is one rung")
    if name.startswith(COMPUTE_CLASS_RESERVED_PREFIXES):
        raise NodePoolError(
            f"pool name {name!r} also names its ComputeClass, and GKE refuses a ComputeClass whose name "
            f"starts with 'gke' or 'autopilot' (how-to/node-attributes-compute-classes, Limitations); "
            f"rename the pool"
        )


def _check_queued(shape: SliceShape, flex_start: bool) -> None:
    """Queued provisioning as GKE offers it for TPUs: flex-start, multi-host slices."""
    if not flex_start:
        # "To use flex-start with queued provisioning, you have to add the --flex-start and
        # --enable-queued-provisioning flags when you create the node pool" (GKE "Run a
        # large-scale workload with flex-start with queued provisioning", how-to/provisioningrequest).
        raise NodePoolError(
            "queuedProvisioning needs flexStart: true; GKE's queued provisioning is a way of "
            "flex-start (--flex-start with --enable-queued-provisioning), not of Spot, reservations "
            "or on-demand capacity"
        )
    if not shape.multi_host:
        # The same page: queued provisioning for workloads "required to run across multiple
        # nodes simultaneously"; "For smaller workloads that can run on a single node, use
        # Flex-start VMs".
        raise NodePoolError(
            f"queuedProvisioning is for multi-host slices, which must come up all at once; a "
            f"{shape.topology} slice of {shape.machine_type.name} is one VM, which GKE provisions "
            f"with plain flex-start (queuedProvisioning: false); or use a multi-host topology"
        )
