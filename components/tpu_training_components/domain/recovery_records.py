"""One record per recovery, for the goodput accounting: what was re-created, why (its cause),
and how long the recovery's own part took. Pure Python; `python -m infra.recover --records FILE`
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

from .recovery import Cause, Decision

RECORD_FORMAT = "tpu-training-recovery/1"

INFRASTRUCTURE_RECOVERY = "infrastructure_recovery_from_disruption"
"""ml-goodput-measurement's ``BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION``, lower case:
from the disruption until the workload runs again. A record's ``recoverySeconds`` is the part
of it this tool spends (detection to `pulumi up` done)."""
WASTED_PROGRESS = "wasted_progress_from_disruption"
"""``BadputType.WASTED_PROGRESS_FROM_DISRUPTION``: the steps redone after the restore; the
trainer knows them (its ``redone_steps``), not recovery."""

BADPUT_OF_CAUSE: dict[Cause, str] = {cause: INFRASTRUCTURE_RECOVERY for cause in Cause}
"""Every cause's recovery time is infrastructure recovery in ml-goodput-measurement's terms; a
hang also wastes the time it stalled (``stalledSeconds``), which its calculator counts as wasted
progress once the restarted run redoes those steps."""


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
        "action": decision.action,
        "cause": decision.cause.value if decision.cause is not None else None,
        "reason": decision.reason,
        "badput": BADPUT_OF_CAUSE[decision.cause] if decision.cause is not None else None,
        "stalledSince": _stamp(stalled),
        "detectedAt": _stamp(times.detected_at),
        "upStartedAt": _stamp(times.up_started_at),
        "upEndedAt": _stamp(ended),
        "upStatus": times.up_status,
        "recoverySeconds": round((ended - times.detected_at).total_seconds(), 3) if ended else None,
        "stalledSeconds": round((times.detected_at - stalled).total_seconds(), 3) if stalled else None,
    }
