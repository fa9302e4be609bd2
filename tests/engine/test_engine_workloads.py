"""The engine tier, for what recovery does with GKE workloads beyond a plain Job: `--apply-pending`
(one full update that takes a pending pool edit with the recovery), on the real control plane with
the real pulumi-kubernetes provider and Job controller; and a JobSet queued through Kueue (kept
while its Workload is admitted, queued anew when Kueue deactivated it), whose Workloads the API
server fake serves as Kueue writes them (tests/support/fakes/fake_kube_api.py, checked against
Kueue's own CRD): Kueue stays a double (docs/engine-tests.md). A multislice JobSet restarting its
gang, and one out of restarts, is test_engine_kube.py's, with the real JobSet controller."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from support.fakes.fake_kube_api import workload
from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.crds import KUEUE_CRDS, schema_errors
from support.harness.engine.control_plane import ControlPlane
from support.harness.engine.engine import EngineProject, endpoints
from support.harness.engine.fakes import CloudTpuApi, KubernetesApi
from support.harness.engine.providers import KUBERNETES_API_VARIABLE
from support.harness.engine.stacks import GKE_CONFIG, JOB, gke_stack

STACK = "workloads"
POOL = GKE_CONFIG["tpu-training:nodePools"][0]
TRAIN = GKE_CONFIG["tpu-training:jobs"][0]
JOB_URN_SUFFIX = f"{JOB}-job"
JOBSET_URN_SUFFIX = f"{JOB}-jobset"
WITHIN = 120.0
"""Seconds the real Job controller may take to act on a loaded two-core machine."""
WORKLOAD_CRD = KUEUE_CRDS / "kueue.x-k8s.io_workloads.yaml"
MULTISLICE = {
    "tpu-training:nodePools": [dict(POOL, slices=2)],
    "tpu-training:jobs": [dict(TRAIN, slices=2)],
}


@pytest.fixture
def kube() -> Iterator[KubernetesApi]:
    with KubernetesApi() as api:
        yield api


@pytest.fixture
def project(programs: str, kube: KubernetesApi, tmp_path: Path) -> Iterator[EngineProject]:
    with CloudTpuApi() as tpu, LoopbackGcs() as storage:
        yield EngineProject(
            tmp_path,
            {
                **endpoints(tpu, storage),
                KUBERNETES_API_VARIABLE: kube.endpoint,
                "KUBECONFIG": str(kube.kubeconfig(tmp_path)),
            },
            programs,
        )


def _changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The last part of the URN of each cloud or cluster resource whose id or inputs changed."""
    return sorted(
        urn.rsplit("::", 1)[-1]
        for urn, resource in after.items()
        if resource.get("custom")
        and not resource["type"].startswith("pulumi:providers:")
        and {k: resource.get(k) for k in ("id", "inputs")}
        != {k: (before.get(urn) or {}).get(k) for k in ("id", "inputs")}
    )


def test_apply_pending_recovers_a_failed_job_and_its_pools_edit_in_one_full_update(
    programs: str, kubernetes: ControlPlane, tmp_path: Path
) -> None:
    namespace = "workloads-apply-pending"
    with CloudTpuApi() as tpu, LoopbackGcs() as storage:
        project = kubernetes.project_with_the_real_provider(tmp_path, programs, (tpu, storage))
        project.init(STACK, gke_stack(namespace))
        project.deploy(STACK)
        (deployed,) = kubernetes.workloads(namespace)
        uid = deployed["metadata"]["uid"]
        kubernetes.fail_pods_until_the_job_fails(namespace, JOB, WITHIN)
        project.set_config(STACK, "tpu-training:nodePools", [dict(POOL, maxRunDuration="72h")])
        before, updates = project.resources(STACK), project.updates(STACK)

        round_ = project.recover_round(STACK, "--apply-pending")
        assert round_["targets"] == [], "--apply-pending is a full update, no --target"
        assert round_["up"]["status"] == "succeeded", round_["up"]
        (job,) = kubernetes.workloads(namespace)
        assert job["metadata"]["uid"] != uid, "the engine re-created the Job"
        assert project.updates(STACK) == updates + 1, "one update took both"
        changed = _changed(before, project.resources(STACK))
        assert JOB_URN_SUFFIX in changed and "v6e-4x4-pool" in changed, changed
        assert project.last_update_changes(STACK).get("replace", 0) >= 2, project.last_update_changes(STACK)
        outputs = project.json("stack", "output", "lastRecoveries", "--stack", STACK)
        assert outputs["jobs"][JOB]["cause"] == "failed", outputs


def _jobset_status(api: KubernetesApi, **status: Any) -> dict[str, Any]:
    """The deployed JobSet with ``status`` as the JobSet controller writes it."""
    (deployed,) = api.jobsets["default"]
    api.put("jobsets", "default", dict(deployed, status=status))
    return deployed


def _served_workload(api: KubernetesApi, state: str) -> None:
    """The Workload Kueue keeps for the deployed JobSet, in ``state`` (valid for Kueue's CRD)."""
    (owner,) = api.jobsets["default"]
    item = workload(dict(owner, metadata=dict(owner["metadata"], namespace="default")), state)
    assert schema_errors(item, WORKLOAD_CRD) == [], state
    api.workloads = {}
    api.add_workload(item)


def test_a_kueue_admitted_jobset_is_kept_and_one_kueue_deactivated_is_queued_anew(
    project: EngineProject, kube: KubernetesApi
) -> None:
    queued = {
        **MULTISLICE,
        "tpu-training:nodePools": [dict(POOL, slices=2, kueueQueue=True)],
    }
    project.init(STACK, {**GKE_CONFIG, **queued})
    project.deploy(STACK)
    (deployed,) = kube.jobsets["default"]
    uid = deployed["metadata"]["uid"]
    queue_name = deployed["metadata"]["labels"].get("kueue.x-k8s.io/queue-name")
    assert queue_name, deployed["metadata"]
    updates = project.updates(STACK)

    # Admitted: Kueue resumed it, and it runs. Nothing to do.
    _served_workload(kube, "admitted")
    round_ = project.recover_round(STACK)
    (decision,) = [d for d in round_["decisions"] if d["name"] == JOB]
    assert decision["action"] == "keep", decision
    assert project.updates(STACK) == updates and kube.jobsets["default"][0]["metadata"]["uid"] == uid

    # Kueue deactivated it (the capacity was revoked): suspended for good. The round queues a new one.
    _jobset_status(
        kube,
        conditions=[
            {
                "type": "Suspended",
                "status": "True",
                "reason": "SuspendedJobs",
                "message": "jobset is suspended",
                "lastTransitionTime": "2026-12-02T10:00:00Z",
            }
        ],
    )
    _served_workload(kube, "capacity-revoked")
    before = project.resources(STACK)
    round_ = project.recover_round(STACK)
    (decision,) = [d for d in round_["decisions"] if d["name"] == JOB]
    assert decision["action"] == "replace", decision
    (jobset,) = kube.jobsets["default"]
    assert jobset["metadata"]["uid"] != uid
    # On Kueue's queue, as the first: Kueue's webhook suspends it until admitted (the stack declares
    # no suspend, so an admission is no change to the next `up`).
    assert jobset["metadata"]["labels"].get("kueue.x-k8s.io/queue-name") == queue_name
    assert _changed(before, project.resources(STACK)) == [JOBSET_URN_SUFFIX]
