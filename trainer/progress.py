"""What this process tells the world while it trains, and what it is asked: its progress record
(``$CHECKPOINT_DIR/progress.process-N.json``, written every ``TRAINER_PROGRESS_SECONDS`` by the
``Beacon`` thread), the save requests it reads (``save-request.json``, and the metadata server's
notices through ``notices``), and the local file that remembers the furthest step this machine
reached (the next start logs the steps it redoes). docs/trainer.md, "Progress and save requests"."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Optional

from notices import (
    METADATA_HEADERS,
    SHORT_NOTICE_KEYS,
    MetadataWatch,
    metadata_key_url,
    notice_can_reschedule,
    read_maintenance_notice,
    read_short_notice,
    with_query,
)
from outcomes import describe, log, quoted
from save_requests import SAVE_REQUEST, SaveRequest, read_save_request, request_token, utc_text
from settings import Settings

PROGRESS_PREFIX = "progress.process-"
"""Each process's progress record is ``$CHECKPOINT_DIR/progress.process-N.json`` (a file beside the
step folders, which Orbax does not list as a step)."""
PROGRESS_FORMAT = "tpu-training-progress/1"


class Progress:
    """The furthest step this machine trained to, in a local file rewritten after every step:
    the next start compares it with the step it restores to and logs the steps redone. A new VM
    or Pod has no such file, and the log says "unknown"."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def of_run(cls, settings: Settings, process: int) -> Progress:
        """This process's file for this run: in ``TRAINER_STATE_DIR``, one per checkpoint folder."""
        key = hashlib.sha256(settings.checkpoint_dir.encode()).hexdigest()[:16]
        return cls(os.path.join(settings.state_dir, f"progress-{key}-{process}.json"))

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
