"""A small JSON HTTP(S) server on loopback, the base of the fake Google and Kubernetes APIs the
real client libraries talk to in tests. It records every request and can fail or stall them all."""

from __future__ import annotations

import json
import socketserver
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterable, Optional


class BackgroundServer:
    """A server on loopback, served from a daemon thread while a ``with`` block runs: the base of
    every test server here. A subclass makes its ``socketserver`` server, then calls
    ``_serve_in_background`` with it."""

    server: socketserver.BaseServer
    allow_off_schema = False
    """A fake that checks what it serves against a published schema fails the test that made
    it serve something off that schema, when it closes; a test that does so on purpose sets this."""

    def off_schema_found(self, where: str, errors: Iterable[str]) -> None:
        """Keep ``errors`` (what a published schema found wrong at ``where``) for the close."""
        self.off_schema.extend(f"{where}: {error}" for error in errors)

    def _serve_in_background(self, server: socketserver.BaseServer) -> None:
        self.server = server
        self.off_schema: list[str] = []
        """What a published schema found wrong in what this fake served (``off_schema_found``)."""
        # A short poll: shutdown() waits for the loop to notice, up to this long (default 0.5 s).
        self._thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        if exc[0] is None and self.off_schema and not self.allow_off_schema:
            raise AssertionError(
                "the fake served outside its published schema:\n" + "\n".join(self.off_schema)
            )


class LoopbackJsonServer(BackgroundServer):
    """Subclasses answer ``route(method, path, query, headers)`` with ``(status, body)``."""

    def __init__(self, tls: Optional[tuple[Path, Path]] = None) -> None:
        self.calls: list[str] = []
        self.bodies: list[bytes] = []
        """The body of each POST, PUT and PATCH request, in order."""
        self.headers: list[dict[str, str]] = []
        """Each request's headers, names in lower case."""
        self.fail_with: int | None = None
        self.delay_seconds = 0.0
        self.drip_seconds = 0.0
        """Send the body one byte at a time, this long apart: each read succeeds, the call never
        ends in time."""
        self.raw_body: bytes | None = None
        """Send these bytes as the body of every answer (malformed JSON, say)."""
        self.content_type = "application/json"
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._answer("GET")

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                self._answer_with_body("POST")

            def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
                self._answer_with_body("PUT")

            def do_PATCH(self) -> None:  # noqa: N802 - http.server's naming
                self._answer_with_body("PATCH")

            def do_DELETE(self) -> None:  # noqa: N802 - http.server's naming
                self._answer("DELETE")

            def _answer_with_body(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                server.bodies.append(self.rfile.read(length))
                self._answer(method)

            def _answer(self, method: str) -> None:
                path, _, query = self.path.partition("?")
                server.calls.append(path)
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
                if server.delay_seconds:
                    time.sleep(server.delay_seconds)
                if server.fail_with is not None:
                    status, body = server.fail_with, {"error": {"code": server.fail_with, "message": "boom"}}
                else:
                    status, body = server.route(method, path, query, dict(self.headers.items()))
                    if server.raw_body is None and not isinstance(body, Streamed):
                        with_body = method in ("POST", "PUT", "PATCH") and server.bodies
                        sent = server.bodies[-1] if with_body else b""
                        server.answered(method, path, status, body, sent)
                if isinstance(body, Streamed):
                    self._stream(status, body)
                    return
                data = server.raw_body if server.raw_body is not None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", server.content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not server.drip_seconds:
                    self.wfile.write(data)
                    return
                for index in range(len(data)):
                    self.wfile.write(data[index : index + 1])
                    self.wfile.flush()
                    time.sleep(server.drip_seconds)

            def _stream(self, status: int, body: Streamed) -> None:
                # HTTP/1.1 chunked, as the API server streams a watch: each piece is sent as a
                # chunk the moment it is made; the connection closes when the pieces end.
                self.protocol_version = "HTTP/1.1"
                self.close_connection = True
                self.send_response(status)
                self.send_header("Content-Type", server.content_type)
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    for piece in body.pieces:
                        if piece:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                            self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client hung up: its time-out, or it stopped

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                # A client that gave up (a deadline test) hangs up mid-answer: expected, not news.
                if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    super().handle_error(request, client_address)

        # (Not `server`: the handler above reads this object under that name.)
        http_server = Server(("127.0.0.1", 0), Handler)
        http_server.daemon_threads = True
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            http_server.socket = context.wrap_socket(http_server.socket, server_side=True)
        self.address = f"127.0.0.1:{http_server.server_address[1]}"
        self.endpoint = f"{'https' if tls else 'http'}://{self.address}"
        self._serve_in_background(http_server)

    def route(self, method: str, path: str, query: str, headers: dict[str, str]) -> tuple[int, Any]:
        raise NotImplementedError

    def answered(self, method: str, path: str, status: int, body: Any, sent: bytes) -> None:
        """Told of every answer ``route`` gave (and the request's body): a fake checked against a
        published schema overrides it (``support.harness.discovery.CheckedAgainstDiscovery``)."""


class Streamed:
    """An answer ``route`` streams instead of a JSON body: each of ``pieces`` is sent as one
    chunk as soon as the iterator yields it (an empty piece sends nothing: a pause)."""

    def __init__(self, pieces: Iterable[bytes]) -> None:
        self.pieces = pieces


def not_found() -> tuple[int, Any]:
    return 404, {"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}}
