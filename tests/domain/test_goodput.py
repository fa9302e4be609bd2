"""How often to checkpoint: Young's interval sqrt(2 x cost x MTBI), its expected loss, the
defaults per provisioning model, and CHECKPOINT_INTERVAL_SECONDS reaching every VM and Job."""

from __future__ import annotations

import math

import pytest
from support.harness.program import REPO, refused, run_stack
from tpu_training_components.domain.goodput import (
    DEFAULT_MEAN_HOURS_BETWEEN_INTERRUPTIONS,
    GoodputError,
    expected_lost_fraction,
    mean_seconds_between_interruptions,
    plan_checkpoints,
)

CHECKPOINTING = "tpu-training:checkpointing"
HOUR = 3600


# --- the formula ---------------------------------------------------------------------------


def test_youngs_interval_for_a_minute_long_checkpoint_and_twelve_hours():
    plan = plan_checkpoints(60, 12 * HOUR)
    # sqrt(2 * 60 * 43200) = sqrt(5184000) = 2276.8...
    assert plan.interval_seconds == 2277
    assert plan.environment() == {"CHECKPOINT_INTERVAL_SECONDS": "2277"}


@pytest.mark.parametrize(("cost", "hours"), [(10, 1), (60, 12), (300, 168), (30, 720)])
def test_the_interval_minimises_the_expected_loss(cost, hours):
    plan = plan_checkpoints(cost, hours * HOUR)
    best = plan.expected_lost_fraction
    for factor in (0.5, 0.8, 0.95, 1.05, 1.25, 2):
        assert best < expected_lost_fraction(cost, hours * HOUR, plan.interval_seconds * factor)
    # At the optimum the loss is sqrt(2C/M).
    assert best == pytest.approx(math.sqrt(2 * cost / (hours * HOUR)), rel=1e-3)


def test_hourly_is_near_optimal_only_for_some_rates():
    """Seed 001's "about every hour" against Young's interval, for a 60 s checkpoint."""

    def hourly_excess(hours: float) -> float:
        mean = hours * HOUR
        return expected_lost_fraction(60, mean, HOUR) / plan_checkpoints(60, mean).expected_lost_fraction

    assert hourly_excess(30) < 1.01  # one interruption in 30 h: hourly is the optimum
    assert hourly_excess(2) > 2  # one in 2 h (busy Spot capacity): hourly loses twice as much
    assert hourly_excess(720) > 2.5  # one a month: hourly checkpoints far too often


@pytest.mark.parametrize(
    ("cost", "mean"), [(0, 3600), (-1, 3600), (float("nan"), 3600), (60, 0), (1800, 3600)]
)
def test_no_interval_for_impossible_costs(cost, mean):
    with pytest.raises(GoodputError):
        plan_checkpoints(cost, mean)


def test_restarts_and_the_commit_lag_add_to_the_loss_but_not_to_the_interval():
    cost, mean = 60.0, 12 * HOUR
    young = plan_checkpoints(cost, mean).interval_seconds
    assert plan_checkpoints(cost, mean, restart_seconds=600).interval_seconds == young
    # Without them, Young's C/T + T/(2M).
    assert expected_lost_fraction(cost, mean, young) == cost / young + young / (2 * mean)
    # A restart of R: R/M more lost while running, and the run takes 1 + R/M of wall time.
    with_restart = expected_lost_fraction(cost, mean, young, restart_seconds=600)
    assert with_restart == pytest.approx((cost / young + young / (2 * mean) + 600 / mean) / (1 + 600 / mean))
    # A save committed c after it starts: a kill in that window goes back one more interval.
    lagged = expected_lost_fraction(cost, mean, young, commit_lag_seconds=30)
    assert lagged == pytest.approx(cost / young + (young / 2 + 30) / mean)
    # Young's interval is still the best one with both.
    best = expected_lost_fraction(cost, mean, young, restart_seconds=600, commit_lag_seconds=30)
    for factor in (0.5, 0.8, 1.25, 2.0):
        assert best < expected_lost_fraction(
            cost, mean, young * factor, restart_seconds=600, commit_lag_seconds=30
        )
    with pytest.raises(GoodputError, match="restart time -1 s must be a number of seconds of at least 0"):
        plan_checkpoints(cost, mean, restart_seconds=-1)


def test_defaults_and_their_adjustments():
    assert mean_seconds_between_interruptions("preemptible") == 12 * HOUR
    assert mean_seconds_between_interruptions("spot", overrides_hours={"spot": 3}) == 3 * HOUR
    # A flex-start node goes at its max run duration; a slice of them goes together.
    assert mean_seconds_between_interruptions("flexStart", run_limit_seconds=24 * HOUR, hosts=4) == 24 * HOUR
    # Spot VMs of a slice are reclaimed one by one, and any one stops the slice.
    assert mean_seconds_between_interruptions("spot", hosts=4) == 6 * HOUR
    assert set(DEFAULT_MEAN_HOURS_BETWEEN_INTERRUPTIONS) == {
        "preemptible",
        "spot",
        "flexStart",
        "onDemand",
        "reserved",
    }


# --- the stack ------------------------------------------------------------------------------


def test_dev_stack_passes_each_run_its_interval(config):
    run = run_stack(config)
    assert run.outputs["trainingEnvironments"]["demo-tpu"]["CHECKPOINT_INTERVAL_SECONDS"] == "1315"
    # Its 20 s checkpoint, preemptible (12 h): sqrt(2 * 20 * 43200) = 1314.5...; the v6e Job runs on
    # flex-start (7 days): sqrt(2 * 20 * 604800) = 4918.5...
    assert run.outputs["jobs"]["train-v6e"]["environment"]["CHECKPOINT_INTERVAL_SECONDS"] == "4919"
    # Young's and the default restart of 300 s per 12 h, over wall time:
    # (20/1315 + 1315/86400 + 300/43200) / (1 + 300/43200) = 3.71%.
    assert run.outputs["checkpointing"]["demo-tpu"] == {
        "intervalSeconds": 1315,
        "meanHoursBetweenInterruptions": 12,
        "expectedLostPercent": 3.71,
    }
    # The Job's Pods read it from their run parameters (a ConfigMap), so a new interval never
    # changes the Job's Pod template.
    run_parameters = run.one("kubernetes:core/v1:ConfigMap", "train-v6e-run-parameters").inputs["data"]
    assert run_parameters["CHECKPOINT_INTERVAL_SECONDS"] == "4919"
    script = run.one("gcp:tpu/v2Vm:V2Vm", "demo-tpu-vm").inputs["metadata"]["startup-script"]
    assert "\n  CHECKPOINT_INTERVAL_SECONDS=1315\n" in script  # the trainer's environment
    assert any("demo-tpu: checkpoint every 1315 s" in line for line in run.infos)


def test_overrides_and_slice_size_change_the_interval(config):
    config[CHECKPOINTING] = {
        "costSeconds": 30,
        "meanHoursBetweenInterruptions": {"preemptible": 2, "spot": 8},
    }
    config["tpu-training:nodePools"][0]["provisioning"] = "spot"
    run = run_stack(config)
    # preemptible 2 h: sqrt(2 * 30 * 7200) = 657.2; the Job's 4-VM Spot slice: 8 h / 4 = 2 h too.
    assert run.outputs["checkpointing"]["demo-tpu"]["intervalSeconds"] == 657
    assert run.outputs["checkpointing"]["train-v6e"]["intervalSeconds"] == 657
    assert run.outputs["checkpointing"]["train-v6e"]["meanHoursBetweenInterruptions"] == 2


def test_without_checkpointing_no_interval_is_passed(config):
    del config[CHECKPOINTING]
    run = run_stack(config)
    assert "CHECKPOINT_INTERVAL_SECONDS" not in run.outputs["trainingEnvironments"]["demo-tpu"]
    assert "checkpointing" not in run.outputs


def test_a_users_own_interval_wins(config):
    config["tpu-training:tpuVms"][0]["env"] = {"CHECKPOINT_INTERVAL_SECONDS": "600"}
    run = run_stack(config)
    assert run.outputs["trainingEnvironments"]["demo-tpu"]["CHECKPOINT_INTERVAL_SECONDS"] == "600"


@pytest.mark.parametrize(
    ("checkpointing", "says"),
    [
        ({"costSeconds": 0}, "tpu-training:checkpointing.costSeconds = 0"),
        ({"costSeconds": "60"}, 'tpu-training:checkpointing.costSeconds = "60"'),
        ({}, "tpu-training:checkpointing"),
        (
            {"costSeconds": 60, "meanHoursBetweenInterruptions": {"sopt": 3}},
            "meanHoursBetweenInterruptions.sopt",
        ),
        (
            {"costSeconds": 60, "meanHoursBetweenInterruptions": {"spot": -3}},
            "meanHoursBetweenInterruptions.spot",
        ),
        ({"costSeconds": 60, "costSecond": 1}, "checkpointing.costSecond"),
    ],
)
def test_bad_checkpointing_is_refused_naming_the_key(config, checkpointing, says):
    config[CHECKPOINTING] = checkpointing
    if checkpointing == {}:
        # `{}` is the declared default: no checkpointing, not an error.
        assert "checkpointing" not in run_stack(config).outputs
        return
    assert says in refused(config)


def test_a_checkpoint_slower_than_half_the_interruptions_is_refused_per_workload(config):
    config[CHECKPOINTING] = {"costSeconds": 7 * HOUR}
    message = refused(config)
    assert "tpu-training:checkpointing, for tpuVms[0] (demo-tpu, preemptible)" in message
    assert "at least half the mean time between interruptions" in message
    assert "jobs[0]" not in message  # 7 h against flex-start's 7 days is fine


def test_the_readme_table_is_what_the_formula_gives():
    """docs/checkpointing.md compares hourly with Young's interval: recomputed here."""
    section = (REPO / "docs" / "checkpointing.md").read_text()
    rows = [line for line in section.splitlines() if line.startswith("| ") and " s | " in line[:10]]
    assert len(rows) >= 6
    for row in rows:
        cost, mean, interval, young, hourly, ratio = (cell.strip() for cell in row.strip("|").split("|"))
        cost_s, mean_s = float(cost.split()[0]), float(mean.split()[0]) * HOUR
        plan = plan_checkpoints(cost_s, mean_s)
        hourly_loss = expected_lost_fraction(cost_s, mean_s, HOUR)
        assert interval.startswith(f"{plan.interval_seconds} s"), row
        assert young == f"{100 * plan.expected_lost_fraction:.1f}%", row
        assert hourly == f"{100 * hourly_loss:.1f}%", row
        assert ratio == f"{hourly_loss / plan.expected_lost_fraction:.2f}×", row


def test_a_run_limit_is_not_divided_by_the_hosts_and_flex_start_never_outlives_a_week():
    # A 4-VM Spot slice with a 4 h max run duration: min(4 h, 24 h / 4) = 4 h.
    spot = mean_seconds_between_interruptions("spot", run_limit_seconds=4 * HOUR, hosts=4)
    assert spot == 4 * HOUR
    flex = mean_seconds_between_interruptions("flexStart", overrides_hours={"flexStart": 1000})
    assert flex == 7 * 24 * HOUR


@pytest.mark.parametrize("key", ["costSeconds", "meanHoursBetweenInterruptions"])
def test_numbers_too_large_for_a_float_are_refused_not_a_traceback(config, key):
    huge = int("1" * 400)
    config[CHECKPOINTING] = (
        {"costSeconds": huge} if key == "costSeconds" else {"costSeconds": 60, key: {"spot": huge}}
    )
    message = refused(config)
    assert f"tpu-training:checkpointing.{key}" in message
    assert "too large a number" in message


def test_an_unknown_checkpointing_key_lists_the_allowed_ones(config):
    config[CHECKPOINTING] = {"costSeconds": 60, "costSecond": 1}
    message = refused(config)
    assert "allowed in tpu-training:checkpointing: costSeconds, meanHoursBetweenInterruptions" in message


def test_a_learning_rate_too_large_for_a_float_is_refused_too(config):
    # The same integer-to-float reading serves tpu-training:training.baseLearningRate.
    config["tpu-training:training"]["baseLearningRate"] = int("9" * 400)
    message = refused(config)
    assert "tpu-training:training.baseLearningRate" in message
    assert "too large a number" in message
