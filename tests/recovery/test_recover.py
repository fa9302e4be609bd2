"""`tpu-training recover`: decisions -> `pulumi up` or nothing, the Automation API path through
a stub `pulumi` on PATH, exit statuses, the watch loop, back-off and signals.

Live state comes from the loopback fakes, through the real client libraries; the dev stack
declares demo-tpu (europe-west4-a) and the Job train-v6e (namespace default)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.fakes import stub_pulumi
from support.fakes.fake_kube_api import job
from support.harness import in_process
from support.harness.program import REPO
from support.harness.recover_runs import (
    RecordingRunner,
    live_dev_stack,
    recoverer,
    set_behaviour,
)
from tpu_training_components.domain.recovery import Decision
from tpu_training_components.domain.recovery_rounds import (
    ENDED_EARLY,
    Backoff,
    RoundOutcome,
    next_round_in,
    plan_round,
)

from tpu_training import exit_codes
from tpu_training.commands import recover
from tpu_training.recovery import round_report, watch_loop
from tpu_training.recovery.automation import AutomationUp
from tpu_training.recovery.pulumi_process import PulumiUnavailable

ZONE = "europe-west4-a"
WORKING_NODE = {"labels": {"recovery-generation": "3"}, "health": "HEALTHY"}
RUNNING_JOB = job("train-v6e", generation=1, active=4, ready=4)


@pytest.fixture
def apis(tmp_path, monkeypatch):
    """Both live APIs on loopback, holding a working dev stack; the environment points at them."""
    with live_dev_stack(tmp_path, monkeypatch, "READY", RUNNING_JOB, **WORKING_NODE) as apis:
        yield apis


# ---------------------------------------------------------------------------------------------
# The decision -> action layer (pure)
# ---------------------------------------------------------------------------------------------


def decision(action: str, **kw) -> Decision:
    return Decision(kw.pop("name", "vm"), action, 1, "because", **kw)  # type: ignore[arg-type]


def test_up_runs_only_for_create_or_replace():
    assert not plan_round([decision("keep"), decision("keep", warn=True)]).run_up
    assert plan_round([decision("keep"), decision("replace", name="b")]).run_up
    assert plan_round([decision("create")]).recovering[0].action == "create"
    assert not plan_round([]).run_up


def test_unavailable_state_never_runs_up_and_is_reported():
    plan = plan_round([decision("keep", warn=True, unavailable=True, name="a"), decision("keep")])
    assert not plan.run_up
    assert [d.name for d in plan.unavailable] == ["a"]
    assert "unavailable for a" in plan.summary


def test_backoff_doubles_to_its_cap_and_starts_over_after_success():
    backoff = Backoff(first_seconds=60, cap_seconds=300)
    delays = []
    for _ in range(5):
        backoff.record(RoundOutcome.FAILED)
        delays.append(backoff.delay_seconds)
    assert delays == [60, 120, 240, 300, 300]
    backoff.record(RoundOutcome.BUSY)  # someone else's update says nothing about capacity
    assert backoff.delay_seconds == 300
    backoff.record(RoundOutcome.SUCCEEDED)
    assert backoff.delay_seconds == 0
    for _ in range(500):  # no overflow however long the stockout lasts
        backoff.record(RoundOutcome.FAILED)
    assert backoff.delay_seconds == 300


def test_backoff_refuses_a_first_wait_above_its_cap():
    with pytest.raises(ValueError, match="at most the cap"):
        Backoff(first_seconds=600, cap_seconds=60)


def test_next_round_waits_the_longer_of_interval_and_backoff_only_after_a_failure():
    backoff = Backoff(first_seconds=60)
    backoff.record(RoundOutcome.FAILED)
    assert next_round_in(10, backoff, RoundOutcome.FAILED) == 60
    assert next_round_in(120, backoff, RoundOutcome.FAILED) == 120
    assert next_round_in(10, backoff, RoundOutcome.BUSY) == 10
    assert next_round_in(10, backoff, RoundOutcome.NOT_RUN) == 10


@pytest.mark.parametrize(
    ("outcome", "key", "status"),
    [
        (RoundOutcome.CONFIG_ERROR, "error", exit_codes.EXIT_CONFIG_ERROR),
        (RoundOutcome.UNAVAILABLE, "unavailable", exit_codes.EXIT_UNAVAILABLE),
        (RoundOutcome.TRY_LATER, "tryLater", exit_codes.EXIT_TRY_LATER),
    ],
)
def test_a_round_that_ended_early_says_why_under_its_own_key_and_ran_no_up(outcome, key, status):
    report = round_report.RoundReport("dev", 1, "2026-11-26T12:00:00Z", ended_early=(outcome, "because"))
    printed = json.loads(json.dumps(report.to_json()))
    assert {k: printed[k] for k in ("error", "unavailable", "tryLater")} == {
        "error": None,
        "unavailable": None,
        "tryLater": None,
        key: "because",
    }
    assert printed["up"] == {"status": "not-run", "message": None, "durationSeconds": 0.0, "changes": {}}
    assert round_report.exit_status(report) == status


def test_every_outcome_has_an_exit_status_and_the_docs_list_every_up_status():
    assert set(round_report.EXIT_STATUSES) == set(RoundOutcome)
    page = " ".join((REPO / "docs" / "hands-free-recovery.md").read_text().split())
    listed = page.split("`up` {`status`: ", 1)[1].split(",", 1)[0].split(" | ")
    assert listed == [o.value for o in RoundOutcome if o not in ENDED_EARLY]


# ---------------------------------------------------------------------------------------------
# Rounds against the live fakes, with an injected runner
# ---------------------------------------------------------------------------------------------


def test_a_working_stack_costs_one_call_per_zone_and_namespace_and_no_up(apis):
    tpu, kube = apis
    runner = RecordingRunner()
    rec, said = recoverer(runner)
    report = rec.run_round()
    assert runner.stacks == []
    assert report.plan is not None and not report.plan.run_up
    assert round_report.exit_status(report) == exit_codes.EXIT_OK
    # One call per zone; per namespace one for its Jobs and, as the Job trains, one for its Pods.
    assert len(tpu.calls) == 1 and len(kube.calls) == 2
    assert (
        "info: TPU VM demo-tpu: node is READY; progress unknown (no progress published since it was "
        "created), so no hang is judged -> is kept (recovery generation 3)"
    ) in said
    assert said[-1] == "dev: nothing to recover: every TPU VM and Job is working or done"


@pytest.mark.parametrize(
    ("up_status", "expected"),
    [
        (RoundOutcome.SUCCEEDED, exit_codes.EXIT_OK),
        (RoundOutcome.FAILED, round_report.EXIT_UP_FAILED),
        (RoundOutcome.BUSY, exit_codes.EXIT_TRY_LATER),
    ],
)
def test_a_preempted_node_runs_up_once_and_its_result_sets_the_exit_status(apis, up_status, expected):
    tpu, _ = apis
    tpu.nodes[ZONE][0]["state"] = "PREEMPTED"
    runner = RecordingRunner(up_status)
    rec, said = recoverer(runner)
    report = rec.run_round()
    assert runner.stacks == ["dev"]
    assert report.outcome is up_status and report.up is not None
    assert round_report.exit_status(report) == expected
    assert "info: TPU VM demo-tpu: node is PREEMPTED -> will be replaced (a new recovery generation)" in said


def test_a_failed_job_runs_up(apis):
    _, kube = apis
    kube.jobs["default"] = [
        job("train-v6e", generation=1, conditions=(("Failed", "True", "BackoffLimitExceeded"),))
    ]
    runner = RecordingRunner()
    report = recoverer(runner)[0].run_round()
    assert runner.stacks == ["dev"]
    assert [(kind, d.action) for kind, d in report.decisions] == [("tpuVm", "keep"), ("job", "replace")]


def test_an_unreadable_api_runs_nothing_and_asks_to_try_later(apis):
    tpu, _ = apis
    tpu.fail_with = 503
    runner = RecordingRunner()
    report = recoverer(runner)[0].run_round()
    assert runner.stacks == []
    assert report.plan is not None and [d.name for d in report.plan.unavailable] == ["demo-tpu"]
    assert round_report.exit_status(report) == exit_codes.EXIT_TRY_LATER


def test_an_unreadable_zone_does_not_stop_the_recovery_of_another_resource(apis):
    tpu, kube = apis
    tpu.fail_with = 503
    kube.jobs["default"] = []  # the Job is gone: `pulumi up` re-creates it
    runner = RecordingRunner()
    report = recoverer(runner)[0].run_round()
    assert runner.stacks == ["dev"]
    assert round_report.exit_status(report) == exit_codes.EXIT_OK


def test_a_dry_run_decides_and_says_so_without_running_up(apis):
    tpu, _ = apis
    tpu.nodes[ZONE] = []
    rec, said = recoverer(None)
    report = rec.run_round()
    assert report.outcome is RoundOutcome.DRY_RUN and report.up is not None
    assert round_report.exit_status(report) == exit_codes.EXIT_OK
    assert report.to_json()["upNeeded"] is True
    assert said[-1].startswith("dev: pulumi up dry-run")


def with_stack(project: Path, stack_file: str) -> Path:
    """``project`` (the ``scratch_project`` fixture) with the test's own stack ``test``."""
    (project / "Pulumi.test.yaml").write_text(stack_file)
    return project


def test_a_stop_asked_during_the_round_starts_no_up(apis):
    tpu, _ = apis
    tpu.nodes[ZONE][0]["state"] = "PREEMPTED"
    runner = RecordingRunner()
    rec, _ = recoverer(runner)
    rec.stopping = lambda: True
    report = rec.run_round()
    assert runner.stacks == []
    assert report.outcome is RoundOutcome.STOPPED and report.up is not None
    assert round_report.exit_status(report) == exit_codes.EXIT_TRY_LATER


def test_invalid_config_is_reported_and_nothing_is_probed(apis, scratch_project):
    tpu, kube = apis
    root = with_stack(scratch_project, "config:\n  gcp:project: tpu-training-dev\n  tpu-training:tpuVms: 3\n")
    runner = RecordingRunner()
    rec, said = recoverer(runner, "test", root)
    report = rec.run_round()
    assert report.outcome is RoundOutcome.CONFIG_ERROR and "tpu-training:tpuVms" in report.reason
    assert round_report.exit_status(report) == exit_codes.EXIT_CONFIG_ERROR
    assert tpu.calls == [] and kube.calls == [] and runner.stacks == []


def test_a_stack_that_reads_no_live_state_is_a_config_error(apis, scratch_project):
    root = with_stack(
        scratch_project,
        "config:\n  gcp:project: tpu-training-dev\n  tpu-training:recovery: {readLiveState: false}\n",
    )
    report = recoverer(RecordingRunner(), "test", root)[0].run_round()
    assert report.outcome is RoundOutcome.CONFIG_ERROR and "readLiveState is false" in report.reason
    assert round_report.exit_status(report) == exit_codes.EXIT_CONFIG_ERROR


# ---------------------------------------------------------------------------------------------
# The watch loop: back-off, stopping
# ---------------------------------------------------------------------------------------------


class ScriptedStop(watch_loop.StopSignal):
    """Records each wait instead of sleeping; asks to stop after ``rounds`` waits."""

    def __init__(self, rounds: int) -> None:
        super().__init__(lambda line: None)
        self.waits: list[float] = []
        self.rounds = rounds

    def sleep(self, seconds: float, *, wakeable: bool = True) -> None:
        self.waits.append(seconds)
        if len(self.waits) >= self.rounds:
            self.event.set()


def test_watch_backs_off_after_failed_ups_and_returns_to_its_interval(apis):
    tpu, _ = apis
    tpu.nodes[ZONE][0]["state"] = "PREEMPTED"
    runner = RecordingRunner(RoundOutcome.FAILED)
    rec, said = recoverer(runner)
    stop = ScriptedStop(rounds=5)
    statuses = []

    def emit(report):
        statuses.append(report.outcome)
        if len(statuses) == 3:  # capacity came back
            runner.status = RoundOutcome.SUCCEEDED
        if len(statuses) == 4:  # the new node is up
            tpu.nodes[ZONE][0]["state"] = "READY"

    status = watch_loop.watch(
        rec, interval_seconds=30, stop=stop, emit=emit, backoff=Backoff(first_seconds=60, cap_seconds=200)
    )
    assert status == exit_codes.EXIT_OK
    assert statuses == [RoundOutcome.FAILED] * 3 + [RoundOutcome.SUCCEEDED, RoundOutcome.NOT_RUN]
    assert stop.waits == [60, 120, 200, 30, 30]
    assert "dev: `pulumi up` failed 2 time(s) in a row; next round in 120 s" in said


def test_an_unreadable_api_between_failed_ups_does_not_restart_the_backoff(apis):
    tpu, _ = apis
    tpu.nodes[ZONE][0]["state"] = "PREEMPTED"
    rec, _ = recoverer(RecordingRunner(RoundOutcome.FAILED))
    stop = ScriptedStop(rounds=3)

    def emit(report):
        tpu.fail_with = 503 if report.number == 1 else None  # round 2 cannot read the zone

    watch_loop.watch(rec, interval_seconds=30, stop=stop, emit=emit, backoff=Backoff(first_seconds=60))
    assert stop.waits == [60, 30, 120]


def test_watch_stops_at_once_on_a_config_error_in_its_first_round(apis, scratch_project):
    root = with_stack(scratch_project, "config:\n  gcp:project: 12345\n")
    rec, _ = recoverer(RecordingRunner(), "test", root)
    stop = ScriptedStop(rounds=5)
    assert (
        watch_loop.watch(rec, interval_seconds=30, stop=stop, emit=lambda r: None)
        == exit_codes.EXIT_CONFIG_ERROR
    )
    assert stop.waits == []


# ---------------------------------------------------------------------------------------------
# The Automation API path, through a stub `pulumi` executable
# ---------------------------------------------------------------------------------------------


def test_automation_up_makes_exactly_these_cli_calls(stub):
    lines: list[str] = []
    result = AutomationUp(REPO, lines.append)("dev")
    assert result.status is RoundOutcome.SUCCEEDED
    assert result.changes == {"replace": 1, "same": 36}
    # `pulumi up --refresh --yes`, no preview; then the summary, as pulumi 3.272.0's Automation
    # API reads it (`stack history`).
    assert stub_pulumi.calls(stub) == [
        ["--non-interactive", "version"],
        ["--non-interactive", "stack", "select", "--stack", "dev"],
        [
            "--non-interactive",
            "up",
            "--yes",
            "--skip-preview",
            "--color",
            "never",
            "--message",
            "tpu-training recover: recovery after preemption, maintenance or a failed Job",
            "--refresh",
            "--stack",
            "dev",
        ],  # fmt: skip
        [
            "--non-interactive",
            "stack",
            "history",
            "--json",
            "--show-secrets",
            "--page-size",
            "1",
            "--page",
            "1",
            "--stack",
            "dev",
        ],  # fmt: skip
    ]
    assert " +- gcp:tpu/v2Vm:V2Vm demo-tpu-vm replaced (95s)" in lines


@pytest.mark.parametrize(
    ("behaviour", "status", "says"),
    [
        ({"up": "busy"}, RoundOutcome.BUSY, "Another update is currently in progress"),
        ({"up": "locked"}, RoundOutcome.BUSY, "currently locked"),
        ({"up": "fail"}, RoundOutcome.FAILED, "update failed"),
    ],
)
def test_automation_up_sorts_cli_failures(stub, behaviour, status, says):
    set_behaviour(stub, **behaviour)
    result = AutomationUp(REPO, lambda line: None)("dev")
    assert result.status is status
    assert says in result.message


@pytest.mark.parametrize("skip_sdk_check", [False, True])
def test_a_cli_older_than_the_projects_minimum_is_unavailable(stub, monkeypatch, skip_sdk_check):
    # Even with the SDK's own check switched off, this one holds: such a CLI ignores the
    # replacement triggers, and every `up` would "succeed" recovering nothing.
    if skip_sdk_check:
        monkeypatch.setenv("PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK", "true")
    set_behaviour(stub, version="3.200.0")
    with pytest.raises(PulumiUnavailable, match=r"3\.200\.0.*3\.226\.0|3\.226\.0.*3\.200\.0"):
        AutomationUp(REPO, lambda line: None)


def test_the_minimum_cli_is_the_projects_required_version():
    from tpu_training.recovery.pulumi_process import MIN_CLI_VERSION

    assert f'requiredPulumiVersion: ">={MIN_CLI_VERSION}"' in (REPO / "Pulumi.yaml").read_text()


@pytest.mark.slow
def test_an_up_that_never_ends_is_a_failure_after_its_timeout(stub):
    set_behaviour(stub, up="succeed", hold=True)  # never released
    try:
        result = AutomationUp(REPO, lambda line: None, up_timeout_seconds=0.5)("dev")
    finally:
        (stub / "release").write_text("")  # let the stub process end
    assert result.status is RoundOutcome.FAILED
    assert "did not finish within 0.5 s" in result.message


def test_an_update_that_succeeded_is_a_success_even_if_its_summary_cannot_be_read(stub):
    # The update's exit status is its result; a history the SDK cannot read only loses the counts.
    set_behaviour(stub, history="[]")
    result = AutomationUp(REPO, lambda line: None)("dev")
    assert result.status is RoundOutcome.SUCCEEDED
    assert "its summary could not be read" in result.message


SECRET_VMS = """config:
  gcp:project: tpu-training-dev
  tpu-training:tpuVms:
    secure: AAABAHhlbmNyeXB0ZWQ=
"""


def decrypted_vms() -> dict:
    vms = [
        {
            "name": "demo-tpu",
            "zone": ZONE,
            "acceleratorType": "v3-8",
            "runtimeVersion": "tpu-vm-tf-2.16.1-pjrt",
            "trainCommand": "python3 train.py",
        }
    ]
    return {
        "gcp:project": {"value": "tpu-training-dev", "secret": False},
        "tpu-training:tpuVms": {"value": json.dumps(vms), "secret": True},
    }


def test_secrets_without_a_cli_are_unavailable_not_guessed(apis, scratch_project):
    tpu, _ = apis
    root = with_stack(scratch_project, SECRET_VMS)
    report = recoverer(None, "test", root)[0].run_round()
    assert report.outcome is RoundOutcome.UNAVAILABLE
    assert "holds secrets (tpu-training:tpuVms)" in report.reason
    assert round_report.exit_status(report) == exit_codes.EXIT_UNAVAILABLE
    assert tpu.calls == []


def test_a_missing_cli_is_unavailable(monkeypatch, tmp_path):
    # A missing stack, under the real CLI: tests/engine/test_engine_rounds.py.
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    with pytest.raises(PulumiUnavailable, match="Pulumi CLI cannot be run"):
        AutomationUp(REPO, lambda line: None)


# ---------------------------------------------------------------------------------------------
# The command, end to end, in a subprocess
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--once"],  # no --stack
        ["--stack", "dev", "--watch", "0"],
        ["--stack", "dev", "--watch", "nan"],
        ["--stack", "dev", "--watch", "abc"],
        ["--stack", "dev", "--watch", "1e12"],  # past a day (and past what a thread can wait)
        ["--stack", "dev", "--up-timeout", "5"],
        ["--stack", "dev", "--once", "--watch", "60"],
        ["--stack", "a/b/c/d"],
        ["--stack", "org/other-project/dev"],
    ],
)
def test_usage_errors_exit_64_before_any_work(stub, args, capsys):
    try:
        status = recover.main(args)
    except SystemExit as exc:  # argparse's own refusals
        status = exc.code
    assert status == exit_codes.EXIT_USAGE
    assert "error:" in capsys.readouterr().err
    assert stub_pulumi.calls(stub) == []


# In this process (support.harness.in_process): what they check is the command's output and status, which a
# subprocess adds nothing to; the test above runs it in one.


def test_no_pulumi_cli_exits_69_before_any_probe(apis, tmp_path):
    tpu, _ = apis
    done = in_process.run_recover("--stack", "dev", env={"PATH": str(tmp_path / "empty")})
    assert done.returncode == exit_codes.EXIT_UNAVAILABLE
    assert "Pulumi CLI cannot be run" in done.stderr
    assert "install it (version 3.226.0 or later): curl -fsSL https://get.pulumi.com | sh" in done.stderr
    assert tpu.calls == []


def test_the_latency_benchmark_runs_and_its_probe_cost_does_not_grow_with_the_vms():
    """benchmarks/recover_latency.py, smallest case: a smoke test. Its timings are printed, never
    asserted; the API calls per round are a count, and must be one per zone at any size."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "recover_latency.py"), "--vms", "8", "--interval", "0.2"]
        + ["--trials", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "latency: median" in done.stdout
    lines = done.stdout.splitlines()
    counts = [line.split(":")[1].strip() for line in lines if line.strip().endswith("calls")]
    assert counts == ["4 calls", "4 calls"]  # 8 and 32 VMs in four zones
