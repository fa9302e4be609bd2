"""A TPU VM's metadata server on loopback, as Compute Engine documents it (the pages are in
docs/fidelity.md; tests/project/test_fidelity.py checks what this fake serves against them):

- every request needs the header ``Metadata-Flavor: Google`` (403 without), and every answer
  carries it back;
- ``instance/upcoming-maintenance`` answers its JSON object in snake_case, ``can_reschedule`` a
  string; with nothing scheduled, HTTP 503 and ``{"error": ...}`` (``none_status``), or ``{}``;
- ``instance/maintenance-event`` and ``instance/preempted`` answer plain text with an ``ETag``;
  with ``?wait_for_change=true`` the answer waits until the value differs from ``last_etag``
  (at once when it already does) or ``timeout_sec`` passes (then the same value).

Every notice and value it serves is checked as it is served (``published_errors``): a notice
must be compute v1's ``UpcomingMaintenance`` in snake_case with string booleans, a watched key's
value one of those documented. What does not conform fails the test when the server closes,
unless the test serves it on purpose (``allow_off_schema``).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import parse_qs

from support.fakes.loopback import BackgroundServer
from support.harness.discovery import discovery_document

PREFIX = "/computeMetadata/v1/instance/"
UPCOMING = PREFIX + "upcoming-maintenance"
MAINTENANCE_EVENT = PREFIX + "maintenance-event"
PREEMPTED = PREFIX + "preempted"
ATTRIBUTES = PREFIX + "attributes/"
"""The VM's custom metadata, one key a path: on a TPU VM the TPU service's own (``agent-worker-number``,
``worker-network-endpoints``, ``tpu-env``), which JAX's TPU cluster detection reads."""
NOTHING_SCHEDULED = {"error": "no notifications have been received yet, try again later"}
"""The body of the 503 the server answers upcoming-maintenance with when nothing is scheduled."""
EXAMPLE_NOTICE = {
    "type": "SCHEDULED",
    "window_start_time": "2026-11-26T04:00:00Z",
    "window_end_time": "2026-11-26T08:00:00Z",
    "latest_window_start_time": "2026-11-26T04:00:01Z",
    "can_reschedule": "false",
    "maintenance_status": "PENDING",
}
"""An upcoming-maintenance answer as Compute Engine's host-maintenance page shows it: snake_case,
``can_reschedule`` a string."""
LONGEST_WAIT = 30.0
"""A hanging GET in a test never waits longer than this, whatever its timeout_sec says."""


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def notice_schema() -> dict[str, Any]:
    """``instance/upcoming-maintenance`` as the host-maintenance page shows it: compute v1's
    ``UpcomingMaintenance`` fields in snake_case, its booleans as the strings "true"/"false"."""
    published = discovery_document("compute", "v1")["schemas"]["UpcomingMaintenance"]["properties"]
    properties: dict[str, Any] = {}
    for name, field in published.items():
        if field["type"] == "boolean":
            properties[_snake(name)] = {"enum": ["true", "false"]}
        elif field["type"] == "array":
            properties[_snake(name)] = {"type": "array", "items": {"enum": field["items"]["enum"]}}
        else:
            properties[_snake(name)] = {
                "type": "string",
                **({"enum": field["enum"]} if "enum" in field else {}),
            }
    return {"type": "object", "properties": properties, "additionalProperties": False}


def documented_values() -> dict[str, set[str]]:
    """The values of the watched keys: ``maintenance-event`` is NONE or X_ON_HOST_MAINTENANCE
    for each X of compute v1's ``Scheduling.onHostMaintenance``; ``preempted`` TRUE or FALSE."""
    scheduling = discovery_document("compute", "v1")["schemas"]["Scheduling"]["properties"]
    on_host = {f"{value}_ON_HOST_MAINTENANCE" for value in scheduling["onHostMaintenance"]["enum"]}
    return {MAINTENANCE_EVENT: {"NONE", *on_host}, PREEMPTED: {"TRUE", "FALSE"}}


def published_errors(path: str, answer: Any) -> list[str]:
    """What Compute Engine's documentation finds wrong with ``answer`` at ``path``; []: none."""
    import jsonschema

    if path == UPCOMING:
        found = jsonschema.Draft202012Validator(notice_schema()).iter_errors(answer)
        return sorted(f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in found)
    allowed = documented_values()[path]
    return [] if answer in allowed else [f"{answer!r} is none of {sorted(allowed)}"]


def etag_of(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


class FakeMetadataServer(BackgroundServer):
    """``upcoming`` is the upcoming-maintenance notice (None: nothing scheduled, answered with
    ``none_status`` 503 or 200 ``{}``); ``values`` the text keys. ``set`` changes a text key and
    wakes the GETs waiting on it."""

    def __init__(self) -> None:
        self.upcoming: Optional[Any] = None
        self.none_status = 503
        self.values = {MAINTENANCE_EVENT: "NONE", PREEMPTED: "FALSE"}
        self.attributes: dict[str, str] = {}
        """``instance/attributes/KEY`` -> its text (404 for a key not here)."""
        self.requests: list[tuple[str, dict[str, list[str]], str]] = []
        """Each request: path, query, its Metadata-Flavor header."""
        self.changed = threading.Condition()
        self.closing = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                path, _, text = self.path.partition("?")
                query = parse_qs(text)
                flavor = self.headers.get("Metadata-Flavor", "")
                with fake.changed:
                    fake.requests.append((path, query, flavor))
                if flavor != "Google":
                    self._send(403, "text/html", b"Missing Metadata-Flavor:Google header.")
                elif path == UPCOMING:
                    self._upcoming()
                elif path in fake.values:
                    self._text(path, query)
                elif path.startswith(ATTRIBUTES) and path[len(ATTRIBUTES) :] in fake.attributes:
                    value = fake.attributes[path[len(ATTRIBUTES) :]]
                    self._send(200, "application/text", value.encode(), etag=etag_of(value))
                else:
                    self._send(404, "text/html", b"Not Found")

            def _upcoming(self) -> None:
                if fake.upcoming is None and fake.none_status == 503:
                    self._send(503, "application/json", json.dumps(NOTHING_SCHEDULED).encode())
                    return
                body = fake.upcoming if fake.upcoming is not None else {}
                fake.off_schema_found(UPCOMING, published_errors(UPCOMING, body))
                self._send(200, "application/json", json.dumps(body).encode())

            def _text(self, path: str, query: dict[str, list[str]]) -> None:
                wait = query.get("wait_for_change") == ["true"]
                last = query.get("last_etag", [None])[0]
                timeout = min(float(query.get("timeout_sec", [LONGEST_WAIT])[0]), LONGEST_WAIT)
                with fake.changed:
                    if wait:
                        start = fake.values[path]
                        fake.changed.wait_for(
                            lambda: (
                                fake.closing
                                or (
                                    etag_of(fake.values[path]) != last if last else fake.values[path] != start
                                )
                            ),
                            timeout=timeout,
                        )
                    value = fake.values[path]
                fake.off_schema_found(path, published_errors(path, value))
                self._send(200, "application/text", value.encode(), etag=etag_of(value))

            def _send(self, status: int, kind: str, body: bytes, etag: Optional[str] = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Metadata-Flavor", "Google")
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(body)))
                    if etag is not None:
                        self.send_header("ETag", etag)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        self.url = self.endpoint + UPCOMING
        """What a TPU VM's startup script gives the trainer as TRAINER_MAINTENANCE_URL."""
        self._serve_in_background(server)

    def set(self, path: str, value: str) -> None:
        with self.changed:
            self.values[path] = value
            self.changed.notify_all()

    def __exit__(self, *exc: object) -> None:
        with self.changed:
            self.closing = True
            self.changed.notify_all()
        super().__exit__(*exc)

    def waits(self, path: str) -> int:
        """How many hanging GETs of ``path`` were made."""
        with self.changed:
            return sum(1 for p, query, _ in self.requests if p == path and "wait_for_change" in query)
