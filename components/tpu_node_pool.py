"""A flex-start TPU node pool on GKE, set up flag by flag as seed 002's `gcloud` commands."""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, TypedDict

import pulumi
import pulumi_gcp as gcp
from typing_extensions import NotRequired

from .catalogue import CatalogueError
from .errors import InvalidArgument, check_known, check_labels
from .node_pool_plan import TpuNodePoolPlan, plan_tpu_node_pool

RESERVATION_NAME_KEY = "compute.googleapis.com/reservation-name"


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
    """Slices the pool may hold at once (default 1); max nodes = VMs per slice x slices."""
    flex_start: NotRequired[bool]
    """Provision with flex-start (default True)."""
    spot: NotRequired[bool]
    """Spot VMs instead (only with flex_start False)."""
    reservation: NotRequired[Optional[str]]
    """Consume this reservation (only with flex_start False)."""
    max_run_duration: NotRequired[Optional[str]]
    """Delete nodes after this long, e.g. ``72h``; at most 7 days with flex-start."""
    node_pool_name: NotRequired[str]
    """GKE node pool name; the component's name when omitted."""
    labels: NotRequired[Mapping[str, str]]
    """Labels on the nodes' VMs."""
    project: NotRequired[pulumi.Input[str]]


def plan_for(name: str, args: FlexStartTpuNodePoolArgs) -> TpuNodePoolPlan:
    """Validate the arguments and derive the pool's settings, or raise ``InvalidArgument``."""
    where = f"FlexStartTpuNodePool {name!r}"
    check_known(where, args, FlexStartTpuNodePoolArgs.__annotations__)
    check_labels(where, args.get("labels", {}))
    try:
        return plan_tpu_node_pool(
            machine_type=args["machine_type"],
            topology=args["topology"],
            node_locations=args["node_locations"],
            cluster_region=args["cluster_region"],
            slices=args.get("slices", 1),
            flex_start=args.get("flex_start", True),
            spot=args.get("spot", False),
            reservation=args.get("reservation"),
            max_run_duration=args.get("max_run_duration"),
        )
    except CatalogueError as exc:
        raise InvalidArgument(f"{where}: {exc}") from None


class FlexStartTpuNodePool(pulumi.ComponentResource):
    """A TPU slice node pool that starts empty and scales from zero to the slices it may hold.

    Seed 002's flags map to the node pool as: ``--flex-start`` -> ``node_config.flex_start``;
    ``--enable-autoscaling --num-nodes 0 --min-nodes 0 --max-nodes N`` -> ``initial_node_count``
    and ``autoscaling``; ``--reservation-affinity=none`` -> ``NO_RESERVATION``;
    ``--tpu-topology`` -> COMPACT ``placement_policy`` (multi-host only);
    ``--no-enable-autorepair`` -> ``management.auto_repair`` (multi-host only).

    Children: ``{name}-pool`` (``gcp.container.NodePool``).
    """

    node_pool_name: pulumi.Output[str]
    max_nodes: pulumi.Output[int]
    accelerator_label: pulumi.Output[str]
    topology: pulumi.Output[str]

    def __init__(
        self, name: str, args: FlexStartTpuNodePoolArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        plan = plan_for(name, args)
        super().__init__("tpu-training:gke:FlexStartTpuNodePool", name, {}, opts)
        self.plan = plan
        """The pool's derived settings and slice shape (VMs, chips per VM, labels) for Jobs."""

        reservation = (
            gcp.container.NodePoolNodeConfigReservationAffinityArgs(
                consume_reservation_type="SPECIFIC_RESERVATION",
                key=RESERVATION_NAME_KEY,
                values=[plan.reservation],
            )
            if plan.reservation
            else gcp.container.NodePoolNodeConfigReservationAffinityArgs(
                consume_reservation_type=plan.reservation_affinity
            )
        )
        self.pool = gcp.container.NodePool(
            f"{name}-pool",
            name=args.get("node_pool_name", name),
            cluster=args["cluster"],
            location=args["cluster_region"],
            project=args.get("project"),
            node_locations=list(plan.node_locations),
            initial_node_count=plan.initial_node_count,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(
                min_node_count=plan.min_nodes,
                max_node_count=plan.max_nodes,
                location_policy=plan.location_policy,
            ),
            placement_policy=(
                gcp.container.NodePoolPlacementPolicyArgs(
                    type="COMPACT", tpu_topology=plan.placement_topology
                )
                if plan.placement_topology
                else None
            ),
            management=gcp.container.NodePoolManagementArgs(auto_repair=plan.auto_repair, auto_upgrade=True),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=plan.shape.machine_type.name,
                flex_start=plan.flex_start or None,
                max_run_duration=plan.max_run_duration,
                spot=plan.spot or None,
                reservation_affinity=reservation,
                service_account=args["service_account_email"],
                # Access is decided by the account's IAM roles, not by OAuth scopes.
                oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
                # Training Pods get their own identity through the GKE metadata server.
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA"
                ),
                resource_labels=dict(args.get("labels", {})),
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.node_pool_name = self.pool.name
        self.max_nodes = pulumi.Output.from_input(plan.max_nodes)
        self.accelerator_label = pulumi.Output.from_input(plan.shape.accelerator_label)
        self.topology = pulumi.Output.from_input(plan.shape.topology)
        self.register_outputs(
            {
                "node_pool_name": self.node_pool_name,
                "max_nodes": self.max_nodes,
                "accelerator_label": self.accelerator_label,
                "topology": self.topology,
            }
        )
