"""Kueue's objects for GKE's flex-start with queued provisioning, as plain dictionaries.

Pure Python with no Pulumi import, like ``job_manifests``: the ``QueuedProvisioning`` component
hands these to pulumi-kubernetes, and the tests validate them against Kueue v0.19.2's own CRD
schemas (tests/fixtures/kueue-v0.19.2). One queue per queued node pool, every object named after
the pool:

- a ResourceFlavor whose ``nodeLabels`` are exactly what the pool's Pods select;
- a ProvisioningRequestConfig of GKE's class ``queued-provisioning.gke.io`` for ``google.com/tpu``;
- an AdmissionCheck of Kueue's ProvisioningRequest controller, pointing at that config;
- a ClusterQueue with the pool's TPU chips as quota, running the check on the flavor;
- a LocalQueue in each namespace the pool's workloads run in, which they name by their
  ``kueue.x-k8s.io/queue-name`` label.

Kueue reserves quota for a workload, makes a ProvisioningRequest for all its Pods, and admits it
(lifts the suspension its webhook set) once GKE has brought up every node at once. The shape
follows GKE's TPU tutorial "Optimize AI training on TPUs with DWS and Kueue"
(docs.cloud.google.com/kubernetes-engine/docs/tutorials/ray-kueue-dws, last updated 2026-04-10:
its DWS flavor, ``dws-prov`` check, ``dws-config`` with ``provisioningClassName:
queued-provisioning.gke.io`` and ``managedResources: [google.com/tpu]``, and a ClusterQueue with
``admissionChecksStrategy``), Kueue's own ProvisioningRequest page and API
(site/content/en/docs/concepts/admission_check/provisioning_request.md and
apis/kueue/v1beta2/provisioningrequestconfig_types.go at v0.19.2,
8eab68778fc1b52affe165fdf5af29d1e9b4f3cb) and Cluster Toolkit's TPU v6e queued-provisioning
example (examples/gke-consumption-options/dws-flex-start-queued-provisioning/ at
1047080375afbb44da4b596be314634e7486af4a). Nothing here has run on TPU hardware.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from .job_manifests import PART_OF, PART_OF_LABEL, TPU_RESOURCE, namespace_problem
from .naming import dns_label_problem
from .node_pool_plan import MAX_NODE_POOL_NAME, TpuNodePoolPlan

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_API_VERSION = f"{KUEUE_GROUP}/v1beta2"
"""The storage version of every Kueue object at v0.19.2; v1beta1 is still served but marked
``deprecated: true`` in each CRD (tests/fixtures/kueue-v0.19.2)."""

PROVISIONING_REQUEST_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
"""``ProvisioningRequestControllerName`` (apis/kueue/v1beta2/provisioningrequestconfig_types.go):
Kueue's built-in admission check controller that turns a workload into a ProvisioningRequest."""

QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"
"""GKE's ProvisioningRequest class for flex-start with queued provisioning (GKE
how-to/provisioningrequest; tutorials/ray-kueue-dws)."""

MAX_RUN_DURATION_PARAMETER = "maxRunDurationSeconds"
"""The ProvisioningRequest parameter for how long GKE keeps the nodes it brings up: "If you don't
specify a value for the maxRunDurationSeconds parameter, the default is seven days" (GKE "About
flex-start provisioning mode", concepts/dws). Kueue copies a ProvisioningRequestConfig's
``parameters`` into every ProvisioningRequest it makes (Kueue's ProvisioningRequest page:
"ProvisioningRequestConfig [...] enables you to set provisioningClassName, managedResources,
and parameters"); Cluster Toolkit's examples give it per Job as the annotation
``provreq.kueue.x-k8s.io/maxRunDurationSeconds`` instead, which would take precedence."""

KIND_RESOURCE_FLAVOR = "ResourceFlavor"
KIND_PROVISIONING_REQUEST_CONFIG = "ProvisioningRequestConfig"
KIND_ADMISSION_CHECK = "AdmissionCheck"
KIND_CLUSTER_QUEUE = "ClusterQueue"
KIND_LOCAL_QUEUE = "LocalQueue"

_NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Kubernetes labels every namespace with its own name (the NamespaceDefaultLabelName feature,
GA since 1.22), so a selector can name namespaces."""


@dataclass(frozen=True)
class QueuedProvisioningSpec:
    """The Kueue objects of one queued node pool."""

    name: str
    """The pool's name, which names every object: the workloads' ``kueue.x-k8s.io/queue-name``."""
    node_labels: Mapping[str, str]
    """What the pool's Pods select (capacity, accelerator, topology, the pool's own label). Kueue
    writes a flavor's ``nodeLabels`` into the nodeSelector of every Pod template it admits, and
    refuses a value that differs from one already there (pkg/podset/podset.go ``Merge``:
    ``HaveConflict``), so these are exactly the Pods' own: the template stays as declared."""
    tpu_chips: int
    """The ClusterQueue's quota: the chips of every slice the pool may hold. A workload beyond it
    waits in the queue instead of asking GKE for capacity the pool cannot take."""
    namespaces: Sequence[str] = ("default",)
    """Namespaces whose workloads may use the queue: a LocalQueue in each."""
    max_run_seconds: Optional[int] = None
    """How long GKE keeps the nodes of one ProvisioningRequest; GKE's default (7 days) when None."""
    labels: Mapping[str, str] = field(default_factory=dict)
    provisioning: bool = True
    """The pool's nodes come through GKE's queued provisioning: a ProvisioningRequestConfig and an
    AdmissionCheck, which every workload passes before it is admitted. Without, the queue admits
    by quota alone: a workload whole when the pool's chips allow it, as GKE's "Orchestrate
    Multislice workloads using JobSet and Kueue" does, and the autoscaler brings up its nodes."""

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem:
            raise ValueError(problem)

    def problem(self) -> Optional[str]:
        """Why Kueue or Kubernetes would refuse these objects, or None."""
        name_problem = dns_label_problem("queue name", self.name, MAX_NODE_POOL_NAME)
        if name_problem:
            return name_problem
        if self.tpu_chips < 1:
            return f"the queue's TPU quota is {self.tpu_chips} chips; it needs at least 1"
        if not self.namespaces:
            return "namespaces is empty; give the namespace (or namespaces) the pool's workloads run in"
        if len(set(self.namespaces)) != len(self.namespaces):
            return f"namespaces {list(self.namespaces)} repeats a namespace"
        for namespace in self.namespaces:
            problem = namespace_problem(namespace)
            if problem:
                return problem
        return None


def queued_provisioning_spec(
    plan: TpuNodePoolPlan,
    namespaces: Sequence[str] = ("default",),
    labels: Optional[Mapping[str, str]] = None,
) -> QueuedProvisioningSpec:
    """The queue of a pool with one (queued provisioning, or ``kueue_queue``), from the pool's
    own plan; ``ValueError`` for any other pool.

    A pool with a capacity ladder gets one flavor too, of its ComputeClass (``node_selector``
    selects the class, not a capacity), and a quota of one rung's slices: Kueue writes a flavor's
    ``nodeLabels`` into each Pod template it admits and picks a flavor by quota alone, so a flavor
    per rung would pin every workload to the rung Kueue chose without seeing GKE's capacity, the
    very choice the class leaves to GKE. With one flavor ``flavorFungibility`` has nothing to
    choose between, and is left at Kueue's default."""
    if plan.queue_name is None:
        raise ValueError(
            f"node pool {plan.name!r} has no queue; only a pool with kueue_queue or "
            f"queued_provisioning gets a Kueue queue"
        )
    return QueuedProvisioningSpec(
        name=plan.name,
        node_labels={**plan.node_selector, **plan.node_labels},
        tpu_chips=plan.slices * plan.shape.chips,
        namespaces=tuple(namespaces),
        max_run_seconds=plan.max_run_seconds if plan.queued_provisioning else None,
        labels=dict(labels or {}),
        provisioning=plan.queued_provisioning,
    )


def _metadata(spec: QueuedProvisioningSpec, namespace: Optional[str] = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": spec.name,
        "labels": {**spec.labels, "app.kubernetes.io/name": spec.name, PART_OF_LABEL: PART_OF},
    }
    if namespace is not None:
        metadata["namespace"] = namespace
    return metadata


def _object(kind: str, metadata: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": KUEUE_API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}


def resource_flavor_manifest(spec: QueuedProvisioningSpec) -> dict[str, Any]:
    """The pool as Kueue sees it: the nodes carrying its labels. No ``tolerations``: Kueue would
    append them to the Pod templates it admits; the Pods tolerate the queued taint themselves."""
    return _object(KIND_RESOURCE_FLAVOR, _metadata(spec), {"nodeLabels": dict(spec.node_labels)})


def provisioning_request_config_manifest(spec: QueuedProvisioningSpec) -> dict[str, Any]:
    """GKE's queued provisioning for the TPUs of a workload: all its nodes at once, or none."""
    body: dict[str, Any] = {
        "provisioningClassName": QUEUED_PROVISIONING_CLASS,
        # Only Pod sets that request TPUs go into the ProvisioningRequest.
        "managedResources": [TPU_RESOURCE],
    }
    if spec.max_run_seconds is not None:
        # Parameter values are strings (v1beta2 ``Parameter``: a string of at most 255).
        body["parameters"] = {MAX_RUN_DURATION_PARAMETER: str(spec.max_run_seconds)}
    return _object(KIND_PROVISIONING_REQUEST_CONFIG, _metadata(spec), body)


def admission_check_manifest(spec: QueuedProvisioningSpec) -> dict[str, Any]:
    """Kueue's ProvisioningRequest controller, with the pool's ProvisioningRequestConfig."""
    return _object(
        KIND_ADMISSION_CHECK,
        _metadata(spec),
        {
            "controllerName": PROVISIONING_REQUEST_CONTROLLER,
            "parameters": {
                "apiGroup": KUEUE_GROUP,
                "kind": KIND_PROVISIONING_REQUEST_CONFIG,
                "name": spec.name,
            },
        },
    )


def cluster_queue_manifest(spec: QueuedProvisioningSpec) -> dict[str, Any]:
    """The pool's quota, and the check every workload on it must pass before it is admitted."""
    return _object(
        KIND_CLUSTER_QUEUE,
        _metadata(spec),
        {
            # Only the namespaces given: a LocalQueue made elsewhere cannot spend the pool's quota
            # (an empty selector, as GKE's tutorial has it, would let every namespace in).
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": _NAMESPACE_NAME_LABEL, "operator": "In", "values": list(spec.namespaces)}
                ]
            },
            # Only TPUs are covered: the training Pods request nothing else, and a resource a Pod
            # requests that no flavor covers would keep the workload out.
            "resourceGroups": [
                {
                    "coveredResources": [TPU_RESOURCE],
                    "flavors": [
                        {
                            "name": spec.name,
                            "resources": [{"name": TPU_RESOURCE, "nominalQuota": spec.tpu_chips}],
                        }
                    ],
                }
            ],
            # v1beta2 has only the strategy form; v1beta1's `admissionChecks: [name]` is gone.
            **(
                {
                    "admissionChecksStrategy": {
                        "admissionChecks": [{"name": spec.name, "onFlavors": [spec.name]}]
                    }
                }
                if spec.provisioning
                else {}
            ),
        },
    )


def local_queue_manifest(spec: QueuedProvisioningSpec, namespace: str) -> dict[str, Any]:
    """The queue a workload in ``namespace`` names: the pool's ClusterQueue."""
    return _object(KIND_LOCAL_QUEUE, _metadata(spec, namespace), {"clusterQueue": spec.name})


def manifests(spec: QueuedProvisioningSpec) -> list[dict[str, Any]]:
    """Every Kueue object of one queued pool, in the order they are applied."""
    return [
        resource_flavor_manifest(spec),
        *(
            [provisioning_request_config_manifest(spec), admission_check_manifest(spec)]
            if spec.provisioning
            else []
        ),
        cluster_queue_manifest(spec),
        *(local_queue_manifest(spec, namespace) for namespace in spec.namespaces),
    ]
