"""The engine tier with the real pulumi-kubernetes provider (v4.32.0, built by .ci/kube from the
source kept in shared/engine/pulumi-kubernetes) on the real control plane: nothing between the
stack and the API server is ours. The GKE cluster the gcp double reports names the control
plane's endpoint and CA, so the stack's own kubeconfig (gke-gcloud-auth-plugin, here a script that
hands out the control plane's token) takes the provider there; the provider checks, diffs,
creates, awaits and deletes as it does against GKE."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.engine.compare import GKE_DOCUMENTED_EDITS, compare_each
from support.harness.engine.control_plane import PROVIDER, ControlPlane, conditions_of
from support.harness.engine.engine import EngineProject
from support.harness.engine.fakes import CloudTpuApi
from support.harness.engine.stacks import GKE_CONFIG, JOB
from support.harness.waiting import eventually

STACK = "provider"
JOB_TYPE = "tpu-training:gke:TpuTrainingJob$kubernetes:batch/v1:Job"
WITHIN = 120.0
"""Seconds the real controllers may take on a loaded two-core machine."""


@pytest.fixture(scope="session")
def provider(kubernetes: ControlPlane) -> Path:
    """Built by .ci/kube with the control plane (the ``kubernetes`` fixture skips, or fails in CI,
    without either)."""
    return PROVIDER


def _project(
    folder: Path, kubernetes: ControlPlane, provider: Path, programs: str, cloud: Any
) -> EngineProject:
    assert provider == PROVIDER
    return kubernetes.project_with_the_real_provider(folder, programs, cloud)


def test_the_real_provider_deploys_the_job_and_recovery_has_it_replace_the_failed_one_alone(
    programs: str, kubernetes: ControlPlane, provider: Path, tmp_path: Path
) -> None:
    namespace = "provider-recovery"
    job = dict(GKE_CONFIG["tpu-training:jobs"][0], namespace=namespace)
    with CloudTpuApi() as tpu, LoopbackGcs() as storage:
        project = _project(tmp_path, kubernetes, provider, programs, (tpu, storage))
        project.init(STACK, {**GKE_CONFIG, "tpu-training:jobs": [job]})
        project.deploy(STACK)
        deployed = kubernetes.job(namespace, JOB)
        uid = deployed["metadata"]["uid"]
        # The provider's own marks: it applied the object server-side, as its field manager.
        managers = {entry["manager"] for entry in deployed["metadata"].get("managedFields", [])}
        assert any(manager.startswith("pulumi") for manager in managers), managers
        # The real Job controller made its Pods (Pending: no scheduler, no kubelet).
        assert eventually(
            lambda: kubernetes.request("GET", f"/api/v1/namespaces/{namespace}/pods")[1].get("items"), WITHIN
        )
        # Nothing to do while it runs: no update.
        history = project.updates(STACK)
        kept = project.recover_round(STACK)
        assert kept["up"]["status"] == "not-run", kept
        assert project.updates(STACK) == history

        conditions = kubernetes.fail_pods_until_the_job_fails(namespace, JOB, WITHIN)
        # What the real controller writes, in its order: FailureTarget first, then Failed.
        assert conditions.index(("FailureTarget", "BackoffLimitExceeded")) < conditions.index(
            ("Failed", "BackoffLimitExceeded")
        ), conditions
        round_ = project.recover_round(STACK)
        (decision,) = [d for d in round_["decisions"] if d["name"] == JOB]
        assert (decision["action"], decision["cause"]) == ("replace", "failed"), decision
        recreated = kubernetes.job(namespace, JOB)
        assert recreated["metadata"]["uid"] != uid, "the provider re-created the Job"
        assert not conditions_of(recreated), "a new Job, not failed"
        assert project.updates(STACK) == history + 1
        assert project.last_update_changes(STACK) == {"replace": 1}


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
