"""Watch the stack's Jobs, JobSets, Pods and Nodes through the Kubernetes watch API, and say when
something changed that a recovery round should look at.

The watcher decides nothing: a relevant change calls ``on_change(reason)`` and nothing else. The
round it wakes lists everything again, as every round does, so no decision is ever taken on what
a watch stream said (a stream can lose events, skip some after a reconnect, or lie).

One thread per stream (a kind in a namespace; Nodes cluster-wide), none a daemon: ``stop()``
shuts their sockets down and joins them within its bound. Each stream:

1. lists, page by page (``resourceVersion`` of the list answer noted); after the first list, a
   relist compares what it found with what the stream knew and reports the difference as events
   would have;
2. watches from that ``resourceVersion`` (``allowWatchBookmarks``, a server-side
   ``timeoutSeconds``, a client read time-out a little longer: a stream the server should have
   ended and that still sends nothing is cut), noting the ``resourceVersion`` of every event and
   bookmark, and resumes from it when the server ends the stream;
3. on ``410 Gone`` ("too old resource version"), as an HTTP status or an ``ERROR`` event, lists
   again; on a line that is not a watch event (garbage, a truncated line) warns once per stream,
   naming it, and lists again; on any other failure waits (capped exponential back-off) and lists
   again. Nothing here raises out of the thread or prints a traceback.

Why the raw stream (``_preload_content=False`` on the generated list methods) rather than
``kubernetes.watch.Watch``: in kubernetes 37.0.2 ``Watch.unmarshal_event`` drops a line that is
not JSON without a word (``except json.JSONDecodeError: return None``), raises ``TypeError`` on
JSON that is not an object, retries a 410 from the same expired version once before raising, and
deserialises every object into a model we would not read; and stopping it from another thread
reaches into its private ``_resp``. The raw response gives each line as the server sent it and
is shut down with urllib3's public ``HTTPResponse.shutdown()`` (urllib3 >= 2.3).
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from ..domain.job_manifests import PART_OF, PART_OF_LABEL
from ..domain.jobset_manifests import JOBSET_API_VERSION
from ..domain.recovery import failure_summary
from .deadline import MAX_ANSWER_BYTES, Deadline
from .kube_client import ClusterRef, api_client_for
from .kube_pages import read_list

MAINTENANCE_LABEL = "cloud.google.com/scheduled-maintenance-time"
"""GKE's label on a node with a scheduled maintenance window (epoch seconds), GKE >= 1.31.1."""
DISRUPTION_TARGET = "DisruptionTarget"
"""The Pod condition Kubernetes sets on a Pod about to be deleted by a disruption (eviction,
preemption, node shutdown, taint manager)."""
BLOCKING_TAINTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class WatchScope:
    """What to watch. Jobs, JobSets and Pods are selected by ``selector`` (this project's own
    label); Nodes by ``node_selector`` (None: Nodes are not watched)."""

    job_namespaces: tuple[str, ...] = ()
    jobset_namespaces: tuple[str, ...] = ()
    pod_namespaces: tuple[str, ...] = ()
    node_selector: Optional[str] = None
    selector: str = f"{PART_OF_LABEL}={PART_OF}"

    @property
    def empty(self) -> bool:
        return not (
            self.job_namespaces or self.jobset_namespaces or self.pod_namespaces or self.node_selector
        )


@dataclass(frozen=True)
class WatchLimits:
    """The bounds of every stream."""

    server_timeout_seconds: int = 240
    """``timeoutSeconds`` of each watch: the API server ends the stream after it (client-go's
    reflector asks for 5 to 10 minutes); the stream then resumes from its last version."""
    read_margin_seconds: float = 30.0
    """The client's read time-out is the server's time-out plus this: a stream silent past the
    moment the server should have ended it is cut."""
    connect_seconds: float = 10.0
    list_seconds: float = 30.0
    """One list call, all in."""
    first_backoff_seconds: float = 0.5
    backoff_cap_seconds: float = 30.0
    """Consecutive failures of a stream wait 0.5, 1, 2, ... seconds, at most this long: a stream
    reconnects at most once per this long while the API server keeps failing."""
    max_line_bytes: int = MAX_ANSWER_BYTES
    """A line longer than this is not a watch event."""

    @property
    def read_seconds(self) -> float:
        return self.server_timeout_seconds + self.read_margin_seconds


# ---------------------------------------------------------------------------------------------
# What is relevant (pure)
# ---------------------------------------------------------------------------------------------


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def facts(kind: str, item: dict[str, Any]) -> frozenset[str]:
    """What about an object would make a round decide differently: a Job's or JobSet's
    conditions; a Pod failed or marked for disruption; a Node not ready, tainted NoSchedule or
    NoExecute, or labelled for maintenance. A change of anything else (a resourceVersion, a Pod's
    readiness, counts of active Pods) is not reported."""
    status = _dict(item.get("status"))
    if kind in ("Job", "JobSet"):
        return frozenset(
            f"{c.get('type')}={c.get('status')}" + (f" ({c['reason']})" if c.get("reason") else "")
            for c in map(_dict, _list(status.get("conditions")))
        )
    if kind == "Pod":
        found = {"phase Failed"} if status.get("phase") == "Failed" else set()
        found |= {
            f"{DISRUPTION_TARGET}" + (f" ({c['reason']})" if c.get("reason") else "")
            for c in map(_dict, _list(status.get("conditions")))
            if c.get("type") == DISRUPTION_TARGET and c.get("status") == "True"
        }
        return frozenset(found)
    metadata, spec = _dict(item.get("metadata")), _dict(item.get("spec"))
    found = {
        f"taint {t.get('key')}:{t.get('effect')}"
        for t in map(_dict, _list(spec.get("taints")))
        if t.get("effect") in BLOCKING_TAINTS
    }
    ready = [c for c in map(_dict, _list(status.get("conditions"))) if c.get("type") == "Ready"]
    if ready and ready[0].get("status") != "True":
        found.add("NotReady")
    label = _dict(metadata.get("labels")).get(MAINTENANCE_LABEL)
    if label is not None:
        found.add(f"maintenance at {label}")
    return frozenset(found)


def _at_birth(kind: str, fact: str) -> bool:
    """Facts a new object of ``kind`` normally has: every TPU node is born tainted
    (``google.com/tpu=present:NoSchedule``) and not yet ready."""
    return kind == "Node" and (fact.startswith("taint ") or fact == "NotReady")


def relevant(kind: str, before: Optional[frozenset[str]], after: Optional[frozenset[str]]) -> Optional[str]:
    """Why a change from ``before`` to ``after`` (facts; None: the object was unknown, or is
    gone) should wake a round, or None when it should not."""
    if after is None:
        return "deleted" if before is not None else None
    new = sorted(after - (before or frozenset()))
    if before is None:
        new = [fact for fact in new if not _at_birth(kind, fact)]
    return new[0] if new else None


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Stream:
    kind: str
    list_kind: str
    namespace: str
    """"" for Nodes (cluster-scoped)."""
    selector: str

    @property
    def name(self) -> str:
        return f"{self.kind}s in {self.namespace}" if self.namespace else f"{self.kind}s"

    def call(self, api_client: Any) -> Callable[..., Any]:
        """The generated list method of this stream, its positional arguments bound."""
        from kubernetes import client

        if self.kind == "Job":
            return lambda **kw: client.BatchV1Api(api_client).list_namespaced_job(self.namespace, **kw)
        if self.kind == "Pod":
            return lambda **kw: client.CoreV1Api(api_client).list_namespaced_pod(self.namespace, **kw)
        if self.kind == "Node":
            return lambda **kw: client.CoreV1Api(api_client).list_node(**kw)
        group, version = JOBSET_API_VERSION.split("/")
        custom = client.CustomObjectsApi(api_client)
        return lambda **kw: custom.list_namespaced_custom_object(
            group, version, self.namespace, "jobsets", **kw
        )


def _streams(scope: WatchScope) -> list[_Stream]:
    return [
        *(_Stream("Job", "JobList", ns, scope.selector) for ns in sorted(set(scope.job_namespaces))),
        *(_Stream("JobSet", "JobSetList", ns, scope.selector) for ns in sorted(set(scope.jobset_namespaces))),
        *(_Stream("Pod", "PodList", ns, scope.selector) for ns in sorted(set(scope.pod_namespaces))),
        *([_Stream("Node", "NodeList", "", scope.node_selector)] if scope.node_selector is not None else []),
    ]


class _Gone(Exception):
    """410: the version the stream resumes from is older than the server keeps."""


class _Garbage(Exception):
    """A line that is not a watch event."""


class _Absent(Exception):
    """404 on the list: the cluster serves no such resource (a CRD not installed)."""


EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")


def _event(line: bytes) -> tuple[str, dict[str, Any]]:
    """A watch event's type and object, or ``_Garbage``."""
    try:
        event = json.loads(line)
    except ValueError:
        raise _Garbage("a line that is not JSON") from None
    if (
        not isinstance(event, dict)
        or event.get("type") not in EVENT_TYPES
        or not isinstance(event.get("object"), dict)
    ):
        raise _Garbage("a JSON line that is not a watch event")
    return event["type"], event["object"]


def _lines(response: Any, max_bytes: int) -> Iterator[bytes]:
    """The newline-delimited lines of a streamed answer, as they arrive: ``read1`` returns what
    has come (chunked or not), where ``stream`` without chunks would wait for the end."""
    buffer = b""
    while piece := response.read1(65536):
        buffer += piece
        *lines, buffer = buffer.split(b"\n")
        yield from (line for line in lines if line.strip())
        if len(buffer) > max_bytes:
            raise _Garbage(f"a line longer than {max_bytes} bytes")
    if buffer.strip():
        raise _Garbage("a truncated last line")


def _key(item: dict[str, Any]) -> tuple[str, str]:
    metadata = _dict(item.get("metadata"))
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _version(item: dict[str, Any]) -> str:
    version = _dict(item.get("metadata")).get("resourceVersion")
    return version if isinstance(version, str) else ""


@dataclass
class StreamRecord:
    """What one stream did, for tests and the log."""

    lists: int = 0
    watches: list[str] = field(default_factory=list)
    """The resourceVersion each watch started from."""
    failures: int = 0
    absent: bool = False


class ClusterWatcher:
    """Watches ``scope`` on ``cluster`` and calls ``on_change(reason)`` on a relevant change;
    ``warn(line)`` for what a person should know (a stream that fails, a garbage line). Credentials
    as ``kube_client.api_client_for`` finds them (``kubeconfig`` and the seams likewise)."""

    def __init__(
        self,
        cluster: ClusterRef,
        scope: WatchScope,
        on_change: Callable[[str], None],
        *,
        warn: Callable[[str], None] = lambda line: None,
        limits: WatchLimits = WatchLimits(),
        kubeconfig: Optional[str] = None,
        container_client: Any = None,
        credentials: Any = None,
    ) -> None:
        self.cluster, self.scope, self.limits = cluster, scope, limits
        self._on_change, self._warn = on_change, warn
        self._credentials = {
            "kubeconfig": kubeconfig,
            "container_client": container_client,
            "credentials": credentials,
        }
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._open: dict[str, Any] = {}
        """stream name -> its response being read, shut down by ``stop``."""
        self._warned: set[tuple[str, str]] = set()
        self._threads: list[threading.Thread] = []
        self.records: dict[str, StreamRecord] = {}

    def start(self) -> None:
        for stream in _streams(self.scope):
            self.records[stream.name] = StreamRecord()
            thread = threading.Thread(
                target=self._run, args=(stream,), name=f"watch {stream.name}", daemon=False
            )
            self._threads.append(thread)
            thread.start()

    def stop(self, timeout: float = 2.0) -> bool:
        """Stop every stream; True when all of them ended within ``timeout`` seconds."""
        self._stopping.set()
        with self._lock:
            responses = list(self._open.values())
        for response in responses:
            _shut(response)
        ends = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, ends - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    @property
    def stopped(self) -> bool:
        return self._stopping.is_set()

    # --- one stream ---------------------------------------------------------------------------

    def _warn_once(self, stream: _Stream, what: str, line: str) -> None:
        if (stream.name, what) not in self._warned:
            self._warned.add((stream.name, what))
            self._warn(line)

    def _run(self, stream: _Stream) -> None:
        record = self.records[stream.name]
        known: Optional[dict[tuple[str, str], frozenset[str]]] = None
        version = ""
        failures = gone = 0
        with ExitStack() as cleanup:
            api_client: Any = None
            while not self._stopping.is_set():
                failed = True
                try:
                    if api_client is None:
                        api_client, _ = api_client_for(
                            self.cluster, cleanup, timeout=self.limits.list_seconds,
                            deadline=self.limits.list_seconds, **self._credentials,
                        )  # fmt: skip
                    if not version:
                        listed, version = self._list(stream, api_client)
                        record.lists += 1
                        if known is not None:
                            self._compare(stream, known, listed, "seen on a relist")
                        known = listed
                    record.watches.append(version)
                    started = time.monotonic()
                    version, lines = self._watch(stream, api_client, known or {}, version)
                    # A stream the server ended early without a word is a failing server, not a
                    # quiet one: reconnecting at once would spin.
                    failed = not lines and time.monotonic() - started < self.limits.server_timeout_seconds / 2
                    gone = 0 if lines else gone
                except _Absent:
                    record.absent = True
                    self._warn(
                        f"info: {stream.name}: the cluster serves none (404: is the CRD installed?); "
                        f"not watched, rounds keep listing them"
                    )
                    return
                except _Gone:
                    # The server no longer keeps that version: list again, at once the first time
                    # (a server that answers 410 to every version it just listed is failing).
                    gone += 1
                    version, failed = "", gone > 1
                except _Garbage as exc:
                    version = ""
                    self._warn_once(
                        stream,
                        "garbage",
                        f"warning: watching {stream.name}: {exc}; listing again (warned once)",
                    )
                except Exception as exc:  # noqa: BLE001 - a stream that fails ends in a relist, never a traceback
                    if self._stopping.is_set():
                        return
                    version = ""
                    api_client = None  # fresh credentials (a GKE token expires) for the next attempt
                    cleanup.close()
                    self._warn_once(
                        stream, "failed", f"warning: watching {stream.name} failed ({failure_summary(exc)}); "
                        f"retrying with back-off (warned once; rounds keep their interval)",
                    )  # fmt: skip
                failures = failures + 1 if failed else 0
                record.failures += failed
                if failures:
                    first, cap = self.limits.first_backoff_seconds, self.limits.backoff_cap_seconds
                    self._stopping.wait(min(cap, first * 2 ** min(failures - 1, 30)))

    def _list(self, stream: _Stream, api_client: Any) -> tuple[dict[tuple[str, str], frozenset[str]], str]:
        by = Deadline(self.limits.list_seconds, f"listing {stream.name}")

        def request(**page: Any) -> Any:
            return stream.call(api_client)(
                label_selector=stream.selector,
                _request_timeout=(self.limits.connect_seconds, by.timeout(self.limits.list_seconds)),
                _preload_content=False,
                **page,
            )

        try:
            items, version = read_list(request, stream.list_kind, self.limits.max_line_bytes, by)
        except Exception as exc:
            if getattr(exc, "status", None) == 404 and stream.kind == "JobSet":
                raise _Absent() from None
            if getattr(exc, "status", None) == 410:
                raise _Gone() from None
            raise
        if not version:
            raise _Garbage(f"a {stream.list_kind} without a resourceVersion")
        return {_key(_dict(item)): facts(stream.kind, _dict(item)) for item in items}, version

    def _compare(
        self,
        stream: _Stream,
        before: dict[tuple[str, str], frozenset[str]],
        after: dict[tuple[str, str], frozenset[str]],
        how: str,
    ) -> None:
        for key in sorted(before.keys() | after.keys()):
            why = relevant(stream.kind, before.get(key), after.get(key))
            if why is not None:
                self._tell(stream, key, f"{why} ({how})")

    def _tell(self, stream: _Stream, key: tuple[str, str], why: str) -> None:
        namespace, name = key
        self._on_change(f"{stream.kind} {namespace + '/' if namespace else ''}{name}: {why}")

    def _watch(
        self, stream: _Stream, api_client: Any, known: dict[tuple[str, str], frozenset[str]], version: str
    ) -> tuple[str, int]:
        """Follow one watch from ``version`` until the server ends it: the version to resume from,
        and how many lines it sent."""
        try:
            response = stream.call(api_client)(
                label_selector=stream.selector,
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.limits.server_timeout_seconds,
                _request_timeout=(self.limits.connect_seconds, self.limits.read_seconds),
                _preload_content=False,
            )
        except Exception as exc:
            if getattr(exc, "status", None) == 410:
                raise _Gone() from None
            raise
        with self._lock:
            self._open[stream.name] = response
        if self._stopping.is_set():
            _shut(response)
        lines = 0
        try:
            for line in _lines(response, self.limits.max_line_bytes):
                lines += 1
                kind, item = _event(line)
                if kind == "ERROR":
                    if item.get("code") == 410:
                        raise _Gone()
                    raise _Garbage(f"an ERROR event: {str(item.get('message'))[:200]}")
                version = _version(item) or version
                if kind == "BOOKMARK":
                    continue
                key = _key(item)
                after = None if kind == "DELETED" else facts(stream.kind, item)
                why = relevant(stream.kind, known.get(key), after)
                if after is None:
                    known.pop(key, None)
                else:
                    known[key] = after
                if why is not None:
                    self._tell(stream, key, why)
        finally:
            with self._lock:
                self._open.pop(stream.name, None)
            response.close()  # never back to the pool half read
            response.release_conn()
        return version, lines


def _shut(response: Any) -> None:
    """Unblock a thread reading ``response`` (urllib3's own way: ``HTTPResponse.shutdown``)."""
    try:
        response.shutdown()
    except Exception:  # noqa: BLE001, S110 - already released or closed: nothing is blocked on it
        pass
