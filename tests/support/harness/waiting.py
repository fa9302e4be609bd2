"""Bounded waits for what another thread does (a watcher's stream, a watch loop's round)."""

from __future__ import annotations

import threading
import time
from typing import Callable


def eventually(check: Callable[[], bool], seconds: float = 5.0, every: float = 0.02) -> bool:
    """Whether ``check()`` came true within ``seconds``, looked at every ``every`` seconds."""
    ends = time.monotonic() + seconds
    pause = threading.Event()
    while not check():
        if time.monotonic() >= ends:
            return False
        pause.wait(every)
    return True
