"""Recovery records written to Cloud Logging as structured entries, where the stack's log-based
metrics (``domain/monitoring.py``) count them: ``POST /v2/entries:write`` of the Logging API
(discovery document ``logging.v2.json``: ``WriteLogEntriesRequest``), one entry per record, its
``jsonPayload`` the record itself.

Only with credentials: ``LOGGING_API_ENDPOINT`` naming a plain ``http://`` server (a local
emulator or test server) is called without them; otherwise Application Default Credentials are
looked for once, and without them nothing is sent (said once). A failed write is a warning: the
recovery matters more than its accounting.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Optional, Sequence

from ..domain.recovery_records import RECORD_FORMAT

LOGGING_ENDPOINT_VARIABLE = "LOGGING_API_ENDPOINT"
"""Overrides the Cloud Logging API endpoint, e.g. ``http://127.0.0.1:8082``."""
LOGGING_DEFAULT_ENDPOINT = "https://logging.googleapis.com"
LOG_ID = "tpu-training-recovery"
"""The log the records go to: ``projects/PROJECT/logs/tpu-training-recovery``."""
WRITE_SECONDS = 10.0
"""How long one write may take: a round's records are a few hundred bytes."""
_WRITE_SCOPE = "https://www.googleapis.com/auth/logging.write"


def write_request(gcp_project: str, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``entries:write`` body for ``records``: each a ``global`` resource's entry in this
    project's recovery log, WARNING when its update did not succeed, NOTICE otherwise."""
    return {
        "logName": f"projects/{gcp_project}/logs/{LOG_ID}",
        "resource": {"type": "global", "labels": {"project_id": gcp_project}},
        "labels": {"format": RECORD_FORMAT},
        "entries": [
            {
                "jsonPayload": dict(record),
                "severity": "NOTICE" if record.get("upStatus") == "succeeded" else "WARNING",
            }
            for record in records
        ],
    }


class RecordLog:
    """Sends a round's recovery records to its stack's project. ``say`` prints one line (a
    warning); each problem is said once per process, not once per round."""

    def __init__(self, say: Callable[[str], None], endpoint: Optional[str] = None) -> None:
        self.say = say
        chosen = endpoint or os.environ.get(LOGGING_ENDPOINT_VARIABLE) or LOGGING_DEFAULT_ENDPOINT
        self.endpoint = chosen.rstrip("/")
        self._session: Any = None
        self._unavailable: Optional[str] = None
        self._said: set[str] = set()

    def _warn_once(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            self.say(message)

    def _session_or_none(self) -> Any:
        if self._session is not None or self._unavailable is not None:
            return self._session
        import requests

        if self.endpoint.startswith("http://"):
            self._session = requests.Session()
            return self._session
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
        from google.auth.transport.requests import AuthorizedSession

        try:
            credentials, _ = google.auth.default(scopes=[_WRITE_SCOPE])
        except DefaultCredentialsError:
            self._unavailable = "no Application Default Credentials"
            return None
        self._session = AuthorizedSession(credentials)
        return self._session

    def write(self, gcp_project: Optional[str], records: Sequence[Mapping[str, Any]]) -> bool:
        """Send ``records``; True when Cloud Logging took them all."""
        if not records or not gcp_project:
            return False
        session = self._session_or_none()
        if session is None:
            self._warn_once(
                f"note: recovery records are not sent to Cloud Logging ({self._unavailable}); "
                "the stack's recovery metrics and alerts see none (docs/monitoring.md)"
            )
            return False
        try:
            response = session.post(
                f"{self.endpoint}/v2/entries:write",
                json=write_request(gcp_project, records),
                timeout=WRITE_SECONDS,
            )
        except Exception as exc:  # noqa: BLE001 - any transport failure is one warning
            self._warn_once(
                f"warning: recovery records not sent to Cloud Logging ({type(exc).__name__}: {exc})"
            )
            return False
        if response.status_code >= 400:
            self._warn_once(
                f"warning: recovery records not sent to Cloud Logging: HTTP {response.status_code} "
                f"{response.text[:300]}"
            )
            return False
        return True
