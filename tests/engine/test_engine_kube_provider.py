"""The engine tier with the real pulumi-kubernetes provider (v4.32.0, built by .ci/kube from the
source kept in shared/engine/pulumi-kubernetes) on the real control plane: nothing between the
stack and the API server is ours. The GKE cluster the gcp double reports names the control
plane's endpoint and CA, so the stack's own kubeconfig (gke-gcloud-auth-plugin, here a script that
hands out the control plane's token) takes the provider there; the provider checks, diffs,
creates, awaits and deletes as it does against GKE."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.engine.compare import GKE_DOCUMENTED_EDITS, compare_each
from support.harness.engine.control_plane import KUBE_BIN, TOKEN, ControlPlane
from support.harness.engine.engine import EngineProject, endpoints
from support.harness.engine.fakes import CloudTpuApi
from support.harness.engine.providers import CLUSTER_CA_VARIABLE, CLUSTER_ENDPOINT_VARIABLE
from support.harness.engine.stacks import GKE_CONFIG, JOB

from tpu_training import exit_codes

STACK = "provider"
JOB_TYPE = "tpu-training:gke:TpuTrainingJob$kubernetes:batch/v1:Job"
PROVIDER = KUBE_BIN / "pulumi-resource-kubernetes"
WITHIN = 120.0
"""Seconds the real controllers may take on a loaded two-core machine."""
EXEC_CREDENTIAL = {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential"}


def _auth_plugin(token: str) -> str:
    """gke-gcloud-auth-plugin, for the engine tier: the control plane's token as an ExecCredential."""
    credential = json.dumps({**EXEC_CREDENTIAL, "status": {"token": token}})
    return f"#!/bin/sh\necho '{credential}'\n"


@pytest.fixture(scope="session")
def provider(kubernetes: ControlPlane) -> Path:
    """Built by .ci/kube with the control plane (the ``kubernetes`` fixture skips, or fails in CI,
    without either)."""
    return PROVIDER


def _project(
    folder: Path, kubernetes: ControlPlane, provider: Path, programs: str, cloud: Any
) -> EngineProject:
    ca = (kubernetes.folder / "certificates" / "apiserver.crt").read_bytes()
    project = EngineProject(
        folder,
        {
            **endpoints(*cloud),
            CLUSTER_ENDPOINT_VARIABLE: kubernetes.endpoint.removeprefix("https://"),
            CLUSTER_CA_VARIABLE: base64.b64encode(ca).decode(),
            # The program's own reads (recovery's live state) go there too.
            "KUBECONFIG": str(kubernetes.kubeconfig),
        },
        programs,
        kubernetes_provider=provider,
    )
    plugin = project.plugins / "gke-gcloud-auth-plugin"
    plugin.write_text(_auth_plugin(TOKEN))
    plugin.chmod(0o755)
    return project


def _job(kubernetes: ControlPlane, namespace: str) -> dict[str, Any]:
    status, job = kubernetes.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{JOB}")
    assert status == 200, job
    return job


def _fail_pods_until_the_job_fails(kubernetes: ControlPlane, namespace: str) -> None:
    deadline = time.monotonic() + WITHIN
    while time.monotonic() < deadline:
        conditions = [
            c["type"] for c in (_job(kubernetes, namespace).get("status") or {}).get("conditions", [])
        ]
        if "Failed" in conditions:
            return
        _, pods = kubernetes.request(
            "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3D{JOB}"
        )
        for pod in pods.get("items", []):
            if pod["status"].get("phase") != "Pending" or pod["metadata"].get("deletionTimestamp"):
                continue
            pod["status"] = {
                "phase": "Failed",
                "containerStatuses": [_exited(c) for c in pod["spec"]["containers"]],
            }
            name = pod["metadata"]["name"]
            kubernetes.request("PUT", f"/api/v1/namespaces/{namespace}/pods/{name}/status", pod)
        time.sleep(0.2)
    raise AssertionError(f"the Job did not fail within {WITHIN:g} s")


def _exited(container: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": container["name"],
        "image": container["image"],
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 1, "reason": "Error"}},
    }


def test_the_real_provider_deploys_the_job_and_recovery_has_it_replace_the_failed_one_alone(
    programs: str, kubernetes: ControlPlane, provider: Path, tmp_path: Path
) -> None:
    namespace = "provider-recovery"
    job = dict(GKE_CONFIG["tpu-training:jobs"][0], namespace=namespace)
    with CloudTpuApi() as tpu, LoopbackGcs() as storage:
        project = _project(tmp_path, kubernetes, provider, programs, (tpu, storage))
        project.init(STACK, {**GKE_CONFIG, "tpu-training:jobs": [job]})
        project.deploy(STACK)
        deployed = _job(kubernetes, namespace)
        uid = deployed["metadata"]["uid"]
        # The provider's own marks: it applied the object server-side, as its field manager.
        managers = {entry["manager"] for entry in deployed["metadata"].get("managedFields", [])}
        assert any(manager.startswith("pulumi") for manager in managers), managers
        # Nothing to do while it runs: no update.
        history = len(project.json("stack", "history", "--stack", STACK))
        (kept,) = [json.loads(line) for line in project.recover(STACK, "--once").stdout.splitlines()]
        assert kept["up"]["status"] == "not-run", kept
        assert len(project.json("stack", "history", "--stack", STACK)) == history

        _fail_pods_until_the_job_fails(kubernetes, namespace)
        done = project.recover(STACK, "--once")
        assert done.returncode == exit_codes.EXIT_OK, done.stdout[-3000:] + done.stderr[-3000:]
        (round_,) = [json.loads(line) for line in done.stdout.splitlines()]
        (decision,) = [d for d in round_["decisions"] if d["name"] == JOB]
        assert (decision["action"], decision["cause"]) == ("replace", "failed"), decision
        recreated = _job(kubernetes, namespace)
        assert recreated["metadata"]["uid"] != uid, "the provider re-created the Job"
        (last,) = project.json("stack", "history", "--stack", STACK, "--page-size", "1")
        assert {k: v for k, v in last["resourceChanges"].items() if k != "same"} == {"replace": 1}


def test_compare_to_predicts_what_the_real_provider_previews_for_each_documented_gke_edit(
    programs: str, kubernetes: ControlPlane, provider: Path, tmp_path: Path
) -> None:
    """docs/offline-plan.md's GKE edits, each previewed by the real pulumi-kubernetes against the
    deployed stack on the real API server: `--compare-to` (domain/provider_rules.py) must say
    what the real provider decides, replace or update, for every Kubernetes object."""
    namespace = "provider-compare"
    edits = {
        edit: (
            key,
            [dict(entry, namespace=namespace) for entry in value] if key == "tpu-training:jobs" else value,
        )
        for edit, (key, value) in GKE_DOCUMENTED_EDITS.items()
    }
    job = dict(GKE_CONFIG["tpu-training:jobs"][0], namespace=namespace)
    with CloudTpuApi() as tpu, LoopbackGcs() as storage:
        project = _project(tmp_path, kubernetes, provider, programs, (tpu, storage))
        project.init(
            STACK,
            {**GKE_CONFIG, "tpu-training:jobs": [job], "tpu-training:checkpointing": {"costSeconds": 60}},
        )
        project.deploy(STACK)
        disagreements, previews = compare_each(project, STACK, edits, tmp_path / "base.json")
        assert not disagreements, json.dumps(disagreements, indent=1)
        job_urn = f"urn:pulumi:{STACK}::tpu-training::{JOB_TYPE}::train-v6e-job"
        assert previews["image"].get(job_urn) == "replace", previews["image"]
        assert job_urn not in previews["costSeconds (tuning)"], "a tuning edit restarts nothing"
