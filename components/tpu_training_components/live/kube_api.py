"""Read live training Jobs through the Kubernetes API (the official ``kubernetes`` client).

One ``list`` call per namespace and kind (Jobs, JobSets, Kueue Workloads), never one per Job; a
list of more than ``PAGE_SIZE`` objects is read page by page.
Credentials come from ``KUBECONFIG`` when it is set; otherwise from the GKE API
(``google-cloud-container``: the cluster's endpoint and CA certificate) and Application Default
Credentials (a bearer token). Any failure (no credentials, HTTP error, time-out, refused
connection) is reported per namespace, and the caller keeps every Job there as it is. A cluster
that does not exist yet has no Jobs: that is known, not unknown.
"""

from __future__ import annotations

import json
import re
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable, Optional, Protocol, Sequence

from ..domain.job_manifests import PART_OF, PART_OF_LABEL
from ..domain.job_recovery import JobCondition, LiveJob, LiveJobSet
from ..domain.jobset_manifests import JOBSET_API_VERSION
from ..domain.kueue_recovery import (
    KUEUE_JOB_UID_LABEL,
    KUEUE_WORKLOAD_API_VERSION,
    NOT_READ,
    KueueState,
    LiveWorkload,
    kueue_found,
    kueue_unreadable,
)
from ..domain.maintenance_notices import NODE_POOL_LABEL, PoolNode
from ..domain.recovery import Condition, failure_summary, zoned_time
from .deadline import MAX_ANSWER_BYTES, PROBE_DEADLINE_SECONDS, Deadline
from .http_answers import timeouts_of
from .kube_client import ClusterAbsent, ClusterRef, api_client_for
from .kube_pages import PAGE_SIZE, MalformedAnswer, read_list


@dataclass
class LiveJobs:
    """What the cluster said, namespace by namespace."""

    jobs: dict[tuple[str, str], LiveJob] = field(default_factory=dict)
    """(namespace, Job name) -> Job, for every namespace that answered."""
    failures: dict[str, str] = field(default_factory=dict)
    """namespace -> why it could not be read."""
    cluster_absent: bool = False
    """The GKE API says the cluster does not exist (yet): it has no Jobs."""
    source: str = ""
    """Where the credentials came from, for the log."""
    calls: int = 0
    jobsets: dict[tuple[str, str], LiveJobSet] = field(default_factory=dict)
    """(namespace, JobSet name) -> JobSet, for every namespace whose JobSets were listed."""
    jobset_failures: dict[str, str] = field(default_factory=dict)
    """namespace -> why its JobSets could not be read."""
    workloads: dict[tuple[str, str], tuple[LiveWorkload, ...]] = field(default_factory=dict)
    """(namespace, uid of a Job or JobSet) -> the Kueue Workloads it controls, for every one asked
    about in a namespace that answered (none yet: an empty tuple)."""
    workload_failures: dict[str, str] = field(default_factory=dict)
    """namespace -> why its Kueue Workloads could not be read."""
    pods_started: dict[tuple[str, str], datetime] = field(default_factory=dict)
    """(namespace, Job or JobSet name) -> when the newest of its Pods started, for the namespaces
    whose Pods were listed (a workload's training is judged only against what its current Pods
    wrote)."""
    pod_failures: dict[str, str] = field(default_factory=dict)
    """namespace -> why its Pods could not be read."""

    def training_since(self, namespace: str, name: str, created: Optional[datetime]) -> Optional[datetime]:
        """When the workload's current training began: the newest of its creation and its Pods'
        starts; None when its Pods were not read (or it has none that started)."""
        started = self.pods_started.get((namespace, name))
        if started is None or namespace in self.pod_failures:
            return None
        return max(started, created) if created is not None else started

    def kueue_state(self, namespace: str, uid: str) -> KueueState:
        """What was read of the Kueue Workload of the Job or JobSet ``uid``."""
        if (namespace, uid) in self.workloads:
            return kueue_found(self.workloads[(namespace, uid)])
        if namespace in self.workload_failures:
            return kueue_unreadable(self.workload_failures[namespace])
        return NOT_READ


class _Named(Protocol):
    @property
    def name(self) -> Any: ...
    @property
    def namespace(self) -> Any: ...


def _check_answer(namespace: str, jobs: Sequence[_Named], noun: str = "Job") -> None:
    """Refuse a list that cannot be matched to our Jobs one to one: read as it is, one of ours
    would look deleted or failed."""
    seen: set[str] = set()
    for index, live in enumerate(jobs):
        if not isinstance(live.name, str) or not live.name:
            raise MalformedAnswer(f"{noun}s in {namespace}: item {index} of the answer has no name")
        if live.namespace not in (None, namespace):
            raise MalformedAnswer(f"{noun}s in {namespace}: {live.name!r} is in namespace {live.namespace!r}")
        if live.name in seen:
            raise MalformedAnswer(f"{noun}s in {namespace}: the answer names {noun} {live.name!r} twice")
        seen.add(live.name)


def _count(status: dict[str, Any], key: str, where: str) -> int:
    value = status.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedAnswer(f"{where}: status.{key} is {json.dumps(value)}, not a count")
    return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _conditions(conditions: list[dict[str, Any]]) -> tuple[Condition, ...]:
    """A ``status.conditions`` list already checked to hold objects; a field that is not text
    reads as empty (then no rule of the decision tables matches it)."""
    return tuple(
        Condition(
            _text(c.get("type")), _text(c.get("status")), _text(c.get("reason")), _text(c.get("message"))
        )
        for c in conditions
    )


def _live_job(item: Any, namespace: str, index: int) -> LiveJob:
    """One item of a JobList, read strictly: a field of the wrong type is not read as empty."""
    where = f"Jobs in {namespace}: item {index} of the answer"
    if not isinstance(item, dict):
        raise MalformedAnswer(f"{where} is not an object")
    metadata, status = item.get("metadata") or {}, item.get("status") or {}
    if not isinstance(metadata, dict) or not isinstance(status, dict):
        raise MalformedAnswer(f"{where}: metadata and status must be objects")
    labels, conditions = metadata.get("labels") or {}, status.get("conditions") or []
    if not isinstance(labels, dict) or not isinstance(conditions, list):
        raise MalformedAnswer(f"{where}: labels must be an object and conditions a list")
    if not all(isinstance(c, dict) for c in conditions):
        raise MalformedAnswer(f"{where}: a condition is not an object")
    name, in_namespace = metadata.get("name"), metadata.get("namespace", namespace)
    if not isinstance(name, str) or not name:
        raise MalformedAnswer(f"{where} has no name")
    if not isinstance(in_namespace, str):
        raise MalformedAnswer(f"{where}: its namespace is {json.dumps(in_namespace)}")
    return LiveJob(
        name=name,
        namespace=in_namespace,  # another namespace than asked: refused by _check_answer
        labels={str(k): v for k, v in labels.items() if isinstance(v, str)},
        conditions=_conditions(conditions),
        active=_count(status, "active", where),
        ready=_count(status, "ready", where),
        succeeded=_count(status, "succeeded", where),
        failed=_count(status, "failed", where),
        uid=_text(metadata.get("uid")),
        created=zoned_time(metadata.get("creationTimestamp")),
    )


@dataclass(frozen=True)
class _Limits:
    """What one list call may take: each request ``timeout`` seconds, the call ``deadline``
    seconds in all (every page of it), each page's answer ``max_bytes``."""

    timeout: float
    deadline: float
    max_bytes: int
    page_size: int = PAGE_SIZE

    def items(
        self, what: str, list_kind: str, call: Callable[..., Any], *args: Any, selector: str
    ) -> list[Any]:
        """The items of ``call(*args)``, one list call of the Kubernetes client, made and read
        page by page within these limits."""
        by = Deadline(self.deadline, what)

        def request(**page: Any) -> Any:
            with timeouts_of(by):
                return call(
                    *args,
                    label_selector=selector,
                    _request_timeout=by.timeout(self.timeout),
                    _preload_content=False,  # the raw urllib3 response, after the client's check for 2xx
                    **page,
                )

        return read_list(request, list_kind, self.max_bytes, by, page_size=self.page_size)[0]


def _list_jobs(batch: Any, namespace: str, limits: _Limits) -> list[LiveJob]:
    """One namespace's Jobs of this project."""
    items = limits.items(
        f"listing Jobs in {namespace}",
        "JobList",
        batch.list_namespaced_job,
        namespace,
        selector=f"{PART_OF_LABEL}={PART_OF}",
    )
    return [_live_job(item, namespace, index) for index, item in enumerate(items)]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _live_jobset(item: Any) -> LiveJobSet:
    """A JobSet from the custom-objects API, which answers plain dictionaries."""
    if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict):
        raise MalformedAnswer("a JobSet of the answer is not an object with metadata")
    metadata, spec, status = item["metadata"], item.get("spec") or {}, item.get("status") or {}
    if not isinstance(spec, dict) or not isinstance(status, dict):
        raise MalformedAnswer("a JobSet's spec or status is not an object")
    conditions = tuple(
        JobCondition(
            str(c.get("type") or ""),
            str(c.get("status") or ""),
            str(c.get("reason") or ""),
            str(c.get("message") or ""),
        )
        for c in status.get("conditions") or []
        if isinstance(c, dict)
    )
    replicated = [r for r in spec.get("replicatedJobs") or [] if isinstance(r, dict)]
    statuses = [r for r in status.get("replicatedJobsStatus") or [] if isinstance(r, dict)]
    return LiveJobSet(
        name=metadata.get("name"),  # checked by _check_answer
        namespace=metadata.get("namespace"),
        labels={str(k): str(v) for k, v in (metadata.get("labels") or {}).items()},
        conditions=conditions,
        restarts=_int(status.get("restarts")),
        restarts_counted=_int(status.get("restartsCountTowardsMax")),
        slices=sum(_int(r.get("replicas")) for r in replicated),
        ready=sum(_int(r.get("ready")) for r in statuses),
        uid=_text(metadata.get("uid")),
        created=zoned_time(metadata.get("creationTimestamp")),
    )


def _list_jobsets(custom: Any, namespace: str, limits: _Limits) -> list[LiveJobSet]:
    """One namespace's JobSets of this project, checked as Jobs are."""
    group, version = JOBSET_API_VERSION.split("/")
    items = limits.items(
        f"listing JobSets in {namespace}",
        "JobSetList",
        custom.list_namespaced_custom_object,
        group,
        version,
        namespace,
        "jobsets",
        selector=f"{PART_OF_LABEL}={PART_OF}",
    )
    return [_live_jobset(item) for item in items]


# A uid goes into a label selector: only a valid label value (a uid always is) can be asked about.
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")


def _live_workload(item: Any, namespace: str, index: int) -> LiveWorkload:
    """One item of a WorkloadList, read strictly: Kueue's deactivation must never be read from a
    field of the wrong type, nor its absence from a field that was not understood."""
    where = f"Kueue Workloads in {namespace}: item {index} of the answer"
    if not isinstance(item, dict):
        raise MalformedAnswer(f"{where} is not an object")
    metadata, spec, status = item.get("metadata") or {}, item.get("spec") or {}, item.get("status") or {}
    if not all(isinstance(part, dict) for part in (metadata, spec, status)):
        raise MalformedAnswer(f"{where}: metadata, spec and status must be objects")
    name, in_namespace = metadata.get("name"), metadata.get("namespace", namespace)
    if not isinstance(name, str) or not name or not isinstance(in_namespace, str):
        raise MalformedAnswer(f"{where} has no name or namespace")
    owners = metadata.get("ownerReferences") or []
    conditions = status.get("conditions") or []
    requeue = status.get("requeueState") or {}
    if not isinstance(owners, list) or not all(isinstance(o, dict) for o in owners):
        raise MalformedAnswer(f"{where}: ownerReferences must be a list of objects")
    if not isinstance(conditions, list) or not all(isinstance(c, dict) for c in conditions):
        raise MalformedAnswer(f"{where}: status.conditions must be a list of objects")
    if not isinstance(requeue, dict):
        raise MalformedAnswer(f"{where}: status.requeueState must be an object")
    active = spec.get("active", True)
    if not isinstance(active, bool):
        raise MalformedAnswer(f"{where}: spec.active is {json.dumps(active)}, not true or false")
    controllers = [_text(o.get("uid")) for o in owners if o.get("controller") is True]
    return LiveWorkload(
        name=name,
        namespace=in_namespace,  # another namespace than asked: refused by _check_answer
        owner_uid=controllers[0] if len(controllers) == 1 else "",
        active=active,
        conditions=_conditions(conditions),
        requeue_at=_text(requeue.get("requeueAt")),
    )


def _list_workloads(custom: Any, namespace: str, uids: Sequence[str], limits: _Limits) -> list[LiveWorkload]:
    """The Kueue Workloads of these Jobs and JobSets in one namespace: one call, selected by the
    label Kueue puts on each (the namespace may hold many other workloads)."""
    group, version = KUEUE_WORKLOAD_API_VERSION.split("/")
    items = limits.items(
        f"listing Kueue Workloads in {namespace}",
        "WorkloadList",
        custom.list_namespaced_custom_object,
        group,
        version,
        namespace,
        "workloads",
        selector=f"{KUEUE_JOB_UID_LABEL} in ({','.join(uids)})",
    )
    return [_live_workload(item, namespace, index) for index, item in enumerate(items)]


# Which workload a Pod belongs to: the name label every Pod template of this project carries
# (job_manifests), then those the Job and JobSet controllers add.
_WORKLOAD_LABELS = (
    "app.kubernetes.io/name",
    "jobset.sigs.k8s.io/jobset-name",
    "batch.kubernetes.io/job-name",
)


def _pod_started(item: Any, where: str) -> tuple[str, Optional[datetime]]:
    """The workload a Pod belongs to, and when it (or the newest of its running containers)
    started."""
    if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict):
        raise MalformedAnswer(f"{where}: a Pod of the answer is not an object with metadata")
    metadata, status = item["metadata"], item.get("status") or {}
    labels = metadata.get("labels") or {}
    if not isinstance(labels, dict) or not isinstance(status, dict):
        raise MalformedAnswer(f"{where}: a Pod's labels or status is not an object")
    owner = next((labels[key] for key in _WORKLOAD_LABELS if isinstance(labels.get(key), str)), "")
    times = [zoned_time(status.get("startTime"))]
    for container in status.get("containerStatuses") or []:
        running = (container.get("state") or {}).get("running") if isinstance(container, dict) else None
        if isinstance(running, dict):
            times.append(zoned_time(running.get("startedAt")))
    known = [t for t in times if t is not None]
    return owner, max(known) if known else None


def _list_pod_starts(core: Any, namespace: str, limits: _Limits) -> dict[str, datetime]:
    """One namespace's Pods of this project: workload name -> when its newest Pod started."""
    items = limits.items(
        f"listing Pods in {namespace}",
        "PodList",
        core.list_namespaced_pod,
        namespace,
        selector=f"{PART_OF_LABEL}={PART_OF}",
    )
    newest: dict[str, datetime] = {}
    for item in items:
        owner, started = _pod_started(item, f"Pods in {namespace}")
        if owner and started is not None:
            newest[owner] = max(started, newest.get(owner, started))
    return newest


def _is_404(exc: Exception) -> bool:
    # The client's ApiException (NotFoundException) carries the HTTP status.
    return getattr(exc, "status", None) == 404


def _waiting_on_kueue(result: LiveJobs, namespace: str) -> list[str]:
    """The uids of the Jobs and JobSets of ``namespace`` that are suspended on a Kueue queue."""
    listed = [
        *(job for (ns, _), job in result.jobs.items() if ns == namespace),
        *(jobset for (ns, _), jobset in result.jobsets.items() if ns == namespace),
    ]
    return sorted({live.uid for live in listed if live.waits_on_kueue and _LABEL_VALUE.match(live.uid)})


def list_live_jobs(
    cluster: ClusterRef,
    namespaces: Iterable[str],
    *,
    jobset_namespaces: Iterable[str] = (),
    workload_namespaces: Iterable[str] = (),
    pod_namespaces: Iterable[str] = (),
    kubeconfig: Optional[str] = None,
    container_client: Any = None,
    credentials: Any = None,
    timeout: float = 15.0,
    deadline: float = PROBE_DEADLINE_SECONDS,
    max_bytes: int = MAX_ANSWER_BYTES,
    page_size: int = PAGE_SIZE,
) -> LiveJobs:
    """List this project's Jobs in every namespace, one call per namespace, and its JobSets in
    every one of ``jobset_namespaces``, one more call each. In each of ``workload_namespaces``
    where a Job or JobSet listed is suspended on a Kueue queue, one more call lists the Kueue
    Workloads of those (the stack's queued workloads), after the Jobs and JobSets. In each of
    ``pod_namespaces`` where a Job or JobSet listed is training (every Pod ready), one more call
    lists this project's Pods, for when each workload's newest Pod started.

    ``kubeconfig`` defaults to ``$KUBECONFIG``; without one (or with ``""``), the cluster is
    found through the GKE API. ``container_client`` and ``credentials`` are seams for tests.
    Loading the credentials and each namespace's list end within ``deadline``: each request
    gets ``timeout``, or the time left if that is shorter, and each body is read against the
    deadline; ``max_bytes`` bounds each page of ``page_size`` objects. An answer that is not the
    API server's own (a redirect, not a JobList) makes the namespace unavailable."""
    from kubernetes import client

    namespaces = sorted(set(namespaces))
    jobset_namespaces = sorted(set(jobset_namespaces))
    workload_namespaces = sorted(set(workload_namespaces))
    pod_namespaces = sorted(set(pod_namespaces))
    result = LiveJobs()
    if not namespaces and not jobset_namespaces:
        return result
    with ExitStack() as cleanup:
        try:
            api_client, result.source = api_client_for(
                cluster,
                cleanup,
                kubeconfig=kubeconfig,
                container_client=container_client,
                credentials=credentials,
                timeout=timeout,
                deadline=deadline,
            )
        except ClusterAbsent:
            result.cluster_absent = True
            return result
        except Exception as exc:  # noqa: BLE001 - no credentials must never stop or replace anything
            for namespace in namespaces:
                result.failures[namespace] = failure_summary(exc)
            for namespace in jobset_namespaces:
                result.jobset_failures[namespace] = failure_summary(exc)
            for namespace in workload_namespaces:
                result.workload_failures[namespace] = failure_summary(exc)
            for namespace in pod_namespaces:
                result.pod_failures[namespace] = failure_summary(exc)
            return result
        limits = _Limits(timeout, deadline, max_bytes, page_size)
        batch = client.BatchV1Api(api_client)
        for namespace in namespaces:
            result.calls += 1
            try:
                jobs = _list_jobs(batch, namespace, limits)
                _check_answer(namespace, jobs)
                result.jobs.update(((namespace, live.name), live) for live in jobs)
            except Exception as exc:  # noqa: BLE001 - any failure means "unknown", per namespace
                result.failures[namespace] = failure_summary(exc)
        custom = client.CustomObjectsApi(api_client)
        for namespace in jobset_namespaces:
            result.calls += 1
            try:
                jobsets = _list_jobsets(custom, namespace, limits)
                _check_answer(namespace, jobsets)
                result.jobsets.update(((namespace, live.name), live) for live in jobsets)
            except Exception as exc:  # noqa: BLE001 - any failure means "unknown", per namespace
                # Also when the JobSet CRD is not installed (404): the JobSets are unknown, not gone.
                result.jobset_failures[namespace] = failure_summary(exc)
        for namespace in workload_namespaces:
            uids = _waiting_on_kueue(result, namespace)
            if not uids:
                continue  # nothing there waits on Kueue: no call
            result.calls += 1
            try:
                workloads = _list_workloads(custom, namespace, uids, limits)
                _check_answer(namespace, workloads, "Kueue Workload")
                for uid in uids:
                    result.workloads[(namespace, uid)] = tuple(w for w in workloads if w.owner_uid == uid)
            except Exception as exc:  # noqa: BLE001 - any failure means "unknown", per namespace
                # Also when the Workload CRD is not installed (404): unknown, never "gone".
                hint = "; the cluster serves no Kueue Workloads: is Kueue installed?" if _is_404(exc) else ""
                result.workload_failures[namespace] = failure_summary(exc) + hint
        core = client.CoreV1Api(api_client)
        for namespace in pod_namespaces:
            listed = [
                *(job for (ns, _), job in result.jobs.items() if ns == namespace),
                *(jobset for (ns, _), jobset in result.jobsets.items() if ns == namespace),
            ]
            if not any(live.training for live in listed):
                continue  # nothing there trains: no call
            result.calls += 1
            try:
                started = _list_pod_starts(core, namespace, limits)
                result.pods_started.update(((namespace, name), at) for name, at in started.items())
            except Exception as exc:  # noqa: BLE001 - any failure means "unknown", per namespace
                result.pod_failures[namespace] = failure_summary(exc)
    return result


# --- The nodes of the stack's node pools, for their maintenance notices --------------------------


@dataclass
class PoolNodes:
    """What the cluster said of the nodes of some node pools (one list call)."""

    nodes: list[PoolNode] = field(default_factory=list)
    failure: Optional[str] = None
    """Why they could not be read; None when they were."""
    cluster_absent: bool = False
    calls: int = 0


def _pool_node(item: Any, index: int) -> PoolNode:
    where = f"node {index} of the answer"
    metadata = item.get("metadata") if isinstance(item, dict) else None
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
        raise MalformedAnswer(f"{where} has no name")
    labels = metadata.get("labels") or {}
    spec = item.get("spec") or {}
    taints = (spec.get("taints") or []) if isinstance(spec, dict) else None
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise MalformedAnswer(f"node {metadata['name']!r}: its labels are not a map of strings")
    if not isinstance(taints, list) or not all(isinstance(t, dict) for t in taints):
        raise MalformedAnswer(f"node {metadata['name']!r}: its taints are not a list of objects")
    return PoolNode(
        metadata["name"], dict(labels), tuple(t["key"] for t in taints if isinstance(t.get("key"), str))
    )


def list_pool_nodes(
    cluster: ClusterRef,
    pools: Iterable[str],
    *,
    kubeconfig: Optional[str] = None,
    container_client: Any = None,
    credentials: Any = None,
    timeout: float = 15.0,
    deadline: float = PROBE_DEADLINE_SECONDS,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> PoolNodes:
    """The nodes of the GKE node pools ``pools``, with their labels and taint keys: one list
    call, selected on ``cloud.google.com/gke-nodepool``, made and read within the limits of
    ``list_live_jobs`` (its credentials too). Any failure is reported, never raised."""
    from kubernetes import client

    pools = sorted(set(pools))
    result = PoolNodes()
    if not pools:
        return result
    with ExitStack() as cleanup:
        try:
            api_client, _ = api_client_for(
                cluster,
                cleanup,
                kubeconfig=kubeconfig,
                container_client=container_client,
                credentials=credentials,
                timeout=timeout,
                deadline=deadline,
            )
            result.calls += 1
            items = _Limits(timeout, deadline, max_bytes).items(
                f"listing the nodes of node pools {', '.join(pools)}",
                "NodeList",
                client.CoreV1Api(api_client).list_node,
                selector=f"{NODE_POOL_LABEL} in ({','.join(pools)})",
            )
            result.nodes = [_pool_node(item, index) for index, item in enumerate(items)]
        except ClusterAbsent:
            result.cluster_absent = True
        except Exception as exc:  # noqa: BLE001 - unread notices are said, never fatal
            result.failure = failure_summary(exc)
    return result
