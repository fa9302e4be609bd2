"""Recovery generations as the tests fix or check them: the clock that stamps new generations,
fixed by the ``decided_at`` fixture, and a check for a generation a subprocess stamped."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

DECIDED_AT = datetime(2026, 11, 23, 12, 0, 0, tzinfo=timezone.utc)
FRESH = 20261123120000
"""The generation a VM or Job re-created at ``DECIDED_AT`` gets (``recovery.fresh_generation``)."""


def fresh_stamp_since(started: datetime, value: Any) -> bool:
    """Whether ``value`` is a generation stamped (YYYYMMDDhhmmss, UTC) at or after ``started``:
    for a subprocess, whose clock a test cannot fix."""
    return isinstance(value, int) and int(started.strftime("%Y%m%d%H%M%S")) <= value <= int(
        datetime.now(timezone.utc).strftime("%Y%m%d%H%M%S")
    )
