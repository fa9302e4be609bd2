"""How often to checkpoint: Young's interval, sqrt(2 x checkpoint cost x mean time between
interruptions), and the fraction of time it loses. Pure Python.

Every interruption loses the work since the last checkpoint, and every checkpoint costs its
writing time. With cost C, mean time between interruptions M and interval T, the expected
fraction of time lost is about C/T (writing checkpoints) + T/(2M) (re-doing half an interval per
interruption), smallest at T = sqrt(2CM) (Young, 1974; Daly, 2006, refines it for large C/M),
where it is sqrt(2C/M). The maintenance-events page's "about every hour" is that optimum only when
M = 3600^2 / (2C): 30 hours for a 60-second checkpoint.

Each interruption also costs a restart R (noticing it, a new VM or Pod, start-up, compiling,
restoring), during which nothing runs and nothing can be interrupted; and with asynchronous saves
the newest checkpoint is only usable once committed, a lag c after the save starts, so a kill in
that window goes back one more interval: T/2 + c re-done on average. Over the wall-clock time, the
fraction lost is then (C/T + (T/2 + c)/M + R/M) / (1 + R/M) (``expected_lost_fraction``). Neither
R nor c depends on T, so Young's interval is still the best one. benchmarks/goodput_measured.py
measures all of it on the reference trainer (docs/trainer.md, "The goodput model measured").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Mapping, Optional

InterruptionModel = Literal["preemptible", "spot", "flexStart", "onDemand", "reserved"]

HOUR = 3600
FLEX_START_LIMIT_SECONDS = 7 * 24 * HOUR
"""Flex-start nodes live at most 7 days (GKE docs, dws): no interruption comes later."""

DEFAULT_MEAN_HOURS_BETWEEN_INTERRUPTIONS: Mapping[InterruptionModel, float] = {
    # Google publishes no interruption rates; these are assumptions, stated with their reason, and
    # every one can be overridden in `tpu-training:checkpointing.meanHoursBetweenInterruptions`.
    # Preemptible TPUs always stop within 24 h, and may be preempted before: assume half of it.
    "preemptible": 12,
    # Spot has no time limit but may be reclaimed at any time: assume the preemptible cap.
    "spot": 24,
    # Flex-start nodes run until their max run duration, at most 7 days (GKE docs, dws).
    "flexStart": 7 * 24,
    # On-demand and reserved capacity stops only for maintenance events (Google's maintenance-events page):
    # assume a month.
    "onDemand": 30 * 24,
    "reserved": 30 * 24,
}

INTERRUPTION_MODELS: tuple[InterruptionModel, ...] = tuple(DEFAULT_MEAN_HOURS_BETWEEN_INTERRUPTIONS)


class GoodputError(ValueError):
    """The checkpoint cost and interruption rate leave no interval worth checkpointing at."""


@dataclass(frozen=True)
class CheckpointPlan:
    """When one workload checkpoints, and what interruptions cost it."""

    cost_seconds: float
    mean_seconds_between_interruptions: float
    interval_seconds: int
    """Young's interval, rounded to whole seconds: what the trainer receives."""
    restart_seconds: float = 0.0
    """What one interruption costs besides the re-done work: noticing it, a new VM or Pod,
    start-up, compiling, restoring."""

    @property
    def expected_lost_fraction(self) -> float:
        """Fraction of wall-clock time spent writing checkpoints, re-doing lost work or restarting."""
        return expected_lost_fraction(
            self.cost_seconds,
            self.mean_seconds_between_interruptions,
            self.interval_seconds,
            restart_seconds=self.restart_seconds,
        )

    def environment(self) -> dict[str, str]:
        return {"CHECKPOINT_INTERVAL_SECONDS": str(self.interval_seconds)}


def expected_lost_fraction(
    cost_seconds: float,
    mean_seconds: float,
    interval_seconds: float,
    *,
    restart_seconds: float = 0.0,
    commit_lag_seconds: float = 0.0,
) -> float:
    """First-order fraction of wall-clock time lost: C/T for writing, (T/2 + c)/M for re-doing
    work, R/M for restarting, over the 1 + R/M of wall-clock time each unit of running time takes
    (restarts are not running time: nothing there is interrupted). With R = c = 0 it is Young's
    C/T + T/(2M)."""
    running = (
        cost_seconds / interval_seconds
        + (interval_seconds / 2 + commit_lag_seconds) / mean_seconds
        + restart_seconds / mean_seconds
    )
    return running / (1 + restart_seconds / mean_seconds)


def plan_checkpoints(
    cost_seconds: float, mean_seconds_between_interruptions: float, *, restart_seconds: float = 0.0
) -> CheckpointPlan:
    """Young's interval for a checkpoint that takes ``cost_seconds`` to write, between
    interruptions ``mean_seconds_between_interruptions`` apart on average; ``restart_seconds``
    per interruption counts in the lost fraction, not in the interval."""
    cost, mean = float(cost_seconds), float(mean_seconds_between_interruptions)
    if not (math.isfinite(cost) and cost > 0):
        raise GoodputError(f"checkpoint cost {cost_seconds!r} s must be a number of seconds above 0")
    if not (math.isfinite(mean) and mean > 0):
        raise GoodputError(
            f"mean time between interruptions {mean_seconds_between_interruptions!r} s must be above 0"
        )
    if 2 * cost >= mean:
        # Then sqrt(2CM) >= M: the run would checkpoint less often than it is interrupted, and
        # lose at least half its time. Daly's refinement does no better; the cost must come down.
        raise GoodputError(
            f"a checkpoint that takes {cost:g} s is at least half the mean time between "
            f"interruptions ({mean:g} s): training would lose most of its time; make checkpoints "
            f"cheaper (smaller, asynchronous) or the capacity steadier"
        )
    if not (math.isfinite(restart_seconds) and restart_seconds >= 0):
        raise GoodputError(f"restart time {restart_seconds!r} s must be a number of seconds of at least 0")
    return CheckpointPlan(cost, mean, max(1, round(math.sqrt(2 * cost * mean))), float(restart_seconds))


def mean_seconds_between_interruptions(
    model: InterruptionModel,
    *,
    overrides_hours: Mapping[InterruptionModel, float] | None = None,
    run_limit_seconds: Optional[int] = None,
    hosts: int = 1,
) -> float:
    """The mean time between interruptions of one workload.

    ``hosts`` > 1 divides it for capacity whose VMs are interrupted one by one (Spot, on-demand,
    reserved GKE nodes): one VM's interruption stops the whole slice, so a slice of n VMs is
    interrupted n times as often (Google's maintenance-events page: the more TPUs, the likelier an
    event). A flex-start slice, or one TPU VM resource, is provisioned and ends as one.
    ``run_limit_seconds`` (a pool's max run duration) then caps it: every node goes at that time,
    all together, so the limit is not divided. Flex-start is capped at its 7 days in any case."""
    hours = (overrides_hours or {}).get(model, DEFAULT_MEAN_HOURS_BETWEEN_INTERRUPTIONS[model])
    seconds = float(hours) * HOUR
    if model != "flexStart" and hosts > 1:
        seconds /= hosts
    limits = [run_limit_seconds] if run_limit_seconds is not None else []
    if model == "flexStart":
        limits.append(FLEX_START_LIMIT_SECONDS)
    return min([seconds, *(float(limit) for limit in limits)])
