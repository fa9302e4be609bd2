"""One record per recovery, for the goodput accounting: what was re-created, why (its cause),
and how long the recovery's own part took. Pure Python; `tpu-training recover --records FILE`
appends them as JSON lines (docs/recovery-records.md has the schema and the mapping onto
ml-goodput-measurement's badput categories).

Why our own schema and not ml-goodput-measurement's recorder: that package computes
``INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION`` and ``WASTED_PROGRESS_FROM_DISRUPTION`` itself, from
the *trainer's* step and job-start entries in Cloud Logging (a step number going backwards is a
disruption; ml-goodput-measurement 0.2.3, src/goodput.py ``GoodputCalculator``); it has no entry a
recovery tool could write for "re-created because hung". A recovery record says what its
calculator cannot know (the cause, when the fault was detected, when `pulumi up` started and
ended), keyed by the same job name, so the two can be joined.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Optional

from .recovery import Decision

RECORD_FORMAT = "tpu-training-recovery/1"

INFRASTRUCTURE_RECOVERY = "infrastructure_recovery_from_disruption"
"""ml-goodput-measurement's ``BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION``, lower case:
from the disruption until the workload runs again. Every cause's recovery time falls in it; a
record's ``recoverySeconds`` is the part of it this tool spends (detection to `pulumi up` done).
Its other disruption category, ``WASTED_PROGRESS_FROM_DISRUPTION`` (the steps redone after the
restore, which a hang's ``stalledSeconds`` become), is the trainer's to count (its
``redone_steps``), not recovery's."""


@dataclass(frozen=True)
class RoundTimes:
    """When a round found what it recovers, and when its `pulumi up` ran."""

    detected_at: datetime
    up_started_at: Optional[datetime]
    up_ended_at: Optional[datetime]
    up_status: str


def _stamp(moment: Optional[datetime]) -> Optional[str]:
    """RFC 3339 in UTC, to the millisecond, as the trainer's records are written."""
    if moment is None:
        return None
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def recovery_record(stack: str, kind: str, decision: Decision, times: RoundTimes) -> dict[str, Any]:
    """The record of one VM or Job a round creates or replaces."""
    ended = times.up_ended_at
    stalled = decision.stalled_since
    return {
        "format": RECORD_FORMAT,
        "stack": stack,
        "kind": kind,
        "name": decision.name,
        # A kept one that a killed round had made is that round's replacement, recorded now.
        "action": "replace" if decision.resumed and decision.action == "keep" else decision.action,
        "cause": decision.cause.value if decision.cause is not None else None,
        "reason": decision.reason,
        "resumed": decision.resumed,
        "badput": INFRASTRUCTURE_RECOVERY if decision.cause is not None else None,
        "stalledSince": _stamp(stalled),
        "detectedAt": _stamp(times.detected_at),
        "upStartedAt": _stamp(times.up_started_at),
        "upEndedAt": _stamp(ended),
        "upStatus": times.up_status,
        "recoverySeconds": round((ended - times.detected_at).total_seconds(), 3) if ended else None,
        "stalledSeconds": round((times.detected_at - stalled).total_seconds(), 3) if stalled else None,
    }
