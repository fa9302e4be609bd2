"""``save-request.json``: a request to checkpoint soon, written into ``CHECKPOINT_DIR`` by
recovery (before a maintenance window) or by hand, read and checked here; and the token the
processes exchange to agree on one request. The format is the one recovery writes
(docs/trainer.md, "Progress and save requests"). Standard library only."""

from __future__ import annotations

import datetime
import hashlib
import json
from dataclasses import dataclass
from typing import Optional

SAVE_REQUEST = "save-request.json"
"""A request to checkpoint now, written by recovery (a maintenance notice) or by hand."""
SAVE_REQUEST_FORMAT = "tpu-training-save-request/1"
REQUEST_ID_LIMIT = 200


def utc_text(seconds: float) -> str:
    """A wall-clock time as RFC 3339 in UTC, to the millisecond."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_utc(text: object) -> Optional[float]:
    """Seconds since the epoch from RFC 3339 text with a zone, or None."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.timestamp() if moment.tzinfo is not None else None


@dataclass(frozen=True)
class SaveRequest:
    """``save-request.json``: save once, soon, and go on training (``before``: the time by which
    the save is wanted, e.g. a maintenance window's start)."""

    id: str
    reason: str
    before: Optional[float]


def read_save_request(text: str, now: float) -> tuple[Optional[SaveRequest], Optional[str]]:
    """The request in ``text`` and None, or None and why it is ignored (said once per content).
    One whose ``before`` has passed is ignored: the window it was for has begun, and a request
    left behind must not make every later start save again."""
    try:
        found = json.loads(text)
    except ValueError:
        return None, "not JSON"
    if not isinstance(found, dict) or found.get("format") != SAVE_REQUEST_FORMAT:
        return None, f"not an object with format {SAVE_REQUEST_FORMAT!r}"
    identity = found.get("id")
    if not isinstance(identity, str) or not identity.strip() or len(identity) > REQUEST_ID_LIMIT:
        return None, f"id must be a non-empty string of at most {REQUEST_ID_LIMIT} characters"
    reason = found.get("reason", "requested")
    if not isinstance(reason, str):
        return None, "reason must be a string"
    before: Optional[float] = None
    if found.get("before") is not None:
        before = parse_utc(found["before"])
        if before is None:
            return None, f"before={found['before']!r} is not an RFC 3339 time with a zone"
        if before < now:
            return None, f"before={found['before']} has passed"
    return SaveRequest(identity, reason, before), None


def request_token(identity: str) -> int:
    """A request's id as a positive 31-bit number: what the processes exchange to agree on it."""
    return int(hashlib.sha256(identity.encode()).hexdigest()[:7], 16) + 1
