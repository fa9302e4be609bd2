"""Maintenance notices: what Cloud TPU and GKE announce before they take a node for maintenance,
read into one shape, and when the affected training should have saved by.

Pure Python. Two sources (docs/tpu-vms-and-recovery.md, "Maintenance notices"):

- a TPU VM's ``upcomingMaintenance`` (Cloud TPU API v2 REST, ``Node.upcomingMaintenance``):
  type SCHEDULED | UNSCHEDULED, ``windowStartTime``, ``windowEndTime``,
  ``latestWindowStartTime``, ``maintenanceStatus`` PENDING | ONGOING, ``canReschedule``;
- a GKE node's labels and taints (GKE 1.31.1-gke.2008000 and later, Google's "Manage GKE node
  disruption for GPUs and TPUs"): ``cloud.google.com/scheduled-maintenance-time`` and
  ``...-latest`` (epoch seconds), ``cloud.google.com/active-node-maintenance=ONGOING``, and the
  taints ``cloud.google.com/maintenance-window-started`` and
  ``cloud.google.com/impending-node-termination``.

A notice never changes a recovery decision: a healthy node is never replaced because of one, and
a window that ends with the node unhealthy is the decision table's to handle. What a notice does
is ask the training to checkpoint before the window (``save_deadline``). Bad input (a time that
does not parse, a window that ends before it starts, no start at all, a PENDING window that is
over) never raises: it is a warning that names the node and the value, and the rest is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, Mapping, Optional, Sequence

from .recovery import maintenance_event_time

NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
"""The GKE node pool a node belongs to: what the node listing selects on."""
SCHEDULED_MAINTENANCE_LABEL = "cloud.google.com/scheduled-maintenance-time"
"""When a GKE node's host maintenance is scheduled to start, in seconds since the epoch."""
LATEST_MAINTENANCE_LABEL = "cloud.google.com/scheduled-maintenance-time-latest"
"""The latest time it may start (after a reschedule), in seconds since the epoch."""
ACTIVE_MAINTENANCE_LABEL = "cloud.google.com/active-node-maintenance"
"""``ONGOING`` while GKE stops the node's workloads for host maintenance."""
WINDOW_STARTED_TAINT = "cloud.google.com/maintenance-window-started"
"""Set on a GKE node when its maintenance window has started."""
IMPENDING_TERMINATION_TAINT = "cloud.google.com/impending-node-termination"
"""Set on a GKE node that is about to be terminated (maintenance or repair)."""

SAVE_REASON = "maintenance"
"""The ``reason`` of the save request a notice turns into (docs/trainer.md)."""

Source = Literal["tpu", "gke"]
PENDING, ONGOING = "PENDING", "ONGOING"

# Epoch seconds as GKE writes them: plain ASCII decimal (`str.isdigit()` also takes "²").
_EPOCH = re.compile(r"^[0-9]{1,12}$")
# A whole RFC 3339 time and nothing else: maintenance_event_time finds one inside any text.
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


@dataclass(frozen=True)
class MaintenanceNotice:
    """One announced maintenance of one node."""

    node: str
    """The TPU VM's name, or the GKE node's."""
    source: Source
    pool: str = ""
    """The GKE node pool of a GKE node; empty for a TPU VM."""
    zone: str = ""
    """The TPU VM's zone; empty for a GKE node."""
    type: str = ""
    """SCHEDULED or UNSCHEDULED as the TPU API says; empty when the source does not say (GKE)."""
    status: str = PENDING
    """PENDING (announced) or ONGOING (the window has started, or the node is being stopped)."""
    window_start: Optional[datetime] = None
    window_end: Optional[datetime] = None
    latest_start: Optional[datetime] = None
    can_reschedule: Optional[bool] = None

    @property
    def what(self) -> str:
        """The node as a reader finds it: ``TPU VM demo-tpu`` or ``GKE node n-1 (pool p)``."""
        return f"TPU VM {self.node}" if self.source == "tpu" else f"GKE node {self.node} (pool {self.pool})"

    @property
    def request_id(self) -> str:
        """The id of the save request this notice asks for: the same every round for the same
        window, so the training is asked once (the trainer saves once per id); a window moved to
        another start is another request."""
        start = int(self.window_start.timestamp()) if self.window_start else 0
        return f"{SAVE_REASON}-{self.source}-{self.node}-{start}"

    def window(self) -> str:
        """The window as text, for a line of output."""
        start = _text(self.window_start) or "unknown start"
        end = f" to {_text(self.window_end)}" if self.window_end else ""
        latest = f" (latest start {_text(self.latest_start)})" if self.latest_start else ""
        return f"{start}{end}{latest}"

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "source": self.source,
            "pool": self.pool or None,
            "zone": self.zone or None,
            "type": self.type or None,
            "status": self.status,
            "window": {
                "start": _text(self.window_start),
                "end": _text(self.window_end),
                "latestStart": _text(self.latest_start),
            },
            "canReschedule": self.can_reschedule,
        }


@dataclass
class ReadNotices:
    """The notices read from one source, and what was wrong with the input on the way."""

    notices: list[MaintenanceNotice] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _text(moment: Optional[datetime]) -> Optional[str]:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if moment else None


def _rfc3339(value: Any) -> Optional[datetime]:
    if not isinstance(value, str) or not _RFC3339.match(value):
        return None
    return maintenance_event_time(value)


def _epoch(value: Any) -> Optional[datetime]:
    if not isinstance(value, str) or not _EPOCH.match(value):
        return None
    try:
        return datetime.fromtimestamp(int(value), timezone.utc)
    except (OverflowError, OSError, ValueError):  # beyond what a datetime holds
        return None


def tpu_notice(node: str, zone: str, maintenance: Mapping[str, Any], now: datetime) -> ReadNotices:
    """The notice in a TPU node's ``upcomingMaintenance`` (the API's JSON, camelCase), if any."""
    read = ReadNotices()
    if not maintenance:
        return read
    where = f"TPU VM {node} ({zone}): upcomingMaintenance"

    def moment(key: str) -> Optional[datetime]:
        value = maintenance.get(key)
        if value is None or value == "":
            return None
        parsed = _rfc3339(value)
        if parsed is None:
            read.warnings.append(f"{where}.{key} = {value!r} is not an RFC 3339 time; it is ignored")
        return parsed

    status = maintenance.get("maintenanceStatus")
    status = status if status in (PENDING, ONGOING) else None
    if status is None:
        read.warnings.append(
            f"{where}.maintenanceStatus = {maintenance.get('maintenanceStatus')!r} is neither PENDING nor "
            f"ONGOING; the notice is read as PENDING"
        )
    kind = maintenance.get("type")
    can_reschedule = maintenance.get("canReschedule")
    _add(
        read,
        where,
        MaintenanceNotice(
            node=node,
            source="tpu",
            zone=zone,
            type=kind if isinstance(kind, str) and kind != "UNKNOWN_TYPE" else "",
            status=status or PENDING,
            window_start=moment("windowStartTime"),
            window_end=moment("windowEndTime"),
            latest_start=moment("latestWindowStartTime"),
            can_reschedule=can_reschedule if isinstance(can_reschedule, bool) else None,
        ),
        {key: maintenance.get(key) for key in ("windowStartTime", "windowEndTime", "latestWindowStartTime")},
        now,
    )
    return read


@dataclass(frozen=True)
class PoolNode:
    """A GKE node of one of the stack's pools, as the Kubernetes API lists it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[str] = ()
    """The keys of its taints."""

    @property
    def pool(self) -> str:
        return self.labels.get(NODE_POOL_LABEL, "")


def gke_notice(node: PoolNode, now: datetime) -> ReadNotices:
    """The notice in a GKE node's maintenance labels and taints, if any."""
    read = ReadNotices()
    labels = node.labels
    ongoing = labels.get(ACTIVE_MAINTENANCE_LABEL) == ONGOING or any(
        taint in (WINDOW_STARTED_TAINT, IMPENDING_TERMINATION_TAINT) for taint in node.taints
    )
    keys = (SCHEDULED_MAINTENANCE_LABEL, LATEST_MAINTENANCE_LABEL)
    if not ongoing and not any(key in labels for key in keys):
        return read
    where = f"GKE node {node.name} (pool {node.pool})"

    def moment(key: str) -> Optional[datetime]:
        value = labels.get(key)
        if value is None:
            return None
        parsed = _epoch(value)
        if parsed is None:
            read.warnings.append(
                f"{where}: label {key}={value!r} is not a time in seconds since the epoch; it is ignored"
            )
        return parsed

    _add(
        read,
        where,
        MaintenanceNotice(
            node=node.name,
            source="gke",
            pool=node.pool,
            status=ONGOING if ongoing else PENDING,
            window_start=moment(SCHEDULED_MAINTENANCE_LABEL),
            latest_start=moment(LATEST_MAINTENANCE_LABEL),
        ),
        {key: labels.get(key) for key in keys},
        now,
    )
    return read


def _add(
    read: ReadNotices, where: str, notice: MaintenanceNotice, sent: Mapping[str, Any], now: datetime
) -> None:
    """Check the notice's window and keep it (or not), saying what was wrong."""
    start, end, latest = notice.window_start, notice.window_end, notice.latest_start
    shown = ", ".join(f"{key}={value!r}" for key, value in sent.items() if value is not None) or "no times"
    start_sent = next(iter(sent.values()), None)  # the start's key comes first
    if start is None and notice.status == PENDING and start_sent in (None, ""):
        # (A start that was sent but does not read is warned of where it is read.)
        read.warnings.append(
            f"{where}: a maintenance notice without a window start ({shown}); it is named, and no save "
            f"is asked for it"
        )
    if start is not None and end is not None and end < start:
        read.warnings.append(
            f"{where}: the maintenance window ends ({_text(end)}) before it starts ({_text(start)}); its end "
            f"is ignored"
        )
        end = None
    if start is not None and latest is not None and latest < start:
        read.warnings.append(
            f"{where}: the latest start ({_text(latest)}) is before the window start ({_text(start)}); it is "
            f"ignored"
        )
        latest = None
    known = [t for t in (start, end, latest) if t is not None]
    if notice.status == PENDING and known and max(known) < now:
        # Announced, never started, and every time it names has passed: left over, not upcoming.
        read.warnings.append(
            f"{where}: a PENDING maintenance notice whose window is over ({shown}, now {_text(now)}) is "
            f"stale; it is ignored"
        )
        return
    read.notices.append(replace(notice, window_end=end, latest_start=latest))


def save_deadline(notice: MaintenanceNotice, now: datetime, margin: timedelta) -> Optional[datetime]:
    """The ``before`` of the save request for ``notice``, or None when no save is to be asked.

    ``margin`` is what a checkpoint takes (the stack's ``checkpointing.costSeconds``): a save
    begun later than ``window start - margin`` may not be committed before the window, so that
    is the request's ``before`` while it is ahead. Closer to the start, the start itself: a save
    begun then may still beat maintenance that starts later in its window. Inside a window that
    has not started its work (PENDING, start passed), the end of the window (or the latest
    start). An ONGOING window asks nothing: the node is being stopped, and the trainer's
    SIGTERM save is what is left; a window without a readable start asks nothing either."""
    if notice.status != PENDING or notice.window_start is None:
        return None
    start = notice.window_start
    if start - margin > now:
        return start - margin
    if start > now:
        return start
    ends = [t for t in (notice.window_end, notice.latest_start) if t is not None and t > now]
    return min(ends) if ends else None
