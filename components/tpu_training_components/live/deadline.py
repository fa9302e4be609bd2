"""An overall deadline for a live-state probe call, whatever the server does.

Pure Python. Client libraries time out each socket read, not a whole call: a server that drips a
byte every few seconds, or keeps returning a next-page token, holds a call open for ever. So a
probe call carries a ``Deadline``: each of its requests gets the library's own timeout, cut to
the time left, and the body of each answer is read in pieces against it (``http_answers``). A
probe that runs out of time is "unavailable", and the caller keeps what was last deployed.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, TypeVar

T = TypeVar("T")

PROBE_DEADLINE_SECONDS = 30.0
"""How long one probe call (one zone's nodes, one namespace's Jobs) may take in all."""
MAX_PAGES = 100
"""List pages one probe call may read; a zone with more is refused rather than read for ever."""
MAX_ANSWER_BYTES = 32 * 1024 * 1024
"""The largest answer body a probe reads: a full page of TPU nodes or a namespace's Jobs is a few
megabytes; a body without end is refused before it fills the memory."""


class TooManyPages(Exception):
    """A list that will not end: its server keeps handing out next-page tokens."""


class DeadlineExceeded(Exception):
    """The call did not finish in time; its result is unknown."""


class Deadline:
    """When a call named ``what`` must be done by, ``seconds`` from now."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds, self.what = seconds, what
        self.at = time.monotonic() + seconds

    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def exceeded(self) -> DeadlineExceeded:
        return DeadlineExceeded(f"{self.what} took longer than {self.seconds:g} s")

    def left(self) -> float:
        """The seconds left; raises ``DeadlineExceeded`` when there are none."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise self.exceeded()
        return left

    def timeout(self, per_request: float) -> float:
        """A request's timeout: ``per_request``, or the time left if that is shorter."""
        return min(per_request, self.left())


def call_with_deadline(call: Callable[[], T], seconds: float, what: str) -> T:
    """Run ``call`` and return its result, or raise ``DeadlineExceeded`` after ``seconds``.

    Only for what no library can time out: opening a FIFO nobody writes to, a credential plugin
    the Kubernetes client waits on without a timeout. The call runs in a daemon thread, which
    stays blocked in that system call if it never ends: it never holds up the program's exit,
    and its late result is dropped. (HTTP calls are bounded with ``Deadline`` instead.)"""
    outcome: dict[str, object] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name=f"probe: {what}", daemon=True).start()
    if not done.wait(seconds):
        raise DeadlineExceeded(f"{what} took longer than {seconds:g} s")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
