"""A local stand-in for the Cloud TPU v2 REST API, on loopback, for the real client to talk to.

Serves ``GET /v2/projects/P/locations/ZONE/nodes`` in the API's JSON shape and counts calls.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_LIST = re.compile(r"^/v2/projects/([^/]+)/locations/([^/]+)/nodes$")


class FakeTpuApi:
    def __init__(self) -> None:
        self.nodes: dict[str, list[dict[str, Any]]] = {}
        self.calls: list[str] = []
        self.fail_with: int | None = None
        self.delay_seconds = 0.0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                path = self.path.split("?", 1)[0]
                api.calls.append(path)
                if api.delay_seconds:
                    time.sleep(api.delay_seconds)
                match = _LIST.match(path)
                if api.fail_with is not None:
                    self._reply(api.fail_with, {"error": {"code": api.fail_with, "message": "boom"}})
                elif match is None:
                    self._reply(404, {"error": {"code": 404, "message": "not found"}})
                else:
                    project, zone = match.groups()
                    nodes = [
                        dict(node, name=f"projects/{project}/locations/{zone}/nodes/{node['name']}")
                        for node in api.nodes.get(zone, [])
                    ]
                    self._reply(200, {"nodes": nodes} if nodes else {})

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, zone: str, name: str, state: str, **fields: Any) -> None:
        self.nodes.setdefault(zone, []).append({"name": name, "state": state, **fields})

    def __enter__(self) -> FakeTpuApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
