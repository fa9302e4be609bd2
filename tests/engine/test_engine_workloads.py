"""The engine tier, for what recovery does with GKE workloads beyond a plain Job: `--apply-pending`
(one full update that takes a pending pool edit with the recovery), a multislice JobSet that
restarts its gang by itself (kept) and one whose restarts are spent (re-created), and a JobSet
queued through Kueue (kept while its Workload is admitted, queued anew when Kueue deactivated
it). The real CLI and language host run every round; the Kubernetes objects land in the API server
fake, which serves the JobSets' and Workloads' status as the JobSet controller and Kueue write it
(tests/support/fakes/fake_kube_api.py, the Workloads checked against Kueue's own CRD)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from support.fakes.fake_kube_api import workload
from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.crds import KUEUE_CRDS, schema_errors
from support.harness.engine.engine import EngineProject, endpoints
from support.harness.engine.fakes import CloudTpuApi, KubernetesApi
from support.harness.engine.providers import KUBERNETES_API_VARIABLE
from support.harness.engine.stacks import GKE_CONFIG, JOB

STACK = "workloads"
POOL = GKE_CONFIG["tpu-training:nodePools"][0]
TRAIN = GKE_CONFIG["tpu-training:jobs"][0]
JOB_URN_SUFFIX = f"{JOB}-job"
JOBSET_URN_SUFFIX = f"{JOB}-jobset"
FAILED_JOB = {
    "failed": 5,
    "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}],
}
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
    project: EngineProject, kube: KubernetesApi
) -> None:
    project.init(STACK, GKE_CONFIG)
    project.deploy(STACK)
    (deployed,) = kube.jobs["default"]
    uid = deployed["metadata"]["uid"]
    kube.put("jobs", "default", dict(deployed, status=FAILED_JOB))
    project.set_config(STACK, "tpu-training:nodePools", [dict(POOL, maxRunDuration="72h")])
    before, updates = project.resources(STACK), project.updates(STACK)

    round_ = project.recover_round(STACK, "--apply-pending")
    assert round_["targets"] == [], "--apply-pending is a full update, no --target"
    assert round_["up"]["status"] == "succeeded", round_["up"]
    (job,) = kube.jobs["default"]
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


def test_a_jobset_restarting_its_gang_is_kept_and_one_out_of_restarts_is_recreated(
    project: EngineProject, kube: KubernetesApi
) -> None:
    project.init(STACK, {**GKE_CONFIG, **MULTISLICE})
    project.deploy(STACK)
    updates = project.updates(STACK)
    # The JobSet controller restarts the whole gang after a slice's failure (its own
    # failurePolicy): restarts counted, no Failed condition, the slices coming back. Not recovery's.
    restarting = _jobset_status(
        kube,
        restarts=2,
        restartsCountTowardsMax=1,
        replicatedJobsStatus=[
            {"name": "slice", "ready": 1, "active": 2, "failed": 0, "succeeded": 0, "suspended": 0}
        ],
    )
    uid = restarting["metadata"]["uid"]
    round_ = project.recover_round(STACK)
    (decision,) = [d for d in round_["decisions"] if d["name"] == JOB]
    assert decision["action"] == "keep", decision
    assert round_["up"]["status"] == "not-run" and project.updates(STACK) == updates, round_["up"]
    assert kube.jobsets["default"][0]["metadata"]["uid"] == uid

    # Its restarts spent (maxRestarts 3): Failed, ReachedMaxRestarts. The round re-creates it.
    _jobset_status(
        kube,
        restarts=3,
        restartsCountTowardsMax=3,
        conditions=[
            {
                "type": "Failed",
                "status": "True",
                "reason": "ReachedMaxRestarts",
                "message": "jobset failed due to reaching max number of restarts",
                "lastTransitionTime": "2026-12-02T10:00:00Z",
            }
        ],
    )
    before = project.resources(STACK)
    round_ = project.recover_round(STACK)
    (decision,) = [d for d in round_["decisions"] if d["name"] == JOB]
    assert (decision["action"], decision["cause"]) == ("replace", "failed"), decision
    (jobset,) = kube.jobsets["default"]
    assert jobset["metadata"]["uid"] != uid, "the engine re-created the JobSet"
    assert not jobset.get("status"), "a new JobSet, no restarts yet"
    assert _changed(before, project.resources(STACK)) == [JOBSET_URN_SUFFIX]


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
