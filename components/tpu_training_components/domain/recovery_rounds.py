"""Hands-free recovery: from one round of decisions to what the watcher does, and when it tries
again. Pure Python; ``tpu-training recover`` runs the rounds.

A round reads the live state (one list call per zone and per namespace), decides for every TPU VM
and Job with the same decision tables `pulumi up` uses, and runs `pulumi up --refresh` only when
something must be created or replaced. Everything else, including every "unknown", costs nothing:
never replace on unknown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, Optional, Sequence

from .capacity_ladder import Rung
from .recovery import Cause, Decision, StrEnum
from .restart_budget import Recovery, read_history

RECOVERING_ACTIONS = frozenset({"create", "replace"})
"""The actions that only `pulumi up` carries out."""


class RoundOutcome(StrEnum):
    """How a recovery round ended: what became of its `pulumi up`, or why it ended before one.

    The value is what ``tpu-training recover --json`` prints: the round's ``up.status`` for the
    first seven; the key that holds the reason for the last three (``error``, ``unavailable``,
    ``tryLater``), whose rounds ran no `pulumi up` (``up.status`` ``not-run``)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """`pulumi up` failed (no capacity, a quota, its time-out), or its targets could not be found."""
    BUSY = "busy"
    """Another update held the stack."""
    NOT_RUN = "not-run"
    """Nothing to create or replace, or nothing that could be decided on: no `pulumi up`."""
    DRY_RUN = "dry-run"
    """``--dry-run``: the `pulumi up` that recovers was shown, not run."""
    STOPPED = "stopped"
    """A stop was asked before `pulumi up` started."""
    BLOCKED = "blocked"
    """Nothing could be recovered without also applying changes nobody has deployed yet (a person
    must deploy them)."""
    CONFIG_ERROR = "error"
    """The stack's configuration, stack file or project file is invalid: nothing was decided."""
    UNAVAILABLE = "unavailable"
    """No usable Pulumi CLI, or no such stack."""
    TRY_LATER = "tryLater"
    """The Pulumi CLI did not answer in time, or its preview failed: nothing was done."""


ENDED_EARLY = frozenset({RoundOutcome.CONFIG_ERROR, RoundOutcome.UNAVAILABLE, RoundOutcome.TRY_LATER})
"""The outcomes of a round that ended before it came to a `pulumi up`."""


@dataclass(frozen=True)
class RoundPlan:
    """What one round does: run `pulumi up`, or not, and why."""

    run_up: bool
    recovering: tuple[Decision, ...]
    """The VMs and Jobs that `pulumi up` will create or replace."""
    unavailable: tuple[Decision, ...]
    """Kept because their API could not be read: never an up; a later round tries again."""
    over_budget: tuple[Decision, ...] = ()
    """Jobs and JobSets whose restart budget is spent: not recovered, and the round fails."""

    @property
    def summary(self) -> str:
        if self.run_up:
            names = ", ".join(d.name for d in self.recovering)
            return (
                f"{len(self.recovering)} to create or replace ({names}): running `pulumi up --refresh` "
                f"for them alone"
            )
        if self.unavailable:
            names = ", ".join(d.name for d in self.unavailable)
            return f"nothing recovered: live state unavailable for {names}, kept as last deployed"
        return "nothing to recover: every TPU VM and Job is working or done"


def plan_round(decisions: Sequence[Decision]) -> RoundPlan:
    """`pulumi up` runs when some VM or Job must be created or replaced, and only then."""
    recovering = tuple(d for d in decisions if d.action in RECOVERING_ACTIONS or d.resumed)
    unavailable = tuple(d for d in decisions if d.unavailable)
    over_budget = tuple(d for d in decisions if d.over_budget)
    return RoundPlan(bool(recovering), recovering, unavailable, over_budget)


@dataclass
class Backoff:
    """Capped exponential back-off after failed `pulumi up` runs (a stockout, no TPU capacity):
    the first retry waits ``first_seconds``, each next one twice as long, never more than
    ``cap_seconds``. A success, or a round with nothing to do, starts over."""

    first_seconds: float = 60.0
    cap_seconds: float = 30 * 60.0
    failures: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.first_seconds <= self.cap_seconds:
            raise ValueError(
                f"back-off: first wait {self.first_seconds} s must be above 0 and at most the cap "
                f"{self.cap_seconds} s"
            )

    @property
    def delay_seconds(self) -> float:
        """How long to wait before the next `pulumi up`: 0 when the last one did not fail."""
        if self.failures == 0:
            return 0.0
        # 2 ** 60 is already far past any cap; a larger exponent would only build a huge integer.
        return min(self.cap_seconds, self.first_seconds * 2 ** min(self.failures - 1, 60))

    def record(self, outcome: RoundOutcome) -> None:
        if outcome is RoundOutcome.FAILED:
            self.failures += 1
        elif outcome in (RoundOutcome.SUCCEEDED, RoundOutcome.NOT_RUN):
            self.failures = 0


def next_round_in(interval_seconds: float, backoff: Backoff, last: RoundOutcome) -> float:
    """Seconds until the next round of a watch: the interval, or the back-off when the last
    `pulumi up` failed and the back-off is longer. A busy stack waits one interval."""
    if last is RoundOutcome.FAILED:
        return max(interval_seconds, backoff.delay_seconds)
    return interval_seconds


# --- What a round's `pulumi up` tells the stack program ---------------------------------------

ROUND_ENV = "TPU_TRAINING_RECOVERY_ROUND"
"""Set by `tpu-training recover` for its own `pulumi up` alone (the CLI hands its environment
to the language host, and that to the program): which VMs and Jobs the update recovers, so the
program's outputs say what the state holds after it (``as_deployed``)."""


class RoundEnvError(ValueError):
    """``ROUND_ENV`` holds something no recovery round writes."""


@dataclass(frozen=True)
class RecoveryRound:
    """A recovery round's `pulumi up`, as the stack program learns of it."""

    targeted: bool
    """Only the recovered VMs and Jobs are its targets (False: --apply-pending, a full update)."""
    tpu_vms: frozenset[str] = frozenset()
    """The TPU VMs it recovers, by name."""
    jobs: frozenset[str] = frozenset()
    """The Jobs and JobSets it recovers, by name."""
    restarts: Mapping[str, tuple[Recovery, ...]] = field(default_factory=dict)
    """Recovered Job or JobSet -> its recoveries within the restart budget's window, this one
    included (the stack output ``restart_budget.RESTARTS_OUTPUT``)."""
    rungs: Mapping[str, Rung] = field(default_factory=dict)
    """Recovered TPU VM -> the rung of its capacity ladder it is declared on
    (``domain.capacity_ladder``): the watcher counts the stockouts, the program declares it."""
    stockouts: frozenset[str] = frozenset()
    """The recovered TPU VMs it declares one rung down their ladder for stockouts: their cause
    is ``stockout`` (their ``recovery-cause`` label, ``lastRecoveries``)."""
    resumed: Mapping[str, str] = field(default_factory=dict)
    """Recovered VM or Job -> the cause of the recovery an interrupted update began and this one
    carries on: its cause (label, annotation, ``lastRecoveries``) instead of what this update
    sees (a node gone, "missing")."""

    def to_env(self) -> str:
        return json.dumps(
            {
                "targeted": self.targeted,
                "tpuVms": sorted(self.tpu_vms),
                "jobs": sorted(self.jobs),
                "restarts": {name: [r.to_json() for r in entries] for name, entries in self.restarts.items()},
                "rungs": {name: rung.to_json() for name, rung in self.rungs.items()},
                "stockouts": sorted(self.stockouts),
                "resumed": dict(self.resumed),
            },
            sort_keys=True,
        )

    @staticmethod
    def from_env(text: Optional[str]) -> Optional[RecoveryRound]:
        """The round ``ROUND_ENV`` describes; None when it is not set (any other `pulumi up`).
        Raises ``RoundEnvError``."""
        if text is None:
            return None
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            value = {}
        vms, jobs = value.get("tpuVms"), value.get("jobs")
        if not isinstance(value.get("targeted"), bool) or not (_names(vms) and _names(jobs)):
            raise RoundEnvError(
                f"{ROUND_ENV} = {text[:80]!r} is not what `tpu-training recover` sets (an object with "
                f"targeted, tpuVms and jobs); unset it to run `pulumi up` yourself"
            )
        history, problems = read_history(value.get("restarts") or {})
        if problems:
            raise RoundEnvError(f"{ROUND_ENV}: {problems[0]}")
        given = value.get("rungs") or {}
        rungs = (
            {name: Rung.from_json(rung) for name, rung in given.items()} if isinstance(given, dict) else None
        )
        if rungs is None or None in rungs.values():
            raise RoundEnvError(
                f"{ROUND_ENV}: rungs = {str(given)[:80]!r} is not a map of VM name -> zone and provisioning"
            )
        stockouts = value.get("stockouts") or []
        if not _names(stockouts):
            raise RoundEnvError(f"{ROUND_ENV}: stockouts = {str(stockouts)[:80]!r} is not a list of VM names")
        resumed = value.get("resumed") or {}
        if not (
            isinstance(resumed, dict)
            and all(isinstance(cause, str) and cause in CAUSES for cause in resumed.values())
        ):
            raise RoundEnvError(
                f"{ROUND_ENV}: resumed = {str(resumed)[:80]!r} is not a map of name -> one of "
                f"{sorted(CAUSES)}"
            )
        return RecoveryRound(
            value["targeted"],
            frozenset(vms or ()),
            frozenset(jobs or ()),
            history,
            {name: rung for name, rung in rungs.items() if rung is not None},
            frozenset(stockouts),
            {str(name): cause for name, cause in resumed.items()},
        )


CAUSES = frozenset(cause.value for cause in Cause)


def with_resumed_causes(
    last_recoveries: Any, resumed: Mapping[str, str], generations: Mapping[str, Any], decided_at: str
) -> Any:
    """``lastRecoveries`` (``TrainingRecovery.last_recoveries``) with each recovery an interrupted
    update began and this round carried on: its cause, marked ``resumed``. One the round kept
    (that update had made it) gets its entry here, since the program saw nothing to recover."""
    if not resumed or not isinstance(last_recoveries, dict):
        return last_recoveries
    found = dict(last_recoveries)
    for kind in ("tpuVms", "jobs"):
        entries = found.get(kind)
        if not isinstance(entries, dict):
            continue
        entries = dict(entries)
        for name, cause in resumed.items():
            if name not in generations.get(kind, {}):
                continue
            entry = entries.get(name)
            if isinstance(entry, dict) and entry.get("generation") == generations[kind][name]:
                entries[name] = {**entry, "cause": cause, "resumed": True}
            else:
                entries[name] = {
                    "action": "replace",
                    "cause": cause,
                    "reason": "an interrupted update made it; recorded by the round that carried it on",
                    "generation": generations[kind][name],
                    "decidedAt": decided_at,
                    "resumed": True,
                }
        found[kind] = entries
    return found


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(name, str) for name in value)


def as_deployed(previous: Any, new: Mapping[str, Any], recovered: Collection[str]) -> dict[str, Any]:
    """A stack output keyed by VM, Job or node pool name, as the state stands after a targeted
    update: the new value of each one recovered; for every other one, what the output said before
    (the engine kept it as the state had it, a removed one included); nothing for one that was
    never deployed (the engine did not create it)."""
    kept = {}
    if isinstance(previous, dict):
        kept = {name: value for name, value in previous.items() if name not in recovered}
    return {**kept, **{name: new[name] for name in recovered if name in new}}
