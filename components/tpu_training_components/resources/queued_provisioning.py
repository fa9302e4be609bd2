"""The Kueue queue of a queued TPU node pool: GKE's flex-start with queued provisioning, where a
workload waits until GKE can bring up all its nodes at once instead of failing or starting on a
part of its slice."""

from typing import Any, Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pydantic import with_config
from typing_extensions import NotRequired, TypedDict

from ..domain.kueue_manifests import (
    KUEUE_API_VERSION,
    QueuedProvisioningSpec,
    admission_check_manifest,
    cluster_queue_manifest,
    local_queue_manifest,
    provisioning_request_config_manifest,
    queued_provisioning_spec,
    resource_flavor_manifest,
)
from ..validation import ARGUMENTS, check_arguments, kubernetes_labels
from .tpu_node_pool import TpuNodePoolSelection, plan_selection


@with_config(ARGUMENTS)
class QueuedProvisioningArgs(TypedDict):
    provider: k8s.Provider
    """Kubernetes provider of the cluster (``GkeTpuCluster.provider``)."""
    node_pool: TpuNodePoolSelection
    """The pool (``FlexStartTpuNodePool.selection`` of a pool with ``queued_provisioning`` or
    ``kueue_queue``): its node labels, chips and node lifetime make the queue."""
    namespaces: NotRequired[Sequence[str]]
    """Namespaces of the pool's workloads (default ``["default"]``): each gets a LocalQueue, and
    only these may use the pool's quota. They must exist."""
    labels: NotRequired[Mapping[str, str]]
    """Labels on every Kueue object, besides the project's own."""


def _spec(
    name: str, args: QueuedProvisioningArgs, opts: Optional[pulumi.ResourceOptions]
) -> QueuedProvisioningSpec:
    problems = check_arguments("QueuedProvisioning", name, args, QueuedProvisioningArgs, opts)
    kubernetes_labels(problems, args.get("labels", {}))
    pool = plan_selection(problems, args["node_pool"])
    if pool.queue_name is None:
        problems.add(
            "node_pool",
            f"node pool {pool.name!r} has neither queued_provisioning nor kueue_queue; set one of them on "
            f"the pool to give it a Kueue queue",
        )
    problems.raise_any()
    try:
        return queued_provisioning_spec(pool, args.get("namespaces", ["default"]), args.get("labels"))
    except ValueError as exc:
        problems.add((), str(exc))  # it names the argument
        raise problems.error() from None


class QueuedProvisioning(pulumi.ComponentResource):
    """Kueue's objects for one queued node pool, each named after the pool: a ResourceFlavor of
    its nodes, a ProvisioningRequestConfig of GKE's ``queued-provisioning.gke.io`` class for TPUs,
    an AdmissionCheck of Kueue's ProvisioningRequest controller, a ClusterQueue with the pool's
    chips as quota, and a LocalQueue per namespace. Workloads on the pool (``TpuTrainingJob``,
    ``TpuTrainingJobSet``) carry ``kueue.x-k8s.io/queue-name: <pool>`` themselves.

    Kueue must be running first (``WorkloadEngines`` with ``kueue``): declare this component with
    ``depends_on`` it, and the workloads with ``depends_on`` this one.

    On a pool with ``kueue_queue`` and no queued provisioning the queue admits by quota alone:
    no ProvisioningRequestConfig and no AdmissionCheck.

    Children: ``{name}-flavor`` (ResourceFlavor), ``{name}-provisioning``
    (ProvisioningRequestConfig), ``{name}-check`` (AdmissionCheck), ``{name}-cluster-queue``
    (ClusterQueue) and ``{name}-queue-{namespace}`` (LocalQueue), all
    ``kubernetes:kueue.x-k8s.io/v1beta2:*``.
    """

    queue_name: pulumi.Output[str]
    """The LocalQueue (and ClusterQueue) name: the workloads' ``kueue.x-k8s.io/queue-name``."""
    namespaces: pulumi.Output[list[str]]
    """Namespaces with a LocalQueue of the pool."""
    tpu_quota: pulumi.Output[int]
    """TPU chips the queue admits at once: every slice of the pool."""

    def __init__(
        self, name: str, args: QueuedProvisioningArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        spec = _spec(name, args, opts)
        super().__init__("tpu-training:gke:QueuedProvisioning", name, {}, opts)
        provider = args["provider"]

        def declare(role: str, manifest: Mapping[str, Any], after: Sequence[pulumi.Resource] = ()) -> Any:
            return k8s.apiextensions.CustomResource(
                f"{name}-{role}",
                api_version=KUEUE_API_VERSION,
                kind=manifest["kind"],
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                # Created in Kueue's order so that no object waits on a missing one; destroyed in
                # the reverse, which Kueue's in-use finalizers on flavors and queues require.
                opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=list(after)),
            )

        self.flavor = declare("flavor", resource_flavor_manifest(spec))
        # A queue by quota alone (kueue_queue) asks GKE for nothing: no ProvisioningRequests.
        self.provisioning = (
            declare("provisioning", provisioning_request_config_manifest(spec)) if spec.provisioning else None
        )
        self.check = (
            declare("check", admission_check_manifest(spec), [self.provisioning])
            if self.provisioning
            else None
        )
        self.cluster_queue = declare(
            "cluster-queue",
            cluster_queue_manifest(spec),
            [self.flavor, *([self.check] if self.check else [])],
        )
        self.local_queues = {
            namespace: declare(
                f"queue-{namespace}", local_queue_manifest(spec, namespace), [self.cluster_queue]
            )
            for namespace in spec.namespaces
        }
        self.queue_name = pulumi.Output.from_input(spec.name)
        self.namespaces = pulumi.Output.from_input(list(spec.namespaces))
        self.tpu_quota = pulumi.Output.from_input(spec.tpu_chips)
        self.register_outputs(
            {"queue_name": self.queue_name, "namespaces": self.namespaces, "tpu_quota": self.tpu_quota}
        )
