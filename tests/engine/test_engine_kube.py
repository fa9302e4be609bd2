"""A multislice JobSet on the real Kubernetes control plane (tests/support/harness/engine/control_plane.py):
kube-apiserver v1.35.4 over etcd and the real JobSet controller v0.12.0 with its webhooks, the
stack's objects written by the real pulumi-kubernetes provider v4.32.0. A leader Pod is failed
through its status subresource as a kubelet would report it; the real JobSet controller restarts
the gang, counted or not, until `maxRestarts`, and `tpu-training recover` reads *its* status and has
the engine re-create the spent JobSet alone. The stack installs no JobSet release
(`cluster.installJobSet: false`): the control plane runs the controller, as a cluster with JobSet
already installed does. The Job's scenario is test_engine_kube_provider.py's.

Still ours here: Kueue (its Workloads are the fake API server's in test_engine_workloads.py), and no
kubelet or scheduler runs (a Pod stays Pending until the test writes its status)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.engine.control_plane import ControlPlane, conditions_of
from support.harness.engine.fakes import CloudTpuApi
from support.harness.engine.stacks import GKE_CONFIG, JOB
from support.harness.waiting import eventually

STACK = "kube"
FAILED_WITHIN = 120.0
"""Seconds the JobSet controller may take to act on a loaded two-core machine."""


def _jobset(kubernetes: ControlPlane, namespace: str) -> dict[str, Any]:
    status, jobset = kubernetes.request(
        "GET", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{JOB}"
    )
    assert status == 200, jobset
    return jobset


def _fail_a_leader(kubernetes: ControlPlane, namespace: str, disruption: bool = False) -> None:
    """Fail the first slice's leader Pod (completion index 0) of the JobSet's current attempt: as a
    crash (its container exited 1) or as a disruption (the DisruptionTarget condition a preemption
    or a drain writes). Pods of an earlier attempt, which the controller is deleting, are left."""
    deadline = time.monotonic() + FAILED_WITHIN
    while time.monotonic() < deadline:
        attempt = _restarts(kubernetes, namespace)[0]
        selector = (
            f"jobset.sigs.k8s.io%2Fjobset-name%3D{JOB},batch.kubernetes.io%2Fjob-completion-index%3D0,"
            f"jobset.sigs.k8s.io%2Frestart-attempt%3D{attempt}"
        )
        _, pods = kubernetes.request("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")
        for pod in pods.get("items", []):
            if pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") != "Pending":
                continue
            status, answer = kubernetes.report_failed(pod, disruption)
            if status == 200:
                return
            assert status in (404, 409), answer  # gone or changed meanwhile: look again
        time.sleep(0.2)
    raise AssertionError(f"no leader Pod of the current attempt within {FAILED_WITHIN:g} s")


def _restarts(kubernetes: ControlPlane, namespace: str) -> tuple[int, int, list[tuple[str, str]]]:
    status = _jobset(kubernetes, namespace).get("status") or {}
    return (
        status.get("restarts", 0),
        status.get("restartsCountTowardsMax", 0),
        conditions_of({"status": status}),
    )


def test_the_real_jobset_controller_restarts_the_gang_until_its_budget_is_spent_then_recovery_replaces_it(
    programs: str, kubernetes: ControlPlane, tmp_path: Path
) -> None:
    namespace = "kube-engine-gang"
    pool = dict(GKE_CONFIG["tpu-training:nodePools"][0], slices=2)
    job = dict(GKE_CONFIG["tpu-training:jobs"][0], namespace=namespace, slices=2, maxRestarts=2)
    with CloudTpuApi() as tpu, LoopbackGcs() as storage:
        project = kubernetes.project_with_the_real_provider(tmp_path, programs, (tpu, storage))
        project.init(
            STACK,
            {
                **GKE_CONFIG,
                # The control plane runs the JobSet controller itself: no Helm release of it (whose
                # chart is fetched from registry.k8s.io, unreachable here).
                "tpu-training:cluster": {**GKE_CONFIG["tpu-training:cluster"], "installJobSet": False},
                "tpu-training:nodePools": [pool],
                "tpu-training:jobs": [job],
            },
        )
        project.deploy(STACK)
        uid = _jobset(kubernetes, namespace)["metadata"]["uid"]

        # A disruption (a preempted host): the JobSet controller restarts the gang, not counted.
        _fail_a_leader(kubernetes, namespace, disruption=True)
        assert eventually(lambda: _restarts(kubernetes, namespace)[0] == 1, FAILED_WITHIN), _restarts(
            kubernetes, namespace
        )
        assert _restarts(kubernetes, namespace)[1] == 0, "a disruption is not counted"
        # Real failures: counted, restarted while maxRestarts (2) lasts; recovery keeps it meanwhile.
        for counted in (1, 2):
            _fail_a_leader(kubernetes, namespace)
            assert eventually(
                lambda counted=counted: _restarts(kubernetes, namespace)[1] == counted, FAILED_WITHIN
            ), _restarts(kubernetes, namespace)
        updates = project.updates(STACK)
        round_ = project.recover_round(STACK)
        assert [(d["name"], d["action"]) for d in round_["decisions"]] == [(JOB, "keep")], round_["decisions"]
        assert round_["up"]["status"] == "not-run" and project.updates(STACK) == updates, round_["up"]
        # The budget spent: the next failure fails the JobSet, and the round has it re-created.
        _fail_a_leader(kubernetes, namespace)
        assert eventually(
            lambda: ("Failed", "ReachedMaxRestarts") in _restarts(kubernetes, namespace)[2], FAILED_WITHIN
        ), _restarts(kubernetes, namespace)
        history = project.updates(STACK)
        (decision,) = project.recover_round(STACK)["decisions"]
        assert (decision["action"], decision["cause"]) == ("replace", "failed"), decision
        recreated = _jobset(kubernetes, namespace)
        assert recreated["metadata"]["uid"] != uid
        assert not (recreated.get("status") or {}).get("restarts"), "a new JobSet, its budget whole"
        assert project.updates(STACK) == history + 1
        assert project.last_update_changes(STACK) == {"replace": 1}
