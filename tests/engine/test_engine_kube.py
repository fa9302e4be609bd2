"""The engine tier on a real Kubernetes control plane (tests/support/harness/engine/control_plane.py):
kube-apiserver v1.35.4 over etcd, the real Job controller of kube-controller-manager and the real
JobSet controller v0.12.0 with its webhooks. The stack's Kubernetes objects are created in the
real API server (through the `kubernetes` provider double, which writes them as pulumi-kubernetes
does: POST, GET, PUT, DELETE in the background, awaited); a worker Pod is failed through its
status subresource as a kubelet would report it, the real controllers do what they do with it
(a Job failed per its `backoffLimit` and `podFailurePolicy`; a JobSet's gang restarted, counted or
not, until `maxRestarts`), and `tpu-training recover` reads *their* status and has the engine
re-create the spent workload alone.

Still ours here: the `kubernetes` provider (a double; the real pulumi-kubernetes is the next
step), Kueue (its Workloads are the fake API server's in test_engine_workloads.py), and no kubelet
or scheduler runs (a Pod stays Pending until the test writes its status)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.engine.control_plane import TOKEN, ControlPlane
from support.harness.engine.engine import EngineProject, endpoints
from support.harness.engine.fakes import CloudTpuApi
from support.harness.engine.providers import KUBERNETES_API_VARIABLE, KUBERNETES_TOKEN_VARIABLE
from support.harness.engine.stacks import GKE_CONFIG, JOB
from support.harness.waiting import eventually

from tpu_training import exit_codes

STACK = "kube"
FAILED_WITHIN = 120.0
"""Seconds the Job controller may take to mark the Job failed on a loaded two-core machine."""


def _job(kubernetes: ControlPlane, namespace: str) -> dict[str, Any]:
    status, job = kubernetes.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{JOB}")
    assert status == 200, job
    return job


def _conditions(job: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["type"], c.get("reason", "")) for c in (job.get("status") or {}).get("conditions", [])]


def _fail_pods_until_the_job_fails(kubernetes: ControlPlane, namespace: str) -> list[tuple[str, str]]:
    """Report each Pending Pod of the Job failed (its container exited 1), as a kubelet would, until
    the Job controller marks the Job failed; returns the Job's conditions then."""
    deadline = time.monotonic() + FAILED_WITHIN
    failed: set[str] = set()
    while time.monotonic() < deadline:
        conditions = _conditions(_job(kubernetes, namespace))
        if ("Failed", "BackoffLimitExceeded") in conditions:
            return conditions
        _, pods = kubernetes.request(
            "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3D{JOB}"
        )
        for pod in pods.get("items", []):
            name = pod["metadata"]["name"]
            if name in failed or pod["status"].get("phase") != "Pending":
                continue
            pod["status"] = {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": container["name"],
                        "image": container["image"],
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"terminated": {"exitCode": 1, "reason": "Error"}},
                    }
                    for container in pod["spec"]["containers"]
                ],
            }
            status, answer = kubernetes.request(
                "PUT", f"/api/v1/namespaces/{namespace}/pods/{name}/status", pod
            )
            assert status == 200, answer
            failed.add(name)
        time.sleep(0.2)
    raise AssertionError(
        f"the Job did not fail within {FAILED_WITHIN:g} s: {_conditions(_job(kubernetes, namespace))}"
    )


def test_a_worker_failed_on_a_real_api_server_is_recovered_by_the_real_job_controller_and_the_engine(
    programs: str, kubernetes: ControlPlane, tmp_path: Path
) -> None:
    namespace = "kube-engine-recovery"  # the stack declares it
    job = dict(GKE_CONFIG["tpu-training:jobs"][0], namespace=namespace)
    with CloudTpuApi() as tpu, LoopbackGcs() as storage:
        project = EngineProject(
            tmp_path,
            {
                **endpoints(tpu, storage),
                KUBERNETES_API_VARIABLE: kubernetes.endpoint,
                KUBERNETES_TOKEN_VARIABLE: TOKEN,
                "KUBECONFIG": str(kubernetes.kubeconfig),
            },
            programs,
        )
        project.init(STACK, {**GKE_CONFIG, "tpu-training:jobs": [job]})
        project.deploy(STACK)
        deployed = _job(kubernetes, namespace)
        uid = deployed["metadata"]["uid"]
        # The real Job controller made its Pods (Pending: no scheduler, no kubelet).
        assert eventually(
            lambda: kubernetes.request("GET", f"/api/v1/namespaces/{namespace}/pods")[1].get("items"), 60
        )
        healthy = project.recover(STACK, "--once")
        assert healthy.returncode == exit_codes.EXIT_OK, healthy.stdout[-3000:] + healthy.stderr[-3000:]
        (round_,) = [json.loads(line) for line in healthy.stdout.splitlines()]
        assert round_["up"]["status"] == "not-run", round_
        history = len(project.json("stack", "history", "--stack", STACK))

        conditions = _fail_pods_until_the_job_fails(kubernetes, namespace)
        # What the real controller writes, in its order: FailureTarget first, then Failed.
        assert conditions.index(("FailureTarget", "BackoffLimitExceeded")) < conditions.index(
            ("Failed", "BackoffLimitExceeded")
        ), conditions

        done = project.recover(STACK, "--once")
        assert done.returncode == exit_codes.EXIT_OK, done.stdout[-3000:] + done.stderr[-3000:]
        (round_,) = [json.loads(line) for line in done.stdout.splitlines()]
        (decision,) = [d for d in round_["decisions"] if d["name"] == JOB]
        assert (decision["action"], decision["cause"]) == ("replace", "failed"), decision
        recreated = _job(kubernetes, namespace)
        assert recreated["metadata"]["uid"] != uid, "the engine re-created the Job"
        assert not _conditions(recreated), "a new Job, not failed"
        assert len(project.json("stack", "history", "--stack", STACK)) == history + 1
        (last,) = project.json("stack", "history", "--stack", STACK, "--page-size", "1")
        assert {k: v for k, v in last["resourceChanges"].items() if k != "same"} == {"replace": 1}


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
            pod["status"] = _failed_status(pod, disruption)
            name = pod["metadata"]["name"]
            status, answer = kubernetes.request(
                "PUT", f"/api/v1/namespaces/{namespace}/pods/{name}/status", pod
            )
            if status == 200:
                return
            assert status in (404, 409), answer  # gone or changed meanwhile: look again
        time.sleep(0.2)
    raise AssertionError(f"no leader Pod of the current attempt within {FAILED_WITHIN:g} s")


def _failed_status(pod: dict[str, Any], disruption: bool) -> dict[str, Any]:
    conditions = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    return {
        "phase": "Failed",
        "conditions": conditions if disruption else [],
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 137 if disruption else 1, "reason": "Error"}},
            }
            for container in pod["spec"]["containers"]
        ],
    }


def _restarts(kubernetes: ControlPlane, namespace: str) -> tuple[int, int, list[tuple[str, str]]]:
    status = _jobset(kubernetes, namespace).get("status") or {}
    return (
        status.get("restarts", 0),
        status.get("restartsCountTowardsMax", 0),
        _conditions({"status": status}),
    )


def test_the_real_jobset_controller_restarts_the_gang_until_its_budget_is_spent_then_recovery_replaces_it(
    programs: str, kubernetes: ControlPlane, tmp_path: Path
) -> None:
    namespace = "kube-engine-gang"
    pool = dict(GKE_CONFIG["tpu-training:nodePools"][0], slices=2)
    job = dict(GKE_CONFIG["tpu-training:jobs"][0], namespace=namespace, slices=2, maxRestarts=2)
    with CloudTpuApi() as tpu, LoopbackGcs() as storage:
        project = EngineProject(
            tmp_path,
            {
                **endpoints(tpu, storage),
                KUBERNETES_API_VARIABLE: kubernetes.endpoint,
                KUBERNETES_TOKEN_VARIABLE: TOKEN,
                "KUBECONFIG": str(kubernetes.kubeconfig),
            },
            programs,
        )
        project.init(STACK, {**GKE_CONFIG, "tpu-training:nodePools": [pool], "tpu-training:jobs": [job]})
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
        kept = project.recover(STACK, "--once")
        assert kept.returncode == exit_codes.EXIT_OK, kept.stdout[-3000:] + kept.stderr[-3000:]
        (round_,) = [json.loads(line) for line in kept.stdout.splitlines()]
        assert [(d["name"], d["action"]) for d in round_["decisions"]] == [(JOB, "keep")], round_["decisions"]
        # The budget spent: the next failure fails the JobSet, and the round has it re-created.
        _fail_a_leader(kubernetes, namespace)
        assert eventually(
            lambda: ("Failed", "ReachedMaxRestarts") in _restarts(kubernetes, namespace)[2], FAILED_WITHIN
        ), _restarts(kubernetes, namespace)
        history = len(project.json("stack", "history", "--stack", STACK))
        done = project.recover(STACK, "--once")
        assert done.returncode == exit_codes.EXIT_OK, done.stdout[-3000:] + done.stderr[-3000:]
        (round_,) = [json.loads(line) for line in done.stdout.splitlines()]
        (decision,) = round_["decisions"]
        assert (decision["action"], decision["cause"]) == ("replace", "failed"), decision
        recreated = _jobset(kubernetes, namespace)
        assert recreated["metadata"]["uid"] != uid
        assert not (recreated.get("status") or {}).get("restarts"), "a new JobSet, its budget whole"
        assert len(project.json("stack", "history", "--stack", STACK)) == history + 1
        (last,) = project.json("stack", "history", "--stack", STACK, "--page-size", "1")
        assert {k: v for k, v in last["resourceChanges"].items() if k != "same"} == {"replace": 1}
