"""A TPU training run as a ``jobset.x-k8s.io/v1alpha2`` JobSet: one slice or several (multislice).

Pure Python with no Pulumi import, like ``job_manifests``, whose Pod template it reuses unchanged
(the same node selector, TPU requests, ports, service account and checkpoint environment as a
Job's): only what a JobSet does differently is here. The shape follows GKE's "Deploy TPU
Multislices in GKE" and what xpk 1.16.0 applies (tests/fixtures/xpk-1.16.0): one replicated job
of ``replicas = slices``, each child an Indexed Job of one Pod per VM of a slice, placed one slice
per GKE node pool by JobSet's exclusive-topology annotation on ``cloud.google.com/gke-nodepool``.

Environment: GKE's TPU webhook gives each Pod of a multi-host slice ``TPU_WORKER_ID`` and
``TPU_WORKER_HOSTNAMES``, and each Pod of a multislice JobSet the ``MEGASCALE_*`` variables that
join the slices over the data-center network; xpk 1.16.0 declares none of them (its container's
``env`` is empty in workload-create-v6e-16-flex-2slices.txt), nor does GKE's multislice example.
So the Pods carry only what a Job's carry. (Taken from GKE's multislice page and xpk's output;
not checked on hardware here.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from .job_manifests import (
    KUEUE_QUEUE_LABEL,  # defined with the Job's labels; importable from here as before
    PRIVILEGED_OPT_IN_ANNOTATION,
    SKIP_AWAIT_ANNOTATION,
    TrainingJobSpec,
    headless_service_manifest,
    job_manifest,
)
from .node_pool_plan import NODE_POOL_LABEL

JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_KIND = "JobSet"
EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"
"""JobSet places each child Job alone in one value of this node label (api/jobset/v1alpha2/
jobset_types.go ``ExclusiveKey``): with ``cloud.google.com/gke-nodepool``, one slice per GKE node
pool, which is one multi-host slice (``TpuNodePoolPlan.pool_names``)."""
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""The label JobSet puts on every Pod of a JobSet (api/jobset/v1alpha2 ``JobSetNameKey``)."""
REPLICATED_JOB = "slice-job"
"""The replicated job's name, as xpk names it: Pods are ``{jobset}-slice-job-{slice}-{worker}``."""
DEFAULT_MAX_RESTARTS = 3
"""Gang restarts for real failures before the JobSet is Failed and `pulumi up` replaces it.
Disruptions do not count. A few: a bug that crashes every worker fails fast instead of looping,
while a transient fault (a bad host, a flaky storage read) gets several tries in seconds."""
MAX_RESTARTS_LIMIT = 1000

# batch/v1 JobFailed reasons (k8s.io/api/batch/v1/types.go): a child Job that a pod failure
# policy's FailJob rule failed says PodFailurePolicy; one whose Pod failed with backoffLimit 0
# says BackoffLimitExceeded.
DISRUPTION_FAILURE_REASON = "PodFailurePolicy"
DISRUPTION_RULE = "disruption"

# JobSet's webhook refuses a JobSet whose longest Pod name, `{jobset}-{rjob}-{slice}-{worker}`
# plus a five-character suffix, is not a DNS-1035 label of at most 63 characters
# (pkg/webhooks/jobset_webhook.go at v0.12.0, `podNameTooLongErrorMsg`).
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def jobset_name_problem(name: str, slices: int, vms: int) -> Optional[str]:
    """Why JobSet's webhook would refuse ``name`` for ``slices`` slices of ``vms`` VMs, or None."""
    longest = f"{name}-{REPLICATED_JOB}-{slices - 1}-{vms - 1}-abcde"
    if len(longest) > 63 or not _DNS_1035.fullmatch(longest):
        room = 63 - len(longest) + len(name)
        return (
            f"job name {name!r} is too long for a JobSet of {slices} slice(s) of {vms} VMs: its "
            f"longest Pod name {longest!r} must be a DNS label of at most 63 characters (JobSet's "
            f"webhook refuses it otherwise); use at most {max(room, 0)} characters"
        )
    return None


@dataclass(frozen=True)
class TrainingJobSetSpec:
    """A JobSet of ``slices`` slices, each Pod as ``job`` describes it."""

    job: TrainingJobSpec
    slices: int = 1
    max_restarts: int = DEFAULT_MAX_RESTARTS
    queue: Optional[str] = None
    """The Kueue LocalQueue that admits the JobSet, or None for ``job.queue``."""

    def __post_init__(self) -> None:
        if not self.job.multi_host:
            # A single-host pool holds all its slices in one GKE node pool, so JobSet's
            # one-slice-per-node-pool placement cannot hold, and GKE's multislice takes
            # multi-host slices only ("Multislice only supports multi-host TPU slice node pools").
            raise ValueError(
                f"a JobSet needs multi-host slices; {self.job.name!r} runs on single-host slices "
                f"of {self.job.vms} VM, which GKE's Multislice does not support (it takes only "
                f"multi-host TPU slice node pools); use a plain Job on a single-host slice"
            )
        if not 1 <= self.slices or not 0 <= self.max_restarts <= MAX_RESTARTS_LIMIT:
            raise ValueError(
                f"slices {self.slices} must be at least 1 and maxRestarts {self.max_restarts} "
                f"0-{MAX_RESTARTS_LIMIT}"
            )


def _copy(value: Any) -> Any:
    """Dictionaries and lists copied, leaves shared: a leaf may be a ``pulumi.Output``, which does
    not deep-copy."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def pod_template(spec: TrainingJobSpec) -> dict[str, Any]:
    """A Job's Pod template, without what JobSet does itself: the headless Service's subdomain
    (JobSet sets ``subdomain`` on every Pod) and the one-pool affinity (exclusive topology)."""
    template = _copy(job_manifest(spec)["spec"]["template"])
    template["spec"].pop("subdomain", None)
    template["spec"].pop("affinity", None)
    return template


def jobset_manifest(spec: TrainingJobSetSpec) -> dict[str, Any]:
    """The JobSet: ``slices`` Indexed Jobs of one Pod per VM, gang-restarted by JobSet."""
    job = spec.job
    job_metadata = job_manifest(job)["metadata"]
    metadata = {
        **job_metadata,
        "annotations": {
            # One slice per GKE node pool: all Pods of a child Job in one pool, no two child Jobs
            # in the same one (xpk: the same annotation on the JobSet).
            EXCLUSIVE_TOPOLOGY_ANNOTATION: NODE_POOL_LABEL,
            SKIP_AWAIT_ANNOTATION: "true",
            **({PRIVILEGED_OPT_IN_ANNOTATION: "true"} if job.privileged else {}),
        },
    }
    if spec.queue is not None:
        # The Job's metadata carries `job.queue` already; this one wins. Never `spec.suspend`:
        # Kueue's webhook suspends the JobSet and Kueue resumes it.
        metadata["labels"] = {**metadata["labels"], KUEUE_QUEUE_LABEL: spec.queue}
    child = {
        # A slice trains only with all its hosts: one failed Pod fails its Job, and the JobSet
        # restarts every slice together (no matching rule: RestartJobSet, counted).
        "backoffLimit": 0,
        "completions": job.vms,
        "parallelism": job.vms,
        "completionMode": "Indexed",
        # A Pod lost to a disruption (preemption, node drain, flex-start's 7-day limit,
        # maintenance: Kubernetes' DisruptionTarget condition) fails its Job at once with reason
        # PodFailurePolicy, which the JobSet's first rule restarts without counting.
        "podFailurePolicy": {
            "rules": [
                {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
            ]
        },
        "template": pod_template(job),
    }
    jobset_spec = {
        "failurePolicy": {
            "maxRestarts": spec.max_restarts,
            "rules": [
                {
                    "name": DISRUPTION_RULE,
                    "action": "RestartJobSetAndIgnoreMaxRestarts",
                    "onJobFailureReasons": [DISRUPTION_FAILURE_REASON],
                }
            ],
        },
        # The headless Service named after the JobSet (``jobset_service_manifest``, declared by
        # the component) gives every Pod the DNS name `{jobset}-slice-job-{slice}-{worker}.{jobset}`;
        # set explicitly, though it is the default.
        "network": {"enableDNSHostnames": True},
        "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": spec.slices, "template": {"spec": child}}],
    }
    return {"apiVersion": JOBSET_API_VERSION, "kind": JOBSET_KIND, "metadata": metadata, "spec": jobset_spec}


def jobset_service_manifest(spec: TrainingJobSpec) -> dict[str, Any]:
    """The JobSet's headless Service, as JobSet's controller would make it when none of its name
    exists (pkg/controllers/jobset_controller.go ``createHeadlessSvcIfNecessary`` at v0.12.0:
    clusterIP None, selector ``jobset.sigs.k8s.io/jobset-name``, ``publishNotReadyAddresses``
    true). Declared by the component, at the URN and name of a Job's Service: a run that turns
    from a Job into a JobSet keeps one Service, its selector updated in place, where JobSet would
    otherwise take over the Job's Service as it is (that function only checks the name; its
    selector, `job-name`, selects none of the JobSet's Pods) and the end of the update delete it."""
    manifest = headless_service_manifest(spec)
    manifest["spec"] = {
        "clusterIP": "None",
        "selector": {JOBSET_NAME_LABEL: spec.name},
        "publishNotReadyAddresses": True,
    }
    return manifest
