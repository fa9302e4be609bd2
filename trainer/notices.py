"""What the TPU VM's metadata server says is coming: the ``upcoming-maintenance`` key read as a
save request before the window, and its siblings ``maintenance-event`` and ``preempted`` watched
with hanging GETs (a terminate or a preemption: save now). Read apart from everything else: the
keys, their spellings and their values are Compute Engine's (docs/fidelity.md), and
tests/project/test_fidelity.py pins the fake that stands in for the server. Standard library only."""

from __future__ import annotations

import json
import threading
import urllib.parse
import urllib.request
from typing import Any, Callable, Mapping, Optional

from outcomes import describe, log, quoted
from save_requests import REQUEST_ID_LIMIT, SaveRequest, parse_utc

MAINTENANCE_METADATA_URL = "http://metadata.google.internal/computeMetadata/v1/instance/upcoming-maintenance"
"""Where a TPU VM's metadata server says what maintenance is coming (Compute Engine's "Monitor and
plan for a host maintenance event", asked with ``?alt=json``). The server writes snake_case
(``window_start_time``, ``window_end_time``, ``latest_window_start_time``, ``maintenance_status``
PENDING | ONGOING, ``type``, ``can_reschedule`` as the string "true"/"false"); the Cloud TPU API's
``upcomingMaintenance`` spells the same fields in camelCase. Either is read. Nothing scheduled:
``{}``, or HTTP 503 with ``{"error": ...}``."""
METADATA_HEADERS = {"Metadata-Flavor": "Google"}
"""The metadata server refuses a request without it (and sends it back on every answer)."""
SHORT_NOTICE_KEYS = ("maintenance-event", "preempted")
"""The keys beside ``upcoming-maintenance`` that change the moment a terminate or a preemption is
decided (``?wait_for_change=true`` waits for that)."""
_NOTICE_FIELDS = {
    "window_start": ("window_start_time", "windowStartTime"),
    "window_end": ("window_end_time", "windowEndTime"),
    "status": ("maintenance_status", "maintenanceStatus"),
    "type": ("type", "maintenance_type", "maintenanceType"),
    "can_reschedule": ("can_reschedule", "canReschedule"),
}
_NO_NOTICE_TEXTS = ("", "{}", "NONE")


def metadata_key_url(maintenance_url: str, key: str) -> str:
    """The URL of ``key``, a sibling of ``upcoming-maintenance`` under the same ``instance/``."""
    base, _, _ = maintenance_url.partition("?")
    return base.rsplit("/", 1)[0] + "/" + key


def with_query(url: str, **parameters: object) -> str:
    """``url`` with ``parameters`` added to its query (None values left out)."""
    pairs = "&".join(
        f"{name}={urllib.parse.quote(str(value))}" for name, value in parameters.items() if value is not None
    )
    return f"{url}{'&' if '?' in url else '?'}{pairs}" if pairs else url


def _notice_field(found: Mapping[str, Any], field: str) -> tuple[Optional[str], Any]:
    """The key ``found`` spells ``field`` with (snake_case first), and its value."""
    for key in _NOTICE_FIELDS[field]:
        if key in found:
            return key, found[key]
    return None, None


def _boolean(value: Any) -> Optional[bool]:
    """True or False from a JSON boolean or the metadata server's "true"/"false"; else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def read_maintenance_notice(
    text: str, now: float, node: str = ""
) -> tuple[Optional[SaveRequest], Optional[str]]:
    """The metadata server's upcoming-maintenance answer as a save request before the window
    starts (at once when it has started), None and None when no maintenance is coming, or None
    and why the answer is ignored. With the VM's ``node`` name, the request's id is the one
    recovery gives its request for the same window (``maintenance-tpu-NODE-START``, START in
    epoch seconds): the run saves once for both."""
    if text.strip() in _NO_NOTICE_TEXTS:
        return None, None
    try:
        found = json.loads(text)
    except ValueError:
        return None, "not JSON"
    if not isinstance(found, dict):
        return None, "not a JSON object"
    start_key, start_text = _notice_field(found, "window_start")
    if start_key is None:
        if not found or set(found) == {"error"}:
            return None, None  # {} or {"error": "no notifications have been received yet..."}
        return None, f"no window_start_time or windowStartTime among the keys {sorted(found)}"
    start = parse_utc(start_text)
    if start is None:
        return None, f"{start_key}={start_text!r} is not an RFC 3339 time with a zone"
    end_key, end_text = _notice_field(found, "window_end")
    end = parse_utc(end_text)
    if end_text is not None and end is None:
        return None, f"{end_key}={end_text!r} is not an RFC 3339 time with a zone"
    if end is not None and end < start:
        return None, f"the window {start_text} to {end_text} ends before it starts"
    status_key, status = _notice_field(found, "status")
    if status not in ("PENDING", "ONGOING"):
        return None, f"{status_key or 'maintenance_status'}={status!r} is neither PENDING nor ONGOING"
    if end is not None and end < now:
        return None, f"its window ended at {end_text}"
    kind = _notice_field(found, "type")[1] or "maintenance"
    identity = (f"maintenance-tpu-{node}-{int(start)}" if node else f"maintenance {kind} {start_text}")[
        :REQUEST_ID_LIMIT
    ]
    return SaveRequest(identity, "maintenance", start if start > now else None), None


def notice_can_reschedule(text: str) -> str:
    """``can_reschedule`` of an upcoming-maintenance answer for the log: true, false or unknown."""
    try:
        found = json.loads(text)
    except ValueError:
        return "unknown"
    value = _boolean(_notice_field(found, "can_reschedule")[1]) if isinstance(found, dict) else None
    return "unknown" if value is None else str(value).lower()


def read_short_notice(key: str, value: str) -> tuple[bool, Optional[str]]:
    """Whether the value of ``maintenance-event`` or ``preempted`` means the VM stops soon (save
    now), and None; or False and why the value is not understood (nothing is done on it)."""
    value = value.strip()
    if key == "maintenance-event":
        if value in ("NONE", "MIGRATE_ON_HOST_MAINTENANCE"):
            return False, None  # a live migration keeps the VM running: nothing to save for
        if value == "TERMINATE_ON_HOST_MAINTENANCE":
            return True, None
        allowed = "NONE, MIGRATE_ON_HOST_MAINTENANCE, TERMINATE_ON_HOST_MAINTENANCE"
    else:
        if value in ("TRUE", "FALSE"):
            return value == "TRUE", None
        allowed = "TRUE, FALSE"
    return False, f"{key}={value[:80]!r} is none of {allowed}"


class MetadataWatch:
    """A thread that watches one metadata key as Compute Engine documents it: one plain GET for
    the value and its ETag, then hanging GETs (``?wait_for_change=true&last_etag=E&timeout_sec=T``)
    that return when the value changes or after T seconds. Each value read goes to ``seen``. A
    failed read is said once (until a read works again) and retried after ``retry_seconds``."""

    def __init__(
        self,
        url: str,
        key: str,
        wait_seconds: int,
        seen: Callable[[str, str], None],
        stopping: threading.Event,
        retry_seconds: float = 5.0,
    ) -> None:
        self.url = url
        self.key = key
        self.wait_seconds = wait_seconds
        self.seen = seen
        self.stopping = stopping
        self.retry_seconds = retry_seconds
        self.problem: Optional[str] = None
        self.failures = 0
        self.thread = threading.Thread(target=self._run, name=f"watch-{key}", daemon=True)

    def _run(self) -> None:
        etag: Optional[str] = None
        while not self.stopping.is_set():
            url = self.url
            if etag is not None:
                url = with_query(url, wait_for_change="true", last_etag=etag, timeout_sec=self.wait_seconds)
            request = urllib.request.Request(url, headers=METADATA_HEADERS)
            try:
                # A hanging GET answers within timeout_sec; the margin is the server's, not ours.
                with urllib.request.urlopen(request, timeout=self.wait_seconds + 10) as answer:
                    value = answer.read(4096).decode("utf-8", errors="replace")
                    etag = answer.headers.get("ETag")
            except Exception as error:  # noqa: BLE001 - said once; the watch goes on
                self.failures += 1
                if self.problem is None:
                    self.problem = describe(error)
                    log("metadata-watch-failed", key=self.key, reason=quoted(self.problem))
                etag = None
                self.stopping.wait(self.retry_seconds)
                continue
            self.problem = None
            self.seen(self.key, value)
            if etag is None:
                # No ETag to wait on: without one a wait_for_change GET could miss a change
                # between two reads, so read again after a pause instead.
                self.stopping.wait(self.retry_seconds)
