"""Whose lock holds the stack, and whether a recovery round may release it: pure Python.

A round whose `pulumi up` is refused because the stack is locked reads the holders from the
CLI's refusal. The file and Cloud Storage backends ("diy") write each lock as a file holding the
holder's pid, user, host and start time, and list every one in the refusal (pulumi/pulumi
v3.274.1, pkg/backend/diy/lock.go ``checkForLock``)::

    the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end or
    delete the lock file with `pulumi cancel`.
      file:///state/.pulumi/locks/organization/tpu-training/dev/1f0c….json: created by
      ci@runner-7 (pid 4242) at 2026-12-02T07:41:09Z

A lock is released (`pulumi cancel`, which deletes every lock of the stack:
pkg/backend/diy/backend.go ``CancelCurrentUpdate``) only when every holder is known to be gone:

- taken on this host by a pid that no longer runs a Pulumi CLI: nothing runs that update any
  more, whoever started it (a killed recovery round, a person's `pulumi up` killed with its
  terminal), so releasing it disturbs no one;
- taken on another host longer ago than any recovery update can run: a round stops its own
  `pulumi up` at ``--up-timeout`` plus the stop grace (infra/automation.py), so a lock older than
  that plus a margin for the hosts' clocks is not a live round's.

Anything else (a live pid here, a younger lock from another host, a refusal that names no
holder, Pulumi Cloud's "Another update is currently in progress", which says nothing of who) is
left alone: the round ends with exit 75 and a later one tries again.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Optional, Sequence

CLOCK_MARGIN = timedelta(minutes=15)
"""How far two hosts' clocks may disagree when one judges the age of the other's lock."""

_HOLDER = re.compile(
    r"^\s*(?P<url>\S+): created by (?P<user>.*)@(?P<host>[^@\s]+) \(pid (?P<pid>\d+)\) at (?P<at>\S+)\s*$"
)


@dataclass(frozen=True)
class LockHolder:
    """One lock file of the stack, as the refusal lists it."""

    url: str
    user: str
    host: str
    pid: int
    taken_at: Optional[datetime]
    """When the holder took it (None when the refusal's time cannot be read)."""

    @property
    def shown(self) -> str:
        taken = self.taken_at.strftime("%Y-%m-%dT%H:%M:%SZ") if self.taken_at else "an unknown time"
        return f"{self.user}@{self.host} (pid {self.pid}, since {taken})"


def lock_holders(refusal: str) -> list[LockHolder]:
    """The holders a diy backend's refusal lists; none for any other refusal."""
    holders = []
    for line in refusal.splitlines():
        found = _HOLDER.match(line)
        if found is None:
            continue
        holders.append(
            LockHolder(found["url"], found["user"], found["host"], int(found["pid"]), _when(found["at"]))
        )
    return holders


def _when(text: str) -> Optional[datetime]:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class LockVerdict:
    """Whether the round releases the stack's locks, and one line per holder saying why."""

    release: bool
    lines: tuple[str, ...]

    @property
    def summary(self) -> str:
        return "; ".join(self.lines)


def judge_locks(
    holders: Sequence[LockHolder],
    *,
    this_host: str,
    runs_pulumi: Callable[[int], bool],
    now: datetime,
    stale_after: timedelta,
) -> LockVerdict:
    """Release only when every holder is gone (the module's docstring says how that is known).
    ``runs_pulumi(pid)`` says whether ``pid`` is a live Pulumi CLI on this host; ``stale_after``
    is how long a recovery update on another host can hold the stack at most."""
    if not holders:
        return LockVerdict(False, ("the refusal names no holder: who holds the stack is not known",))
    lines = []
    release = True
    for holder in holders:
        if holder.host == this_host:
            if runs_pulumi(holder.pid):
                release = False
                lines.append(f"lock of {holder.shown}: that process still runs here; left alone")
            else:
                lines.append(f"lock of {holder.shown}: no such process runs here any more")
            continue
        bound = stale_after + CLOCK_MARGIN
        age = now - holder.taken_at if holder.taken_at is not None else None
        if age is not None and age > bound:
            lines.append(
                f"lock of {holder.shown}: taken {_hours(age)} ago on another host, longer than any "
                f"recovery update runs ({_hours(bound)}: its time-out, stop grace and clock margin)"
            )
            continue
        release = False
        if age is None:
            lines.append(
                f"lock of {holder.shown}: on another host, at a time that cannot be read; left alone"
            )
        else:
            lines.append(
                f"lock of {holder.shown}: on another host, taken {_hours(age)} ago; left alone until it "
                f"is older than {_hours(bound)}"
            )
    return LockVerdict(release, tuple(lines))


def _hours(span: timedelta) -> str:
    minutes = max(0, int(span.total_seconds() // 60))
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def runs_pulumi(pid: int) -> bool:
    """Whether ``pid`` is a live process on this host that could hold a stack's lock: one whose
    command line names pulumi. A pid the kernel reused for something else holds nothing; where
    the command line cannot be read (no /proc), a live pid counts as the holder."""
    if pid <= 0:
        return False
    if not os.path.isdir("/proc/self"):
        return _exists(pid)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read()
    except FileNotFoundError:
        return False
    except OSError:
        return _exists(pid)
    return b"pulumi" in command.lower()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
