"""What a stack needs from its Google Cloud project: the APIs to be enabled and the IAM
permissions of the identity that runs `pulumi up`, per kind of resource it declares. The one place
these are kept: the stack enables the APIs (``apis_for_features``), ``tpu-training preflight``
checks both, and a test keeps every resource type the stack can declare in ``ACCESS``.

Pure Python with no Pulumi import.

Read on 2026-11-26 from Google's IAM "roles and permissions" pages, one per product
(https://cloud.google.com/iam/docs/roles-permissions/<product>: tpu, compute, container, storage,
iam, resourcemanager, serviceusage), which list each predefined role with its permissions; the
role named beside each entry is the narrowest predefined one that holds its permissions, but for
``iam.serviceAccounts.actAs`` (``ROLE_OF_PERMISSION``). A Pulumi provider creates, reads
(refresh), updates and deletes what it declares, so each entry holds the create, get, update and
delete permissions of its API resource, and what the provider also calls on the way
(``*.operations.get`` to wait for a long-running operation, ``iam.serviceAccounts.actAs`` to
attach a service account).

Objects in the GKE cluster are authorised by Kubernetes RBAC or by IAM; IAM's ``container.*``
permissions (held by ``roles/container.admin``) grant them without any RBAC binding, which is what
these entries assume. A deploying identity with cluster-admin through RBAC needs only
``container.clusters.get`` of them, and preflight says so next to a missing one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

AS_OF = "2026-11-26"

SERVICE_USAGE_API = "serviceusage.googleapis.com"
RESOURCE_MANAGER_API = "cloudresourcemanager.googleapis.com"
COMPUTE_API = "compute.googleapis.com"
CONTAINER_API = "container.googleapis.com"
IAM_API = "iam.googleapis.com"
STORAGE_API = "storage.googleapis.com"
TPU_API = "tpu.googleapis.com"
LOGGING_API = "logging.googleapis.com"
MONITORING_API = "monitoring.googleapis.com"

API_NEEDS = {CONTAINER_API: (COMPUTE_API,)}
"""APIs that work only with another on: GKE's nodes are Compute Engine VMs (enabling the Kubernetes
Engine API enables Compute Engine's; preflight checks both)."""

BOOTSTRAP_APIS = (SERVICE_USAGE_API, RESOURCE_MANAGER_API)
"""APIs the provider calls before it can enable any other (enabling is a Service Usage call; a
project's IAM policy is a Resource Manager one): a stack cannot enable these itself, they must be
on before the first `pulumi up` (``gcloud services enable``)."""


@dataclass(frozen=True)
class Access:
    """What one kind of resource needs: the API that serves it, the permissions the deploying
    identity must hold for the provider to create, read, update and delete it, and a predefined
    role that holds them."""

    api: Optional[str]
    """None for what no Google API serves (a Kubernetes provider, a component)."""
    permissions: tuple[str, ...]
    role: Optional[str]


def _crud(prefix: str, *more: str) -> tuple[str, ...]:
    return (f"{prefix}.create", f"{prefix}.delete", f"{prefix}.get", f"{prefix}.update", *more)


def _kubernetes(plural: str) -> Access:
    # GKE's IAM names for Kubernetes objects (container.jobs.create, ...), reached through the
    # cluster, whose credentials the provider reads with container.clusters.get.
    return Access(
        CONTAINER_API,
        (*_crud(f"container.{plural}"), "container.clusters.get"),
        "roles/container.admin",
    )


ACCESS: dict[str, Access] = {
    # --- the project's APIs (the stack enables them itself) ---------------------------------
    "gcp:projects/service:Service": Access(
        SERVICE_USAGE_API,
        ("serviceusage.services.enable", "serviceusage.services.get", "serviceusage.services.list"),
        "roles/serviceusage.serviceUsageAdmin",
    ),
    # --- network -------------------------------------------------------------------------------
    "gcp:compute/network:Network": Access(
        COMPUTE_API,
        (
            "compute.networks.create",
            "compute.networks.delete",
            "compute.networks.get",
            "compute.globalOperations.get",
        ),
        "roles/compute.networkAdmin",
    ),
    "gcp:compute/subnetwork:Subnetwork": Access(
        COMPUTE_API,
        (*_crud("compute.subnetworks"), "compute.regionOperations.get"),
        "roles/compute.networkAdmin",
    ),
    "gcp:compute/router:Router": Access(
        COMPUTE_API, (*_crud("compute.routers"), "compute.regionOperations.get"), "roles/compute.networkAdmin"
    ),
    # A Cloud NAT is part of its router: the provider writes it with a router update.
    "gcp:compute/routerNat:RouterNat": Access(
        COMPUTE_API,
        ("compute.routers.get", "compute.routers.update", "compute.regionOperations.get"),
        "roles/compute.networkAdmin",
    ),
    # Firewall rules: compute.securityAdmin's, plus updatePolicy on the network they belong to.
    "gcp:compute/firewall:Firewall": Access(
        COMPUTE_API,
        (*_crud("compute.firewalls"), "compute.networks.updatePolicy", "compute.globalOperations.get"),
        "roles/compute.securityAdmin",
    ),
    # --- storage -------------------------------------------------------------------------------
    "gcp:storage/bucket:Bucket": Access(STORAGE_API, _crud("storage.buckets"), "roles/storage.admin"),
    "gcp:storage/bucketIAMMember:BucketIAMMember": Access(
        STORAGE_API, ("storage.buckets.getIamPolicy", "storage.buckets.setIamPolicy"), "roles/storage.admin"
    ),
    "gcp:storage/bucketObject:BucketObject": Access(
        STORAGE_API,
        ("storage.objects.create", "storage.objects.delete", "storage.objects.get", "storage.objects.update"),
        "roles/storage.admin",
    ),
    # --- identities ----------------------------------------------------------------------------
    "gcp:serviceaccount/account:Account": Access(
        IAM_API, _crud("iam.serviceAccounts"), "roles/iam.serviceAccountAdmin"
    ),
    "gcp:serviceaccount/iAMMember:IAMMember": Access(
        IAM_API,
        ("iam.serviceAccounts.getIamPolicy", "iam.serviceAccounts.setIamPolicy"),
        "roles/iam.serviceAccountAdmin",
    ),
    "gcp:projects/iAMMember:IAMMember": Access(
        RESOURCE_MANAGER_API,
        ("resourcemanager.projects.getIamPolicy", "resourcemanager.projects.setIamPolicy"),
        "roles/resourcemanager.projectIamAdmin",
    ),
    # --- TPU VMs -------------------------------------------------------------------------------
    # A VM runs as the trainer's service account: attaching it is iam.serviceAccounts.actAs.
    "gcp:tpu/v2Vm:V2Vm": Access(
        TPU_API,
        (*_crud("tpu.nodes"), "tpu.operations.get", "iam.serviceAccounts.actAs"),
        "roles/tpu.admin",
    ),
    # --- GKE -----------------------------------------------------------------------------------
    "gcp:container/cluster:Cluster": Access(
        CONTAINER_API,
        (*_crud("container.clusters"), "container.operations.get", "iam.serviceAccounts.actAs"),
        "roles/container.admin",
    ),
    # Node pools have no permissions of their own: creating one updates its cluster.
    "gcp:container/nodePool:NodePool": Access(
        CONTAINER_API,
        (
            "container.clusters.get",
            "container.clusters.update",
            "container.operations.get",
            "iam.serviceAccounts.actAs",
        ),
        "roles/container.admin",
    ),
    # Monitoring (docs/monitoring.md): read 2026-11-28 from the roles-and-permissions pages of
    # logging and monitoring (https://cloud.google.com/iam/docs/roles-permissions/logging, .../monitoring).
    "gcp:logging/metric:Metric": Access(
        LOGGING_API, _crud("logging.logMetrics"), "roles/logging.configWriter"
    ),
    "gcp:monitoring/dashboard:Dashboard": Access(
        MONITORING_API, _crud("monitoring.dashboards"), "roles/monitoring.dashboardEditor"
    ),
    "gcp:monitoring/alertPolicy:AlertPolicy": Access(
        MONITORING_API, _crud("monitoring.alertPolicies"), "roles/monitoring.alertPolicyEditor"
    ),
    "gcp:monitoring/notificationChannel:NotificationChannel": Access(
        MONITORING_API, _crud("monitoring.notificationChannels"), "roles/monitoring.notificationChannelEditor"
    ),
    "pulumi:providers:kubernetes": Access(None, (), None),
    "kubernetes:core/v1:Namespace": _kubernetes("namespaces"),
    "kubernetes:core/v1:ConfigMap": _kubernetes("configMaps"),
    "kubernetes:core/v1:Service": _kubernetes("services"),
    "kubernetes:core/v1:ServiceAccount": _kubernetes("serviceAccounts"),
    "kubernetes:batch/v1:Job": _kubernetes("jobs"),
    # A Helm release installs CRDs, cluster roles and a controller: only container.admin can.
    "kubernetes:helm.sh/v3:Release": Access(
        CONTAINER_API,
        (
            *_crud("container.customResourceDefinitions"),
            *_crud("container.clusterRoles"),
            *_crud("container.clusterRoleBindings"),
            *_crud("container.deployments"),
            "container.clusters.get",
        ),
        "roles/container.admin",
    ),
}

ROLE_OF_PERMISSION = {"iam.serviceAccounts.actAs": "roles/iam.serviceAccountUser"}
"""Permissions the entry's own role does not hold: attaching a service account to a VM, a
cluster or a node pool is iam.serviceAccounts.actAs, which none of tpu.admin or container.admin
has (it is the Service Account User role's)."""

CUSTOM_RESOURCE = _kubernetes("thirdPartyObjects")
"""Objects of a CRD (JobSets, Kueue's queues): GKE's IAM calls them third-party objects."""

_CUSTOM_GROUPS = ("jobset.x-k8s.io", "kueue.x-k8s.io")


def access_for(resource_type: str) -> Optional[Access]:
    """What a resource of ``resource_type`` (a Pulumi type token) needs, or None for a type this
    table does not know. Components (``tpu-training:...``) and the stack need nothing."""
    if resource_type in ACCESS:
        return ACCESS[resource_type]
    if resource_type.startswith(("tpu-training:", "pulumi:pulumi:Stack")):
        return Access(None, (), None)
    group = resource_type.removeprefix("kubernetes:").split("/")[0]
    if resource_type.startswith("kubernetes:") and group in _CUSTOM_GROUPS:
        return CUSTOM_RESOURCE
    return None


@dataclass(frozen=True)
class StackAccess:
    """What one stack needs, from the resource types it declares."""

    apis: tuple[str, ...]
    permissions: tuple[str, ...]
    roles: dict[str, tuple[str, ...]]
    """permission -> the predefined roles (from ``ACCESS``) that hold it."""
    unknown_types: tuple[str, ...]
    """Resource types the table does not know: their needs are not checked."""


def stack_access(resource_types: Iterable[str]) -> StackAccess:
    """Every API and permission the resources of ``resource_types`` need, sorted, and the
    service APIs ``BOOTSTRAP_APIS`` always."""
    apis = set(BOOTSTRAP_APIS)
    roles: dict[str, set[str]] = {}
    unknown = set()
    for resource_type in set(resource_types):
        access = access_for(resource_type)
        if access is None:
            unknown.add(resource_type)
            continue
        if access.api:
            apis.update([access.api, *API_NEEDS.get(access.api, ())])
        for permission in access.permissions:
            role = ROLE_OF_PERMISSION.get(permission, access.role)
            roles.setdefault(permission, set()).update([role] if role else [])
    return StackAccess(
        apis=tuple(sorted(apis)),
        permissions=tuple(sorted(roles)),
        roles={permission: tuple(sorted(held)) for permission, held in sorted(roles.items())},
        unknown_types=tuple(sorted(unknown)),
    )


def apis_for_features(
    *, tpu_vms: bool, cluster: bool, network: bool, buckets: bool, monitoring: bool = False
) -> tuple[str, ...]:
    """The APIs the stack enables, from what it declares (without the ``BOOTSTRAP_APIS``, which
    must already be on). A test checks this against ``stack_access`` of the declared types."""
    apis = {IAM_API} if tpu_vms or cluster else set()
    if buckets:
        apis.add(STORAGE_API)
    if tpu_vms:
        apis.add(TPU_API)
    if cluster:
        apis.update({CONTAINER_API, COMPUTE_API})
    if network:
        apis.add(COMPUTE_API)
    if monitoring:
        apis.update({LOGGING_API, MONITORING_API})
    return tuple(sorted(apis))
