"""A restart budget across generations: how often one training Job or JobSet may start over
within a window before hands-free recovery stops re-creating it and says why.

Pure Python. Each generation starts the workload's own restart count from zero (a JobSet's
``maxRestarts``, a Job's ``backoffLimit``), and JobSet does not count restarts for disruptions at
all (node-pressure evictions, preemptions and drains carry Kubernetes' ``DisruptionTarget``
condition, which the JobSet's failure policy restarts with ``RestartJobSetAndIgnoreMaxRestarts``):
a trainer that crashes every time, or a Pod that the kubelet evicts for memory or disk pressure
every time, would otherwise loop for ever, one generation after another.

What counts, per workload, within the last ``window`` (docs/hands-free-recovery.md):

- each recovery `tpu-training recover` made of it (a new generation), with the gang restarts
  the generation it replaced had made itself: kept in the stack output ``RESTARTS_OUTPUT``;
- the gang restarts its live JobSet has made in its current generation (``status.restarts``,
  disruptions included). JobSet keeps no time per restart: while the JobSet is younger than the
  window they all count; an older one counts at its average rate over its life
  (restarts x window / age, rounded up).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping, Optional

from .recovery import Decision

RESTARTS_OUTPUT = "recoveryRestarts"
"""Stack output holding ``{job name: [{"at": RFC 3339 time, "restarts": n}, ...]}``: the
recoveries of each Job or JobSet within the budget's window."""

DEFAULT_RESTARTS = 10
"""Restarts one workload may make within the window. A crash loop of a JobSet with the default
``maxRestarts`` (3) stops after its third generation (each counts itself and its 3 restarts),
while Spot preemptions every few hours stay well under it."""
DEFAULT_WINDOW_HOURS = 24.0


@dataclass(frozen=True)
class RestartBudget:
    """At most ``restarts`` restarts of one workload within ``window``."""

    restarts: int = DEFAULT_RESTARTS
    window: timedelta = timedelta(hours=DEFAULT_WINDOW_HOURS)

    @property
    def shown(self) -> str:
        return f"at most {self.restarts} within {_hours(self.window)}"


@dataclass(frozen=True)
class Recovery:
    """One recovery of a workload by the watcher."""

    at: datetime
    restarts: int = 0
    """Gang restarts the generation it replaced had made itself."""

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "restarts": self.restarts,
        }


def read_history(value: Any) -> tuple[dict[str, tuple[Recovery, ...]], list[str]]:
    """The recoveries in the stack output ``RESTARTS_OUTPUT``, and what could not be read in it
    (left out, and said: a history nobody can read must not stop recovery for ever)."""
    if value is None:
        return {}, []
    if not isinstance(value, dict):
        return {}, [f"stack output {RESTARTS_OUTPUT} is not a map of name -> recoveries; read as empty"]
    history: dict[str, tuple[Recovery, ...]] = {}
    problems = []
    for name, entries in value.items():
        read = []
        for entry in entries if isinstance(entries, list) else [entries]:
            recovery = _recovery(entry)
            if recovery is None:
                problems.append(
                    f"stack output {RESTARTS_OUTPUT}.{name}: {str(entry)[:80]!r} is no recovery; left out"
                )
            else:
                read.append(recovery)
        history[str(name)] = tuple(read)
    return history, problems


def _recovery(entry: Any) -> Optional[Recovery]:
    if not isinstance(entry, dict) or not isinstance(entry.get("at"), str):
        return None
    restarts = entry.get("restarts", 0)
    if isinstance(restarts, float) and restarts.is_integer():
        restarts = int(restarts)  # every number crosses the wire as a double
    if not isinstance(restarts, int) or isinstance(restarts, bool) or not 0 <= restarts <= 10**6:
        return None
    try:
        at = datetime.fromisoformat(entry["at"].replace("Z", "+00:00"))
    except ValueError:
        return None
    return Recovery(at if at.tzinfo else at.replace(tzinfo=timezone.utc), restarts)


def within(history: tuple[Recovery, ...], budget: RestartBudget, now: datetime) -> tuple[Recovery, ...]:
    """The recoveries that happened within the budget's window (a time after ``now``, from a
    wrong clock, counts: nothing is left out on a guess)."""
    return tuple(r for r in history if now - r.at <= budget.window)


def live_restarts(restarts: int, created: Optional[datetime], budget: RestartBudget, now: datetime) -> int:
    """How many of the live generation's ``restarts`` count within the window: all of them while
    it is younger than the window (or its age is unknown), else its average rate over its life."""
    if restarts <= 0:
        return 0
    if created is None:
        return restarts
    age = now - created
    if age <= budget.window:
        return restarts
    return math.ceil(restarts * (budget.window / age))


def counted(
    history: tuple[Recovery, ...],
    restarts: int,
    created: Optional[datetime],
    budget: RestartBudget,
    now: datetime,
) -> int:
    """The restarts that count against the budget now: each recovery within the window with the
    restarts of the generation it replaced, and the live generation's own."""
    recent = within(history, budget, now)
    return sum(1 + r.restarts for r in recent) + live_restarts(restarts, created, budget, now)


def spent_reason(used: int, budget: RestartBudget, *, recovering: bool) -> Optional[str]:
    """Why the budget stops recovery (``recovering``: one more restart is asked for) or is
    already exceeded by a workload that restarts itself; None when within it."""
    over = used + 1 > budget.restarts if recovering else used > budget.restarts
    if not over:
        return None
    return (
        f"its restart budget is spent: {used} restart(s) within the last {_hours(budget.window)} "
        f"(tpu-training:recovery.restartBudget: {budget.shown}); recovery stops for it: find why it keeps "
        f"failing (`kubectl describe`, its Pods' logs), then run `pulumi up` (a person's update that "
        f"re-creates it starts the count over) or raise the budget"
    )


def _hours(window: timedelta) -> str:
    return f"{window.total_seconds() / 3600:g} h"


def history_after_recovery(
    previous: tuple[Recovery, ...], restarts: int, budget: RestartBudget, now: datetime
) -> tuple[Recovery, ...]:
    """A workload's history once the watcher recovers it now: the recoveries still within the
    window, and this one with the restarts of the generation it replaces."""
    return (*within(previous, budget, now), Recovery(now, restarts))


def history_output(
    previous: Mapping[str, Any],
    recovered: Mapping[str, tuple[Recovery, ...]],
    declared: Mapping[str, int],
    last_deployed: Mapping[str, int],
    *,
    by_watcher: bool,
) -> dict[str, Any]:
    """The stack output ``RESTARTS_OUTPUT`` after an update. In the watcher's (``by_watcher``):
    each recovered workload's new history, every other one's as it was. In anyone else's `pulumi
    up`: as it was, but a workload the update re-creates (its declared generation differs from the
    last deployed one) starts its count over: a person who deploys it has looked at it."""
    if by_watcher:
        kept = {name: entries for name, entries in previous.items() if name not in recovered}
        return {**kept, **{name: [r.to_json() for r in entries] for name, entries in recovered.items()}}
    return {
        name: entries
        for name, entries in previous.items()
        if name in declared and declared[name] == last_deployed.get(name)
    }


def with_budget(
    decision: Decision, history: Optional[tuple[Recovery, ...]], budget: RestartBudget, now: datetime
) -> Decision:
    """A Job's or JobSet's ``decision`` held against its budget: a recovery it has no budget left
    for becomes a kept one (``over_budget``); one that keeps running over it is kept, with the
    same warning. ``history`` None: its recoveries are unknown (a dry run reads no stack
    outputs), and only its own restarts count."""
    recovering = decision.action in ("create", "replace")
    used = counted(history or (), decision.restarts, decision.created, budget, now)
    reason = spent_reason(used, budget, recovering=recovering)
    if reason is None:
        return decision
    if history is None:
        reason += " (its earlier recoveries, in the stack's outputs, are not read in a dry run)"
    return dataclasses.replace(
        decision,
        action="keep",
        generation=decision.generation if not recovering else None,
        reason=f"{decision.reason}; {reason}",
        warn=True,
        after_last_deployed=False,
        over_budget=True,
    )
