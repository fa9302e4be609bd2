"""Kubernetes manifests for a TPU training Job on GKE, as plain dictionaries, after GKE's flex-start
training page.

Pure Python with no Pulumi import: the ``TpuTrainingJob`` component hands these to
pulumi-kubernetes, the tests validate them against the Kubernetes OpenAPI schemas and compare them
with the examples of GKE's flex-start training page field by field. Leaf values are passed through
untouched, so a caller may put a ``pulumi.Output`` where a label value goes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from .naming import dns_label_problem
from .node_pool_plan import NODE_POOL_LABEL, POOL_NODE_LABEL
from .recovery import GENERATION_LABEL

TPU_RESOURCE = "google.com/tpu"
WORKLOAD_IDENTITY_ANNOTATION = "iam.gke.io/gcp-service-account"
SKIP_AWAIT_ANNOTATION = "pulumi.com/skipAwait"
DELETION_PROPAGATION_ANNOTATION = "pulumi.com/deletionPropagationPolicy"
PRIVILEGED_OPT_IN_ANNOTATION = "tpu-training/privileged"
"""Set to ``"true"`` on a Job that runs its trainer privileged on purpose (``privileged=True``):
the policy pack refuses privileged training Pods without it."""
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""Kueue admits a Job or JobSet labelled with its LocalQueue's name: its webhook creates such a
workload suspended and Kueue lifts that when it admits it (kubernetes-sigs/kueue v0.19.2
pkg/controller/jobframework/defaults.go ``ApplyDefaultForSuspend``). xpk labels every JobSet so;
GKE's TPU tutorial ray-kueue-dws: "The kueue.x-k8s.io/queue-name label routes your job directly
to Kueue"."""
PART_OF_LABEL = "app.kubernetes.io/part-of"
PART_OF = "tpu-training"
"""Every Job this project declares carries ``app.kubernetes.io/part-of: tpu-training``; recovery
lists Jobs by it."""

TPU_PORTS = (
    (8471, "tpu-ici"),  # TPU VM communication between the hosts of a slice
    (8431, "tpu-metrics"),  # TPU runtime metrics (GKE >= 1.27.4-gke.900, JAX >= 0.4.14)
)

RUN_PARAMETERS_SUFFIX = "-run-parameters"
"""The ConfigMap ``{job}-run-parameters`` holds the run's variables. Its name is fixed, never
auto-named: the Pod template names it, and a new name would change the template."""

SINGLE_HOST_BACKOFF_LIMIT = 6
"""Retries of a single-host Job (the Kubernetes default); each retry resumes from the checkpoint."""

# A Job name becomes the `job-name` label (at most 63 characters) and, for an Indexed Job, the
# start of each Pod's hostname `NAME-INDEX`; 52 leaves room for the index and the Pod suffix.
MAX_JOB_NAME = 52


def job_name_problem(name: str) -> Optional[str]:
    """Why ``name`` cannot name a training Job, or None."""
    return dns_label_problem("job name", name, MAX_JOB_NAME)


MAX_NAMESPACE = 63
# Kubernetes' own namespaces (https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/):
# a training Job there would run beside the cluster's system components, and the stack would
# try to create (and own) a namespace that exists. Other `kube-` names are only discouraged.
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


def namespace_problem(namespace: str) -> Optional[str]:
    """Why a training Job cannot run in ``namespace``, or None."""
    if namespace in SYSTEM_NAMESPACES:
        return (
            f"namespace {namespace!r} is one of Kubernetes' own ({', '.join(SYSTEM_NAMESPACES)}), which "
            f"it reserves for its system components; use 'default' or a name of your own"
        )
    if len(namespace) > MAX_NAMESPACE or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", namespace):
        return (
            f"namespace {namespace!r} must be 1-{MAX_NAMESPACE} lowercase letters, digits or '-', "
            f"starting and ending with a letter or digit"
        )
    return None


# The container image reference grammar of distribution/reference (reference.go, regexp.go),
# which the kubelet's runtime parses: [registry[:port]/]path[:tag][@digest].
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_IMAGE_REFERENCE = re.compile(
    rf"^(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?$", re.ASCII
)
MAX_IMAGE_NAME = 255
"""distribution/reference: NameTotalLengthMax, the registry and path without tag or digest."""
IMAGE_RULE = (
    "[registry[:port]/]path[:tag][@digest], e.g. 'us-docker.pkg.dev/my-project/my-repo/trainer:v1': "
    "the path is lowercase letters and digits, joined by '/', '.', '_', '__' or '-'; the tag is up to "
    "128 letters, digits, '_', '.' or '-'; no spaces"
)


def image_problem(image: str) -> Optional[str]:
    """Why ``image`` is not a container image reference a node could pull, or None."""
    if not image.strip():
        return "the container image is blank"
    if any(character.isspace() for character in image):
        return f"container image {image!r} contains whitespace; an image reference is {IMAGE_RULE}"
    if not _IMAGE_REFERENCE.fullmatch(image):
        if _IMAGE_REFERENCE.fullmatch(image.lower()):
            return f"container image {image!r} has uppercase letters in its path, which must be lowercase"
        return f"container image {image!r} is not an image reference, which is {IMAGE_RULE}"
    first, _, rest = image.partition("/")
    if rest and first != first.lower() and not any(mark in first for mark in ".:") and first != "localhost":
        # The runtime takes such a first part for a registry host, which it cannot be.
        return (
            f"container image {image!r} has uppercase letters in {first!r}, which is no registry "
            f"host (one has a '.' or a ':port', or is 'localhost'); the path must be lowercase"
        )
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    if len(name) > MAX_IMAGE_NAME:
        return (
            f"container image {image!r}: the name before the tag is {len(name)} characters; "
            f"at most {MAX_IMAGE_NAME}"
        )
    return None


@dataclass(frozen=True)
class TrainingJobSpec:
    """What a training Job needs to know about itself and the slice it runs on."""

    name: str
    namespace: str
    image: str
    command: Sequence[str]
    node_selector: Mapping[str, str]
    """Node labels of the pool's nodes (``TpuNodePoolPlan.node_selector``): capacity type,
    ``cloud.google.com/gke-tpu-accelerator`` and ``cloud.google.com/gke-tpu-topology``."""
    chips_per_vm: int
    vms: int
    """VMs in one slice: Pods of the Job, one per VM."""
    service_account: str
    """Kubernetes service account the Pods run as."""
    node_pool: Optional[str] = None
    """The pool the Pods run on, by the label every node of every slice of it carries
    (``POOL_NODE_LABEL``, ``TpuNodePoolPlan.node_labels``); any pool of the shape when None."""
    generation: Any = 0
    """Recovery generation (an int, or a ``pulumi.Output`` of one): labels the Job and its Pods."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables written into the Pod template: what names the run itself (``CHECKPOINT_DIR``).
    A change replaces a running Job."""
    run_parameters: Mapping[str, str] = field(default_factory=dict)
    """Variables the Pods read from the ConfigMap ``run_parameters_name`` when their container
    starts: the scale, the learning rate, the checkpoint interval and the user's own. A change
    updates the ConfigMap in place and reaches the Pods at their next start, never replacing a
    running Job."""
    privileged: bool = False
    """GKE's flex-start training page runs multi-host Pods privileged; current GKE exposes the chips
    through the TPU device plugin without it, so it is off unless asked for."""
    labels: Mapping[str, str] = field(default_factory=dict)
    queue: Optional[str] = None
    """The Kueue LocalQueue that admits the workload (``KUEUE_QUEUE_LABEL`` on the Job or JobSet
    itself, never on its Pods), or None for none."""
    tolerations: Sequence[Mapping[str, str]] = ()
    """Taints of the pool's nodes the Pods tolerate (``TpuNodePoolPlan.tolerations``: GKE's
    queued-provisioning taint on a queued pool); none, and no ``tolerations`` key, otherwise."""
    termination_grace_seconds: Optional[int] = None
    """The Pods' ``terminationGracePeriodSeconds``: time for the trainer's stop save
    (``termination_grace.pod_grace_seconds``); Kubernetes' 30 s when None. Part of the Pod
    template: a change replaces a running Job."""

    @property
    def multi_host(self) -> bool:
        return self.vms > 1

    @property
    def service_name(self) -> str:
        """The headless Service of a multi-host Job: the Pods' DNS subdomain."""
        return self.name

    @property
    def run_parameters_name(self) -> str:
        """The ConfigMap of the run's variables (a DNS subdomain name: up to 253 characters)."""
        return f"{self.name}{RUN_PARAMETERS_SUFFIX}"


def _labels(spec: TrainingJobSpec, *, generation: bool = False) -> dict[str, Any]:
    labels = {**spec.labels, "app.kubernetes.io/name": spec.name, PART_OF_LABEL: PART_OF}
    if generation:
        # Label values are strings; an Output stands for one already.
        labels[GENERATION_LABEL] = (
            str(spec.generation) if isinstance(spec.generation, int) else spec.generation
        )
    return labels


def _metadata(spec: TrainingJobSpec, name: str, *, generation: bool = False) -> dict[str, Any]:
    # Only the Job and its Pods carry the recovery generation: the service account and the
    # Service outlive Job replacements, and a changing label would only churn them.
    return {"name": name, "namespace": spec.namespace, "labels": _labels(spec, generation=generation)}


def service_account_manifest(spec: TrainingJobSpec, google_service_account: Any) -> dict[str, Any]:
    """The Pods' Kubernetes service account, bound by Workload Identity to a Google one."""
    metadata = _metadata(spec, spec.service_account)
    metadata["annotations"] = {WORKLOAD_IDENTITY_ANNOTATION: google_service_account}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata}


def headless_service_manifest(spec: TrainingJobSpec) -> dict[str, Any]:
    """The headless Service of GKE's flex-start training page: stable DNS names for the hosts of a
    multi-host slice."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, spec.service_name),
        "spec": {"clusterIP": "None", "selector": {"job-name": spec.name}},
    }


def run_parameters_manifest(spec: TrainingJobSpec) -> dict[str, Any]:
    """The ConfigMap of the run's variables, which every Pod of the Job reads at its start."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(spec, spec.run_parameters_name),
        "data": dict(spec.run_parameters),
    }


def _container(spec: TrainingJobSpec) -> dict[str, Any]:
    chips = {TPU_RESOURCE: spec.chips_per_vm}
    container: dict[str, Any] = {
        "name": "trainer",
        "image": spec.image,
        "command": list(spec.command),
        # Always, even with no parameters yet: adding the first one must not change the
        # template. Not optional: a Pod waits for its parameters rather than train without them.
        "envFrom": [{"configMapRef": {"name": spec.run_parameters_name}}],
        # A variable in `env` wins over the same name from `envFrom`.
        "env": [{"name": key, "value": value} for key, value in spec.env.items()],
        "resources": {"requests": dict(chips), "limits": dict(chips)},
    }
    if spec.multi_host:
        container["ports"] = [{"containerPort": port, "name": name} for port, name in TPU_PORTS]
    if spec.privileged:
        container["securityContext"] = {"privileged": True}
    return container


def _node_selector(spec: TrainingJobSpec) -> dict[str, str]:
    # The pool by the label all its slices' nodes share, not by its slices' GKE pool names:
    # another pool of the same shape (another stack's, or one kept for other work) is not this
    # Job's capacity, and a slice added or removed leaves the template as it is.
    selector = dict(spec.node_selector)
    if spec.node_pool is not None:
        selector[POOL_NODE_LABEL] = spec.node_pool
    return selector


def _affinity(spec: TrainingJobSpec) -> dict[str, Any]:
    if not spec.multi_host:
        return {}
    # Each multi-host slice is a GKE node pool of its own: all the Job's Pods must land in the
    # same one, or its hosts would not share an interconnect (xpk does the same with JobSet's
    # exclusive-topology `cloud.google.com/gke-nodepool`, src/xpk/core/scheduling.py). Declared
    # whatever the number of slices, so going from one slice to two changes nothing here; with
    # one slice it holds anyway. The first Pod may go anywhere: the scheduler lets a Pod whose
    # own labels match the term start a group no other Pod matches yet. Only Pods of this
    # generation count: a replaced Job's Pods, still terminating, must not hold the new ones to
    # the old (perhaps broken) slice.
    generation = _labels(spec, generation=True)[GENERATION_LABEL]
    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"job-name": spec.name, GENERATION_LABEL: generation}},
                    "topologyKey": NODE_POOL_LABEL,
                }
            ]
        }
    }


def job_manifest(spec: TrainingJobSpec) -> dict[str, Any]:
    """A ``batch/v1`` Job: one Pod for a single-host slice, an Indexed Job of one Pod per VM for
    a multi-host slice (GKE's flex-start training page)."""
    metadata = _metadata(spec, spec.name, generation=True)
    if spec.queue is not None:
        # Not `spec.suspend`: Kueue's webhook suspends the Job and Kueue resumes it. Declared by
        # us, a later `pulumi up` that updates the Job in place would suspend it again.
        metadata["labels"][KUEUE_QUEUE_LABEL] = spec.queue
    # `pulumi up` returns once the Job is accepted instead of waiting days for it to finish;
    # recovery reads the Job's state itself on the next run.
    # skipAwait also skips the wait for a Job's *deletion* (pulumi-kubernetes v4.32.0,
    # provider/pkg/metadata/overrides.go `allowsSkipAwaitWithDelete`, which lists batch/v1 Job),
    # and its default delete is foreground: the old Job, same name, stays until its Pods are gone,
    # so the replacement's create failed with "object is being deleted: jobs.batch ... already
    # exists" (found by the engine tier with the real provider, tests/engine/test_engine_kube_provider.py).
    # Deleted in the background, the Job object goes at once and its Pods after it, as `kubectl
    # delete job` does; the annotation is metadata, updated in place on a running Job.
    metadata["annotations"] = {
        SKIP_AWAIT_ANNOTATION: "true",
        DELETION_PROPAGATION_ANNOTATION: "background",
        **({PRIVILEGED_OPT_IN_ANNOTATION: "true"} if spec.privileged else {}),
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": spec.service_account,
        # Never, not the OnFailure of GKE's flex-start training page for single-host: a pod failure
        # policy requires it, and a fresh Pod resumes from the checkpoint as well as a restarted
        # container does.
        "restartPolicy": "Never",
        "nodeSelector": _node_selector(spec),
        "containers": [_container(spec)],
    }
    if spec.termination_grace_seconds is not None:
        pod_spec["terminationGracePeriodSeconds"] = spec.termination_grace_seconds
    affinity = _affinity(spec)
    if affinity:
        pod_spec["affinity"] = affinity
    if spec.tolerations:
        pod_spec["tolerations"] = [dict(toleration) for toleration in spec.tolerations]
    job_spec: dict[str, Any] = {
        # A Pod that fails because its node was taken away (flex-start's 7-day limit, maintenance,
        # preemption, eviction) carries the DisruptionTarget condition: Kubernetes' own way to say
        # "not the workload's fault". Those failures do not count against backoffLimit; the Job
        # makes a new Pod, which waits for the autoscaler and resumes from the checkpoint.
        "podFailurePolicy": {
            "rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
            ]
        },
        "template": {"metadata": {"labels": _labels(spec, generation=True)}, "spec": pod_spec},
    }
    if spec.multi_host:
        pod_spec["subdomain"] = spec.service_name
        job_spec.update(
            {
                # A slice trains only with all its hosts: one real failure fails the whole Job,
                # and the next `pulumi up` replaces it (GKE's flex-start training page's backoffLimit: 0).
                "backoffLimit": 0,
                "completions": spec.vms,
                "parallelism": spec.vms,
                "completionMode": "Indexed",
            }
        )
    else:
        job_spec["backoffLimit"] = SINGLE_HOST_BACKOFF_LIMIT
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}


def manifests(spec: TrainingJobSpec, google_service_account: Any) -> list[dict[str, Any]]:
    """Every object of one training Job, in the order they are applied."""
    objects = [service_account_manifest(spec, google_service_account), run_parameters_manifest(spec)]
    if spec.multi_host:
        objects.append(headless_service_manifest(spec))
    objects.append(job_manifest(spec))
    return objects
