"""live/kube_watch.py: the cluster watcher against the loopback Kubernetes fake, through the real
`kubernetes` client.

The Kubernetes API semantics relied on, from the Kubernetes documentation, "Kubernetes API
Concepts" (https://kubernetes.io/docs/reference/using-api/api-concepts/, "Efficient detection of
changes"; the bookmark text as added by kubernetes/website commit c7c55c5, "Watch bookmarks
documentation"), and the API reference's ListOptions:
- a watch from a resourceVersion sends the changes after it, one JSON event per line
  (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR), chunked; "Clients may start a watch from the last
  resourceVersion value returned by the server and not miss any modifications";
- "When the requested watch operations fail because the historical version of that resource is
  not available, clients must handle the case by recognizing the status code `410 Gone`,
  clearing their local cache, performing a list operation, and starting the watch from the
  `resourceVersion` returned by that new list operation" (an ERROR event whose Status has code
  410, or the HTTP status of the watch request itself);
- a BOOKMARK's object has "only `resourceVersion` field" set: all changes up to it were sent;
  "clients shouldn't assume bookmarks are returned at any specific interval, nor may they assume
  the server will send any `bookmark` event";
- timeoutSeconds limits the duration of the list/watch call "regardless of any activity or
  inactivity".
The client side: kubernetes-client/python 37.0.2, kubernetes/watch/watch.py (``Watch.stream``
retries a 410 once from the same version; ``unmarshal_event`` returns None for a line that is not
JSON): why live/kube_watch.py reads the raw stream instead.

Every wait here is bounded; the streams use server time-outs of a second or two.
"""

from __future__ import annotations

import queue
import threading
import time

import pytest
from support.fakes.fake_kube_api import FakeJobSetApi, job, jobset, node, watched_pod
from support.harness.waiting import eventually
from tpu_training_components.live.kube_client import ClusterRef
from tpu_training_components.live.kube_watch import (
    MAINTENANCE_LABEL,
    ClusterWatcher,
    WatchLimits,
    WatchScope,
    facts,
    relevant,
)

CLUSTER = ClusterRef("p", "us-east5", "tpu-dev")
QUICK = WatchLimits(
    server_timeout_seconds=1, read_margin_seconds=1.5, first_backoff_seconds=0.05, backoff_cap_seconds=0.2
)
FAILED = (("Failed", "True", "BackoffLimitExceeded"),)
STARTUP = 20.0
"""How long the streams may take to list and start watching: the first loads the kubernetes client
and each reads the kubeconfig, slow on a loaded machine (a bound, not a target)."""


class Watching:
    """A started watcher and what it said."""

    def __init__(self, api: FakeJobSetApi, kubeconfig: str, scope: WatchScope, limits: WatchLimits = QUICK):
        self.changes: queue.Queue[str] = queue.Queue()
        self.warnings: list[str] = []
        self.watcher = ClusterWatcher(
            CLUSTER, scope, self.changes.put, warn=self.warnings.append, limits=limits, kubeconfig=kubeconfig
        )
        self.watcher.start()

    def next_change(self, seconds: float = 10.0) -> str:
        return self.changes.get(timeout=seconds)

    def quiet_for(self, seconds: float) -> bool:
        try:
            change = self.changes.get(timeout=seconds)
        except queue.Empty:
            return True
        raise AssertionError(f"an unexpected change: {change}")


@pytest.fixture
def api(tmp_path):
    with FakeJobSetApi() as fake:
        fake.put("jobs", "default", job("train-v6e", generation=1, active=4, ready=4))
        fake.put("jobsets", "default", jobset("train-js", ready=2))
        fake.put("pods", "default", watched_pod("train-v6e-0"))
        fake.put("nodes", "", node("gke-node-1"))
        fake.kubeconfig_path = str(fake.kubeconfig(tmp_path))
        yield fake


def watching_all(
    api: FakeJobSetApi, resources: tuple[str, ...] = ("jobs", "jobsets", "pods", "nodes")
) -> bool:
    """Whether every one of ``resources`` has a watch asked: a change made after it is streamed
    (one made before is in the stream's first list, which reports nothing)."""
    return {resource for resource, _, _ in api.watch_requests} >= set(resources)


@pytest.fixture
def thread_errors(monkeypatch):
    """Exceptions that escaped any thread (there must be none: never a traceback)."""
    errors: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    return errors


ALL = WatchScope(
    job_namespaces=("default",),
    jobset_namespaces=("default",),
    pod_namespaces=("default",),
    node_selector="tpu-training/node-pool in (v6e-4x4)",
)
JOBS = WatchScope(job_namespaces=("default",))


@pytest.fixture
def watching(api):
    started: list[Watching] = []

    def start(scope: WatchScope = ALL, limits: WatchLimits = QUICK) -> Watching:
        started.append(Watching(api, api.kubeconfig_path, scope, limits))
        return started[-1]

    yield start
    for each in started:
        assert each.watcher.stop(2.0), "a stream did not end within 2 s of stop()"


# ---------------------------------------------------------------------------------------------
# What is relevant (pure)
# ---------------------------------------------------------------------------------------------


def test_a_new_job_condition_is_relevant_and_a_count_change_is_not():
    running, failed = job("j", active=4, ready=4), job("j", conditions=FAILED, failed=1)
    assert (
        relevant("Job", facts("Job", running), facts("Job", failed)) == "Failed=True (BackoffLimitExceeded)"
    )
    assert relevant("Job", facts("Job", running), facts("Job", job("j", active=3, ready=2))) is None
    assert relevant("Job", facts("Job", running), None) == "deleted"


def test_a_pod_ready_flip_is_not_relevant_a_failure_or_a_disruption_is():
    healthy = facts("Pod", watched_pod("p"))
    assert relevant("Pod", healthy, facts("Pod", watched_pod("p", ready=False))) is None
    assert relevant("Pod", healthy, facts("Pod", watched_pod("p", disruption="EvictionByEvictionAPI"))) == (
        "DisruptionTarget (EvictionByEvictionAPI)"
    )
    assert relevant("Pod", healthy, facts("Pod", watched_pod("p", phase="Failed"))) == "phase Failed"


def test_a_node_born_tainted_and_not_ready_is_not_relevant_gaining_either_or_maintenance_is():
    ready = facts("Node", node("n"))
    assert relevant("Node", None, facts("Node", node("n", ready=False))) is None  # how every node starts
    assert relevant("Node", ready, facts("Node", node("n", ready=False))) == "NotReady"
    tainted = node("n", taints=(("google.com/tpu", "NoSchedule"), ("impending-termination", "NoExecute")))
    assert relevant("Node", ready, facts("Node", tainted)) == "taint impending-termination:NoExecute"
    assert (
        relevant("Node", ready, facts("Node", node("n", maintenance="1795000000")))
        == "maintenance at 1795000000"
    )
    assert (
        relevant("Node", None, facts("Node", node("n", maintenance="1795000000")))
        == "maintenance at 1795000000"
    )
    assert MAINTENANCE_LABEL in node("n", maintenance="1")["metadata"]["labels"]


# ---------------------------------------------------------------------------------------------
# Against the loopback API server
# ---------------------------------------------------------------------------------------------


def test_a_failed_job_a_maintenance_label_and_a_deletion_are_reported_a_ready_flip_is_not(
    api, watching, thread_errors
):
    # (How soon a round follows is tests/recovery/test_recover_events.py's: within 2 s. Here, what is told;
    # the waits are bounds for a loaded machine.)
    w = watching()
    assert eventually(lambda: watching_all(api), STARTUP)  # all four streams listed and watching
    api.put("pods", "default", watched_pod("train-v6e-0", ready=False))
    api.put("jobs", "default", job("train-v6e", generation=1, active=4, ready=3))
    assert w.quiet_for(0.5)
    api.put("jobs", "default", job("train-v6e", generation=1, conditions=FAILED, failed=1))
    assert w.next_change(10.0) == "Job default/train-v6e: Failed=True (BackoffLimitExceeded)"
    api.put("nodes", "", node("gke-node-1", maintenance="1795000000"))
    assert w.next_change(10.0) == "Node gke-node-1: maintenance at 1795000000"
    api.remove("jobsets", "default", "train-js")
    assert w.next_change(10.0) == "JobSet default/train-js: deleted"
    assert w.warnings == [] and thread_errors == []


def test_a_stream_the_server_ended_resumes_from_its_last_resource_version_without_listing(api, watching):
    w = watching(JOBS)
    assert eventually(lambda: len(api.watch_requests) == 1, STARTUP)
    listed_version = api.watch_requests[0][2]
    api.put("jobs", "default", job("train-v6e", generation=1, active=4, ready=3))
    seen = str(api.revision)
    # The server ends each watch after timeoutSeconds (1 s): the next starts where the last left.
    assert eventually(lambda: len(api.watch_requests) >= 2, 4.0)
    assert api.watch_requests[:2] == [("jobs", "default", listed_version), ("jobs", "default", seen)]
    assert w.watcher.records["Jobs in default"].lists == 1


def test_bookmarks_move_the_resume_point_and_report_nothing(api, watching):
    api.bookmark_seconds = 0.2
    w = watching(JOBS)
    assert eventually(lambda: len(api.watch_requests) == 1, STARTUP)
    listed_version = int(api.watch_requests[0][2])
    # A change the Jobs stream does not carry:
    api.put("pods", "default", watched_pod("unrelated", ours=False))
    assert eventually(lambda: len(api.watch_requests) >= 2, 4.0)
    # Resumed from the bookmark, past the Pod's change, without listing again.
    assert int(api.watch_requests[1][2]) == api.revision > listed_version
    assert w.watcher.records["Jobs in default"].lists == 1
    assert w.quiet_for(0.1)


@pytest.mark.parametrize("fault", ["gone", "http-gone"])
def test_410_gone_lists_again_and_watches_from_the_new_list(api, watching, fault, thread_errors):
    api.watch_faults = [fault]
    w = watching(JOBS)
    assert eventually(lambda: len(api.watch_requests) >= 2, STARTUP)
    record = w.watcher.records["Jobs in default"]
    assert record.lists == 2 and record.failures == 0  # one 410 relists at once, no back-off
    api.put("jobs", "default", job("train-v6e", generation=1, conditions=FAILED, failed=1))
    assert w.next_change().startswith("Job default/train-v6e: Failed=True")
    assert w.warnings == [] and thread_errors == []


def test_a_change_missed_while_the_stream_was_down_is_reported_by_the_relist(api, watching):
    api.compact()
    api.watch_faults = ["silent"]
    w = watching(JOBS)
    assert eventually(lambda: len(api.watch_requests) == 1, STARTUP)
    # Changed with no event (as if the event were lost): only a list can see it.
    api.jobs["default"][0]["status"]["conditions"] = [
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}
    ]
    assert w.next_change(QUICK.read_seconds + 2) == (
        "Job default/train-v6e: Failed=True (DeadlineExceeded) (seen on a relist)"
    )


def test_garbage_warns_once_naming_the_stream_and_lists_again(api, watching, thread_errors):
    api.watch_faults = ["garbage", "garbage", "garbage"]
    w = watching(JOBS)
    assert eventually(lambda: len(api.watch_requests) >= 4, STARTUP)  # 3 garbage, then a good one
    assert w.watcher.records["Jobs in default"].lists >= 4
    assert w.warnings == [
        "warning: watching Jobs in default: a line that is not JSON; listing again (warned once)"
    ]
    api.put("jobs", "default", job("train-v6e", generation=1, conditions=FAILED, failed=1))
    assert w.next_change().startswith("Job default/train-v6e: Failed=True")
    assert thread_errors == []


def test_a_stream_that_never_ends_and_sends_nothing_is_cut_within_its_bound(api, watching, thread_errors):
    api.watch_faults = ["silent"]
    w = watching(JOBS)
    assert eventually(lambda: len(api.watch_requests) == 1, STARTUP)
    started = time.monotonic()
    assert eventually(lambda: len(api.watch_requests) >= 2, QUICK.read_seconds + 2)
    assert time.monotonic() - started < QUICK.read_seconds + 1.5
    assert len(w.warnings) == 1 and w.warnings[0].startswith("warning: watching Jobs in default failed (")
    assert thread_errors == []


def test_stop_is_prompt_even_with_a_silent_stream_open(api):
    api.watch_faults = ["silent"]
    slow = WatchLimits(server_timeout_seconds=600)
    w = Watching(api, api.kubeconfig_path, ALL, slow)
    assert eventually(lambda: watching_all(api), STARTUP)
    asked = time.monotonic()
    assert w.watcher.stop(2.0)
    assert time.monotonic() - asked < 1.0


def test_a_cluster_without_the_jobset_crd_watches_the_rest(api, watching, thread_errors):
    api.crd_installed = False
    w = watching()
    assert eventually(lambda: w.watcher.records["JobSets in default"].absent, STARTUP)
    assert w.warnings == [
        "info: JobSets in default: the cluster serves none (404: is the CRD installed?); not watched, rounds "
        "keep listing them"
    ]
    assert eventually(lambda: watching_all(api, ("jobs", "pods", "nodes")), STARTUP)
    api.put("pods", "default", watched_pod("train-v6e-0", disruption="PreemptionByScheduler"))
    assert w.next_change() == "Pod default/train-v6e-0: DisruptionTarget (PreemptionByScheduler)"
    assert thread_errors == []


def test_a_new_node_joining_wakes_nothing(api, watching):
    w = watching()
    assert eventually(lambda: watching_all(api), STARTUP)
    api.put("nodes", "", node("gke-node-2", ready=False))
    api.put("nodes", "", node("gke-node-2"))
    api.put("nodes", "", node("other-pool-node", pool="cpu"))
    assert w.quiet_for(0.5)
