"""The live-state readers against the real API server of the engine tier's control plane
(tests/support/harness/engine/control_plane.py), not the fake: ``list_live_jobs`` reads the Job
the real Job controller failed, with the failure's reason, and follows the server's pages
(``limit``, ``continue``), also across an etcd compaction; a ServiceAccount token without the
verbs is refused by real RBAC and read as "unknown", never as "absent"; and ``ClusterWatcher``
follows the real server's watch (lists, watches from the list's resourceVersion), resumes from
the real server's bookmarks without listing, and says when the Job fails.

What a real server cannot be made to do on loopback on purpose stays with the fake's tests
(tests/live/, tests/recovery/test_recover_events.py): a body that drips, a 500, a hang, garbage on
a watch, and 410 Gone. kube-apiserver v1.35 serves watches and continued lists from its watch
cache, which keeps at least 75 s of changes (k8s.io/apiserver v0.35.4, pkg/storage/cacher/
cacher.go: ``DefaultEventFreshDuration = defaultBookmarkFrequency + 15*time.Second``) and, on a
fresh server, every change since it started: measured here, a watch from resourceVersion 1
streams the namespace's objects rather than answering 410, and a continue token is still
honoured after etcd was compacted past it. Only a cache that has dropped the version (minutes of
changes on a busy cluster) answers 410."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from support.harness.engine.control_plane import ControlPlane
from support.harness.waiting import eventually
from tpu_training_components.domain.job_manifests import PART_OF, PART_OF_LABEL
from tpu_training_components.domain.recovery import GENERATION_LABEL
from tpu_training_components.live.deadline import Deadline
from tpu_training_components.live.kube_api import list_live_jobs
from tpu_training_components.live.kube_client import ClusterRef
from tpu_training_components.live.kube_pages import read_list
from tpu_training_components.live.kube_watch import ClusterWatcher, WatchLimits, WatchScope

CLUSTER = ClusterRef("engine-project", "us-east5", "engine")
WITHIN = 120.0
"""Seconds the real controllers and the watch may take on a loaded two-core machine."""


def _namespace(kubernetes: ControlPlane, name: str) -> str:
    status, answer = kubernetes.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert status == 201, answer
    return name


def _job(kubernetes: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {PART_OF_LABEL: PART_OF, GENERATION_LABEL: "7"}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {PART_OF_LABEL: PART_OF}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "train", "image": "trainer"}]},
            },
        },
    }
    status, answer = kubernetes.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body)
    assert status == 201, answer
    return answer


def _fail_its_pod(kubernetes: ControlPlane, namespace: str, job: str) -> None:
    """Its Pod's container exited 1, as a kubelet reports it."""

    def pods() -> list[dict[str, Any]]:
        return kubernetes.request(
            "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3D{job}"
        )[1].get("items", [])

    assert eventually(pods, WITHIN), "the Job controller made no Pod"
    (pod,) = pods()
    status, answer = kubernetes.report_failed(pod)
    assert status == 200, answer


def test_the_job_reader_reads_the_failure_the_real_job_controller_wrote(kubernetes: ControlPlane) -> None:
    namespace = _namespace(kubernetes, "readers-list")
    _job(kubernetes, namespace, "train")
    _fail_its_pod(kubernetes, namespace, "train")

    def failed() -> Any:
        result = list_live_jobs(CLUSTER, [namespace], kubeconfig=str(kubernetes.kubeconfig))
        live = result.jobs.get((namespace, "train"))
        return live if live is not None and live.condition("Failed") is not None else None

    assert eventually(failed, WITHIN), "the reader never saw the Job failed"
    live = failed()
    assert live.condition("Failed").reason == "BackoffLimitExceeded"
    assert live.generation == 7


def test_a_token_without_the_verbs_is_refused_by_rbac_and_read_as_unknown(
    kubernetes: ControlPlane, tmp_path: Path
) -> None:
    namespace = _namespace(kubernetes, "readers-rbac")
    _job(kubernetes, namespace, "train")
    status, account = kubernetes.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "no-verbs"}}
    )
    assert status == 201, account
    status, token = kubernetes.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/no-verbs/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )
    assert status == 201, token
    admin = json.loads(kubernetes.kubeconfig.read_text())
    admin["users"] = [{"name": "admin", "user": {"token": token["status"]["token"]}}]
    kubeconfig = tmp_path / "no-verbs.kubeconfig"
    kubeconfig.write_text(json.dumps(admin))

    result = list_live_jobs(CLUSTER, [namespace], jobset_namespaces=[namespace], kubeconfig=str(kubeconfig))
    assert not result.jobs and not result.jobsets, "nothing read is nothing absent"
    assert "HTTP 403" in result.failures[namespace], result.failures
    assert "HTTP 403" in result.jobset_failures[namespace], result.jobset_failures


def test_the_watcher_follows_the_real_watch_and_says_when_the_job_fails(kubernetes: ControlPlane) -> None:
    namespace = _namespace(kubernetes, "readers-watch")
    _job(kubernetes, namespace, "train")
    changes: list[str] = []
    warnings: list[str] = []
    said = threading.Event()

    def on_change(reason: str) -> None:
        changes.append(reason)
        said.set()

    watcher = ClusterWatcher(
        CLUSTER,
        WatchScope(job_namespaces=(namespace,), pod_namespaces=(namespace,)),
        on_change,
        warn=warnings.append,
        kubeconfig=str(kubernetes.kubeconfig),
    )
    watcher.start()
    try:
        # Started: each stream listed once and watches from that list's resourceVersion.
        assert eventually(lambda: all(r.watches for r in watcher.records.values()), WITHIN), watcher.records
        changes.clear()
        said.clear()
        started = time.monotonic()
        _fail_its_pod(kubernetes, namespace, "train")
        assert eventually(lambda: any("train" in reason for reason in changes), WITHIN), changes
        assert time.monotonic() - started < WITHIN
    finally:
        assert watcher.stop(timeout=10), "every stream ends when stopped"
    assert not warnings, warnings
    assert all(r.failures == 0 for r in watcher.records.values()), watcher.records


def _names(items: list[Any]) -> list[str]:
    return sorted(item["metadata"]["name"] for item in items)


def test_the_job_reader_follows_the_real_servers_pages(kubernetes: ControlPlane) -> None:
    namespace = _namespace(kubernetes, "readers-pages")
    for number in range(5):
        _job(kubernetes, namespace, f"train-{number}")
    status, first = kubernetes.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs?limit=2")
    assert status == 200 and len(first["items"]) == 2 and first["metadata"]["continue"], (
        "the real server answers a limit with a page and a continue token"
    )

    result = list_live_jobs(CLUSTER, [namespace], kubeconfig=str(kubernetes.kubeconfig), page_size=2)
    assert not result.failures, result.failures
    assert sorted(name for _, name in result.jobs) == [f"train-{n}" for n in range(5)]
    assert result.calls == 1, "one list call, of three pages"


def test_a_list_paged_across_an_etcd_compaction_reads_every_job_once(kubernetes: ControlPlane) -> None:
    """kube-apiserver v1.35 answers a continue token from its watch cache's snapshot even after
    etcd compacted past it (measured here: 200, the rest of the list, not 410), and the pager
    starts again if it ever answers 410: either way, every Job is read, once."""
    from kubernetes import client, config

    namespace = _namespace(kubernetes, "readers-compacted")
    for number in range(3):
        _job(kubernetes, namespace, f"train-{number}")
    batch = client.BatchV1Api(config.new_client_from_config(str(kubernetes.kubeconfig)))
    asked: list[Any] = []

    def request(**page: Any) -> Any:
        asked.append(page.get("_continue"))
        if len(asked) == 2:
            # After the first page: a write, then etcd compacted past the page's snapshot.
            status, answer = kubernetes.request(
                "POST", f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": "a-write"}}
            )
            assert status == 201, answer
            kubernetes.compact_etcd()
        return batch.list_namespaced_job(namespace, _preload_content=False, **page)

    items, version = read_list(request, "JobList", 1 << 20, Deadline(WITHIN, "listing Jobs"), page_size=2)
    assert _names(items) == ["train-0", "train-1", "train-2"], "each Job once"
    assert version
    assert asked[0] is None and asked[1], asked
    assert len(asked) in (2, 4), f"the rest of the list, or the list again after a 410: {asked}"


def test_the_watcher_resumes_from_the_real_servers_bookmarks_without_listing(
    kubernetes: ControlPlane,
) -> None:
    quiet = _namespace(kubernetes, "readers-bookmarks")
    elsewhere = _namespace(kubernetes, "readers-bookmarks-elsewhere")
    warnings: list[str] = []
    # The server ends each stream after 6 s, sending a bookmark shortly before: "right before the
    # watcher timeout - for now we simply set it 2s before the deadline" (k8s.io/apiserver v0.35.4,
    # pkg/storage/cacher/cache_watcher.go, nextBookmarkTime).
    watcher = ClusterWatcher(
        CLUSTER,
        WatchScope(job_namespaces=(quiet,)),
        lambda reason: None,
        warn=warnings.append,
        kubeconfig=str(kubernetes.kubeconfig),
        limits=WatchLimits(server_timeout_seconds=6),
    )
    watcher.start()
    try:
        (record,) = watcher.records.values()
        assert eventually(lambda: record.watches, WITHIN), "the stream never watched"
        listed = int(record.watches[0])
        # A Job elsewhere moves the Jobs' resourceVersion on; nothing in the watched namespace
        # changes, so only a bookmark can carry the stream past it.
        later = int(_job(kubernetes, elsewhere, "train")["metadata"]["resourceVersion"])
        assert later > listed

        def resumed_past_it() -> bool:
            return any(int(version) >= later for version in record.watches[1:])

        assert eventually(resumed_past_it, WITHIN), record.watches
        assert record.lists == 1, f"resumed from bookmarks, never listed again: {record}"
    finally:
        assert watcher.stop(timeout=10)
    assert not warnings, warnings
    assert record.failures == 0, record
