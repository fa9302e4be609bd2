"""What a recovery round did (``RoundReport``): its lines, its JSON (``--json``), its recovery
records, and the exit status of a one-round run."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

from tpu_training_components.domain.capacity_ladder import (
    CreateFailure,
    Rung,
)
from tpu_training_components.domain.recovery import (
    Decision,
)
from tpu_training_components.domain.recovery_records import RoundTimes, recovery_record
from tpu_training_components.domain.recovery_rounds import (
    ENDED_EARLY,
    RoundOutcome,
    RoundPlan,
)

from tpu_training.exit_codes import EXIT_CONFIG_ERROR, EXIT_OK, EXIT_TRY_LATER, EXIT_UNAVAILABLE
from tpu_training.recovery.automation import (
    PendingChange,
    UpResult,
)
from tpu_training.recovery.maintenance import NoticeRound

EXIT_UP_FAILED = 1


@dataclass
class RoundReport:
    stack: str
    number: int
    started: str
    decisions: list[tuple[str, Decision]] = field(default_factory=list)
    plan: Optional[RoundPlan] = None
    up: Optional[UpResult] = None
    """The round's `pulumi up`, once it came to one: run, or held back (dry run, stop, blocked)."""
    ended_early: Optional[tuple[RoundOutcome, str]] = None
    """How and why the round ended before it came to a `pulumi up`: an outcome of ``ENDED_EARLY``,
    and the message."""
    targets: tuple[str, ...] = ()
    """The URNs its `pulumi up` targeted (none: a full update, or no update)."""
    pending: tuple[PendingChange, ...] = ()
    """Changes a full update would make that recovery did not decide."""
    duration_seconds: float = 0.0
    notices: Optional[NoticeRound] = None
    """The maintenance notices the round read, and the save requests they became."""
    trigger: str = "first"
    """What started the round: "first", "interval", or "event: <the cluster change>"."""
    detected_at: Optional[datetime] = None
    """When the round had decided (its live state read)."""
    up_started_at: Optional[datetime] = None
    up_ended_at: Optional[datetime] = None
    rungs: dict[str, Rung] = field(default_factory=dict)
    """The rung of its capacity ladder each recovered TPU VM is declared on."""
    gcp_project: Optional[str] = None
    """The stack's Google Cloud project, once its config was read: where its records are logged."""
    create_failures: dict[str, CreateFailure] = field(default_factory=dict)
    """How the create of each recovered TPU VM failed, when its `pulumi up` failed."""
    stockout_moves: set[str] = field(default_factory=set)
    """TPU VMs this round declares one rung down (cause ``stockout``)."""
    ladder_moves: tuple[str, ...] = ()
    """TPU VMs whose next creation goes one rung down: the next round is a new attempt, not a
    retry, so a watch does not back off before it."""
    released_locks: list[str] = field(default_factory=list)
    """The locks of dead updates the round released, one line each: whose, and how it knew."""
    settled: list[str] = field(default_factory=list)
    """What the round did to settle the state interrupted updates left
    (``tpu_training.recovery.interrupted_updates``)."""

    def recovery_records(self) -> list[dict[str, Any]]:
        """One record per VM or Job the round's `pulumi up` recovered (or tried to): its cause and
        how long the recovery took (``domain.recovery_records``); none when no up ran."""
        if self.plan is None or self.up is None or self.detected_at is None:
            return []
        times = RoundTimes(self.detected_at, self.up_started_at, self.up_ended_at, self.up.status.value)
        recovering = set(self.plan.recovering)
        records = []
        for kind, decision in self.decisions:
            if decision not in recovering:
                continue
            record = recovery_record(self.stack, kind, decision, times)
            if self.released_locks:
                record["releasedLocks"] = list(self.released_locks)
            if kind == "tpuVm" and decision.name in self.rungs:
                # Its rung, and how its create failed: what a later run counts stockouts from.
                record["rung"] = self.rungs[decision.name].to_json()
                failure = self.create_failures.get(decision.name)
                record["createFailure"] = failure.value if failure is not None else None
            records.append(record)
        return records

    @property
    def outcome(self) -> RoundOutcome:
        if self.ended_early is not None:
            return self.ended_early[0]
        return self.up.status if self.up is not None else RoundOutcome.NOT_RUN

    @property
    def reason(self) -> Optional[str]:
        """Why the round ended early; None when it did not."""
        return self.ended_early[1] if self.ended_early is not None else None

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "round": self.number,
            "started": self.started,
            "durationSeconds": self.duration_seconds,
            "trigger": self.trigger,
            # "error", "unavailable", "tryLater": the reason under the key of its outcome.
            **{outcome.value: self.reason if self.outcome is outcome else None for outcome in ENDED_EARLY},
            "targets": list(self.targets),
            "releasedLocks": list(self.released_locks),
            "settled": list(self.settled),
            "pendingChanges": [{"urn": p.urn, "op": p.op, "keys": list(p.keys)} for p in self.pending],
            "decisions": [
                {
                    "kind": kind,
                    "name": d.name,
                    "action": d.action,
                    # A new one (create, replace) is stamped by the program when it declares it.
                    "generation": d.generation if d.action == "keep" else None,
                    "afterLastDeployed": d.after_last_deployed,
                    "reason": d.reason,
                    # One word (domain.recovery.Cause) for a create or replace; null for a keep.
                    "cause": d.cause.value if d.cause is not None else None,
                    "warn": d.warn,
                    "unavailable": d.unavailable,
                    "restarts": d.restarts,
                    "overBudget": d.over_budget,
                    "resumed": d.resumed,
                }
                for kind, d in self.decisions
            ],
            "notices": self.notices.to_json() if self.notices else [],
            "upNeeded": bool(self.plan and self.plan.run_up),
            "up": {
                "status": (self.up.status if self.up else RoundOutcome.NOT_RUN).value,
                "message": self.up.message if self.up else None,
                "durationSeconds": self.up.duration_seconds if self.up else 0.0,
                "changes": self.up.changes if self.up else {},
            },
        }


EXIT_STATUSES = {
    RoundOutcome.SUCCEEDED: EXIT_OK,
    RoundOutcome.FAILED: EXIT_UP_FAILED,
    RoundOutcome.BUSY: EXIT_TRY_LATER,
    RoundOutcome.NOT_RUN: EXIT_OK,
    RoundOutcome.DRY_RUN: EXIT_OK,
    RoundOutcome.STOPPED: EXIT_TRY_LATER,
    RoundOutcome.BLOCKED: EXIT_UP_FAILED,
    RoundOutcome.CONFIG_ERROR: EXIT_CONFIG_ERROR,
    RoundOutcome.UNAVAILABLE: EXIT_UNAVAILABLE,
    RoundOutcome.TRY_LATER: EXIT_TRY_LATER,
}
"""The status of a one-round run by its outcome, but for the two cases of ``exit_status``."""


def exit_status(report: RoundReport) -> int:
    """The status of a one-round run (``--once``)."""
    outcome = report.outcome
    if outcome not in ENDED_EARLY and report.plan is not None:
        if report.plan.over_budget:
            return EXIT_UP_FAILED
        if outcome is RoundOutcome.NOT_RUN and report.plan.unavailable:
            return EXIT_TRY_LATER
    return EXIT_STATUSES[outcome]
