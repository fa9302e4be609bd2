"""Recovery is a reconcile, for Jobs and JobSets queued through Kueue: a suspended one is decided by
its Kueue Workload, read through the real `kubernetes` client from a loopback API that serves
Workloads in the shape Kueue v0.19.2 writes them (tests/support/fakes/fake_kube_api.py, each checked
against Kueue's own Workload CRD), by the reconcile, the stack program, `tpu-training recover`
and `tpu-training plan --live`."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from support.fakes.fake_kube_api import (
    WORKLOAD_STATES,
    FakeJobSetApi,
    FakeKubernetesApi,
    jobset,
    queued_job,
    workload,
    workload_name,
)
from support.fakes.fake_tpu_api import FakeTpuApi
from support.harness.crds import KUEUE_CRDS, schema_errors
from support.harness.in_process import run_plan
from support.harness.program import REPO, run_components, run_stack
from tpu_training_components import TrainingRecovery
from tpu_training_components.domain.job_manifests import KUEUE_QUEUE_LABEL
from tpu_training_components.domain.kueue_recovery import KUEUE_JOB_UID_LABEL
from tpu_training_components.live.kube_api import list_live_jobs
from tpu_training_components.live.kube_client import ClusterRef
from tpu_training_components.resources import reconcile

from tpu_training import project_files
from tpu_training.recovery import recovery_round, stack_probe

WORKLOAD_CRD = KUEUE_CRDS / "kueue.x-k8s.io_workloads.yaml"
CLUSTER = ClusterRef("tpu-training-dev", "us-east5", "tpu-dev")
JOBS_PATH = "/apis/batch/v1/namespaces/{}/jobs"
WORKLOADS_PATH = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{}/workloads"
JOB = "kubernetes:batch/v1:Job"


def served(kube: FakeKubernetesApi, owner: dict[str, Any], state: str) -> dict[str, Any]:
    """Serve the Workload Kueue keeps for ``owner`` in ``state``, once it is valid against Kueue's
    own CRD: a fake nobody could have written is no test."""
    item = workload(owner, state)
    assert schema_errors(item, WORKLOAD_CRD) == [], state
    kube.add_workload(item)
    return item


def decide(kube: FakeKubernetesApi, tmp_path: Path, entries, queued) -> dict[str, Any]:
    path = str(kube.kubeconfig(tmp_path))
    decisions = reconcile.reconcile_jobs(
        CLUSTER,
        entries,
        queued=queued,
        read=lambda cluster, namespaces, **kw: list_live_jobs(cluster, namespaces, kubeconfig=path, **kw),
    )
    return {d.name: d for d in decisions}


@pytest.fixture
def kube():
    with FakeJobSetApi() as api:
        yield api


# --- the fake Workloads are Kueue's --------------------------------------------------------------


@pytest.mark.parametrize("state", WORKLOAD_STATES)
def test_every_fake_workload_is_valid_against_kueues_workload_crd(state):
    for owner in (queued_job("train"), jobset("train")):
        owner["metadata"]["namespace"] = "default"
        assert schema_errors(workload(owner, state), WORKLOAD_CRD) == [], owner["kind"]


LONG_NAME = (
    "marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-department-"
    "social-media-engagement-tracker-and-analytics-dashboard-v2-final-revision-by-engineering-team-lead-"
    "senior-architect-validation-checked-approved-by-legal-and-ops-dept"
)


def test_the_fake_names_workloads_as_kueue_does():
    # Kueue's own cases without ShortWorkloadNames, off by default in v0.19.2
    # (pkg/controller/jobframework/workload_names_test.go, pkg/features/kube_features.go).
    assert workload_name("Job", "batch", "name", "uid") == "job-name-ef3a1"
    assert workload_name("Job", "batch", LONG_NAME, "uid") == f"job-{LONG_NAME}"[:247] + "-218b8"


def test_a_mutation_the_workload_crd_refuses():
    owner = copy.deepcopy(queued_job("train"))
    owner["metadata"]["namespace"] = "default"
    item = workload(owner, "capacity-revoked")
    item["spec"]["active"] = "false"  # a string: what a careless reader would read as "deactivated"
    assert any("spec/active" in error for error in schema_errors(item, WORKLOAD_CRD))


# --- the decision table, through the probe --------------------------------------------------------

EXPECTED = {
    # state: (action, warn, what the reason says)
    "pending": ("keep", False, "Job waits for Kueue to admit it (all-or-nothing capacity); its Workload"),
    "provisioning": ("keep", False, "quota reserved, its admission check (the node request) is pending"),
    "admitted": ("keep", False, "Kueue admitted its Workload"),
    "capacity-revoked": (
        "replace",
        False,
        "(Evicted: DeactivatedDueToAdmissionCheck: The workload is deactivated due to AdmissionCheck in "
        'Rejected state: "v6e-4x4")',
    ),
    "requeuing-limit-exceeded": ("replace", False, "Evicted: DeactivatedDueToRequeuingLimitExceeded"),
    "failed-to-start": ("replace", False, "(Finished: FailedToStart: invalid podSetUpdates"),
    "maximum-execution-time-exceeded": ("keep", True, "Kueue deactivated it (MaximumExecutionTimeExceeded)"),
    "deactivated-by-hand": ("keep", True, "someone deactivated it on purpose"),
    "backing-off": ("keep", False, "queues it again at 2026-11-21T10:05:00Z"),
    "queue-stopped": ("keep", True, "someone stopped the queue"),
}


def test_every_state_has_its_row():
    assert set(EXPECTED) == set(WORKLOAD_STATES)


@pytest.mark.parametrize("state", EXPECTED)
def test_a_suspended_queued_job_is_decided_by_its_workload(kube, tmp_path, state):
    train = queued_job("train", generation=3)
    kube.add("default", train)
    served(kube, train, state)
    decision = decide(kube, tmp_path, [("train", "default")], queued={"train"})["train"]
    action, warn, says = EXPECTED[state]
    assert (decision.action, decision.warn) == (action, warn), decision.message
    assert decision.generation == (4 if action == "replace" else 3)
    assert says in decision.message
    # One call per namespace and kind: the Jobs, then the Workloads of those waiting on Kueue.
    assert kube.calls == [JOBS_PATH.format("default"), WORKLOADS_PATH.format("default")]


def test_replace_names_kueues_condition_and_the_way_back(kube, tmp_path):
    train = queued_job("train", generation=3)
    kube.add("default", train)
    revoked = served(kube, train, "capacity-revoked")
    (decision,) = decide(kube, tmp_path, [("train", "default")], queued={"train"}).values()
    assert decision.message.startswith(
        f"train: Kueue deactivated its Workload {revoked['metadata']['name']} ("
    )
    assert decision.message.endswith(
        "Kueue never resumes it, so a new Job is queued and resumes from its checkpoint "
        "-> will be replaced (a new recovery generation)"
    )


def test_a_workload_deactivated_by_hand_says_how_to_queue_it_again(kube, tmp_path):
    train = queued_job("train", generation=3)
    kube.add("default", train)
    item = served(kube, train, "deactivated-by-hand")
    (decision,) = decide(kube, tmp_path, [("train", "default")], queued={"train"}).values()
    assert (
        f"kubectl patch workloads.kueue.x-k8s.io {item['metadata']['name']} -n default --type=merge "
        """-p '{"spec":{"active":true}}'"""
    ) in decision.message


def test_a_jobset_kueue_deactivated_is_replaced_and_one_waiting_kept(kube, tmp_path):
    for name, state in (("revoked", "capacity-revoked"), ("waiting", "provisioning")):
        item = jobset(name, generation=5, conditions=(("Suspended", "JobSetSuspended"),))
        item["metadata"]["labels"][KUEUE_QUEUE_LABEL] = "v6e-4x4"
        kube.add_jobset("default", item)
        served(kube, item, state)
    decisions = decide(
        kube,
        tmp_path,
        [("revoked", "default", "JobSet"), ("waiting", "default", "JobSet")],
        queued={"revoked", "waiting"},
    )
    assert (decisions["revoked"].action, decisions["revoked"].generation) == ("replace", 6)
    assert "a new JobSet is queued and resumes from its checkpoint" in decisions["revoked"].message
    assert (decisions["waiting"].action, decisions["waiting"].generation) == ("keep", 5)
    assert len(kube.calls) == 2  # JobSets, then Workloads; no Job entry, no Job call


def test_one_workload_call_per_namespace_whatever_the_number_of_jobs(kube, tmp_path):
    entries, queued = [], set()
    for namespace in ("default", "research"):
        for index in range(6):
            name = f"{namespace}-{index}"
            item = queued_job(name, generation=1)
            kube.add(namespace, item)
            served(kube, item, "capacity-revoked" if index == 0 else "pending")
            entries.append((name, namespace))
            queued.add(name)
    # Someone else's Workload in the namespace: not asked for, not answered.
    other = copy.deepcopy(queued_job("theirs"))
    other["metadata"].update(namespace="default", uid="uid-of-another-team")
    kube.add_workload(workload(other, "capacity-revoked"))

    decisions = decide(kube, tmp_path, entries, queued)

    assert sorted(kube.calls) == sorted(
        [JOBS_PATH.format("default"), JOBS_PATH.format("research")]
        + [WORKLOADS_PATH.format("default"), WORKLOADS_PATH.format("research")]
    )
    assert [n for n, d in sorted(decisions.items()) if d.action == "replace"] == ["default-0", "research-0"]
    workload_selector = kube.selectors[-1]
    assert workload_selector.startswith(f"{KUEUE_JOB_UID_LABEL} in (uid-research-0,")


def test_a_queued_job_that_runs_needs_no_workload_call(kube, tmp_path):
    kube.add("default", queued_job("train", generation=2, suspended=False))
    (decision,) = decide(kube, tmp_path, [("train", "default")], queued={"train"}).values()
    assert (decision.action, decision.generation) == ("keep", 2)
    assert kube.calls == [JOBS_PATH.format("default")]


def test_no_workload_yet_is_waiting(kube, tmp_path):
    """Kueue makes the Workload after the Job: found none is "not yet", kept without a warning."""
    kube.add("default", queued_job("train", generation=2))
    (decision,) = decide(kube, tmp_path, [("train", "default")], queued={"train"}).values()
    assert (decision.action, decision.generation, decision.warn) == ("keep", 2, False)
    assert "Kueue has not made its Workload yet" in decision.message


def test_the_workload_of_a_replaced_job_of_the_same_name_does_not_count(kube, tmp_path):
    """A replaced Job has a new uid; its predecessor's Workload, until collected, is not its own."""
    train = queued_job("train", generation=4)
    kube.add("default", train)
    previous = copy.deepcopy(train)
    previous["metadata"]["uid"] = "uid-of-generation-3"
    kube.add_workload(workload(previous, "capacity-revoked"))
    served(kube, train, "pending")
    (decision,) = decide(kube, tmp_path, [("train", "default")], queued={"train"}).values()
    assert (decision.action, decision.generation) == ("keep", 4)


def test_two_workloads_for_one_job_are_kept_for_a_later_run(kube, tmp_path):
    train = queued_job("train", generation=4)
    kube.add("default", train)
    served(kube, train, "capacity-revoked")
    second = workload(train, "pending")
    second["metadata"]["name"] += "-2"
    kube.add_workload(second)
    (decision,) = decide(kube, tmp_path, [("train", "default")], queued={"train"}).values()
    assert (decision.action, decision.generation, decision.warn) == ("keep", 4, False)
    assert "has 2 Kueue Workloads" in decision.message


# --- unknown is never replaced ----------------------------------------------------------------------


def test_no_workload_crd_keeps_the_live_generation_with_a_warning(kube, tmp_path):
    kube.kueue_installed = False  # the API server's own 404 for a resource it does not serve
    train = queued_job("train", generation=3)
    kube.add("default", train)
    (decision,) = decide(kube, tmp_path, [("train", "default")], queued={"train"}).values()
    assert (decision.action, decision.generation, decision.warn) == ("keep", 3, True)
    assert decision.unavailable  # `tpu-training recover` tries again later
    assert (
        "its Kueue Workload could not be read (NotFoundException: HTTP 404 Not Found; the cluster "
        "serves no Kueue Workloads: is Kueue installed?)"
    ) in decision.message
    assert "nothing is replaced on unknown state" in decision.message


def _workload_list(*items: Any, kind: str = "WorkloadList") -> bytes:
    return json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "items": list(items)}).encode()


def _revoked_item(**changes: Any) -> dict[str, Any]:
    train = copy.deepcopy(queued_job("train", generation=3))
    train["metadata"]["namespace"] = "default"
    item = workload(train, "capacity-revoked")
    for path, value in changes.items():
        section, key = path.split("__")
        item[section][key] = value
    return item


GARBAGE = {
    "not JSON": b"{not json",
    "an HTML page": b"<html>502 Bad Gateway</html>",
    "a JobList": _workload_list(kind="JobList"),
    "items not a list": json.dumps({"kind": "WorkloadList", "items": {}}).encode(),
    "active as a string": _workload_list(_revoked_item(spec__active="false")),
    "conditions not a list": _workload_list(_revoked_item(status__conditions="Evicted")),
    "a Workload twice": _workload_list(_revoked_item(), _revoked_item()),
    "a Workload of another namespace": _workload_list(
        _revoked_item(metadata__namespace="research", metadata__name="x")
    ),
}


FAULTS: dict[str, dict[str, Any]] = {
    **{name: {"raw": body} for name, body in GARBAGE.items()},
    "HTTP 500": {"status": 500},
    "HTTP 403 (no right to list Workloads)": {"status": 403},
    "an answer over the size bound": {
        "raw": _workload_list(_revoked_item()) + b" " * 4096,
        "max_bytes": 4096,
    },
    "an answer dripping past the deadline": {"drip": 0.3, "deadline": 1.0},
}


@pytest.mark.parametrize("fault", FAULTS)
def test_an_unreadable_workload_answer_keeps_the_job(tmp_path, fault):
    how = FAULTS[fault]
    with FakeKubernetesApi() as kube:
        train = queued_job("train", generation=3)
        kube.add("default", train)
        served(kube, train, "capacity-revoked")  # what a readable answer would have said
        answer = kube.route

        def faulty(method, path, query, headers):
            if not path.endswith("/workloads"):
                return answer(method, path, query, headers)  # the Jobs are answered
            kube.raw_body, kube.drip_seconds = how.get("raw"), how.get("drip", 0.0)
            if "status" in how:
                return how["status"], {"kind": "Status", "code": how["status"]}
            return answer(method, path, query, headers)

        kube.route = faulty
        live = list_live_jobs(
            CLUSTER,
            ["default"],
            workload_namespaces=["default"],
            kubeconfig=str(kube.kubeconfig(tmp_path)),
            **{key: how[key] for key in ("max_bytes", "deadline") if key in how},
        )
    assert ("default", "train") in live.jobs and "default" in live.workload_failures, live.workloads
    decisions = reconcile.reconcile_jobs(
        CLUSTER, [("train", "default")], queued={"train"}, read=lambda c, n, **kw: live
    )
    assert [(d.action, d.generation, d.warn, d.unavailable) for d in decisions] == [("keep", 3, True, True)]


# --- who asks: only a stack with queued pools, only where a queued workload waits --------------------


def test_a_plain_stack_makes_no_workload_call(kube, tmp_path):
    """Not on a queued pool: never a Workload call, even for a Job that looks queued."""
    kube.add("default", queued_job("train", generation=2))
    (decision,) = decide(kube, tmp_path, [("train", "default")], queued=set()).values()
    assert (decision.action, decision.generation, decision.warn) == ("keep", 2, False)
    assert kube.calls == [JOBS_PATH.format("default")]


@pytest.fixture
def live_cluster(monkeypatch, tmp_path, kube):
    monkeypatch.delenv("TPU_TRAINING_OFFLINE", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path)))
    return kube


def queued_stack(config: dict[str, Any]) -> dict[str, Any]:
    """The dev stack, its v6e pool queued, without its TPU VM (only the cluster is read)."""
    config = copy.deepcopy(config)
    config["tpu-training:nodePools"][0]["provisioning"] = "flex-start-queued"
    config["tpu-training:tpuVms"] = []
    return config


def test_the_stack_queues_anew_a_job_kueue_deactivated(config, live_cluster, decided_at):
    train = queued_job("train-v6e", generation=3, queue="v6e-4x4")
    live_cluster.add("default", train)
    served(live_cluster, train, "capacity-revoked")

    run = run_stack(queued_stack(config), previous_outputs={"jobRecoveryGenerations": {"train-v6e": 3}})

    assert live_cluster.calls == [JOBS_PATH.format("default"), WORKLOADS_PATH.format("default")]
    replaced = run.one(JOB, "train-v6e-job")
    assert replaced.options["replacementTrigger"] == decided_at
    assert replaced.inputs["metadata"]["labels"]["recovery-generation"] == str(decided_at)
    assert any(
        "train-v6e: Kueue deactivated its Workload" in m and "will be replaced" in m for m in run.infos
    )


def test_the_stack_keeps_a_job_waiting_for_admission(config, live_cluster):
    train = queued_job("train-v6e", generation=3, queue="v6e-4x4")
    live_cluster.add("default", train)
    served(live_cluster, train, "provisioning")
    run = run_stack(queued_stack(config), previous_outputs={"jobRecoveryGenerations": {"train-v6e": 3}})
    assert run.one(JOB, "train-v6e-job").options["replacementTrigger"] == 3
    assert run.warnings == []


def test_the_stack_keeps_its_job_when_kueue_is_not_installed(config, live_cluster):
    live_cluster.kueue_installed = False
    live_cluster.add("default", queued_job("train-v6e", generation=3, queue="v6e-4x4"))
    run = run_stack(queued_stack(config), previous_outputs={"jobRecoveryGenerations": {"train-v6e": 3}})
    assert run.one(JOB, "train-v6e-job").options["replacementTrigger"] == 3
    assert any("its Kueue Workload could not be read" in w for w in run.warnings)


def test_the_plain_dev_stack_makes_no_workload_call(config, live_cluster):
    config = copy.deepcopy(config)
    config["tpu-training:tpuVms"] = []
    live_cluster.add("default", queued_job("train-v6e", generation=3))
    run_stack(config, previous_outputs={"jobRecoveryGenerations": {"train-v6e": 3}})
    assert live_cluster.calls == [JOBS_PATH.format("default")]


def test_training_recovery_reads_workloads_of_the_jobs_it_is_told_are_queued(live_cluster, decided_at):
    train = queued_job("train", generation=1)
    live_cluster.add("default", train)
    served(live_cluster, train, "capacity-revoked")
    decided: dict[str, Any] = {}

    def body() -> None:
        recovery = TrainingRecovery(
            "recovery",
            {
                "project": "p",
                "jobs": [{"name": "train", "queued": True}],
                "cluster": {"project": "p", "location": "us-east5", "name": "tpu-dev"},
            },
        )
        recovery.job_decisions.apply(decided.update)

    run_components(body)
    assert "Kueue deactivated its Workload" in decided["train"]
    assert len(live_cluster.calls) == 2


def test_training_recovery_refuses_a_queued_flag_that_is_no_bool():
    def body() -> None:
        TrainingRecovery(
            "recovery",
            {
                "project": "p",
                "jobs": [{"name": "train", "queued": "yes"}],  # type: ignore[typeddict-item]
                "cluster": {"project": "p", "location": "us-east5", "name": "tpu-dev"},
                "read_live_state": False,
            },
        )

    with pytest.raises(pulumi.RunError, match="queued"):
        run_components(body)


# --- tpu-training recover and tpu-training plan --live get the same decisions -----------------------


def _queued_dev_stack(root: Path) -> None:
    """Pulumi.dev.yaml of this repository in ``root``, its v6e pool queued."""
    dev = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    pools = dev["config"]["tpu-training:nodePools"]
    pools[0]["provisioning"] = "flex-start-queued"
    (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump(dev))


def test_recover_queues_anew_a_job_kueue_deactivated(scratch_project, monkeypatch, tmp_path):
    _queued_dev_stack(scratch_project)
    with FakeTpuApi() as tpu, FakeKubernetesApi() as kube:
        tpu.add("europe-west4-a", "demo-tpu", "READY", labels={"recovery-generation": "3"}, health="HEALTHY")
        train = queued_job("train-v6e", generation=1)
        kube.add("default", train)
        served(kube, train, "capacity-revoked")
        monkeypatch.setenv("TPU_API_ENDPOINT", tpu.endpoint)
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path)))
        target = stack_probe.Target(project_files.load_project(scratch_project), "dev", "dev")
        said: list[str] = []
        report = recovery_round.Recoverer(
            target, probe=stack_probe.Probe(), up=None, say=said.append
        ).run_round()
    assert [(kind, d.action) for kind, d in report.decisions] == [("tpuVm", "keep"), ("job", "replace")]
    assert kube.calls == [JOBS_PATH.format("default"), WORKLOADS_PATH.format("default")]
    assert any("train-v6e: Kueue deactivated its Workload" in line for line in said)


def test_plan_live_shows_the_replacement(scratch_project):
    _queued_dev_stack(scratch_project)
    with FakeTpuApi() as tpu, FakeKubernetesApi() as kube:
        tpu.add("europe-west4-a", "demo-tpu", "READY", labels={"recovery-generation": "3"})
        train = queued_job("train-v6e", generation=1)
        kube.add("default", train)
        served(kube, train, "capacity-revoked")
        with tempfile.TemporaryDirectory() as folder:
            env = {"TPU_API_ENDPOINT": tpu.endpoint, "KUBECONFIG": str(kube.kubeconfig(Path(folder)))}
            result = run_plan("--live", cwd=scratch_project, env=env)
    assert result.returncode == 0, result.stderr
    assert "Job train-v6e replaced" in result.stdout, result.stdout
    assert kube.calls == [JOBS_PATH.format("default"), WORKLOADS_PATH.format("default")]
