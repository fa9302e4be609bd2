"""The Cloud Logging API's ``POST /v2/entries:write`` on loopback, for the recovery watcher's
record writer (``tpu_training_components.live.cloud_logging``). Every request body is checked
against the Logging v2 discovery document (``WriteLogEntriesRequest``) when the server closes, and
the entries it was sent are kept as the API would store them: the request's ``logName``,
``resource`` and ``labels`` copied into each entry that has none of its own."""

from __future__ import annotations

import json
from typing import Any

from support.fakes.loopback import LoopbackJsonServer, not_found
from support.harness.discovery import CheckedAgainstDiscovery


class FakeCloudLogging(CheckedAgainstDiscovery, LoopbackJsonServer):
    APIS = (("logging", "v2"),)

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[dict[str, Any]] = []

    def route(self, method: str, path: str, query: str, headers: dict[str, str]) -> tuple[int, Any]:
        if (method, path) != ("POST", "/v2/entries:write"):
            return not_found()
        request = json.loads(self.bodies[-1])
        shared = {key: request[key] for key in ("logName", "resource", "labels") if key in request}
        self.entries.extend({**shared, **entry} for entry in request.get("entries", []))
        return 200, {}  # WriteLogEntriesResponse: an empty object
