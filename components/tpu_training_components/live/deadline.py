"""An overall deadline for a live-state probe call, whatever the server does.

Pure Python. Client libraries time out each socket read, not a whole call: a server that drips a
byte every few seconds, or keeps returning a next-page token, holds a call open for ever. A probe
that runs out of time is "unavailable", and the caller keeps what was last deployed.
"""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

T = TypeVar("T")

PROBE_DEADLINE_SECONDS = 30.0
"""How long one probe call (one zone's nodes, one namespace's Jobs) may take in all."""
MAX_PAGES = 100
"""List pages one probe call may read; a zone with more is refused rather than read for ever."""
MAX_ANSWER_BYTES = 32 * 1024 * 1024
"""The largest answer body a probe reads: a full page of TPU nodes or a namespace's Jobs is a few
megabytes; a body without end is refused before it fills the memory."""


class DeadlineExceeded(Exception):
    """The call did not finish in time; its result is unknown."""


def call_with_deadline(call: Callable[[], T], seconds: float, what: str) -> T:
    """Run ``call`` and return its result, or raise ``DeadlineExceeded`` after ``seconds``.

    The call runs in a daemon thread: Python cannot stop a thread blocked in a socket read, but a
    daemon thread never holds up the program's exit, and its late result is dropped."""
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
