"""domain/progress.py: hung, advancing, ended or unknown, from the trainers' progress records.
The records are the reference trainer's format (tests/trainer/test_trainer_progress.py writes them with
the real trainer)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any, Optional

import pytest
from tpu_training_components.domain.progress import (
    HANG_FLOOR,
    ProcessProgress,
    Verdict,
    hang_limit,
    judge,
    read_record,
    request_done_everywhere,
)

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
CREATED = NOW - timedelta(hours=2)


def record(
    process: int = 0,
    *,
    processes: int = 2,
    phase: str = "training",
    stalled_minutes: float = 0.5,
    started: datetime = CREATED + timedelta(minutes=1),
    step_seconds: Optional[float] = 0.5,
    done: Optional[str] = None,
) -> ProcessProgress:
    advanced = NOW - timedelta(minutes=stalled_minutes)
    return ProcessProgress(
        process=process,
        processes=processes,
        phase=phase,
        step=1200,
        started_at=started,
        advanced_at=advanced,
        written_at=max(advanced, NOW - timedelta(seconds=20)),
        step_seconds=step_seconds,
        request_done=done,
    )


def verdict(*records: ProcessProgress, hang_minutes: Optional[float] = None) -> tuple[Verdict, str]:
    stall = judge(records, created_at=CREATED, now=NOW, hang_minutes=hang_minutes)
    return stall.verdict, stall.reason


@pytest.mark.parametrize(
    ("records", "hang_minutes", "want", "said"),
    [
        ((), None, Verdict.UNKNOWN, "no progress published since it was created"),
        # The records of the VM or Job before this one say nothing about it.
        (
            (record(stalled_minutes=300, started=CREATED - timedelta(hours=5)),),
            None,
            Verdict.UNKNOWN,
            "no progress",
        ),
        ((record(0), record(1)), None, Verdict.ADVANCING, "advanced 0.5 min ago"),
        # Any host stalled is the slice stalled: the one furthest past its limit is named.
        (
            (record(0), record(1, stalled_minutes=11)),
            None,
            Verdict.HUNG,
            "process 1 of 2 (training, step 1200) has not advanced for 11.0 min (limit 10.0 min)",
        ),
        # Slow steps: 20 of them before a hang. 60 s steps: 15 min is not hung, 21 is.
        ((record(stalled_minutes=15, step_seconds=60),), None, Verdict.ADVANCING, "advanced 15.0 min ago"),
        ((record(stalled_minutes=21, step_seconds=60),), None, Verdict.HUNG, "(limit 20.0 min)"),
        # hangMinutes wins over the derived limit, either way.
        ((record(stalled_minutes=3),), 2.0, Verdict.HUNG, "has not advanced for 3.0 min (limit 2.0 min)"),
        ((record(stalled_minutes=15, step_seconds=0.1),), 60.0, Verdict.ADVANCING, "advanced 15.0 min"),
        # Still starting (restore, compile): 30 minutes at least.
        (
            (record(phase="starting", stalled_minutes=20),),
            None,
            Verdict.ADVANCING,
            "(starting, step 1200) advanced 20.0 min",
        ),
        ((record(phase="starting", stalled_minutes=31),), None, Verdict.HUNG, "(limit 30.0 min)"),
        (
            (
                record(0, phase="complete", stalled_minutes=50),
                record(1, phase="complete", stalled_minutes=50),
            ),
            None,
            Verdict.ENDED,
            "every process ended (complete)",
        ),
        # One ended, one stalled: the stalled one speaks.
        (
            (record(0, phase="exited", stalled_minutes=50), record(1, stalled_minutes=12)),
            None,
            Verdict.HUNG,
            "process 1",
        ),
        ((record(stalled_minutes=-30),), None, Verdict.UNKNOWN, "in the future"),
    ],
)
def test_verdicts(
    records: tuple[ProcessProgress, ...], hang_minutes: Optional[float], want: Verdict, said: str
) -> None:
    got, reason = verdict(*records, hang_minutes=hang_minutes)
    assert (got, said in reason) == (want, True), reason


def test_steps_that_jitter_three_times_their_mean_are_never_hung() -> None:
    """The derived limit is 20 measured steps at least: a step 3x the mean (a save, an input
    stall) is far from it, at every step time."""
    for step_seconds in (0.01, 0.5, 5.0, 60.0, 600.0):
        stalled = 3 * step_seconds / 60
        got, reason = verdict(record(stalled_minutes=stalled, step_seconds=step_seconds))
        assert got is Verdict.ADVANCING, reason
    assert hang_limit(None, None) == HANG_FLOOR
    assert hang_limit(None, 600.0) == timedelta(minutes=200)
    assert hang_limit(0.5, 600.0) == timedelta(seconds=30)


GOOD: dict[str, Any] = {
    "format": "tpu-training-progress/1",
    "process": 1,
    "processes": 2,
    "phase": "training",
    "step": 40,
    "examples": 1280,
    "started_at": "2026-11-26T10:00:00.000Z",
    "advanced_at": "2026-11-26T11:59:00.000Z",
    "written_at": "2026-11-26T11:59:30.000Z",
    "step_seconds": 0.25,
    "request_done": "maintenance-1",
}


def test_a_record_is_read() -> None:
    found, problem = read_record(json.dumps(GOOD))
    assert problem is None and found is not None
    assert (found.process, found.processes, found.step, found.step_seconds) == (1, 2, 40, 0.25)
    assert found.advanced_at == datetime(2026, 11, 26, 11, 59, tzinfo=timezone.utc)
    assert found.request_done == "maintenance-1"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("garbage", "not JSON"),
        ({"format": "tpu-training-progress/2"}, "not a record of format 'tpu-training-progress/1'"),
        ({"advanced_at": "yesterday"}, "advanced_at='yesterday' is not an RFC 3339 time with a zone"),
        ({"written_at": "2026-11-26T11:59:30"}, "written_at='2026-11-26T11:59:30' is not an RFC 3339"),
        ({"started_at": None}, "started_at=None"),
        ({"process": 2}, "process=2 of processes=2 is not a process of the run"),
        ({"process": True}, "process=True of processes=2"),
        ({"processes": 0, "process": 0}, "process=0 of processes=0"),
        ({"step": -1}, "step=-1 is not a whole number"),
        ({"step": 1.5}, "step=1.5 is not a whole number"),
        ({"phase": 3}, "phase=3 is not a string"),
    ],
)
def test_a_bad_record_says_why(change: Any, problem: str) -> None:
    text = change if isinstance(change, str) else json.dumps({**GOOD, **change})
    found, why = read_record(text)
    assert found is None and why is not None and why.startswith(problem), why


def test_a_step_time_that_is_not_a_time_is_left_out() -> None:
    for bad in ("fast", -1, float("inf"), True):
        found, _ = read_record(
            json.dumps({**GOOD, "step_seconds": bad})
            if bad != float("inf")
            else json.dumps(GOOD).replace("0.25", "Infinity")
        )
        assert found is not None and found.step_seconds is None, bad


def test_a_request_is_done_when_every_process_says_so() -> None:
    assert request_done_everywhere([record(0, done="m"), record(1, done="m")], "m")
    assert not request_done_everywhere([record(0, done="m"), record(1, done=None)], "m")
    assert not request_done_everywhere([record(0, done="m")], "m")  # process 1 unread
    assert not request_done_everywhere([], "m")
