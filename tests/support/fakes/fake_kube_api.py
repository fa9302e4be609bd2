"""Local stand-ins, on loopback, for the two APIs the Job probe uses through real clients:

- ``FakeKubernetesApi``: ``GET /apis/batch/v1/namespaces/NS/jobs`` answering a ``batch/v1``
  JobList, and ``GET /apis/kueue.x-k8s.io/v1beta2/namespaces/NS/workloads`` a Kueue
  WorkloadList (or the API server's own 404 when Kueue's CRD is not installed), each filtered by
  ``labelSelector`` as the real API server does (equality and ``in`` terms); plain HTTP or TLS.
- ``FakeJobSetApi``: a ``FakeKubernetesApi`` that also serves JobSets at
  ``/apis/jobset.x-k8s.io/v1alpha2/namespaces/NS/jobsets`` (or 404 when JobSet's CRD is not
  installed), filtered by equality terms.
- ``FakeGkeApi``: ``GET /v1/projects/P/locations/L/clusters/C`` answering a GKE ``Cluster``.

Watches (``?watch=true``, see "Watches" below): Jobs, JobSets, Pods
(``/api/v1/namespaces/NS/pods``) and Nodes (``/api/v1/nodes``) stream newline-delimited watch
events from a ``resourceVersion``, changed through ``put`` and ``remove``; with faults on demand
(``watch_faults``): a garbage line, a stream that never ends and sends nothing, a 410.

``workload(owner, state)`` makes the Workload Kueue v0.19.2 keeps for a Job or JobSet in one of
the states of ``WORKLOAD_STATES``, as Kueue's own source writes them (the citations there).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional
from urllib.parse import parse_qs

from tpu_training_components.domain.job_manifests import KUEUE_QUEUE_LABEL, PART_OF, PART_OF_LABEL
from tpu_training_components.domain.kueue_recovery import KUEUE_JOB_UID_LABEL, KUEUE_WORKLOAD_API_VERSION

from support.fakes.loopback import LoopbackJsonServer, Streamed, not_found
from support.harness.crds import CheckedAgainstKubernetes
from support.harness.discovery import CheckedAgainstDiscovery

_JOBS = re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs$")
_WORKLOADS = re.compile(rf"^/apis/{KUEUE_WORKLOAD_API_VERSION}/namespaces/([^/]+)/workloads$")
_CLUSTER = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/clusters/[^/]+)$")
_PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods$")
_NODES = "/api/v1/nodes"


def pod(owner: str, started: str, *, index: int = 0) -> dict[str, Any]:
    """A running Pod of the Job or JobSet ``owner`` (its template's labels), started at
    ``started`` (RFC 3339)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{owner}-{index}-x7k2p",
            "labels": {PART_OF_LABEL: PART_OF, "app.kubernetes.io/name": owner},
        },
        "status": {
            "phase": "Running",
            "startTime": started,
            "containerStatuses": [
                {
                    "name": "trainer",
                    "ready": True,
                    "restartCount": 0,
                    "image": "trainer:1",
                    "imageID": "trainer@sha256:" + "0" * 64,
                    "state": {"running": {"startedAt": started}},
                }
            ],
        },
    }


def job(
    name: str,
    *,
    generation: int = 0,
    conditions: tuple[tuple[str, str, str], ...] = (),
    ours: bool = True,
    **status: int,
) -> dict[str, Any]:
    """A Job as the API server returns it; ``conditions`` are (type, status, reason)."""
    labels = {PART_OF_LABEL: PART_OF, "recovery-generation": str(generation)} if ours else {"team": "other"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels, "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}}},
        "status": {
            "conditions": [
                {
                    "type": kind,
                    "status": state,
                    "reason": reason,
                    "message": f"{reason} happened",
                    "lastProbeTime": "2026-11-21T10:00:00Z",
                    "lastTransitionTime": "2026-11-21T10:00:00Z",
                }
                for kind, state, reason in conditions
            ],
            "startTime": "2026-11-20T10:00:00Z",
            **status,
        },
    }


def queued_job(
    name: str, *, generation: int = 0, queue: str = "v6e-4x4", suspended: bool = True
) -> dict[str, Any]:
    """A Job on a Kueue queue, as Kueue's webhook leaves it before admission: suspended."""
    item = job(
        name,
        generation=generation,
        conditions=(("Suspended", "True", "JobSuspended"),) if suspended else (),
        **({} if suspended else {"active": 4, "ready": 4}),
    )
    item["metadata"]["labels"][KUEUE_QUEUE_LABEL] = queue
    item["spec"].update(suspend=suspended, parallelism=4, completions=4)
    return item


# A label selector term: `key=value`, `key==value`, `key!=value` or `key in (a,b)`, as the API
# server takes them (apimachinery's labels.Parse); enough for what the probe sends.
_TERM = re.compile(r"\s*([^,=!\s]+)\s*(?:(==?|!=)\s*([^,\s]*)|\s+in\s+\(([^)]*)\))\s*(?:,|$)")


def _selected(item: dict[str, Any], selector: str) -> bool:
    labels = item["metadata"].get("labels", {})
    position = 0
    while position < len(selector):
        term = _TERM.match(selector, position)
        assert term is not None, f"the fake API cannot parse the label selector {selector!r}"
        key, operator, value, values = term.groups()
        if values is not None:
            if labels.get(key) not in {v.strip() for v in values.split(",")}:
                return False
        elif (labels.get(key) == value) != (operator != "!="):
            return False
        position = term.end()
    return True


def _kubernetes_not_found() -> tuple[int, Any]:
    """The API server's answer for a resource it does not serve (a CRD not installed)."""
    return 404, {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the requested resource",
        "reason": "NotFound",
        "details": {},
        "code": 404,
    }


# --- Watches -----------------------------------------------------------------------------------
# As the API server streams them (Kubernetes "API Concepts", "Efficient detection of changes"): a
# watch from resourceVersion N sends every change after N, one JSON event per line, `{"type":
# ADDED | MODIFIED | DELETED | BOOKMARK | ERROR, "object": ...}`; a BOOKMARK carries only the
# object's kind and metadata.resourceVersion; a version older than the server keeps gets an ERROR
# event holding a Status with code 410 (Gone), or, from some paths, an HTTP 410; the stream ends
# after timeoutSeconds.

_KINDS = {
    "jobs": ("batch/v1", "Job"),
    "jobsets": ("jobset.x-k8s.io/v1alpha2", "JobSet"),
    "pods": ("v1", "Pod"),
    "nodes": ("v1", "Node"),
}
WATCH_FAULTS = ("garbage", "silent", "gone", "http-gone")
"""What ``watch_faults`` may hold: the next watch request sends a line that is not JSON and ends;
sends nothing and never ends (until the server closes); sends an ERROR event with a 410 Status;
answers HTTP 410."""


def _watching(query: str) -> bool:
    return parse_qs(query).get("watch", [""])[0].lower() in ("1", "true")


def _gone_status() -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "too old resource version: 1 (100)",
        "reason": "Expired",
        "code": 410,
    }


def _line(kind: str, item: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": item}).encode() + b"\n"


def watched_pod(
    name: str,
    *,
    phase: str = "Running",
    ready: bool = True,
    disruption: Optional[str] = None,
    ours: bool = True,
) -> dict[str, Any]:
    """A Pod of one of our Jobs named ``name``, as a watch sees it change: its phase, readiness,
    and ``disruption`` (the reason of a DisruptionTarget condition)."""
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if disruption is not None:
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": disruption})
    labels = {PART_OF_LABEL: PART_OF} if ours else {"team": "other"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "uid": f"uid-{name}"},
        "status": {"phase": phase, "conditions": conditions},
    }


def node(
    name: str,
    *,
    pool: str = "v6e-4x4",
    ready: bool = True,
    taints: tuple[tuple[str, str], ...] = (("google.com/tpu", "NoSchedule"),),
    maintenance: Optional[str] = None,
) -> dict[str, Any]:
    """A node of one of our pools (``taints``: (key, effect)); ``maintenance`` GKE's
    scheduled-maintenance-time label (epoch seconds)."""
    labels = {"tpu-training/node-pool": pool, "cloud.google.com/gke-nodepool": pool}
    if maintenance is not None:
        labels["cloud.google.com/scheduled-maintenance-time"] = maintenance
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "uid": f"uid-{name}"},
        "spec": {"taints": [{"key": key, "value": "present", "effect": effect} for key, effect in taints]},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


class _Watches:
    """The watch half of ``FakeKubernetesApi`` (a mixin: it reads ``jobs``, ``jobsets``)."""

    jobs: dict[str, list[dict[str, Any]]]

    def _init_watches(self) -> None:
        self.pods: dict[str, list[dict[str, Any]]] = {}
        self.nodes: list[dict[str, Any]] = []
        self.revision = 100
        """The latest resourceVersion; every list answers it."""
        self.history: list[tuple[int, str, str, str, dict[str, Any]]] = []
        """(resourceVersion, resource, namespace, event type, object) of every change."""
        self.oldest_kept = 0
        """A watch from an older version than this is answered 410 (``compact``)."""
        self.watch_faults: list[str] = []
        """Faults (``WATCH_FAULTS``) the next watch requests meet, one each, in order."""
        self.watch_requests: list[tuple[str, str, str]] = []
        """(resource, namespace, resourceVersion) of every watch request."""
        self.list_requests: list[tuple[str, str]] = []
        """(resource, namespace) of every Pod and Node list."""
        self.bookmark_seconds: Optional[float] = None
        """Send a BOOKMARK this often on a watch that asks for them."""
        self._changed = threading.Condition()
        self._closing = threading.Event()

    def _collection(self, resource: str, namespace: str) -> list[dict[str, Any]]:
        if resource == "nodes":
            return self.nodes
        store = {"jobs": self.jobs, "pods": self.pods, "jobsets": getattr(self, "jobsets", {})}[resource]
        return store.setdefault(namespace, [])

    def put(self, resource: str, namespace: str, item: dict[str, Any]) -> None:
        """Add or change (by name) an object of ``resource`` (jobs, jobsets, pods, nodes), as a
        controller's write would: a new resourceVersion, and an ADDED or MODIFIED event."""
        with self._changed:
            self.revision += 1
            item = copy.deepcopy(item)
            item["metadata"]["resourceVersion"] = str(self.revision)
            if resource != "nodes":
                item["metadata"]["namespace"] = namespace
            self.check_object(f"a watched {resource} object", item)  # type: ignore[attr-defined]
            items = self._collection(resource, namespace)
            names = [i["metadata"]["name"] for i in items]
            name = item["metadata"]["name"]
            if name in names:
                items[names.index(name)] = item
            else:
                items.append(item)
            self.history.append(
                (self.revision, resource, namespace, "MODIFIED" if name in names else "ADDED", item)
            )
            self._changed.notify_all()

    def remove(self, resource: str, namespace: str, name: str) -> None:
        """Delete an object: a DELETED event carrying its last state."""
        with self._changed:
            items = self._collection(resource, namespace)
            (item,) = [i for i in items if i["metadata"]["name"] == name]
            items.remove(item)
            self.revision += 1
            gone = copy.deepcopy(item)
            gone["metadata"]["resourceVersion"] = str(self.revision)
            self.history.append((self.revision, resource, namespace, "DELETED", gone))
            self._changed.notify_all()

    def compact(self) -> None:
        """Forget the history, as the API server's compaction does: a watch from any version
        given out so far gets 410 Gone."""
        with self._changed:
            self.oldest_kept = self.revision + 1

    def close_watches(self) -> None:
        self._closing.set()
        with self._changed:
            self._changed.notify_all()

    def serve(self, resource: str, namespace: str, query: str) -> tuple[int, Any]:
        """A list, or a watch when ``query`` asks for one, of ``resource`` in ``namespace``."""
        params = parse_qs(query)
        selector = params.get("labelSelector", [""])[0]
        api_version, kind = _KINDS[resource]
        if not _watching(query):
            self.list_requests.append((resource, namespace))
            with self._changed:
                items = [i for i in self._collection(resource, namespace) if _selected(i, selector)]
                return 200, {
                    "apiVersion": api_version,
                    "kind": f"{kind}List",
                    "metadata": {"resourceVersion": str(self.revision)},
                    "items": copy.deepcopy(items),
                }
        since = params.get("resourceVersion", [""])[0]
        self.watch_requests.append((resource, namespace, since))
        fault = self.watch_faults.pop(0) if self.watch_faults else None
        assert fault in (None, *WATCH_FAULTS), fault
        if fault == "http-gone":
            return 410, _gone_status()
        seconds = float(params.get("timeoutSeconds", ["1800"])[0])
        bookmarks = params.get("allowWatchBookmarks", [""])[0].lower() == "true"
        return 200, Streamed(self._events(resource, namespace, selector, since, seconds, bookmarks, fault))

    def _events(
        self,
        resource: str,
        namespace: str,
        selector: str,
        since: str,
        seconds: float,
        bookmarks: bool,
        fault: Optional[str],
    ) -> Iterator[bytes]:
        if fault == "garbage":
            yield b"{this is not a watch event\n"
            return
        if fault == "silent":
            while not self._closing.wait(0.05):
                yield b""
            return
        if fault == "gone" or (since.isdigit() and int(since) < self.oldest_kept):
            yield _line("ERROR", _gone_status())
            return
        sent = int(since) if since.isdigit() else self.revision
        ends = time.monotonic() + seconds
        bookmark_at = time.monotonic() + (self.bookmark_seconds or 0)
        while not self._closing.is_set():
            with self._changed:
                news = [e for e in self.history if e[0] > sent]
                if not news:
                    waits = [ends - time.monotonic()]
                    if bookmarks and self.bookmark_seconds:
                        waits.append(bookmark_at - time.monotonic())
                    if max(0.0, min(waits)) > 0:
                        self._changed.wait(min(waits))
                    news = [e for e in self.history if e[0] > sent]
                latest = self.revision
            for version, kind, ns, event, item in news:
                sent = version
                if kind == resource and ns == namespace and _selected(item, selector):
                    yield _line(event, item)
            sent = max(sent, latest) if not news else sent
            now = time.monotonic()
            if bookmarks and self.bookmark_seconds and now >= bookmark_at:
                bookmark_at = now + self.bookmark_seconds
                yield _line(
                    "BOOKMARK", {"kind": _KINDS[resource][1], "metadata": {"resourceVersion": str(sent)}}
                )
            if now >= ends:
                return


class FakeKubernetesApi(CheckedAgainstKubernetes, _Watches, LoopbackJsonServer):
    def __init__(self, tls: Optional[tuple[Path, Path]] = None) -> None:
        super().__init__(tls)
        self.jobs: dict[str, list[dict[str, Any]]] = {}
        self.workloads: dict[str, list[dict[str, Any]]] = {}
        self.kueue_installed = True
        """False: the Workload CRD is not installed, and its path answers 404."""
        self.selectors: list[str] = []
        """The label selector of every list call."""
        self._init_watches()

    def add_pod(self, namespace: str, item: dict[str, Any]) -> None:
        item["metadata"]["namespace"] = namespace
        self.pods.setdefault(namespace, []).append(item)

    def add(self, namespace: str, item: dict[str, Any]) -> None:
        item["metadata"]["namespace"] = namespace
        self.jobs.setdefault(namespace, []).append(item)

    def add_workload(self, item: dict[str, Any]) -> None:
        """A Workload, in the namespace its metadata names (its Job's, see ``workload``)."""
        self.workloads.setdefault(item["metadata"]["namespace"], []).append(item)

    def route(self, method: str, path: str, query: str, headers: dict[str, str]) -> tuple[int, Any]:
        selector = parse_qs(query).get("labelSelector", [""])[0]
        pods, jobs = _PODS.match(path), _JOBS.match(path)
        if path == _NODES or ((pods or jobs) is not None and _watching(query)):
            resource = "nodes" if path == _NODES else "pods" if pods is not None else "jobs"
            namespace = "" if path == _NODES else (pods or jobs).group(1)  # type: ignore[union-attr]
            return self.serve(resource, namespace, query)
        workloads = _WORKLOADS.match(path)
        if workloads is not None:
            if not self.kueue_installed:
                return _kubernetes_not_found()
            self.selectors.append(selector)
            return 200, {
                "apiVersion": KUEUE_WORKLOAD_API_VERSION,
                "kind": "WorkloadList",
                "metadata": {"continue": "", "resourceVersion": "9"},
                "items": [i for i in self.workloads.get(workloads.group(1), []) if _selected(i, selector)],
            }
        pods = _PODS.match(path)
        if pods is not None:
            self.selectors.append(selector)
            items = [i for i in self.pods.get(pods.group(1), []) if _selected(i, selector)]
            return 200, {
                "apiVersion": "v1",
                "kind": "PodList",
                "metadata": {"resourceVersion": str(self.revision)},
                "items": items,
            }
        match = _JOBS.match(path)
        if match is None:
            return _kubernetes_not_found()
        self.selectors.append(selector)
        items = [i for i in self.jobs.get(match.group(1), []) if _selected(i, selector)]
        return 200, {
            "apiVersion": "batch/v1",
            "kind": "JobList",
            "metadata": {"resourceVersion": str(self.revision)},
            "items": items,
        }

    def __exit__(self, *exc: object) -> None:
        self.close_watches()  # streams still open end, so the server's shutdown does not wait
        super().__exit__(*exc)

    def kubeconfig(self, folder: Path, user: str = "{}") -> Path:
        """A kubeconfig file pointing at this server (plain HTTP); ``user`` is its user's entry
        (flow-style YAML), no credentials unless given."""
        return kubeconfig_for(self.endpoint, folder, user)


# --- JobSets -----------------------------------------------------------------------------------

_JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/"


def jobset(
    name: str,
    *,
    generation: int = 0,
    conditions: Any = (),
    ready: int = 0,
    restarts: int = 0,
    ours: bool = True,
) -> dict[str, Any]:
    """A JobSet as the API server lists it; ``ours`` False: one this project did not make."""
    labels = {"app.kubernetes.io/part-of": "tpu-training", "recovery-generation": str(generation)}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": labels if ours else {"team": "x"}, "uid": f"uid-{name}"},
        "spec": {"replicatedJobs": [{"name": "slice-job", "replicas": 2, "template": {}}]},
        "status": {
            "conditions": [
                {
                    "type": kind,
                    "status": "True",
                    "reason": reason,
                    "message": f"{reason} happened",
                    "lastTransitionTime": "2026-11-21T10:00:00Z",
                }
                for kind, reason in conditions
            ],
            "restarts": restarts,
            "restartsCountTowardsMax": restarts,
            "replicatedJobsStatus": [
                {
                    "name": "slice-job",
                    "ready": ready,
                    "active": 2,
                    "failed": 0,
                    "succeeded": 0,
                    "suspended": 0,
                }
            ],
        },
    }


class FakeJobSetApi(FakeKubernetesApi):
    """Jobs as ``FakeKubernetesApi`` serves them, and JobSets at the custom-objects path."""

    def __init__(self) -> None:
        super().__init__()
        self.jobsets: dict[str, list[dict[str, Any]]] = {}
        self.crd_installed = True

    def add_jobset(self, namespace: str, item: dict[str, Any]) -> None:
        item["metadata"]["namespace"] = namespace
        self.jobsets.setdefault(namespace, []).append(item)

    def route(self, method: str, path: str, query: str, headers: dict[str, str]) -> tuple[int, Any]:
        if not path.startswith(_JOBSETS):
            return super().route(method, path, query, headers)
        if not self.crd_installed:
            return _kubernetes_not_found()
        namespace, _, plural = path[len(_JOBSETS) :].partition("/")
        if plural != "jobsets":
            return _kubernetes_not_found()
        if _watching(query):
            return self.serve("jobsets", namespace, query)
        terms = filter(None, parse_qs(query).get("labelSelector", [""])[0].split(","))
        selector = dict(term.split("=", 1) for term in terms)
        items = [
            i
            for i in self.jobsets.get(namespace, [])
            if all(i["metadata"]["labels"].get(key) == value for key, value in selector.items())
        ]
        return 200, {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSetList",
            "metadata": {"resourceVersion": str(self.revision)},
            "items": items,
        }


# --- Kueue Workloads ----------------------------------------------------------------------------
# What Kueue v0.19.2 (kubernetes-sigs/kueue 8eab68778fc1b52affe165fdf5af29d1e9b4f3cb) writes on
# the Workload of a queued Job, by state. "capacity-revoked" is the end of the flow its
# integration test plays (test/integration/singlecluster/controller/admissionchecks/provisioning/
# provisioning_test.go, "...the ProvisioningRequest's condition is set to CapacityRevoked"): the
# check rejected, then deactivation (pkg/controller/core/workload_controller.go), eviction
# (pkg/workload/evict/evict.go), the Job stopped and its quota released with Requeued False
# (pkg/controller/jobframework/reconciler.go step 6; the expected Workload of
# pkg/controller/jobs/job/job_controller_test.go "when workload is active after deactivation").

# Messages are Kueue's own, with its feature gates at their v0.19.2 defaults (pkg/features/
# kube_features.go: UnadmittedWorkloadsObservability off, hence the Admitted reasons below,
# pkg/workload/admissionchecks.go). A check's message copies the ProvisioningRequest's condition
# message, GKE's: left empty here, as in Kueue's own test.
_EVICTED_BY_KUEUE = "The workload is deactivated due to "
_REVOKED = 'AdmissionCheck in Rejected state: "v6e-4x4"'


def _deactivated(cause: str, why: str) -> dict[str, Any]:
    reason = f"DeactivatedDueTo{cause}" if cause else "Deactivated"
    message = _EVICTED_BY_KUEUE + why if cause else "The workload is deactivated"
    return {
        "active": False,
        "conditions": [
            ("Evicted", "True", reason, message),
            ("QuotaReserved", "False", "Pending", message),
            (
                "Admitted",
                "False",
                "NoReservationUnsatisfiedChecks",
                "The workload has no reservation and not all checks ready",
            ),
            ("Requeued", "False", reason, message),
        ],
        "checks": [("Pending", "Reset to Pending after eviction. Previously: Rejected" if cause else "")],
        "evictions": [{"reason": "Deactivated", "underlyingCause": cause, "count": 1}],
    }


WORKLOAD_STATES: dict[str, dict[str, Any]] = {
    # Queued, no quota yet (the scheduler's "Pending", pkg/scheduler/scheduler.go).
    "pending": {
        "conditions": [
            (
                "QuotaReserved",
                "False",
                "Pending",
                "couldn't assign flavors to pod set main: insufficient unused quota for google.com/tpu "
                "in flavor v6e-4x4, 16 more needed",
            )
        ],
        "checks": [("Pending", "")],
    },
    # Quota reserved, its ProvisioningRequest not provisioned yet (provisioning/controller.go).
    "provisioning": {
        "admission": True,
        "conditions": [
            ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue v6e-4x4"),
            ("Admitted", "False", "UnsatisfiedChecks", "The workload has not all checks ready"),
        ],
        "checks": [("Pending", "")],
    },
    "admitted": {
        "admission": True,
        "conditions": [
            ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue v6e-4x4"),
            ("Admitted", "True", "Admitted", "The workload is admitted"),
        ],
        "checks": [("Ready", "")],
    },
    "capacity-revoked": _deactivated("AdmissionCheck", _REVOKED),
    "requeuing-limit-exceeded": _deactivated(
        "RequeuingLimitExceeded", "exceeding the maximum number of re-queuing retries"
    ),
    "maximum-execution-time-exceeded": _deactivated(
        "MaximumExecutionTimeExceeded", "exceeding the maximum execution time"
    ),
    # `spec.active: false` set by someone: evicted with the bare reason (workload_controller.go).
    "deactivated-by-hand": _deactivated("", ""),
    # A PodsReady time-out: evicted, re-queued by Kueue after its back-off.
    "backing-off": {
        "conditions": [
            ("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout default/train"),
            ("QuotaReserved", "False", "Pending", "Exceeded the PodsReady timeout default/train"),
            ("Requeued", "False", "PodsReadyTimeout", "Exceeded the PodsReady timeout default/train"),
        ],
        "checks": [("Pending", "Reset to Pending after eviction. Previously: Ready")],
        "requeue": {"count": 1, "requeueAt": "2026-11-21T10:05:00Z"},
    },
    "queue-stopped": {
        "conditions": [
            ("Evicted", "True", "ClusterQueueStopped", "The ClusterQueue is stopped"),
            ("QuotaReserved", "False", "Pending", "The ClusterQueue is stopped"),
            ("Requeued", "False", "ClusterQueueStopped", "The ClusterQueue is stopped"),
        ],
        "checks": [("Pending", "Reset to Pending after eviction. Previously: Ready")],
    },
    # Kueue could not start it for good (reconciler.go step 7, FailedToStartFinishedReason); the
    # message, the start error, is a stand-in.
    "failed-to-start": {
        "admission": True,
        "conditions": [
            ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue v6e-4x4"),
            ("Admitted", "True", "Admitted", "The workload is admitted"),
            ("Finished", "True", "FailedToStart", "invalid podSetUpdates: conflicting node selector"),
        ],
        "checks": [("Ready", "")],
    },
}


def workload_name(kind: str, group: str, name: str, uid: str) -> str:
    """Kueue's name for the Workload of a Job or JobSet (pkg/controller/jobframework/
    workload_names.go ``GetWorkloadNameForOwnerWithGVK``, without ShortWorkloadNames)."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{name}\n{uid}".encode()).hexdigest()
    return f"{f'{kind.lower()}-{name}'[:247]}-{digest[:5]}"


def _pod_sets(owner: dict[str, Any]) -> list[dict[str, Any]]:
    default_template = {"spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}}
    if owner["kind"] == "Job":
        spec = owner["spec"]
        return [{"name": "main", "count": spec.get("parallelism", 1), "template": spec["template"]}]
    return [  # a JobSet: one pod set per replicated job (pkg/controller/jobs/jobset)
        {
            "name": replicated["name"],
            "count": replicated.get("replicas", 1)
            * replicated["template"].get("spec", {}).get("parallelism", 1),
            "template": replicated["template"].get("spec", {}).get("template") or default_template,
        }
        for replicated in owner["spec"]["replicatedJobs"]
    ]


def workload(owner: dict[str, Any], state: str, *, queue: str = "v6e-4x4") -> dict[str, Any]:
    """The Workload Kueue keeps for ``owner`` (a Job or JobSet as the fake serves it, with its
    namespace) in ``state``, one of ``WORKLOAD_STATES``."""
    shape = WORKLOAD_STATES[state]
    kind, api_version = owner["kind"], owner["apiVersion"]
    group = api_version.rpartition("/")[0]
    meta = owner["metadata"]
    uid = meta["uid"]
    now = "2026-11-21T10:00:00Z"
    pod_sets = _pod_sets(owner)
    status: dict[str, Any] = {
        "conditions": [
            {
                "type": type_,
                "status": status_,
                "reason": reason,
                "message": message,
                "lastTransitionTime": now,
                "observedGeneration": 1,
            }
            for type_, status_, reason, message in shape["conditions"]
        ],
        "admissionChecks": [
            {"name": queue, "state": check_state, "message": message, "lastTransitionTime": now}
            for check_state, message in shape["checks"]
        ],
    }
    if shape.get("admission"):
        status["admission"] = {
            "clusterQueue": queue,
            "podSetAssignments": [
                {
                    "name": pod_set["name"],
                    "count": pod_set["count"],
                    "flavors": {"google.com/tpu": queue},
                    "resourceUsage": {"google.com/tpu": str(4 * pod_set["count"])},
                }
                for pod_set in pod_sets
            ],
        }
    if "requeue" in shape:
        status["requeueState"] = shape["requeue"]
    if "evictions" in shape:
        status["schedulingStats"] = {"evictions": shape["evictions"]}
    return {
        "apiVersion": KUEUE_WORKLOAD_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(kind, group, meta["name"], uid),
            "namespace": meta["namespace"],
            "uid": f"workload-{uid}",
            "resourceVersion": "8",
            "generation": 1,
            "creationTimestamp": now,
            "labels": {KUEUE_JOB_UID_LABEL: uid},
            "ownerReferences": [
                {
                    "apiVersion": api_version,
                    "kind": kind,
                    "name": meta["name"],
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
        },
        "spec": {
            "active": shape.get("active", True),
            "queueName": queue,
            "podSets": copy.deepcopy(pod_sets),
        },
        "status": status,
    }


def kubeconfig_for(endpoint: str, folder: Path, user: str = "{}") -> Path:
    """A kubeconfig file pointing at ``endpoint``, with ``user`` as its user's entry."""
    path = folder / "kubeconfig"
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "{endpoint}"}}}}]
users: [{{name: fake, user: {user}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: fake}}}}]
current-context: fake
"""
    )
    return path


class FakeGkeApi(CheckedAgainstDiscovery, LoopbackJsonServer):
    """GKE's ``projects.locations.clusters.get``; every answer checked against container v1's
    discovery document."""

    APIS = (("container", "v1"),)

    def __init__(self) -> None:
        super().__init__()
        self.clusters: dict[str, dict[str, Any]] = {}

    def add(self, path: str, endpoint: str, ca_pem: bytes) -> None:
        self.clusters[path] = {
            "name": path.rsplit("/", 1)[-1],
            "endpoint": endpoint,
            "status": "RUNNING",
            "masterAuth": {"clusterCaCertificate": base64.b64encode(ca_pem).decode()},
        }

    def route(self, method: str, path: str, query: str, headers: dict[str, str]) -> tuple[int, Any]:
        match = _CLUSTER.match(path)
        if match is None or match.group(1) not in self.clusters:
            return not_found()
        return 200, self.clusters[match.group(1)]


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made by the openssl command-line tool."""
    cert, key = folder / "server.crt", folder / "server.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert),
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key
