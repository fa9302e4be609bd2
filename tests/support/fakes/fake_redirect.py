"""A loopback server that answers every request with a redirect to another server, keeping the
path and query: what a proxy, a moved endpoint or an attacker on the path could send."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from support.fakes.loopback import BackgroundServer


class RedirectingServer(BackgroundServer):
    def __init__(self, target: str, status: int = 302) -> None:
        self.status = status
        self.calls: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                server.calls.append(self.path)
                self.send_response(server.status)
                self.send_header("Location", target + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        http_server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)  # `server` is this object
        http_server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{http_server.server_address[1]}"
        self._serve_in_background(http_server)
