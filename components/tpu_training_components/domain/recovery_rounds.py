"""Hands-free recovery: from one round of decisions to what the watcher does, and when it tries
again. Pure Python; ``python -m infra.recover`` runs the rounds.

A round reads the live state (one list call per zone and per namespace), decides for every TPU VM
and Job with the same decision tables `pulumi up` uses, and runs `pulumi up --refresh` only when
something must be created or replaced. Everything else, including every "unknown", costs nothing:
never replace on unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Sequence

from .recovery import Decision

RECOVERING_ACTIONS = frozenset({"create", "replace"})
"""The actions that only `pulumi up` carries out."""

UpStatus = Literal["succeeded", "failed", "busy", "not-run", "dry-run", "stopped", "blocked"]
"""What became of a round's `pulumi up`: ``busy`` when another update held the stack,
``stopped`` when a stop was asked before it started, ``blocked`` when nothing could be recovered
without also applying changes nobody has deployed yet (a person must deploy them)."""


@dataclass(frozen=True)
class RoundPlan:
    """What one round does: run `pulumi up`, or not, and why."""

    run_up: bool
    recovering: tuple[Decision, ...]
    """The VMs and Jobs that `pulumi up` will create or replace."""
    unavailable: tuple[Decision, ...]
    """Kept because their API could not be read: never an up; a later round tries again."""

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
    recovering = tuple(d for d in decisions if d.action in RECOVERING_ACTIONS)
    unavailable = tuple(d for d in decisions if d.unavailable)
    return RoundPlan(run_up=bool(recovering), recovering=recovering, unavailable=unavailable)


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

    def record(self, status: UpStatus) -> None:
        if status == "failed":
            self.failures += 1
        elif status in ("succeeded", "not-run"):
            self.failures = 0


def next_round_in(interval_seconds: float, backoff: Backoff, last_status: Optional[UpStatus]) -> float:
    """Seconds until the next round of a watch: the interval, or the back-off when the last
    `pulumi up` failed and the back-off is longer. A busy stack waits one interval."""
    if last_status == "failed":
        return max(interval_seconds, backoff.delay_seconds)
    return interval_seconds
