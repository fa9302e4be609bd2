"""A local stand-in for the Cloud TPU REST API's node list, on loopback, for the real client to
talk to.

Serves ``GET /v2/projects/P/locations/ZONE/nodes`` in the API's JSON shape, each node's
``upcomingMaintenance`` included, and counts calls. Nothing answers at /v2alpha1/: a client that
lists nodes through the pre-GA surface would find no nodes there, and fail. Every answer is
checked against the v2 discovery document by tests/project/test_fidelity.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

from support.fakes.loopback import LoopbackJsonServer, not_found
from support.harness.discovery import CheckedAgainstDiscovery

_LIST = re.compile(r"^/v2/projects/([^/]+)/locations/([^/]+)/nodes$")


class FakeTpuApi(CheckedAgainstDiscovery, LoopbackJsonServer):
    APIS = (("tpu", "v2"),)

    def __init__(self, tls: Optional[tuple[Path, Path]] = None) -> None:
        super().__init__(tls)
        self.nodes: dict[str, list[dict[str, Any]]] = {}
        self.endless_pages = False
        """Answer every page with another nextPageToken."""
        self.repeated_token = ""
        """Answer every page with this same nextPageToken."""

    def add(self, zone: str, name: str, state: str, **fields: Any) -> None:
        # The API stamps every node with its creation time.
        self.nodes.setdefault(zone, []).append(
            {"name": name, "state": state, "createTime": "2026-11-20T08:00:00Z", **fields}
        )

    def route(self, method: str, path: str, query: str, headers: dict[str, str]) -> tuple[int, Any]:
        match = _LIST.match(path)
        if match is None:
            return not_found()
        project, zone = match.groups()
        nodes = [
            dict(node, name=f"projects/{project}/locations/{zone}/nodes/{node['name']}")
            for node in self.nodes.get(zone, [])
        ]
        body: dict[str, Any] = {"nodes": nodes} if nodes else {}
        if self.endless_pages:
            body["nextPageToken"] = f"page-{len(self.calls)}"
        if self.repeated_token:
            body["nextPageToken"] = self.repeated_token
        return 200, body
