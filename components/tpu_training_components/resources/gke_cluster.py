"""A GKE Standard cluster ready for flex-start TPU node pools, with secure defaults."""

import json
import re
from typing import Mapping, Optional

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
from pydantic import with_config
from typing_extensions import NotRequired, TypedDict

from ..domain import catalogue
from ..domain.cost_estimate import Priced
from ..domain.gcp_locations import region_problem
from ..domain.gke_cluster_plan import gke_version_problem, system_pool_zones
from ..domain.maintenance_window import (
    DEFAULT_UPGRADE_EXCLUSION_START,
    UPGRADE_EXCLUSION_SCOPES,
    MaintenanceWindowError,
    exclusion_start_problem,
    recurring_window,
)
from ..domain.naming import (
    min_version_problem,
    network_problem,
    service_account_id_problem,
    subnetwork_problem,
    system_machine_type_problem,
)
from ..validation import ARGUMENTS, Problems, check_arguments, count_problem, gcp_labels

RELEASE_CHANNELS = ("RAPID", "REGULAR", "STABLE")
# Roles of the nodes' own identity: what GKE's hardening guide grants a custom node service
# account instead of the project-wide Editor of the default compute account.
NODE_ROLES = {
    # Write logs and metrics, read node metadata: everything a node itself needs.
    "default-node": "roles/container.defaultNodeServiceAccount",
    # Pull container images from the project's Artifact Registry, read-only.
    "image-reader": "roles/artifactregistry.reader",
}
_CLUSTER_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")


class MaintenanceWindow(TypedDict):
    """When GKE may upgrade and repair the cluster: a daily window with a recurrence."""

    start_time: str
    """Start, ``HH:MM`` UTC."""
    end_time: str
    """End, ``HH:MM`` UTC; an end not after the start is on the next day (``22:00``-``04:00``)."""
    recurrence: str
    """RFC 5545 RRULE, e.g. ``FREQ=WEEKLY;BYDAY=SA,SU``. GKE needs at least 48 hours of windows
    in every 32 days, counting only windows of 4 hours or more."""


DEFAULT_MAINTENANCE_WINDOW: MaintenanceWindow = {
    "start_time": "02:00",
    "end_time": "08:00",
    "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU",
}


@with_config(ARGUMENTS)
class GkeTpuClusterArgs(TypedDict):
    location: str
    """Region of the cluster, e.g. ``europe-west4``: a regional control plane survives a zone's
    maintenance, and every TPU node pool must lie in this region."""
    project: str
    """Google Cloud project; also names the Workload Identity pool ``PROJECT.svc.id.goog``."""
    cluster_name: NotRequired[str]
    """GKE cluster name; the component's name when omitted."""
    release_channel: NotRequired[str]
    """RAPID, REGULAR (default) or STABLE."""
    min_version: NotRequired[Optional[str]]
    """Minimum control-plane version; must be at least 1.33.0-gke.1712000 for TPU flex-start.
    The release channel's default when omitted."""
    maintenance_window: NotRequired[MaintenanceWindow]
    """When GKE may upgrade; default weekends 02:00-08:00 UTC."""
    system_machine_type: NotRequired[str]
    """Machine type of the CPU system pool (default ``e2-standard-4``)."""
    system_max_nodes: NotRequired[int]
    """Upper bound of the system pool across all zones (default 3; the lower bound is 1)."""
    upgrade_exclusion_scope: NotRequired[str]
    """What the standing maintenance exclusion holds back: ``NO_MINOR_OR_NODE_UPGRADES``
    (default: no node upgrades at all, so GKE never drains a training slice to upgrade it; the
    control plane still gets patches), ``NO_MINOR_UPGRADES`` (node patches allowed) or ``NONE``."""
    upgrade_exclusion_start: NotRequired[str]
    """RFC 3339 start of the exclusion (default 2025-12-01T00:00:00Z); it lasts until the end of
    support of the cluster's version."""
    network: NotRequired[Optional[pulumi.Input[str]]]
    """VPC network (name or id); the project's ``default`` network when omitted, which must then
    give private nodes Private Google Access and, for images outside Google, Cloud NAT."""
    subnetwork: NotRequired[Optional[pulumi.Input[str]]]
    """Subnetwork of ``network`` in the cluster's region, for nodes and Pods."""
    pods_range_name: NotRequired[Optional[pulumi.Input[str]]]
    """Secondary range of ``subnetwork`` for Pod IPs; GKE creates one when omitted."""
    services_range_name: NotRequired[Optional[pulumi.Input[str]]]
    """Secondary range of ``subnetwork`` for Service IPs; GKE creates one when omitted."""
    master_ipv4_cidr_block: NotRequired[Optional[str]]
    """Control-plane range for a VPC-peered private cluster; GKE picks (Private Service Connect)
    when omitted."""
    node_account_id: NotRequired[str]
    """Id of the nodes' service account; ``{cluster name}-nodes`` when omitted. Set it when two
    stacks share a project and a cluster name."""
    deletion_protection: NotRequired[bool]
    """Refuse to delete the cluster (default True)."""
    labels: NotRequired[Mapping[str, str]]
    """Resource labels on the cluster, besides the project's own."""


def _check_values(problems: Problems, name: str, args: GkeTpuClusterArgs) -> None:
    location = args["location"]
    if not catalogue.is_region(location):
        problems.add(
            "location",
            f"{location!r} must be a region such as 'europe-west4' (a regional control plane stays up "
            f"while a zone is in maintenance)",
        )
    problems.check("location", region_problem(location))
    cluster_name = args.get("cluster_name", name)
    if not _CLUSTER_NAME.fullmatch(cluster_name):
        problems.add(
            "cluster_name",
            f"cluster name {cluster_name!r} must be 1-40 lowercase letters, digits or '-', starting "
            f"with a letter",
        )
    channel = args.get("release_channel", "REGULAR")
    if channel not in RELEASE_CHANNELS:
        problems.add("release_channel", f"{channel!r} is not one of {', '.join(RELEASE_CHANNELS)}")
    version = args.get("min_version")
    if version is not None:
        problems.check("min_version", min_version_problem(version, gke_version_problem))
    scope = args.get("upgrade_exclusion_scope", UPGRADE_EXCLUSION_SCOPES[0])
    if scope not in UPGRADE_EXCLUSION_SCOPES:
        problems.add(
            "upgrade_exclusion_scope", f"{scope!r} is not one of {', '.join(UPGRADE_EXCLUSION_SCOPES)}"
        )
    start_problem = exclusion_start_problem(
        args.get("upgrade_exclusion_start", DEFAULT_UPGRADE_EXCLUSION_START)
    )
    problems.check("upgrade_exclusion_start", start_problem)
    node_account = args.get("node_account_id", f"{cluster_name[:24]}-nodes")
    problems.check("node_account_id", service_account_id_problem(node_account))
    problems.check("system_max_nodes", count_problem(args.get("system_max_nodes", 3), least=1))
    problems.check(
        "system_machine_type", system_machine_type_problem(args.get("system_machine_type", "e2-standard-4"))
    )
    # Outputs (a TrainingNetwork's ids) are checked by nobody: their values are not known yet.
    network, subnetwork = args.get("network"), args.get("subnetwork")
    if isinstance(network, str):
        problems.check("network", network_problem(network))
    if isinstance(subnetwork, str):
        problems.check("subnetwork", subnetwork_problem(subnetwork, location))
    gcp_labels(problems, args.get("labels", {}))


def _upgrade_exclusions(
    scope: str, start: str
) -> Optional[list[gcp.container.ClusterMaintenancePolicyMaintenanceExclusionArgs]]:
    if scope == "NONE":
        return None
    return [
        gcp.container.ClusterMaintenancePolicyMaintenanceExclusionArgs(
            exclusion_name="training-slices",
            start_time=start,
            exclusion_options=gcp.container.ClusterMaintenancePolicyMaintenanceExclusionExclusionOptionsArgs(
                scope=scope,
                # Renewed by GKE with every minor version, so it never silently runs out.
                end_time_behavior="UNTIL_END_OF_SUPPORT",
            ),
        )
    ]


def gke_kubeconfig(context: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig for the cluster that authenticates with ``gke-gcloud-auth-plugin`` (as
    ``gcloud container clusters get-credentials`` writes), so no credential is stored in it.
    JSON, which is YAML too."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": context,
                    "cluster": {
                        "server": f"https://{endpoint}",
                        "certificate-authority-data": ca_certificate,
                    },
                }
            ],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
            "current-context": context,
            "users": [
                {
                    "name": context,
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "gke-gcloud-auth-plugin",
                            "installHint": "gcloud components install gke-gcloud-auth-plugin",
                            "provideClusterInfo": True,
                        }
                    },
                }
            ],
        },
        indent=2,
    )


class GkeTpuCluster(pulumi.ComponentResource):
    """A GKE Standard cluster for TPU training: secure defaults, a small CPU system pool, a
    dedicated node identity, and a Kubernetes provider for the cluster.

    Children: ``{name}-nodes`` (node service account) with ``{name}-nodes-default-node`` and
    ``{name}-nodes-image-reader`` role bindings,
    ``{name}-cluster``, ``{name}-system`` (CPU node pool), ``{name}-k8s`` (Kubernetes provider).
    """

    cluster_name: pulumi.Output[str]
    """Name of the cluster."""
    location: pulumi.Output[str]
    """Region of the cluster."""
    endpoint: pulumi.Output[str]
    """The control plane's address."""
    kubeconfig: pulumi.Output[str]
    """A kubeconfig for the cluster, e.g. for a Kubernetes provider in another language."""
    workload_pool: pulumi.Output[str]
    """The cluster's Workload Identity pool (``PROJECT.svc.id.goog``)."""
    node_service_account_email: pulumi.Output[str]
    """Identity of the cluster's nodes, for TPU node pools."""

    def __init__(
        self, name: str, args: GkeTpuClusterArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        problems = check_arguments("GkeTpuCluster", name, args, GkeTpuClusterArgs, opts)
        _check_values(problems, name, args)
        given = args.get("maintenance_window", DEFAULT_MAINTENANCE_WINDOW)
        try:
            window = recurring_window(given["start_time"], given["end_time"], given["recurrence"])
        except MaintenanceWindowError as exc:
            problems.add("maintenance_window", str(exc))
        problems.raise_any()
        super().__init__("tpu-training:gke:GkeTpuCluster", name, {}, opts)
        project = args["project"]
        labels = dict(args.get("labels", {}))
        child = pulumi.ResourceOptions(parent=self)

        # We never use the default compute service account: it is Editor of the whole project.
        self.node_account = gcp.serviceaccount.Account(
            f"{name}-nodes",
            account_id=args.get("node_account_id", f"{args.get('cluster_name', name)[:24]}-nodes"),
            display_name="GKE nodes of the TPU training cluster",
            project=project,
            opts=child,
        )
        node_bindings = [
            gcp.projects.IAMMember(
                f"{name}-nodes-{key}",
                project=project,
                role=role,
                member=self.node_account.member,
                opts=child,
            )
            for key, role in NODE_ROLES.items()
        ]

        window_start, window_end = window.rfc3339()
        self.cluster = gcp.container.Cluster(
            f"{name}-cluster",
            name=args.get("cluster_name", name),
            location=args["location"],
            project=project,
            network=args.get("network"),
            subnetwork=args.get("subnetwork"),
            # Pod IPs from alias ranges, as private nodes need; said, not left to the API's
            # default (Optional/Computed/ForceNew in the Terraform provider, so naming the value
            # a VPC-native cluster already has changes nothing).
            networking_mode="VPC_NATIVE",
            # TPU pools scale to zero, so system pods get their own small pool (below); the
            # default pool would run with the default compute account, so it goes.
            remove_default_node_pool=True,
            initial_node_count=1,
            # Even the default pool, which lives only while the cluster is created, runs as the
            # nodes' own account: the default compute account is Editor of the whole project.
            # Changes are ignored (ignore_changes below): the pool is gone, and node_config is
            # ForceNew on a cluster, so a cluster made before this was said is left alone.
            node_config=gcp.container.ClusterNodeConfigArgs(
                service_account=self.node_account.email,
                oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
                workload_metadata_config=gcp.container.ClusterNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA"
                ),
                shielded_instance_config=gcp.container.ClusterNodeConfigShieldedInstanceConfigArgs(
                    enable_secure_boot=True, enable_integrity_monitoring=True
                ),
            ),
            min_master_version=args.get("min_version"),
            # Upgrades arrive tested, and only inside the maintenance window.
            release_channel=gcp.container.ClusterReleaseChannelArgs(
                channel=args.get("release_channel", "REGULAR")
            ),
            maintenance_policy=gcp.container.ClusterMaintenancePolicyArgs(
                recurring_window=gcp.container.ClusterMaintenancePolicyRecurringWindowArgs(
                    start_time=window_start, end_time=window_end, recurrence=window.recurrence
                ),
                # A release channel keeps node auto-upgrade on ("cannot be disabled", GKE
                # ReleaseChannel reference), and an upgrade drains and re-creates a TPU slice under
                # a running training. A standing exclusion of node upgrades keeps them away, as
                # Cluster Toolkit's TPU flex-start blueprint does
                # (examples/gke-consumption-options/dws-flex-start/gke-tpu-v6e).
                maintenance_exclusions=_upgrade_exclusions(
                    args.get("upgrade_exclusion_scope", UPGRADE_EXCLUSION_SCOPES[0]),
                    args.get("upgrade_exclusion_start", DEFAULT_UPGRADE_EXCLUSION_START),
                ),
            ),
            # Pods get Google identities of their own instead of the node's.
            workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                workload_pool=f"{project}.svc.id.goog"
            ),
            # Nodes prove their identity with secure boot and vTPM before they may join.
            enable_shielded_nodes=True,
            # Nodes have no public IPs; the control plane keeps its public endpoint for `pulumi up`.
            private_cluster_config=gcp.container.ClusterPrivateClusterConfigArgs(
                enable_private_nodes=True,
                enable_private_endpoint=False,
                master_ipv4_cidr_block=args.get("master_ipv4_cidr_block"),
            ),
            # Private nodes need a VPC-native cluster (alias IP ranges).
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name=args.get("pods_range_name"),
                services_secondary_range_name=args.get("services_range_name"),
            ),
            # Access is decided by IAM and RBAC, never by the legacy attribute-based policy.
            enable_legacy_abac=False,
            # A client certificate is a credential that cannot be revoked.
            master_auth=gcp.container.ClusterMasterAuthArgs(
                client_certificate_config=gcp.container.ClusterMasterAuthClientCertificateConfigArgs(
                    issue_client_certificate=False
                )
            ),
            deletion_protection=args.get("deletion_protection", True),
            resource_labels=labels,
            # The default pool's nodes need their roles to join and report.
            opts=pulumi.ResourceOptions(parent=self, depends_on=node_bindings, ignore_changes=["nodeConfig"]),
        )

        system_max_nodes = args.get("system_max_nodes", 3)
        system_machine_type = args.get("system_machine_type", "e2-standard-4")
        # One node in each of the pool's zones to start with: GKE counts initial_node_count per
        # zone, so when that exceeds system_max_nodes the pool is pinned to as many zones as fit;
        # otherwise it keeps GKE's default zones.
        system_zones = system_pool_zones(args["location"], system_max_nodes)
        self.system_pool = gcp.container.NodePool(
            f"{name}-system",
            name="system",
            cluster=self.cluster.name,
            location=self.cluster.location,
            project=project,
            node_locations=system_zones,
            initial_node_count=1,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(
                total_min_node_count=1,
                total_max_node_count=system_max_nodes,
                location_policy="BALANCED",
            ),
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=system_machine_type,
                service_account=self.node_account.email,
                # Access is decided by the account's IAM roles, not by OAuth scopes.
                oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
                # Pods see the GKE metadata server, never the node's own credentials.
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA"
                ),
                shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
                    enable_secure_boot=True, enable_integrity_monitoring=True
                ),
                resource_labels=labels,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=node_bindings),
        )

        self.priced: list[Priced] = [
            Priced("gcp:container/cluster:Cluster", f"{name}-cluster", {"location": args["location"]}),
            Priced(
                "gcp:container/nodePool:NodePool",
                f"{name}-system",
                {
                    "location": args["location"],
                    "nodeLocations": system_zones,
                    "initialNodeCount": 1,
                    "autoscaling": {"totalMinNodeCount": 1, "totalMaxNodeCount": system_max_nodes},
                    "nodeConfig": {"machineType": system_machine_type},
                },
            ),
        ]
        """The billable resources declared, as ``cost_estimate.estimate`` prices them."""
        self.cluster_name = self.cluster.name
        self.location = self.cluster.location
        self.endpoint = self.cluster.endpoint
        # Read from the cluster, so bindings to the pool wait until the cluster has made it.
        self.workload_pool = self.cluster.workload_identity_config.apply(
            lambda config: (config.workload_pool if config else None) or f"{project}.svc.id.goog"
        )
        self.node_service_account_email = self.node_account.email
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(
                self.cluster.name,
                self.cluster.endpoint,
                self.cluster.master_auth.apply(lambda auth: auth.cluster_ca_certificate),
            ).apply(
                lambda values: gke_kubeconfig(
                    f"gke_{project}_{args['location']}_{values[0]}", values[1], values[2]
                )
            )
        )
        # Kubernetes objects go through this provider, so they reach this cluster and no other
        # (never the ambient kubeconfig), and wait until the cluster and its system pool exist.
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            # Without it, a kubeconfig whose server or CA changes (a CA rotation, a new endpoint)
            # replaces the provider and so every Namespace, Service and running Job on it. With
            # it, only a change of this value replaces them (pulumi-kubernetes
            # provider/pkg/provider/provider.go DiffConfig; adding it to a provider that had none
            # replaces nothing). The cluster's id, projects/P/locations/L/clusters/N: it stays
            # through rotations and in-place updates (the engine keeps an updated resource's id
            # even in a preview, pkg/resource/deploy/step.go UpdateStep.Apply), and when the
            # cluster itself is re-created the engine sees this input depend on it and replaces
            # the provider with everything on it, as it must.
            cluster_identifier=self.cluster.id,
            # A ConfigMap's data is updated in place instead of replacing the ConfigMap: a Job's
            # run parameters change without touching the Job (see TpuTrainingJob).
            enable_config_map_mutable=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_pool]),
        )
        self.register_outputs(
            {
                "cluster_name": self.cluster_name,
                "location": self.location,
                "endpoint": self.endpoint,
                "kubeconfig": self.kubeconfig,
                "workload_pool": self.workload_pool,
                "node_service_account_email": self.node_service_account_email,
            }
        )
