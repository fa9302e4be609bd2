"""Recovery is a reconcile: decide, from a TPU node's live state, whether `pulumi up` replaces it.

Pure Python. ``pulumi refresh`` leaves a PREEMPTED node in place and ``up`` then sees no diff, so
the program reads the live nodes itself and bumps a *recovery generation* for each node that must
be re-created. The generation is the VM's ``replacement_trigger`` and its ``recovery-generation``
label, so the decision is visible on the node and in every preview.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Literal, Mapping, Optional

GENERATION_LABEL = "recovery-generation"
CAUSE_LABEL = "recovery-cause"
"""On a TPU VM (a label) and a Job or JobSet (an annotation, ``CAUSE_ANNOTATION``): why recovery
last re-created it, one word of ``Cause``; absent on one never recovered."""
CAUSE_ANNOTATION = f"tpu-training/{CAUSE_LABEL}"

# Cloud TPU v2 API Node.State values in which a node is working or getting there by itself.
_WORKING = frozenset({"READY", "CREATING", "STARTING", "RESTARTING", "REPAIRING", "REIMAGING"})
# Gone for good: GCP does not clean these up, and they never come back on their own.
_LOST = frozenset({"PREEMPTED", "TERMINATED"})
# Someone stopped the node on purpose: replacing it would undo a human decision.
_STOPPED = frozenset({"STOPPED", "STOPPING"})
_HEALTHY = frozenset({"", "HEALTHY", "HEALTH_UNSPECIFIED"})

# Anything that starts like a date and time: each must read as a whole RFC 3339 time (below), or
# the description holds a time nobody can place, which may be that of the current event.
_TIME_LIKE = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")
# RFC 3339 section 5.6: "T" and "Z" may be written in lower case; the seconds may have any number
# of digits after the point (the TPU API writes nanoseconds, Google's maintenance-events page).
_EVENT_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
# A generation label is plain ASCII decimal: `str.isdigit()` also takes "²", which int() refuses.
# At most 15 digits: a generation also crosses gRPC as a double, exact to 2**53 (16 digits), and
# "one more" than a longer one could round back to itself (naming.MAX_RECOVERY_GENERATION).
_PLAIN_DECIMAL = re.compile(r"^[0-9]{1,15}$")


def cause_problem(value: object) -> str:
    """What is wrong with a ``recovery_cause`` argument ("" when nothing: "" or a cause word)."""
    if value == "" or value in {cause.value for cause in Cause}:
        return ""
    return f'{value!r} is no recovery cause; allowed: {", ".join(c.value for c in Cause)}, or ""'


def zoned_time(value: object) -> Optional[datetime]:
    """An RFC 3339 time with its zone, as APIs and the trainer write it (``2026-11-26T07:00:00Z``,
    ``...T07:00:00.123+00:00``); None for anything else, a time without a zone included."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def parse_generation(labels: Mapping[str, str]) -> Optional[int]:
    """The ``recovery-generation`` label as a number, or None when it is missing or not a plain
    decimal number: then nobody knows the generation, and the last deployed one stands."""
    value = labels.get(GENERATION_LABEL)
    if not isinstance(value, str) or not _PLAIN_DECIMAL.match(value):
        return None
    return int(value)


@dataclass(frozen=True)
class Condition:
    """One entry of a Kubernetes object's ``status.conditions`` (a metav1.Condition): a Job's, a
    JobSet's or a Kueue Workload's."""

    type: str
    status: str
    reason: str = ""
    message: str = ""


def true_condition(conditions: tuple[Condition, ...], *types: str) -> Optional[Condition]:
    """The first condition of one of ``types`` whose status is True."""
    for condition in conditions:
        if condition.type in types and condition.status == "True":
            return condition
    return None


@dataclass(frozen=True)
class LiveNode:
    """What the Cloud TPU API says of one node."""

    name: str
    zone: str
    state: str
    health: str = ""
    health_description: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    create_time: str = ""
    maintenance: Mapping[str, object] = field(default_factory=dict)
    """Its ``upcomingMaintenance`` as the API sent it (v2 REST JSON, camelCase); empty when none
    is announced. Read by ``maintenance_notices``, never by the decision table."""

    @property
    def generation(self) -> Optional[int]:
        """The node's ``recovery-generation`` label; None when absent or not a plain number."""
        return parse_generation(self.labels)

    @property
    def training(self) -> bool:
        """READY and healthy: only then can its training be judged by its progress."""
        return self.state == "READY" and self.health in _HEALTHY


Action = Literal["create", "keep", "replace"]

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10, which the package supports: the same, by hand
    from enum import Enum

    class StrEnum(str, Enum):
        __str__ = str.__str__
        __format__ = str.__format__


class Cause(StrEnum):
    """Why a VM or Job is created or replaced: one word per cause, the same in `recover`'s JSON
    (``cause``), on what is re-created (the ``recovery-cause`` label), in ``lastRecoveries`` and in
    the goodput records (``domain.recovery_records``). docs/recovery-causes.md maps each to
    ml-goodput-measurement's badput categories."""

    PREEMPTED = "preempted"
    """The TPU API says PREEMPTED (Spot or preemptible capacity taken back)."""
    TERMINATED = "terminated"
    """The TPU API says TERMINATED (the node ended for good, not by the stack's own hand)."""
    MAINTENANCE = "maintenance"
    """Unhealthy past the grace period after a maintenance event that did not heal."""
    UNHEALTHY = "unhealthy"
    """Unhealthy past the grace period for another reason."""
    FAILED = "failed"
    """A Job or JobSet Failed (its own restarts spent), or Kueue finished it before it ran."""
    EVICTED = "evicted"
    """A Job that Failed because its Pods were disrupted (evicted, preempted, node gone)."""
    HUNG = "hung"
    """Running, but its training has not advanced for its hang limit (``domain.progress``)."""
    FLEX_START_EXPIRED = "flex-start-expired"
    """Kueue gave up on a queued workload whose flex-start booking expired."""
    QUEUED_CAPACITY_REVOKED = "queued-capacity-revoked"
    """Kueue gave up on a queued workload after GKE took its capacity back (or never gave it)."""
    STOCKOUT = "stockout"
    """A TPU VM declared on the next rung of its capacity ladder after its creates were refused
    for want of capacity (``domain.capacity_ladder``)."""
    MISSING = "missing"
    """No such VM or Job live: deleted, or never created yet."""


@dataclass(frozen=True)
class Decision:
    """What `pulumi up` does with one VM, and why."""

    name: str
    action: Action
    generation: Optional[int]
    """The generation to declare; None means "the last one this stack deployed"."""
    reason: str
    warn: bool = False
    after_last_deployed: bool = False
    """Declare the last deployed generation + 1 (0 when this stack never deployed it): the
    resource is gone from the cloud but may still be in the stack's state, where only a new
    replacement trigger makes a plain `pulumi up` (without --refresh) create it again."""
    unavailable: bool = False
    """The API could not be read for it: the decision keeps what was last deployed, and a
    watcher should try again later."""
    restarts: int = 0
    """Gang restarts the live workload made itself in its current generation (a JobSet's
    ``status.restarts``, disruptions included): they count against the restart budget."""
    created: Optional[datetime] = None
    """When its current generation was created, when known."""
    over_budget: bool = False
    """Its restart budget is spent: recovery does not re-create it, and the round fails."""
    cause: Optional[Cause] = None
    """Why it is created or replaced (or, over its restart budget, would be); None for one kept."""
    stalled_since: Optional[datetime] = None
    """For a hung one: when its stalled process last advanced (the hang's cost starts there)."""
    resumed: bool = False
    """It carries on a recovery an interrupted update began
    (``tpu_training.recovery.interrupted_updates``): its
    cause is that recovery's. A kept one whose object that update made is recovered all the
    same: its `pulumi up` writes it into the stack's outputs."""

    @property
    def message(self) -> str:
        verb = {"create": "will be created", "keep": "is kept", "replace": "will be replaced"}
        if self.action != "keep":
            generation = "a new recovery generation"
        else:
            generation = (
                f"recovery generation {'last deployed' if self.generation is None else self.generation}"
            )
        return f"{self.name}: {self.reason} -> {verb[self.action]} ({generation})"


def keep(name: str, generation: Optional[int], reason: str, *, warn: bool = False) -> Decision:
    """Keep a live resource at its generation, or at the last deployed one when its label is
    unreadable (never 0: that would replace a healthy resource)."""
    if generation is None:
        return Decision(name, "keep", None, f"{reason}; {_NO_LABEL}", warn=True)
    return Decision(name, "keep", generation, reason, warn=warn)


def replace(name: str, generation: Optional[int], reason: str, cause: Cause) -> Decision:
    """Replace a lost resource: its generation + 1, or the last deployed + 1 when its label is
    unreadable."""
    if generation is None:
        return Decision(
            name, "replace", None, f"{reason}; {_NO_LABEL}", warn=True, after_last_deployed=True, cause=cause
        )
    return Decision(name, "replace", generation + 1, reason, cause=cause)


def live_generation(decision: Decision) -> Optional[int]:
    """The generation of the live resource a decision was made on: a kept one's own, a replaced
    one's its new generation less one (``replace``); None for one that is missing, or whose label
    or API could not be read."""
    if decision.unavailable or decision.action == "create" or decision.generation is None:
        return None
    return decision.generation - 1 if decision.action == "replace" else decision.generation


_NO_LABEL = (
    f"its {GENERATION_LABEL} label is missing or not a plain number, so the last deployed generation counts"
)


def gone(name: str, reason: str) -> Decision:
    """A VM or Job that the API says does not exist: create it, with a new generation when the
    stack deployed it before (see ``Decision.after_last_deployed``)."""
    return Decision(name, "create", None, reason, after_last_deployed=True, cause=Cause.MISSING)


def maintenance_event_time(health_description: str) -> Optional[datetime]:
    """The time of the current event in a description such as "The TPU had a maintenance event at
    2022-01-26T03:44:36.265703305Z" (Google's maintenance-events page), or None when it carries no
    time that can be read.

    A description may name several events (a maintenance, then another). The unhealthy state is
    timed from the latest of them, by the clock and not by the order of the text (offsets differ):
    an earlier one would make the state look older than it is and replace a node that may still
    heal. When any time in it cannot be read (no offset, a 30 February), the current event may be
    that one: None, and the node is kept rather than timed from a guess."""
    times = []
    for candidate in _TIME_LIKE.finditer(health_description):
        match = _EVENT_TIME.match(health_description, candidate.start())
        if match is None:
            return None
        times.append(_event_time(*match.groups()))
    if not times or None in times:
        return None
    return max(t for t in times if t is not None)


def _event_time(day: str, seconds: str, fraction: Optional[str], zone: str) -> Optional[datetime]:
    micros = (fraction or ".0")[1:7].ljust(6, "0")  # RFC 3339 allows nanoseconds; Python, micros
    offset = "+00:00" if zone in ("Z", "z") else zone
    try:
        return datetime.fromisoformat(f"{day}T{seconds}.{micros}{offset}")
    except ValueError:  # an impossible date or offset (2026-02-30, +25:00): no time to measure by
        return None


def decide(
    name: str,
    live: Optional[LiveNode],
    *,
    now: datetime,
    grace: timedelta = timedelta(minutes=30),
) -> Decision:
    """The decision table for one VM whose zone the API answered for (see README)."""
    if live is None:
        return gone(name, "no such node in its zone")
    generation = live.generation
    state, health = live.state, live.health
    if state in ("", "STATE_UNSPECIFIED"):
        return keep(name, None, "the API gave the node no state", warn=True)
    if state in _LOST:
        lost = Cause.PREEMPTED if state == "PREEMPTED" else Cause.TERMINATED
        return replace(name, generation, f"node is {state}", lost)
    if state in _STOPPED:
        return keep(
            name,
            generation,
            f"node is {state}; someone stopped it on purpose, start it or run "
            f"`pulumi up --replace <urn>` to re-create it",
            warn=True,
        )
    if health not in _HEALTHY:
        since = maintenance_event_time(live.health_description)
        if since is None:
            return keep(
                name,
                generation,
                f"health is {health} with no event time to measure it by; it is kept until "
                f"replaced by hand (`pulumi up --replace <urn>`)",
                warn=True,
            )
        lasted = now - since
        if lasted < timedelta(0):
            # An event after now: this clock or the API's is wrong, and how long the state has
            # lasted is unknown.
            return keep(
                name,
                generation,
                f"health is {health} since {since.isoformat()}, which is after now "
                f"({now.isoformat()}); a clock is wrong, so it is kept until the time has passed",
                warn=True,
            )
        if lasted > grace:
            return replace(
                name,
                generation,
                f"health has been {health} since {since.isoformat()} ({_minutes(lasted)}, "
                f"longer than the {_minutes(grace)} grace period)",
                Cause.MAINTENANCE if "maintenance" in live.health_description.lower() else Cause.UNHEALTHY,
            )
        return keep(
            name,
            generation,
            f"health is {health} since {since.isoformat()}, within the {_minutes(grace)} grace "
            f"period; most maintenance events heal by themselves",
            warn=True,
        )
    if state in _WORKING:
        return keep(name, generation, f"node is {state}")
    return keep(name, generation, f"node is in state {state!r}, which this version does not know", warn=True)


UNKNOWN_KEPT = "nothing is replaced on unknown state"
"""Ends the reason of every decision made without live state (``unreachable``)."""


def unreachable(name: str, problem: str, api: str = "TPU API") -> Decision:
    """When the API cannot say: keep the last deployed generation. Never replace on unknown."""
    return Decision(
        name,
        "keep",
        None,
        f"{api} unavailable ({problem}); {UNKNOWN_KEPT}",
        warn=True,
        unavailable=True,
    )


def failure_summary(exc: BaseException) -> str:
    """One short line for why a live-state probe failed, for ``unreachable``'s message."""
    status = getattr(exc, "status", None)
    if isinstance(status, int):  # the kubernetes client's ApiException: its text spans lines
        return f"{type(exc).__name__}: HTTP {status} {getattr(exc, 'reason', '') or ''}".strip()
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:200]


def _minutes(delta: timedelta) -> str:
    return f"{int(delta.total_seconds() // 60)} min"


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def fresh_generation(at_least: int, now: datetime) -> int:
    """A generation no earlier deployment of the resource can have used: the decision's UTC time
    as the number YYYYMMDDhhmmss, or ``at_least`` when that is higher.

    "Last deployed + 1" is not enough: the engine writes a resource's state as it changes it, but
    the stack outputs that say what was last deployed only when the program reached its end, so
    after an update that failed half-way (a node deleted, its re-creation refused for want of
    capacity) the state can already hold "last deployed + 1". Declaring that value again is then
    no change to the engine, and a plain `pulumi up` would leave the node absent. A time-based
    number grows with every decision, whatever the outputs say."""
    stamp = int(now.astimezone(timezone.utc).strftime("%Y%m%d%H%M%S"))
    return max(stamp, at_least)
