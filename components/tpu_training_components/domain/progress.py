"""Hung training, from the progress records trainers publish (docs/trainer.md, "Progress and save
requests"): pure Python, no client.

A trainer writes ``progress.process-N.json`` into its checkpoint folder every few seconds, from a
thread beside training: a process stuck in a collective or in I/O keeps writing but its step stops
advancing; a frozen or vanished one stops writing. Either way ``advanced_at`` (when its step last
moved) grows old, and any host of a slice stalled is the slice stalled.

Never on unknown: a workload none of whose records can be read, that has published nothing since
it was created (a new Job or VM still starting, or a trainer that does not publish), or whose
record is of an unknown format or dated in the future, is *unknown*, which recovery keeps.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Optional, Sequence, TypeGuard

from .recovery import Cause, Decision, replace, zoned_time

PROGRESS_PREFIX = "progress.process-"
PROGRESS_FORMAT = "tpu-training-progress/1"

HANG_FLOOR = timedelta(minutes=10)
"""The least a workload must stall before it is hung, whatever its steps take: a checkpoint
restore or a recompilation on a large slice takes minutes, and a replacement costs more than a
few minutes of waiting."""
STEPS_BEFORE_HANG = 20
"""Without ``hangMinutes``: hung after this many of its own measured steps without one, or
``HANG_FLOOR``, whichever is longer; a run whose steps take 3x their mean now and then (a save,
input stalls) stays far from it."""
STARTING_FLOOR = timedelta(minutes=30)
"""A process still ``starting`` (joining its hosts, restoring, compiling) is hung only after this
long, or the hang time if that is longer."""
CLOCK_SKEW = timedelta(minutes=5)
"""A record dated further than this in the future is not believed."""
TERMINAL_PHASES = frozenset({"complete", "stopped", "exited"})


class Verdict(enum.StrEnum):
    ADVANCING = "advancing"
    HUNG = "hung"
    ENDED = "ended"
    """Every process wrote a last record (complete, stopped, exited): the workload's own state
    says what comes next, not its progress."""
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ProcessProgress:
    """One process's record, as read."""

    process: int
    processes: int
    phase: str
    step: Optional[int]
    started_at: datetime
    advanced_at: datetime
    written_at: datetime
    step_seconds: Optional[float]
    request_done: Optional[str]


@dataclass(frozen=True)
class Stall:
    verdict: Verdict
    reason: str
    """One line for the round's log: which process, how long, against what limit."""
    stalled_for: Optional[timedelta] = None
    since: Optional[datetime] = None
    """Hung: when the stalled process last advanced."""
    doubtful: bool = False
    """Unknown because something could not be read or believed (not merely nothing published
    yet): the round warns."""


def read_record(text: str) -> tuple[Optional[ProcessProgress], Optional[str]]:
    """A record from the object's text, or None and why it is not one."""
    try:
        found = json.loads(text)
    except ValueError:
        return None, "not JSON"
    if not isinstance(found, dict) or found.get("format") != PROGRESS_FORMAT:
        return None, f"not a record of format {PROGRESS_FORMAT!r}"
    times: dict[str, datetime] = {}
    for key in ("started_at", "advanced_at", "written_at"):
        moment = zoned_time(found.get(key))
        if moment is None:
            return None, f"{key}={found.get(key)!r} is not an RFC 3339 time with a zone"
        times[key] = moment
    process, processes, step = found.get("process"), found.get("processes"), found.get("step")
    if not (_count(process) and _count(processes) and process < processes):
        return None, f"process={process!r} of processes={processes!r} is not a process of the run"
    if step is not None and not _count(step):
        return None, f"step={step!r} is not a whole number"
    phase = found.get("phase")
    if not isinstance(phase, str):
        return None, f"phase={phase!r} is not a string"
    step_seconds = found.get("step_seconds")
    if step_seconds is not None and not (
        isinstance(step_seconds, (int, float))
        and not isinstance(step_seconds, bool)
        and math.isfinite(step_seconds)
        and step_seconds >= 0
    ):
        step_seconds = None
    done = found.get("request_done")
    return (
        ProcessProgress(
            process=process,
            processes=processes,
            phase=phase,
            step=step,
            started_at=times["started_at"],
            advanced_at=times["advanced_at"],
            written_at=times["written_at"],
            step_seconds=float(step_seconds) if step_seconds is not None else None,
            request_done=done if isinstance(done, str) else None,
        ),
        None,
    )


@dataclass(frozen=True)
class HangCheck:
    """How one VM's or Job's training is judged by the progress records its trainer writes into
    its checkpoint folder (docs/trainer.md, "Progress and save requests")."""

    checkpoint_dir: str
    """Its ``CHECKPOINT_DIR``; only a ``gs://`` one can be read by recovery."""
    hang_minutes: Optional[float] = None
    """How long it may go without a step; None: 20 of its measured steps, at least 10 minutes
    (``domain.progress.hang_limit``)."""


def hang_limit(hang_minutes: Optional[float], step_seconds: Optional[float]) -> timedelta:
    """How long a training workload may go without a step: ``hangMinutes`` when set, otherwise
    ``STEPS_BEFORE_HANG`` of its measured steps, at least ``HANG_FLOOR``."""
    if hang_minutes is not None:
        return timedelta(minutes=hang_minutes)
    if step_seconds is None:
        return HANG_FLOOR
    return max(HANG_FLOOR, timedelta(seconds=STEPS_BEFORE_HANG * step_seconds))


def judge(
    records: Sequence[ProcessProgress],
    *,
    created_at: datetime,
    now: datetime,
    hang_minutes: Optional[float] = None,
) -> Stall:
    """The workload (a VM or Job created at ``created_at``) from its processes' records.
    Records from before ``created_at`` belong to an earlier VM or Job of the same run and say
    nothing about this one."""
    current = [record for record in records if record.started_at >= created_at]
    if not current:
        return Stall(Verdict.UNKNOWN, "no progress published since it was created")
    future = [r for r in current if max(r.advanced_at, r.written_at) > now + CLOCK_SKEW]
    if future:
        first = future[0]
        return Stall(
            Verdict.UNKNOWN,
            f"process {first.process} reports progress at {first.written_at.isoformat()}, in the "
            f"future (now {now.isoformat()})",
            doubtful=True,
        )
    if all(record.phase in TERMINAL_PHASES for record in current):
        phases = sorted({record.phase for record in current})
        return Stall(Verdict.ENDED, f"every process ended ({', '.join(phases)})")
    measured = [r.step_seconds for r in current if r.step_seconds is not None]
    limit = hang_limit(hang_minutes, max(measured) if measured else None)
    # The process nearest its limit (or furthest past it) speaks for the slice.
    stalled, allowed, record = max(
        (
            (now - r.advanced_at, max(limit, STARTING_FLOOR) if r.phase == "starting" else limit, r)
            for r in current
            if r.phase not in TERMINAL_PHASES
        ),
        key=lambda candidate: candidate[0] - candidate[1],
    )
    where = f"process {record.process} of {record.processes} ({record.phase}, step {record.step})"
    if stalled >= allowed:
        return Stall(
            Verdict.HUNG,
            f"{where} has not advanced for {_minutes(stalled)} (limit {_minutes(allowed)})",
            stalled,
            since=record.advanced_at,
        )
    return Stall(Verdict.ADVANCING, f"{where} advanced {_minutes(stalled)} ago", stalled)


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _minutes(span: timedelta) -> str:
    return f"{span.total_seconds() / 60:.1f} min"


def request_done_everywhere(records: Sequence[ProcessProgress], request_id: str) -> bool:
    """Every process of the run says the save request ``request_id`` is done (its checkpoint is
    committed)."""
    if not records:
        return False
    processes = records[0].processes
    done = {record.process for record in records if record.request_done == request_id}
    return done == set(range(processes))


def with_progress(decision: Decision, stall: Stall) -> Decision:
    """A running VM's or Job's decision once its progress is judged: replaced at a new
    generation when hung (cause ``hung``), otherwise kept as decided, with what its progress
    says (an unknown one with a warning when something could not be read or believed)."""
    if decision.action != "keep":
        return decision
    if stall.verdict is Verdict.HUNG:
        hung = replace(
            decision.name,
            decision.generation,
            f"{_first_clause(decision.reason)}, but its training is hung: {stall.reason}; the new one "
            f"resumes from its checkpoint",
            Cause.HUNG,
        )
        return dataclasses.replace(hung, stalled_since=stall.since)
    if stall.verdict is Verdict.UNKNOWN:
        return dataclasses.replace(
            decision,
            reason=f"{decision.reason}; progress unknown ({stall.reason}), so no hang is judged",
            warn=decision.warn or stall.doubtful,
        )
    return dataclasses.replace(decision, reason=f"{decision.reason}; progress: {stall.reason}")


def _first_clause(reason: str) -> str:
    return reason.split("; ", 1)[0]
