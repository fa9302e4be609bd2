"""A restart budget across generations: a Job or JobSet that keeps starting over (a trainer that
crashes every time, Pods the kubelet evicts for memory or disk pressure every time) is recovered
at most ``recovery.restartBudget.restarts`` times within ``windowHours``; then recovery stops for
it, says why, and the round exits 1.

Why a budget across generations: each new generation starts JobSet's ``maxRestarts`` from zero,
and a JobSet restarts for disruptions without counting them at all: node-pressure evictions carry
``DisruptionTarget`` (Kubernetes' pod disruption conditions: "TerminationByKubelet" for
node-pressure eviction), which the JobSet's failure policy restarts with
``RestartJobSetAndIgnoreMaxRestarts`` (components/.../jobset_manifests.py), so only
``status.restarts`` grows, never ``restartsCountTowardsMax`` (JobSet v0.12
pkg/controllers/failure_policy.go)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

import pytest
import yaml
from support.fakes.fake_kube_api import FakeJobSetApi, jobset
from support.fakes.fake_tpu_api import FakeTpuApi
from support.harness.program import multislice, refused, run_stack
from support.harness.recover_runs import RecordingRunner, recoverer
from tpu_training_components.domain.restart_budget import (
    RESTARTS_OUTPUT,
    Recovery,
    RestartBudget,
    counted,
    history_output,
    live_restarts,
    read_history,
)

from tpu_training import exit_codes
from tpu_training.recovery import round_report

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
BUDGET = RestartBudget(10, timedelta(hours=24))
ZONE = "europe-west4-a"


def ago(hours: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the arithmetic ------------------------------------------------------------------------------


def test_each_recovery_counts_itself_and_the_restarts_of_the_generation_it_replaced():
    history = (Recovery(NOW - timedelta(hours=2), 3), Recovery(NOW - timedelta(hours=1), 3))
    assert counted(history, 0, None, BUDGET, NOW) == 8
    old = (Recovery(NOW - timedelta(hours=25), 3),)  # outside the window
    assert counted(old, 0, None, BUDGET, NOW) == 0


def test_a_live_jobsets_own_restarts_count_all_while_young_then_at_their_rate():
    assert live_restarts(7, NOW - timedelta(hours=5), BUDGET, NOW) == 7
    assert live_restarts(7, None, BUDGET, NOW) == 7  # age unknown: all of them
    # Twenty Spot preemptions over ten days: two a day, far under the budget.
    assert live_restarts(20, NOW - timedelta(days=10), BUDGET, NOW) == 2


def test_a_history_nobody_can_read_is_left_out_and_said():
    history, problems = read_history(
        {"a": [{"at": "2026-11-26T10:00:00Z", "restarts": 2.0}, {"at": "never"}]}
    )
    assert history == {"a": (Recovery(datetime(2026, 11, 26, 10, tzinfo=timezone.utc), 2),)}
    assert problems and "recoveryRestarts.a" in problems[0]
    assert read_history("garbage")[0] == {}


def test_the_watcher_records_its_recoveries_and_a_persons_update_starts_the_count_over():
    previous = {"a": [{"at": "x", "restarts": 1}], "b": [{"at": "y", "restarts": 1}]}
    recovered = {"a": (Recovery(NOW, 4),)}
    by_watcher = history_output(previous, recovered, {}, {}, by_watcher=True)
    assert by_watcher == {"a": [{"at": "2026-11-26T12:00:00Z", "restarts": 4}], "b": previous["b"]}
    # A person's `pulumi up` re-creates a (a new generation) and keeps b (the same one).
    by_person = history_output(previous, {}, {"a": 9, "b": 2}, {"a": 8, "b": 2}, by_watcher=False)
    assert by_person == {"b": previous["b"]}


# --- rounds --------------------------------------------------------------------------------------


@pytest.fixture
def multislice_project(scratch_project, config):
    stack = multislice(config)
    stack.pop("tpu-training:trainerCode")  # the scratch project has no trainer folder
    (scratch_project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": stack}))
    return scratch_project


@pytest.fixture
def live(tmp_path, monkeypatch):
    with FakeTpuApi() as tpu, FakeJobSetApi() as kube:
        tpu.add(ZONE, "demo-tpu", "READY", labels={"recovery-generation": "3"})
        monkeypatch.setenv("TPU_API_ENDPOINT", tpu.endpoint)
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path)))
        yield kube


def failed_jobset(restarts: int) -> dict:
    item = jobset(
        "train-v6e", conditions=(("Failed", "ReachedMaxRestarts"),), generation=5, restarts=restarts
    )
    item["metadata"]["creationTimestamp"] = ago(1)
    return item


def test_a_jobset_that_keeps_failing_is_recovered_until_its_budget_is_spent(multislice_project, live):
    live.add_jobset("default", failed_jobset(3))
    history = {"train-v6e": [{"at": ago(3), "restarts": 3}, {"at": ago(2), "restarts": 3}]}
    runner = RecordingRunner(outputs={RESTARTS_OUTPUT: history})
    rec, said = recoverer(runner, "dev", multislice_project)
    report = rec.run_round()
    # 2 recoveries x (1 + 3) + the failed generation's 3 = 11 restarts: one more is over 10.
    assert runner.targets == []
    assert report.plan is not None and [d.name for d in report.plan.over_budget] == ["train-v6e"]
    assert round_report.exit_status(report) == round_report.EXIT_UP_FAILED
    (line,) = [line for line in said if "restart budget is spent" in line]
    assert "11 restart(s) within the last 24 h" in line and "recovery.restartBudget: at most 10" in line
    assert "-> is kept" in line
    assert report.to_json()["decisions"][1]["overBudget"] is True


def test_within_its_budget_it_is_recovered_and_the_program_is_told_its_history(multislice_project, live):
    live.add_jobset("default", failed_jobset(3))
    history = {"train-v6e": [{"at": ago(30), "restarts": 3}, {"at": ago(2), "restarts": 3}]}
    runner = RecordingRunner(outputs={RESTARTS_OUTPUT: history})
    report = recoverer(runner, "dev", multislice_project)[0].run_round()
    assert round_report.exit_status(report) == exit_codes.EXIT_OK
    assert len(runner.targets) == 1
    (told,) = runner.rounds
    assert told is not None and told.jobs == {"train-v6e"}
    kept, new = told.restarts["train-v6e"]  # the entry outside the window is dropped
    assert kept.restarts == 3 and new.restarts == 3


def test_node_pressure_evictions_count_against_the_budget_of_a_running_jobset(multislice_project, live):
    # Eleven gang restarts for DisruptionTarget (node-pressure evictions), none counted against
    # maxRestarts: the JobSet looks "running" to JobSet and to the decision table.
    running = jobset("train-v6e", ready=2, generation=5, restarts=11)
    running["status"]["restartsCountTowardsMax"] = 0
    running["metadata"]["creationTimestamp"] = ago(6)
    live.add_jobset("default", running)
    runner = RecordingRunner()
    rec, said = recoverer(runner, "dev", multislice_project)
    report = rec.run_round()
    assert runner.stacks == []  # nothing to re-create, and no CLI call for it
    assert round_report.exit_status(report) == round_report.EXIT_UP_FAILED
    assert any(
        "JobSet is running" in line and "restart budget is spent: 11 restart(s)" in line for line in said
    )


def test_a_long_run_with_occasional_preemptions_stays_within_its_budget(multislice_project, live):
    running = jobset("train-v6e", ready=2, generation=5, restarts=20)
    running["metadata"]["creationTimestamp"] = ago(24 * 10)
    live.add_jobset("default", running)
    report = recoverer(RecordingRunner(), "dev", multislice_project)[0].run_round()
    assert round_report.exit_status(report) == exit_codes.EXIT_OK


def test_a_dry_run_checks_what_it_can_see_and_says_what_it_cannot(multislice_project, live):
    live.add_jobset("default", failed_jobset(12))
    rec, said = recoverer(None, "dev", multislice_project)
    report = rec.run_round()
    assert round_report.exit_status(report) == round_report.EXIT_UP_FAILED
    assert any("not read in a dry run" in line for line in said)


# --- the stack key and the output ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ({"restarts": 0}, "tpu-training:recovery.restartBudget.restarts = 0"),
        ({"windowHours": 1000}, "tpu-training:recovery.restartBudget.windowHours = 1000"),
        ({"restart": 3}, "restarts"),
    ],
)
def test_the_budget_key_is_checked(config, budget, message):
    config["tpu-training:recovery"] = {"restartBudget": budget}
    assert message in refused(config)


def test_a_persons_update_that_recreates_a_job_starts_its_count_over(config, live, monkeypatch):
    monkeypatch.delenv("TPU_TRAINING_OFFLINE")  # `pulumi up` reads the live JobSet
    previous = {
        "jobRecoveryGenerations": {"train-v6e": 5},
        RESTARTS_OUTPUT: {"train-v6e": [{"at": ago(1), "restarts": 3}]},
    }
    stack = multislice(config)
    live.add_jobset("default", jobset("train-v6e", ready=2, generation=5))  # running: kept at 5
    assert run_stack(copy.deepcopy(stack), previous_outputs=copy.deepcopy(previous)).outputs[
        RESTARTS_OUTPUT
    ] == {"train-v6e": previous[RESTARTS_OUTPUT]["train-v6e"]}
    live.jobsets["default"] = [failed_jobset(3)]  # failed: this update re-creates it
    assert run_stack(stack, previous_outputs=previous).outputs[RESTARTS_OUTPUT] == {}
