"""The timeline of one training run: steps over time, saves, interruptions with their cause and
the gaps until training resumed. Pure Python; ``tpu_training/timeline_figure.py`` draws it.

It is read from lines of text (``timeline_from_lines``), each one of:

- a recovery record (``domain.recovery_records``, the JSON lines `tpu-training recover --records FILE`
  appends): an interruption of the named run, with its cause, at ``stalledSince`` for a hang
  (when its training stopped) or else ``detectedAt`` (nothing earlier is known of the fault);
- a trainer event line with a time in front, as ``kubectl logs --timestamps`` and Cloud Logging
  exports print it (``2026-11-26T08:41:12.123456789Z tpu-trainer: step step=41 ...``; the
  trainer's own lines carry no time, docs/trainer.md): ``step``, ``resume``, ``saving``,
  ``stopped`` and ``complete`` lines are steps over time (each names the step training had
  reached when it was printed), ``committed`` lines saves (a checkpoint is usable once
  committed), ``stopped`` an interruption by SIGTERM, and a ``resume`` after earlier lines with
  no stop between them an interruption of unknown cause, at the last line before it (as
  ml-goodput-measurement infers a disruption from a step going backwards).

Trainer lines name no run: they belong to the run being drawn. Anything else is counted as not
understood, never guessed at.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Iterable, Optional

from .recovery import zoned_time
from .recovery_records import RECORD_FORMAT

TRAINER_PREFIX = "tpu-trainer:"
UNKNOWN_CAUSE = "unknown"
"""Training resumed with no stop and no recovery record to say why."""
STEP_EVENTS = ("step", "resume", "saving", "stopped", "complete")
"""The trainer's events whose ``step=`` is where training stood when the line was printed (a
``committed`` line names an earlier step: its save started before)."""
STOPPED_CAUSE = "stopped (SIGTERM)"
"""The trainer said it was stopped: a drain, a preemption notice or a maintenance event."""

# "<RFC 3339 time> ... tpu-trainer: EVENT key=value ...": the time first (kubectl --timestamps,
# journald's short-iso, a Cloud Logging export), the trainer's line anywhere after it.
_TRAINER_LINE = re.compile(
    r"^(?P<time>\d{4}-\d\d-\d\dT[0-9:.]+(?:Z|[+-]\d\d:?\d\d))\s.*?"
    + re.escape(TRAINER_PREFIX)
    + r" (?P<event>\S+)(?P<rest>.*)$"
)
_FIELD = re.compile(r"(\w+)=(\S+)")


class TimelineError(ValueError):
    """The lines hold no timeline to draw, or several runs and no choice among them."""


@dataclass(frozen=True)
class Interruption:
    at: datetime
    cause: str
    resumed_at: Optional[datetime] = None
    """When training ran again (its next ``resume``), or when recovery's `pulumi up` ended;
    None while it has not: the gap is open."""
    detail: str = ""


@dataclass(frozen=True)
class RunTimeline:
    name: str
    steps: tuple[tuple[datetime, int], ...] = ()
    """Each (time, step) seen, in time order."""
    saves: tuple[tuple[datetime, int], ...] = ()
    """Each committed checkpoint: (when, its step)."""
    interruptions: tuple[Interruption, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.steps or self.saves or self.interruptions)

    @property
    def causes(self) -> tuple[str, ...]:
        """Every cause shown, once each, in the order first seen."""
        return tuple(dict.fromkeys(interruption.cause for interruption in self.interruptions))


@dataclass
class ReadLines:
    """What ``timeline_from_lines`` made of its lines."""

    timeline: RunTimeline
    not_understood: list[str] = field(default_factory=list)
    """``line N: why`` for each non-empty line that is no record and no trainer line."""
    other_runs: list[str] = field(default_factory=list)
    """Runs the recovery records name besides the one drawn."""


def _trainer_line(line: str) -> Optional[tuple[datetime, str, dict[str, str]]]:
    found = _TRAINER_LINE.match(line.strip())
    if found is None:
        return None
    # Python reads at most microseconds: cut kubectl's nanoseconds to six digits.
    text = re.sub(r"(\.\d{6})\d+", r"\1", found["time"])
    moment = zoned_time(text)
    if moment is None:
        return None
    return moment, found["event"], dict(_FIELD.findall(found["rest"]))


def _step(fields: dict[str, str]) -> Optional[int]:
    value = fields.get("step", "")
    return int(value) if value.isdigit() else None


def timeline_from_lines(lines: Iterable[str], *, run: Optional[str] = None) -> ReadLines:
    """The timeline of ``run`` (or of the one run the recovery records name) from ``lines``.
    Raises ``TimelineError`` when nothing in them is a record or a trainer line, or when the
    records name several runs and ``run`` does not choose."""
    records: list[dict[str, object]] = []
    events: list[tuple[datetime, str, dict[str, str]]] = []
    not_understood: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                found = json.loads(line)
            except ValueError:
                not_understood.append(f"line {number}: not JSON")
                continue
            if not isinstance(found, dict) or found.get("format") != RECORD_FORMAT:
                not_understood.append(f"line {number}: not a record of format {RECORD_FORMAT!r}")
                continue
            if zoned_time(found.get("detectedAt")) is None or not isinstance(found.get("name"), str):
                not_understood.append(f"line {number}: a recovery record without name or detectedAt")
                continue
            records.append(found)
            continue
        event = _trainer_line(line)
        if event is None:
            not_understood.append(f"line {number}: neither a recovery record nor a timed trainer line")
        else:
            events.append(event)
    if not records and not events:
        raise TimelineError(
            "no recovery record (`tpu-training recover --records`) and no timed trainer line "
            f"(`<time> {TRAINER_PREFIX} EVENT ...`, as `kubectl logs --timestamps` prints them) in "
            + (
                f"{len(not_understood)} line(s); first: {not_understood[0]}"
                if not_understood
                else "an empty file"
            )
        )
    names = list(dict.fromkeys(str(record["name"]) for record in records))
    if run is None:
        if len(names) > 1:
            raise TimelineError(
                f"the recovery records name {len(names)} runs ({', '.join(names)}); choose one"
            )
        run = names[0] if names else "run"
    chosen = [record for record in records if record["name"] == run]
    timeline = build(run, events, chosen)
    return ReadLines(timeline, not_understood, [name for name in names if name != run])


def build(
    name: str,
    events: Iterable[tuple[datetime, str, dict[str, str]]],
    records: Iterable[dict[str, object]] = (),
) -> RunTimeline:
    """One run's timeline from its trainer events (time, event, fields) and its recovery records."""
    steps: list[tuple[datetime, int]] = []
    saves: list[tuple[datetime, int]] = []
    interruptions: list[Interruption] = []
    last_seen: Optional[datetime] = None
    open_gap: Optional[int] = None
    for at, event, fields in sorted(events, key=lambda item: item[0]):
        step = _step(fields)
        if event == "resume":
            if open_gap is not None:
                interruptions[open_gap] = replace(interruptions[open_gap], resumed_at=at)
            elif last_seen is not None:
                interruptions.append(Interruption(last_seen, UNKNOWN_CAUSE, resumed_at=at))
            open_gap = None
        if event == "stopped":
            interruptions.append(Interruption(at, STOPPED_CAUSE, detail=f"at step {step}"))
            open_gap = len(interruptions) - 1
        if event in STEP_EVENTS and step is not None:
            steps.append((at, step))
        if event == "committed" and step is not None:
            saves.append((at, step))
        last_seen = at
    for record in records:
        interruptions = _with_record(interruptions, record)
    interruptions.sort(key=lambda interruption: interruption.at)
    return RunTimeline(name, tuple(steps), tuple(saves), tuple(interruptions))


def _with_record(interruptions: list[Interruption], record: dict[str, object]) -> list[Interruption]:
    """The record's interruption: it names the cause of a gap the trainer's lines already show
    (detected between the stop and the resume), or is one of its own, its gap ending when its
    `pulumi up` ended (the trainer's start after that is not known without its lines)."""
    detected = zoned_time(record.get("detectedAt"))
    assert detected is not None  # checked when read
    at = zoned_time(record.get("stalledSince")) or detected
    cause = str(record.get("cause") or UNKNOWN_CAUSE)
    detail = f"{record.get('action')}, `pulumi up` {record.get('upStatus')}"
    for index, known in enumerate(interruptions):
        ends = known.resumed_at
        if known.at <= detected and (ends is None or detected <= ends):
            interruptions[index] = replace(known, cause=cause, detail=detail)
            return interruptions
    up_ended = zoned_time(record.get("upEndedAt"))
    interruptions.append(Interruption(at, cause, resumed_at=up_ended, detail=detail))
    return interruptions
