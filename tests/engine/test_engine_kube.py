"""The engine tier on a real Kubernetes control plane (tests/support/harness/engine/control_plane.py):
kube-apiserver v1.35.4 over etcd, and the real Job controller of kube-controller-manager. The
stack's Kubernetes objects are created in the real API server (through the `kubernetes` provider
double, which writes them as pulumi-kubernetes does: POST, GET, PUT, DELETE in the background,
awaited); a worker Pod is failed through its status subresource as a kubelet would report it, the
real Job controller marks the Job failed per its `backoffLimit` and `podFailurePolicy`, and
`tpu-training recover` reads *that* status and has the engine re-create the Job alone.

Still ours here: the provider (a double; pulumi-kubernetes is issue 49's next step), the JobSet
controller and Kueue (their status is the fake API server's in the other tests), and no kubelet or
scheduler runs (a Pod stays Pending until the test writes its status)."""

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
