#!/usr/bin/env python3
"""The reference trainer: what a trainer run by this project's stacks must do, in one file.

A small multi-layer perceptron learns a fixed random "teacher" function on synthetic data. Every
example is a pure function of its index (``jax.random.fold_in(key, index)``), and the model, the
data and the optimizer are float32 with no nondeterministic operation, so a run that is killed and
resumed any number of times ends with exactly the parameters of a run that never stopped
(``tests/test_trainer_resume.py`` and ``tests/test_trainer_hosts.py`` check it bit for bit, on one
process and on a cluster of several).

The contract it keeps (docs/trainer.md):

- It reads the stack's environment: ``CHECKPOINT_DIR`` (an absolute local path or ``gs://``),
  ``TRAIN_STEPS`` (or ``EPOCHS``, or ``TOTAL_EXAMPLES``), ``GLOBAL_BATCH_SIZE``,
  ``LEARNING_RATE``, ``CHECKPOINT_INTERVAL_SECONDS``; it checks the paths before it trains.
- Every host of a slice decides together: which checkpoint to restore (the newest that every one
  of them can read and verify), when to save (one step for all) and when to stop (SIGTERM to any of
  them, or JAX's preemption notice, stops all of them at one step, after one save).
- Nothing good is deleted: a checkpoint that cannot be read for now is retried, then the trainer
  exits "try again" (75); one that belongs to another run is refused (3) and left alone; a damaged
  one is moved aside into ``$CHECKPOINT_DIR.damaged/``; old ones are removed only once a newer one
  is committed and verified.
- The run has an identity (model shape, seed, data order, optimizer) saved in every checkpoint, and
  counts examples: a resized slice continues where the examples stand and stops when all are seen.
- A non-finite loss stops the run before anything of it is saved (4).
- Saves are asynchronous: training waits only for the copy off the devices.

Run it as ``python3 train.py``; it takes no arguments. Exit codes: 0 complete, 2 bad
configuration, 3 a checkpoint of another run, 4 training diverged, 75 storage or cluster
unreachable for now (try again), 143 stopped by SIGTERM after saving; anything else is a failure
the retry loop retries.
"""

from __future__ import annotations

import hosts  # first, and quick: the trainer's modules import the standard library only at first

# Before the imports below and the seconds a start takes: a SIGTERM that arrives then must not
# kill the process half-way through a save later; it is remembered and honoured at the next step.
STOP_SIGNAL = hosts.StopSignal().listen()

import datetime  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.parse  # noqa: E402
import urllib.request  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from enum import IntEnum  # noqa: E402
from typing import Any, Callable, Mapping, Optional  # noqa: E402

from hosts import Hosts, join_cluster  # noqa: E402
from model import Model, checksum, final_state_npz, fingerprint  # noqa: E402
from outcomes import (  # noqa: E402
    EXIT_BAD_CONFIG,
    EXIT_COMPLETE,
    EXIT_DIVERGED,
    EXIT_INCOMPATIBLE,
    EXIT_STOPPED,
    EXIT_TRY_AGAIN,
    ConfigError,
    Diverged,
    IncompatibleCheckpoint,
    TryAgain,
    describe,
    fail,
    log,
    quoted,
)
from settings import Settings, read_settings  # noqa: E402
from storage import check_bucket, check_local_folder, list_storage_afresh, move_folder, storage_failure  # noqa: E402

COMPLETION_MARKER = "TRAINING_COMPLETE"
"""The startup script's marker (components/startup_script.py COMPLETION_MARKER): a VM that finds
it in ``CHECKPOINT_DIR`` does not train again."""
FINAL_STATE = "final_state.npz"
DAMAGED_SUFFIX = ".damaged"
"""Damaged checkpoints are moved to ``$CHECKPOINT_DIR.damaged/STEP-TIME``: out of the way of the
step that will be saved again, and kept for inspection. Beside ``CHECKPOINT_DIR``, not in it: on
``gs://`` Orbax takes any folder in it without a commit file for an unfinished save and deletes
it at the next start."""


class Progress:
    """The furthest step this machine trained to, in a local file rewritten after every step:
    the next start compares it with the step it restores to and logs the steps redone. A new VM
    or Pod has no such file, and the log says "unknown"."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> Optional[int]:
        try:
            with open(self.path) as handle:
                return int(json.load(handle)["step"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, step: int) -> None:
        temporary = f"{self.path}.{os.getpid()}"
        with open(temporary, "w") as handle:
            json.dump({"step": step}, handle)
        os.replace(temporary, self.path)


# -- Progress out, save requests in --------------------------------------------------------------

PROGRESS_PREFIX = "progress.process-"
"""Each process's progress record is ``$CHECKPOINT_DIR/progress.process-N.json`` (a file beside the
step folders, which Orbax does not list as a step)."""
PROGRESS_FORMAT = "tpu-training-progress/1"
SAVE_REQUEST = "save-request.json"
"""A request to checkpoint now, written by recovery (a maintenance notice) or by hand."""
SAVE_REQUEST_FORMAT = "tpu-training-save-request/1"
_REQUEST_ID_LIMIT = 200


def utc_text(seconds: float) -> str:
    """A wall-clock time as RFC 3339 in UTC, to the millisecond."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_utc(text: object) -> Optional[float]:
    """Seconds since the epoch from RFC 3339 text with a zone, or None."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.timestamp() if moment.tzinfo is not None else None


@dataclass(frozen=True)
class SaveRequest:
    """``save-request.json``: save once, soon, and go on training (``before``: the time by which
    the save is wanted, e.g. a maintenance window's start)."""

    id: str
    reason: str
    before: Optional[float]


def read_save_request(text: str, now: float) -> tuple[Optional[SaveRequest], Optional[str]]:
    """The request in ``text`` and None, or None and why it is ignored (said once per content).
    One whose ``before`` has passed is ignored: the window it was for has begun, and a request
    left behind must not make every later start save again."""
    try:
        found = json.loads(text)
    except ValueError:
        return None, "not JSON"
    if not isinstance(found, dict) or found.get("format") != SAVE_REQUEST_FORMAT:
        return None, f"not an object with format {SAVE_REQUEST_FORMAT!r}"
    identity = found.get("id")
    if not isinstance(identity, str) or not identity.strip() or len(identity) > _REQUEST_ID_LIMIT:
        return None, f"id must be a non-empty string of at most {_REQUEST_ID_LIMIT} characters"
    reason = found.get("reason", "requested")
    if not isinstance(reason, str):
        return None, "reason must be a string"
    before: Optional[float] = None
    if found.get("before") is not None:
        before = parse_utc(found["before"])
        if before is None:
            return None, f"before={found['before']!r} is not an RFC 3339 time with a zone"
        if before < now:
            return None, f"before={found['before']} has passed"
    return SaveRequest(identity, reason, before), None


# -- What the VM's metadata server says ----------------------------------------------------------
# Read apart from everything else: the keys, their spellings and their values are Compute Engine's
# (docs/fidelity.md), and tests/test_fidelity.py pins the fake that stands in for the server.

MAINTENANCE_URL_VARIABLE = "TRAINER_MAINTENANCE_URL"
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
        :_REQUEST_ID_LIMIT
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


def request_token(identity: str) -> int:
    """A request's id as a positive 31-bit number: what the processes exchange to agree on it."""
    return int(hashlib.sha256(identity.encode()).hexdigest()[:7], 16) + 1


class Beacon:
    """A thread beside training that, every ``TRAINER_PROGRESS_SECONDS``, publishes this process's
    progress (``progress.process-N.json``: phase, step, examples, when the step last advanced, the
    recent step time, the newest committed save, the last save request done) and reads
    ``save-request.json``. Recovery reads the records to tell hung training from slow training
    (a process stuck in a collective still writes; its step does not advance) and to see that a
    requested save was done. Never in training's way: the loop only sets values under a lock, and
    a write that hangs holds up nothing but this thread."""

    def __init__(self, directory: Any, settings: Settings, index: int, count: int) -> None:
        self.directory = directory
        self.period = settings.progress_seconds
        self.local = not settings.checkpoint_dir.startswith("gs://")
        self.path = directory / f"{PROGRESS_PREFIX}{index}.json"
        self.lock = threading.Lock()
        now = time.time()
        self.record: dict[str, Any] = {
            "format": PROGRESS_FORMAT,
            "process": index,
            "processes": count,
            "phase": "starting",
            "step": None,
            "examples": None,
            "target_examples": settings.target_examples,
            "started_at": utc_text(now),
            "step_seconds": None,
            "saved_step": None,
            "saved_at": None,
            "request_done": None,
        }
        self.advanced_at = now
        """When the step (or the phase) last changed; formatted only when the record is written,
        so the step loop does no more than store a number."""
        self.step_seconds: Optional[float] = None
        self.pending: Optional[SaveRequest] = None
        """A request read and not yet done."""
        self.done_tokens: set[int] = set()
        """Requests saved for, by the token the processes agreed on (this process may have saved
        for a request before it read it itself)."""
        self.started_tokens: set[int] = set()
        """Requests a save under way is for."""
        self.ignored: Optional[str] = None
        self.lead = settings.save_lead_seconds
        self.maintenance_url = settings.maintenance_url
        self.node_name = settings.node_name
        self.notice: Optional[SaveRequest] = None
        """The maintenance the metadata server announced, as a request."""
        self.notice_problem: Optional[str] = None
        self.short_notice: Optional[SaveRequest] = None
        """A terminate or a preemption the watched keys announced: save now."""
        self.short_values: dict[str, str] = {}
        self.stopping = threading.Event()
        self.thread: Optional[threading.Thread] = None
        self.watches = [
            MetadataWatch(
                metadata_key_url(self.maintenance_url, key),
                key,
                settings.metadata_wait_seconds,
                self._short_notice_seen,
                self.stopping,
            )
            for key in (SHORT_NOTICE_KEYS if self.maintenance_url else ())
        ]
        if self.period > 0:
            previous = self._read_own_record()
            if isinstance(previous.get("request_done"), str):
                self.record["request_done"] = previous["request_done"]
                self.done_tokens.add(request_token(previous["request_done"]))

    def start(self) -> None:
        for watch in self.watches:
            watch.thread.start()
        if self.period <= 0:
            return
        self.thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self.thread.start()

    def advanced(self, step: int, examples: int, seconds: Optional[float] = None) -> None:
        """The loop reached ``step``; ``seconds`` is the step's time (a running mean is kept)."""
        with self.lock:
            if seconds is not None:
                mean = self.step_seconds
                self.step_seconds = seconds if mean is None else 0.9 * mean + 0.1 * seconds
                self.record["step_seconds"] = round(self.step_seconds, 6)
            self.record.update(step=step, examples=examples)
            self.advanced_at = time.time()

    def phase(self, phase: str) -> None:
        with self.lock:
            self.record["phase"] = phase
            self.advanced_at = time.time()

    def committed(self, step: int) -> None:
        with self.lock:
            self.record.update(saved_step=step, saved_at=utc_text(time.time()))

    def requested(self) -> int:
        """The token of a request this process read (a terminate or preemption the watched keys
        announced, the file's, then the maintenance notice's),
        has not saved for, and whose ``before`` is within the lead; or 0."""
        now = time.time()
        with self.lock:
            for request in (self.short_notice, self.pending, self.notice):
                if request is None or (request.before is not None and request.before - now > self.lead):
                    continue
                token = request_token(request.id)
                if token not in self.done_tokens and token not in self.started_tokens:
                    return token
            return 0

    def saving_for(self, token: int) -> None:
        """A save for the request agreed as ``token`` has started (0: none)."""
        if token:
            with self.lock:
                self.started_tokens.add(token)

    def saved_for(self, token: int) -> None:
        """Every process saved (and the save is committed) for the request agreed as ``token``."""
        with self.lock:
            self.done_tokens.add(token)
            if self.pending is not None and request_token(self.pending.id) == token:
                self.record["request_done"] = self.pending.id
            if self.notice is not None and request_token(self.notice.id) == token:
                log("maintenance-saved", id=quoted(self.notice.id))
            if self.short_notice is not None and request_token(self.short_notice.id) == token:
                log("short-notice-saved", id=quoted(self.short_notice.id))

    def stop(self, phase: str) -> None:
        """The last record (``complete``, ``stopped``, ``exited``), written now, within the period.
        The watches end with their hanging GET (daemon threads: nothing waits for them)."""
        self.stopping.set()
        if self.thread is None:
            return
        self.phase(phase)
        self.thread.join(timeout=max(5.0, self.period))

    def _run(self) -> None:
        while True:
            self._read_request()
            self._read_maintenance()
            self._write()
            if self.stopping.wait(self.period):
                self._write()
                return

    def _read_own_record(self) -> dict[str, Any]:
        try:
            found = json.loads(self.path.read_text())
        except Exception:  # noqa: BLE001 - none yet, or unreadable: nothing was done
            return {}
        return found if isinstance(found, dict) else {}

    def _read_request(self) -> None:
        try:
            text = (self.directory / SAVE_REQUEST).read_text()
        except FileNotFoundError:
            return
        except Exception as error:  # noqa: BLE001 - a read that fails now may work next time
            self._ignore(f"could not be read: {describe(error)}")
            return
        request, problem = read_save_request(text, time.time())
        if problem is not None:
            self._ignore(problem)
            return
        with self.lock:
            # A request rewritten with another time is the same request (its id), wanted later or
            # sooner: it replaces the one read.
            if request is not None and self.pending != request:
                self.pending = request
                if request_token(request.id) in self.done_tokens:
                    self.record["request_done"] = request.id
                else:
                    log("save-requested", id=quoted(request.id), reason=quoted(request.reason))

    def _read_maintenance(self) -> None:
        if not self.maintenance_url:
            return
        request = urllib.request.Request(
            with_query(self.maintenance_url, alt="json"), headers=METADATA_HEADERS
        )
        try:
            # Bounded well inside the period: the beacon must keep writing records.
            with urllib.request.urlopen(request, timeout=min(5.0, max(self.period / 2, 0.5))) as answer:
                text = answer.read(64 * 1024).decode("utf-8", errors="replace")
        except urllib.error.HTTPError as error:
            # 503 with {"error": ...} is how the server says nothing is scheduled; some images
            # answer 404 with a body where no notice was ever received.
            if error.code not in (404, 503):
                self._notice_problem(f"HTTP {error.code}")
                return
            text = "" if error.code == 503 else error.read(64 * 1024).decode("utf-8", errors="replace")
        except Exception as error:  # noqa: BLE001 - unread now, read again next period
            self._notice_problem(f"could not be read: {describe(error)}")
            return
        notice, problem = read_maintenance_notice(text, time.time(), self.node_name)
        if problem is not None:
            self._notice_problem(problem)
            return
        with self.lock:
            if notice is not None and (self.notice is None or self.notice.id != notice.id):
                before = utc_text(notice.before) if notice.before is not None else "now"
                log(
                    "maintenance-notice",
                    id=quoted(notice.id),
                    save_before=before,
                    can_reschedule=notice_can_reschedule(text),
                )
            self.notice = notice
            self.notice_problem = None

    def _short_notice_seen(self, key: str, value: str) -> None:
        """A value of ``maintenance-event`` or ``preempted`` (each change said once)."""
        value = value.strip()
        with self.lock:
            if self.short_values.get(key) == value:
                return
            self.short_values[key] = value
            save, problem = read_short_notice(key, value)
            if problem is not None:
                log("metadata-event-ignored", key=key, reason=quoted(problem))
                return
            log("metadata-event", key=key, value=value[:80], save="now" if save else "no")
            if save:
                node = f" {self.node_name}" if self.node_name else ""
                self.short_notice = SaveRequest(f"{key} {value}{node} {utc_text(time.time())}", key, None)

    def _notice_problem(self, problem: str) -> None:
        if problem != self.notice_problem:
            self.notice_problem = problem
            log("maintenance-notice-ignored", url=self.maintenance_url, reason=quoted(problem))

    def _ignore(self, problem: str) -> None:
        if problem != self.ignored:
            self.ignored = problem
            log("save-request-ignored", file=SAVE_REQUEST, reason=quoted(problem))

    def _write(self) -> None:
        with self.lock:
            record = {
                **self.record,
                "advanced_at": utc_text(self.advanced_at),
                "written_at": utc_text(time.time()),
            }
        text = json.dumps(record, sort_keys=True)
        try:
            if self.local:
                # Whole or not at all: a reader never sees half a record.
                temporary = str(self.path.parent / f".{self.path.name}.partial-{os.getpid()}")
                with open(temporary, "w") as handle:
                    handle.write(text)
                os.replace(temporary, str(self.path))
            else:
                self.path.write_text(text)  # one object upload: whole or not at all
        except Exception as error:  # noqa: BLE001 - the next period tries again; training goes on
            log("progress-unwritten", reason=quoted(describe(error)))


# -- Checkpoints ------------------------------------------------------------------------------------


class Outcome(IntEnum):
    """What one process found when it tried a checkpoint; the worst over all processes decides."""

    RESTORED = 0
    DAMAGED = 1
    UNREACHABLE = 2
    INCOMPATIBLE = 3


@dataclass
class Pending:
    step: int
    started: float
    committed: bool = False
    request: int = 0
    """The save request (its agreed token) this save is for, or 0."""


@dataclass
class Restored:
    step: int
    examples: int
    state: Any


@dataclass
class Attempt:
    outcome: Outcome
    reason: str = ""
    restored: Optional[Restored] = None


def checkpoint_options(ocp: Any, **options: Any) -> Any:
    # Not Orbax's max_to_keep: old steps go only once a newer one is committed and verified by
    # every process (Checkpoints.remove_old), never on the way in.
    return ocp.CheckpointManagerOptions(max_to_keep=None, **options)


class CheckpointReader:
    """This process's own view of ``CHECKPOINT_DIR``: listing and reading, with no step that
    waits for the other processes (Orbax's restore ends with a barrier across all of them, which a
    process whose read failed would never reach). What the processes read, they then compare."""

    def __init__(self, jax: Any, model: Model, settings: Settings, hosts: Hosts) -> None:
        import orbax.checkpoint as ocp
        from etils import epath

        self.jax, self.model, self.settings, self.ocp = jax, model, settings, ocp
        self.directory = epath.Path(settings.checkpoint_dir)
        self.damaged = epath.Path(settings.checkpoint_dir + DAMAGED_SUFFIX)
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=checkpoint_options(
                ocp,
                read_only=True,
                create=False,
                save_interval_steps=0,
                multiprocessing_options=ocp.options.MultiprocessingOptions(
                    primary_host=hosts.index, active_processes={hosts.index}
                ),
            ),
            item_names=("state", "meta"),
        )

    def steps(self) -> list[int]:
        """The committed steps, newest first."""
        self.manager.reload()
        return sorted(self.manager.all_steps(), reverse=True)

    def record(self, step: int) -> Any:
        ocp = self.ocp
        return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]

    def attempt(self, step: int) -> Attempt:
        """Try ``step``: its record first (is it this run's?), then the arrays and their checksum."""
        ocp = self.ocp
        try:
            record = self.record(step)
            if not isinstance(record, dict) or record.get("step") != step:
                return Attempt(Outcome.DAMAGED, f"its record {record!r:.100} names another step")
            difference = self._difference(record)
            if difference:
                return Attempt(Outcome.INCOMPATIBLE, difference)
            examples = record.get("examples")
            if not isinstance(examples, int) or examples < 0:
                return Attempt(Outcome.DAMAGED, f"its record has no examples count ({examples!r})")
            restored = self.manager.restore(
                step, args=ocp.args.Composite(state=ocp.args.StandardRestore(self.model.abstract_state()))
            )
            state = restored["state"]
            found, want = checksum(self.jax, state), str(record.get("checksum"))
            if found != want:
                return Attempt(Outcome.DAMAGED, f"checksum {found[:12]} differs from the saved {want[:12]}")
        except Exception as error:  # noqa: BLE001 - classified: not now, or not this one
            if storage_failure(error) == "transient":
                return Attempt(Outcome.UNREACHABLE, describe(error))
            return Attempt(Outcome.DAMAGED, describe(error))
        return Attempt(Outcome.RESTORED, restored=Restored(step, examples, state))

    def _difference(self, record: Mapping[str, Any]) -> str:
        """Why the checkpoint is not this run's, or "" when it is (or an override accepts it)."""
        saved, ours = record.get("run"), fingerprint(self.settings)
        if not isinstance(saved, dict):
            return "it records no run fingerprint (saved by another trainer?); move it away to start anew"
        changed = [
            f"{key} {saved.get(key)!r} -> {ours[key]!r}" for key in ours if saved.get(key) != ours[key]
        ]
        if not changed:
            return ""
        if saved.get("model") != ours["model"]:
            return f"another model ({'; '.join(changed)}); its arrays cannot be restored into this one"
        if self.settings.accept_changed_run:
            log("accept", changed=quoted("; ".join(changed)), reason="TRAINER_ACCEPT_CHANGED_RUN=1")
            return ""
        return (
            f"another run ({'; '.join(changed)}); set TRAINER_ACCEPT_CHANGED_RUN=1 to continue from it "
            f"anyway, or give the run another CHECKPOINT_DIR"
        )

    def close(self) -> None:
        self.manager.close()


def agreed_steps(reader: CheckpointReader, hosts: Hosts) -> list[int]:
    """The committed steps every process lists, newest first (the same list on every process)."""
    return hosts.common(reader.steps())


def restore(reader: CheckpointReader, hosts: Hosts, settings: Settings) -> Optional[Restored]:
    """The newest checkpoint every process can read and verify, restored on all of them; None
    when there is none. Each step is decided from what every process found: one that any process
    cannot read *for now* is tried again (then ``TryAgain``), one of another run refused
    (``IncompatibleCheckpoint``), a damaged one moved aside and the one before it tried. Nothing
    is deleted."""
    failures = 0
    while True:
        try:
            listed: Optional[list[int]] = reader.steps()
            listing_error = ""
        except Exception as error:  # noqa: BLE001 - any failure to list is "not now"
            listed, listing_error = None, describe(error)
        (unlisted,) = hosts.any(listed is None)
        if unlisted:
            failures += 1
            _wait_or_give_up(settings, failures, None, listing_error or "another process could not list")
            continue
        assert listed is not None
        candidates = hosts.common(listed)
        if not candidates:
            (some,) = hosts.any(bool(listed))
            if not some:
                return None
            failures += 1
            _wait_or_give_up(settings, failures, None, "the processes do not list the same checkpoints")
            continue
        for step in candidates:
            attempt = reader.attempt(step)
            outcomes = [row[0] for row in hosts.gather([int(attempt.outcome)])]
            worst = Outcome(max(outcomes))
            reason = attempt.reason
            if attempt.outcome != worst:
                reason = f"process {outcomes.index(worst)} could not use it"
            if worst == Outcome.RESTORED:
                assert attempt.restored is not None
                return attempt.restored
            if worst == Outcome.INCOMPATIBLE:
                raise IncompatibleCheckpoint(f"checkpoint step {step} in {reader.directory}: {reason}")
            if worst == Outcome.UNREACHABLE:
                failures += 1
                _wait_or_give_up(settings, failures, step, reason)
                break  # list again, then try again from the newest
            log("skip", step=step, reason=quoted(reason))
            _move_aside(reader, hosts, step)
        else:
            return None


def _wait_or_give_up(settings: Settings, failures: int, step: Optional[int], reason: str) -> None:
    where = f"step {step}" if step is not None else "the checkpoint list"
    if failures >= settings.restore_attempts:
        raise TryAgain(
            f"could not read {where} in {settings.checkpoint_dir} after {failures} tries ({reason}); "
            f"nothing was changed"
        )
    delay = settings.retry_seconds * 2 ** (failures - 1)
    log("retry", what=quoted(where), attempt=failures, seconds=f"{delay:g}", reason=quoted(reason))
    time.sleep(delay)


def _move_aside(reader: CheckpointReader, hosts: Hosts, step: int) -> None:
    # Out of the way of the step that will be saved again (Orbax does not write over a step), and
    # kept for inspection. One process moves; all wait for it before they list again.
    failed = ""
    if hosts.primary:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = reader.damaged / f"{step}-{stamp}"
        try:
            move_folder(reader.directory / str(step), target)
            log("moved", step=step, to=str(target))
        except Exception as error:  # noqa: BLE001 - reported below, on every process
            failed = describe(error)
    (unmoved,) = hosts.any(bool(failed))
    if unmoved:
        # Training on would save this step again over the damaged one, which Orbax refuses.
        raise TryAgain(
            f"could not move damaged step {step} aside in {reader.directory} "
            f"({failed or 'on process 0'}); nothing was deleted"
        )


class Checkpoints:
    """Saving into ``CHECKPOINT_DIR``: per step the state and, beside it, its step, examples,
    checksum and the run's fingerprint. Every method is called by every process at the same
    point of the program."""

    def __init__(
        self, jax: Any, settings: Settings, hosts: Hosts, reader: CheckpointReader, beacon: Beacon
    ) -> None:
        import orbax.checkpoint as ocp

        self.jax, self.settings, self.hosts, self.reader, self.ocp = jax, settings, hosts, reader, ocp
        self.beacon = beacon
        self.directory = reader.directory
        self.pending: Optional[Pending] = None
        """The save under way in the background."""
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=checkpoint_options(
                ocp,
                # Orbax copies the arrays off the devices, then writes them in the background
                # while training goes on; a save waits for the one before to be committed.
                enable_async_checkpointing=True,
                # A kill during a save leaves a temporary directory; the next start removes it.
                cleanup_tmp_directories=True,
                # Saves happen when the hosts agree (by time), not on Orbax's step schedule.
                save_interval_steps=1,
            ),
            item_names=("state", "meta"),
        )

    def save(self, step: int, examples: int, state: Any, reason: str, request: int = 0) -> None:
        """Start saving ``state``; returns once the arrays are off the devices. ``request``: the
        save request this save is for (done once the save is committed)."""
        ocp = self.ocp
        self.finish()
        log("saving", step=step, reason=reason)
        started = time.monotonic()
        meta = {
            "step": step,
            "examples": examples,
            "checksum": checksum(self.jax, state),
            "run": fingerprint(self.settings),
            "global_batch_size": self.settings.global_batch_size,
        }
        self.pending = Pending(step, started, request=request)
        saved = self.manager.save(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
            force=True,
        )
        if not saved:
            raise RuntimeError(f"orbax did not save step {step} in {self.directory}")
        log("saved", step=step, seconds=f"{time.monotonic() - started:.4f}")

    def poll(self) -> None:
        """Log the save under way once it is committed (this process's view; nothing is decided
        on it). Cheap: Orbax's own flag."""
        pending = self.pending
        if pending is not None and not pending.committed and not self.manager.is_saving_in_progress():
            pending.committed = True
            log("committed", step=pending.step, seconds=f"{time.monotonic() - pending.started:.4f}")
            self.beacon.committed(pending.step)
            if pending.request:
                self.beacon.saved_for(pending.request)

    def finish(self) -> None:
        """Wait for the save under way to be committed, then remove what it made old."""
        if self.pending is None:
            return
        self.manager.wait_until_finished()
        self.poll()
        newest = self.pending.step
        self.pending = None
        self.remove_old(newest)

    def remove_old(self, newest: int) -> None:
        """Once ``newest`` is committed and every process reads its record back, keep it and the
        ``keep - 1`` before it; delete the older ones (every process, the same steps)."""
        try:
            verified = newest in self.reader.steps() and self.reader.record(newest).get("step") == newest
        except Exception:  # noqa: BLE001 - unreadable is unverified
            verified = False
        (unverified,) = self.hosts.any(not verified)
        if unverified:
            log("keep", step=newest, reason=quoted("not verified by every process; nothing deleted"))
            return
        older = [step for step in agreed_steps(self.reader, self.hosts) if step < newest]
        # Deleted through this manager's own list of steps (it made or found every one), never a
        # fresh listing: Orbax's delete refuses a step it does not list, and process 0 deletes
        # the folder while another process may still be listing, which then misses the step and
        # never reaches the barrier that ends the delete on every process.
        for old in older[self.settings.keep - 1 :]:
            log("delete", step=old, reason=f"older than the {self.settings.keep} newest")
            self.manager.delete(old)

    def write_file(self, name: str, data: bytes) -> None:
        (self.directory / name).write_bytes(data)

    def close(self) -> None:
        self.manager.close()


# -- Training -----------------------------------------------------------------------------------------


def train(settings: Settings, *, clock: Callable[[], float] = time.monotonic) -> int:
    """One attempt: restore, train to the end or to SIGTERM, save. Returns the exit code."""
    started = clock()
    list_storage_afresh()
    if not settings.checkpoint_dir.startswith("gs://"):
        check_local_folder("CHECKPOINT_DIR", settings.checkpoint_dir)
    check_local_folder("TRAINER_STATE_DIR", settings.state_dir)
    jax, distributed = join_cluster(settings)
    hosts = Hosts(jax, distributed)
    if settings.checkpoint_dir.startswith("gs://"):
        check_bucket(settings, hosts.index)
    from etils import epath

    beacon = Beacon(epath.Path(settings.checkpoint_dir), settings, hosts.index, hosts.count)
    beacon.start()
    code: Optional[int] = None
    try:
        model = Model(jax, settings)
        reader = CheckpointReader(jax, model, settings, hosts)
        try:
            restore_started = clock()
            restored = restore(reader, hosts, settings)
            restore_seconds = clock() - restore_started
            # Made once the restore is decided: a damaged step moved aside is gone from its view.
            checkpoints = Checkpoints(jax, settings, hosts, reader, beacon)
            try:
                code = _train(
                    jax,
                    model,
                    checkpoints,
                    hosts,
                    settings,
                    beacon,
                    restored,
                    started,
                    restore_seconds,
                    clock,
                )
                return code
            finally:
                checkpoints.close()
        finally:
            reader.close()
    finally:
        ends = {EXIT_COMPLETE: "complete", EXIT_STOPPED: "stopped"}
        beacon.stop(ends.get(code, "exited") if code is not None else "exited")


def _train(
    jax: Any,
    model: Model,
    checkpoints: Checkpoints,
    hosts: Hosts,
    settings: Settings,
    beacon: Beacon,
    restored: Optional[Restored],
    started: float,
    restore_seconds: float,
    clock: Callable[[], float],
) -> int:
    key = hashlib.sha256(settings.checkpoint_dir.encode()).hexdigest()[:16]
    progress = Progress(os.path.join(settings.state_dir, f"progress-{key}-{hosts.index}.json"))
    if restored is None:
        restored = Restored(0, 0, model.initial_state())
    step, examples, state = restored.step, restored.examples, restored.state
    model.compile(state)
    reached = progress.read()
    log(
        "resume",
        step=step,
        examples=examples,
        restore_seconds=f"{restore_seconds:.3f}",
        redone_steps="unknown" if reached is None else max(0, reached - step),
        reached_before="unknown" if reached is None else reached,
        startup_seconds=f"{clock() - started:.3f}",
        target_examples=settings.target_examples,
        global_batch_size=settings.global_batch_size,
        processes=hosts.count,
    )
    beacon.advanced(step, examples)
    beacon.phase("training")

    saved_step = step
    last_save = clock()
    request = 0
    (stop,) = hosts.any(STOP_SIGNAL.received)
    while examples < settings.target_examples and not stop:
        step_started = clock()
        state, loss, finite = model.train_step(state, examples)
        loss_value = float(loss)  # waits for the step: its time is real, and so is the progress record
        if settings.step_seconds:
            time.sleep(max(0.0, settings.step_seconds - (clock() - step_started)))
        if not bool(finite):
            # The state after this step is not finite: nothing of it is saved. The checkpoint
            # before it is good and stays; a restart would diverge again the same way.
            raise Diverged(
                f"the loss at step {step + 1} is {loss_value} (examples {examples} to "
                f"{examples + settings.global_batch_size}); nothing from this step on was saved. "
                f"Lower LEARNING_RATE (now {settings.learning_rate:g}) or resume from an earlier checkpoint"
            )
        first = examples
        step += 1
        examples += settings.global_batch_size
        progress.write(step)
        beacon.advanced(step, examples, clock() - step_started)
        checkpoints.poll()
        if step % settings.log_every == 0 or examples >= settings.target_examples:
            log(
                "step",
                step=step,
                examples=f"{first}-{examples}",
                loss=f"{loss_value:.6f}",
                seconds=f"{clock() - step_started:.4f}",
            )
        done = examples >= settings.target_examples
        due = (
            step % settings.interval_steps == 0
            if settings.interval_steps is not None
            else clock() - last_save >= settings.interval_seconds
        )
        # One exchange per step: every process learns whether any wants to stop or to save, and
        # which save request any has read, and all act at this same step. JAX's preemption
        # service agrees on its own step.
        (stop_wanted, save_wanted), request = hosts.agree(STOP_SIGNAL.received, due, token=beacon.requested())
        stop = stop_wanted or hosts.preempted(step)
        if stop and not done:
            break
        if (save_wanted or request) and not done:
            checkpoints.save(step, examples, state, "requested" if request else "interval", request)
            beacon.saving_for(request)
            saved_step, last_save = step, clock()

    if stop and examples < settings.target_examples:
        if step != saved_step:
            checkpoints.save(step, examples, state, "sigterm", request)
        checkpoints.finish()
        log("stopped", step=step, signal="SIGTERM", exit=EXIT_STOPPED)
        return EXIT_STOPPED

    if step != saved_step:
        checkpoints.save(step, examples, state, "final")
    checkpoints.finish()
    if hosts.primary:
        # Idempotent: a kill between these writes and the exit makes the next start repeat them.
        checkpoints.write_file(FINAL_STATE, final_state_npz(jax, state))
        checkpoints.write_file(COMPLETION_MARKER, f"completed step {step}, {examples} examples\n".encode())
    log("complete", step=step, examples=examples, checksum=checksum(jax, state))
    return EXIT_COMPLETE


def main() -> int:
    try:
        settings = read_settings(os.environ)
        return train(settings)
    except ConfigError as error:
        return fail(EXIT_BAD_CONFIG, f"configuration error: {error}")
    except IncompatibleCheckpoint as error:
        return fail(EXIT_INCOMPATIBLE, f"refusing to resume: {error}")
    except Diverged as error:
        return fail(EXIT_DIVERGED, f"training diverged: {error}")
    except TryAgain as error:
        return fail(EXIT_TRY_AGAIN, f"try again later: {error}")


if __name__ == "__main__":
    sys.exit(main())
