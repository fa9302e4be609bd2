"""Cloud Storage on loopback, for the trainer's ``gs://`` tests: the real clients of the trainer
(tensorstore's ``gcs`` driver, gcsfs, google-cloud-storage) talk to it over HTTP as they would to
storage.googleapis.com, pointed at it by their own endpoint settings
(``support.harness.sandbox.GcsStore.client_env``).

The server is gcp-storage-emulator (PyPI, pinned in requirements-dev.txt), run in this process on
127.0.0.1 at a port the OS picks, its objects in memory: the tests start and stop it. It answers the
JSON API requests those clients send (media and resumable uploads, media downloads with ranges,
listings by prefix and delimiter, deletes, batches). Where it departs from Cloud Storage in a way
they depend on, the handler below answers as Cloud Storage does instead:

- Request preconditions (https://cloud.google.com/storage/docs/request-preconditions). The
  emulator ignores ``ifGenerationMatch`` and ``ifGenerationNotMatch``; tensorstore's OCDBT driver
  commits each manifest with them (``=0`` to create one, ``=<generation>`` to replace the one it
  read), and Cloud Storage refuses with 412 a commit over a manifest it did not expect (one a
  killed save left behind, say). Answering 200 would let a test pass that fails on a real bucket.
- The ``x-goog-generation`` and ``x-goog-metageneration`` headers of a media download, from which
  tensorstore takes the generation its next conditional write names
  (tensorstore/kvstore/gcs/object_metadata.cc, ``SetObjectMetadataFromHeaders``).
- Any other query parameter that changes what a request means and that the emulator does not
  implement (``startOffset``, ``ifMetagenerationMatch``, ...), and any path outside the JSON API
  (the emulator's own extras; a credentials lookup probing for a metadata server, which the
  clients' settings would send here), is refused with 501 and recorded in ``refused``: a client
  that starts to rely on one fails a test instead of passing against the wrong semantics.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from functools import partial
from http.server import HTTPServer
from typing import Any, Callable, Optional
from urllib.parse import parse_qs, unquote, urlsplit

from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers.buckets import create_bucket
from gcp_storage_emulator.server import RequestHandler
from gcp_storage_emulator.storage import Storage

from support.fakes.loopback import BackgroundServer

# Query parameters that do not change what a request means, or that the emulator implements.
_UNDERSTOOD = frozenset(
    {
        "alt",  # media download
        "prettyPrint",
        "fields",  # a partial response; the emulator answers with the whole resource
        "projection",
        "userProject",
        "tensorstore",  # tensorstore's cache-busting nonce (gcs_key_value_store.cc)
        "uploadType",
        "name",
        "upload_id",
        "prefix",
        "delimiter",
        "matchGlob",
        "maxResults",  # the emulator answers in one page, without nextPageToken
        "pageToken",
        "ifGenerationMatch",  # below
        "ifGenerationNotMatch",  # below
        "project",  # a bucket insert's project (the emulator has one)
    }
)
# The JSON API's paths; anything else (the emulator's own extras, a metadata-server probe sent
# here by the clients' settings) is refused.
_API_PATHS = ("/storage/v1/", "/upload/storage/v1/", "/download/storage/v1/", "/batch/storage/v1")
_OBJECT = re.compile(r"^(?:/download)?/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<name>.+)$")
_UPLOAD = re.compile(r"^/upload/storage/v1/b/(?P<bucket>[^/]+)/o$")


class LoopbackGcs(BackgroundServer):
    """gcp-storage-emulator on ``127.0.0.1``, with the buckets given, as a context manager."""

    def __init__(self, *buckets: str) -> None:
        # The emulator logs every read of a missing object as an error; tensorstore and Orbax probe
        # for files that are not there yet on every save, which is no error.
        logging.getLogger("gcp_storage_emulator").setLevel(logging.CRITICAL)
        self.storage = Storage(use_memory_fs=True)
        for bucket in buckets:
            create_bucket(bucket, self.storage)
        self.requests: list[str] = []
        """Every request, ``METHOD /path?query``, in the order served."""
        self.refused: list[str] = []
        """Requests refused because they rely on what the emulator does not implement."""
        self.intercept: Optional[Callable[[str, str, dict[str, str]], bool]] = None
        """Called with each request's method, path and query before it is served; when it returns
        False the request is dropped unanswered, as if its client had died before sending it."""
        handler = partial(_Handler, self)
        server = _Server(("127.0.0.1", 0), handler)
        self.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        self._serve_in_background(server)

    def objects(self, bucket: str, prefix: str) -> list[str]:
        """The names of the live objects under ``prefix``, read from the server's own state (an
        ``intercept`` runs on the server's only thread, so it cannot ask the server over HTTP)."""
        return sorted(name for name in self.storage.objects.get(bucket, {}) if name.startswith(prefix))

    def generation(self, bucket: str, name: str) -> int:
        """The live object's generation; 0 when there is none (as in ``ifGenerationMatch=0``)."""
        try:
            return int(self.storage.get_file_obj(bucket, name)["generation"])
        except NotFound:
            return 0

    def metageneration(self, bucket: str, name: str) -> int:
        return int(self.storage.get_file_obj(bucket, name)["metageneration"])


class _Server(HTTPServer):
    # One request at a time (the emulator's storage is not made for threads), so every
    # precondition is checked and acted on atomically; a deep accept queue, so a client that opens
    # many connections at once (tensorstore does) waits in it instead of having its SYNs dropped.
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up before reading its answer (a killed trainer, a cancelled read)
        # is no fault of the server's; anything else is reported as usual.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(RequestHandler):
    def __init__(self, gcs: LoopbackGcs, *args: Any) -> None:
        self.gcs = gcs
        self._goog_headers: dict[str, str] = {}
        self._status = 0
        super().__init__(gcs.storage, *args)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._serve("GET", super().do_GET)

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST", super().do_POST)

    def do_PUT(self) -> None:  # noqa: N802
        self._serve("PUT", super().do_PUT)

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE", super().do_DELETE)

    def do_PATCH(self) -> None:  # noqa: N802
        self._serve("PATCH", super().do_PATCH)

    def _serve(self, method: str, emulator: Any) -> None:
        self.gcs.requests.append(f"{method} {self.path}")
        parts = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        if self.gcs.intercept is not None and not self.gcs.intercept(method, parts.path, query):
            self.close_connection = True
            return
        if not parts.path.startswith(_API_PATHS):
            self.gcs.refused.append(f"{method} {self.path}")
            self._reply(501, "not a Cloud Storage JSON API path")
            return
        unknown = sorted(set(query) - _UNDERSTOOD)
        if unknown:
            self.gcs.refused.append(f"{method} {self.path}")
            self._reply(501, f"the loopback Cloud Storage does not implement {', '.join(unknown)}")
            return
        target = self._target(method, parts.path, query)
        if target is not None:
            bucket, name = target
            current = self.gcs.generation(bucket, name)
            status = _precondition(method, current, query)
            if status is not None:
                self._reply(status, "At least one of the pre-conditions you specified did not hold.")
                return
            if method == "GET" and current and ("alt" in query or parts.path.startswith("/download/")):
                self._goog_headers = {
                    "x-goog-generation": str(current),
                    "x-goog-metageneration": str(self.gcs.metageneration(bucket, name)),
                }
        elif "ifGenerationMatch" in query or "ifGenerationNotMatch" in query:
            # A precondition on a request this handler cannot check (a resumable upload's later
            # chunks, a copy): not sent by the trainer's clients today.
            self.gcs.refused.append(f"{method} {self.path}")
            self._reply(501, "the loopback Cloud Storage cannot check a precondition on this request")
            return
        emulator()

    @staticmethod
    def _target(method: str, path: str, query: dict[str, str]) -> Optional[tuple[str, str]]:
        """The object a request reads, replaces or deletes, as ``(bucket, name)``."""
        match = _OBJECT.match(path)
        if match and method in ("GET", "DELETE", "PATCH"):
            return unquote(match["bucket"]), unquote(match["name"])
        match = _UPLOAD.match(path)
        if match and method == "POST" and query.get("uploadType") == "media" and "name" in query:
            return unquote(match["bucket"]), query["name"]
        return None

    def _reply(self, status: int, message: str) -> None:
        body = b"" if status == 304 else json.dumps({"error": {"code": status, "message": message}}).encode()
        self.send_response(status)
        if body:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_response(self, code: int, message: Optional[str] = None) -> None:
        self._status = code
        super().send_response(code, message)

    def end_headers(self) -> None:
        if self._status in (200, 206):
            for key, value in self._goog_headers.items():
                self.send_header(key, value)
        self._goog_headers = {}
        super().end_headers()


def _precondition(method: str, current: int, query: dict[str, str]) -> Optional[int]:
    """What Cloud Storage answers instead of serving the request, or None to serve it.
    ``current`` is the live object's generation, 0 when there is none."""
    match = query.get("ifGenerationMatch")
    not_match = query.get("ifGenerationNotMatch")
    if method in ("GET", "DELETE", "PATCH") and not current:
        return None  # 404 from the emulator: a missing object is reported as missing
    if match is not None and int(match) != current:
        return 412
    if not_match is not None and int(not_match) == current:
        # A read whose copy is still current: "Not Modified". Anything else that names a
        # generation it must not be fails its precondition.
        return 304 if method == "GET" else 412
    return None
