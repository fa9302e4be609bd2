"""The live-state readers against the real API server of the engine tier's control plane
(tests/support/harness/engine/control_plane.py), not the fake: ``list_live_jobs`` reads the Job
the real Job controller failed, with the failure's reason; a ServiceAccount token without the
verbs is refused by real RBAC and read as "unknown", never as "absent"; and ``ClusterWatcher``
follows the real server's watch (lists, watches from the list's resourceVersion with bookmarks)
and says when the Job fails. What a real server cannot be made to do on loopback on purpose (a
body that drips, a 500, a hang, an expired watch's 410) stays with the fake's tests
(tests/live/, tests/recovery/test_recover_events.py)."""

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
from tpu_training_components.live.kube_api import list_live_jobs
from tpu_training_components.live.kube_client import ClusterRef
from tpu_training_components.live.kube_watch import ClusterWatcher, WatchScope

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
