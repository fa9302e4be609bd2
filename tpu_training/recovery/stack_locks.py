"""Whose lock holds the stack, and whether a recovery round may release it: pure Python.

A round whose `pulumi up` is refused because the stack is locked reads the holders from the
CLI's refusal. The file and Cloud Storage backends ("diy") write each lock as a file holding the
holder's pid, user, host and start time, and list every one in the refusal (pulumi/pulumi
v3.274.1, pkg/backend/diy/lock.go ``checkForLock``)::

    the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end or
    delete the lock file with `pulumi cancel`.
      file:///state/.pulumi/locks/organization/tpu-training/dev/1f0c….json: created by
      ci@runner-7 (pid 4242) at 2026-12-02T07:41:09Z

A lock is released only when every holder is known to be gone, and then only the lock files the
refusal named are deleted (``remove_lock``): not `pulumi cancel`, which deletes every lock of the
stack (pkg/backend/diy/backend.go ``CancelCurrentUpdate``), the one a second recoverer took a
moment ago included. Known gone:

- taken on this host by a pid that no longer runs a Pulumi CLI: nothing runs that update any
  more, whoever started it (a killed recovery round, a person's `pulumi up` killed with its
  terminal), so releasing it disturbs no one;
- taken on another host longer ago than any recovery update can run: a round stops its own
  `pulumi up` at ``--up-timeout`` plus the stop grace (tpu_training/recovery/automation.py), so a
  lock older than that plus a margin for the hosts' clocks is not a live round's.

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
from urllib.parse import unquote, urlparse

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


_COUNT = re.compile(r"currently locked by (\d+) lock\(s\)")


def lock_holders(refusal: str) -> list[LockHolder]:
    """The holders a diy backend's refusal lists; none for any other refusal, or for one that
    lists fewer holders than it counts (a lock this version cannot read is one not judged)."""
    counted = _COUNT.search(refusal)
    holders = []
    for line in refusal.splitlines():
        found = _HOLDER.match(line)
        if found is None:
            continue
        holders.append(
            LockHolder(found["url"], found["user"], found["host"], int(found["pid"]), _when(found["at"]))
        )
    if counted is None or int(counted[1]) != len(holders):
        return []
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
    """Whether ``pid`` may be a live process on this host that holds a stack's lock. The kernel
    decides whether the pid exists (``kill(pid, 0)``: a process of another user, or one /proc
    hides from this one, counts as live); a live pid whose command line can be read and names
    no pulumi is one the kernel reused, and holds nothing."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read()
    except OSError:
        return True  # no /proc, or not readable: the live pid counts as the holder
    # A zombie's command line is empty: it is gone, and holds nothing.
    return b"pulumi" in command.lower()


class LockNotRemovable(Exception):
    """The lock is in a backend this module cannot delete a file of (s3, azblob, ...)."""


def remove_lock(url: str, *, project: str = "", cwd: str = ".") -> None:
    """Deletes one lock file, as the refusal names it: ``file://`` (the CLI's own folder
    ``cwd`` for a relative one) or ``gs://`` (with the Application Default Credentials the
    backend uses). Only a file under ``.pulumi/locks/`` that ends in ``.json``; one already gone
    is no error. Raises ``LockNotRemovable`` for any other URL."""
    # CLIs before the lock URL was built with path.Join put the lock's key after the backend URL
    # whole, its query included: file:///state?no_tmp_dir=true/.pulumi/locks/....json.
    base, marker, key = url.partition("/.pulumi/locks/")
    if marker:
        url = base.split("?", 1)[0] + marker + key
    parsed = urlparse(url)
    path = unquote(parsed.path)
    if "/.pulumi/locks/" not in path or not path.endswith(".json"):
        raise LockNotRemovable(f"{url} is not a lock file of a Pulumi backend")
    if parsed.scheme == "file":
        if parsed.netloc == "~":
            path = os.path.expanduser("~") + path
        elif parsed.netloc not in ("", "localhost"):
            path = os.path.join(cwd, parsed.netloc + path)
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        return
    if parsed.scheme == "gs":
        from google.api_core.exceptions import NotFound
        from tpu_training_components.live.endpoints import storage_client

        try:
            storage_client(project).bucket(parsed.netloc).blob(path.lstrip("/")).delete(timeout=30)
        except NotFound:
            pass
        return
    raise LockNotRemovable(f"{url}: a {parsed.scheme or 'local'} backend's lock is not deleted here")
