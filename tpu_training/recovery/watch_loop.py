"""The recovery watch: rounds one after another (``watch``), woken early by the cluster's events,
stopped between rounds by SIGINT or SIGTERM (``StopSignal``), and each round's records published."""

from __future__ import annotations

import json
import signal
import threading
import time
from types import FrameType
from typing import Any, Callable, Optional, Sequence

from tpu_training_components.domain.recovery_rounds import (
    Backoff,
    RoundOutcome,
    next_round_in,
)
from tpu_training_components.live.cloud_logging import RecordLog

from tpu_training.exit_codes import EXIT_CONFIG_ERROR, EXIT_OK
from tpu_training.recovery.recover_events import ClusterEvents
from tpu_training.recovery.recovery_round import Recoverer
from tpu_training.recovery.round_report import RoundReport, exit_status

WAKE_DEBOUNCE_SECONDS = 0.25
"""A change wakes the next round this long after it: a burst (a slice's Pods failing together)
makes one round."""


MIN_SECONDS_BETWEEN_ROUNDS = 1.0
"""A woken round starts at least this long after the last one ended: a cluster that keeps
changing costs a list per second at most, never a loop."""


class StopSignal:
    """SIGINT and SIGTERM ask the watch to stop; it does so between rounds, never during a
    `pulumi up`. A cluster change (``wake``) ends the wait between rounds early."""

    def __init__(
        self,
        say: Callable[[str], None],
        *,
        debounce_seconds: float = WAKE_DEBOUNCE_SECONDS,
        gap_seconds: float = MIN_SECONDS_BETWEEN_ROUNDS,
    ) -> None:
        self.event = threading.Event()
        self._say = say
        self._debounce, self._gap = debounce_seconds, gap_seconds
        self._poked = threading.Event()
        """Set by a stop or a wake: what ends a wait early."""
        self._lock = threading.Lock()
        self._reasons: list[str] = []

    def install(self) -> None:
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, self._handle)

    def _handle(self, number: int, frame: Optional[FrameType]) -> None:
        if not self.event.is_set():
            self._say(f"{signal.Signals(number).name}: stopping after this round")
        self.request_stop()

    def request_stop(self) -> None:
        self.event.set()
        self._poked.set()

    @property
    def stopped(self) -> bool:
        return self.event.is_set()

    def wake(self, reason: str) -> None:
        """Start the next round soon (from any thread): something in the cluster changed."""
        with self._lock:
            self._reasons.append(reason)
            self._poked.set()

    def _take(self) -> Optional[str]:
        with self._lock:
            reasons, self._reasons = self._reasons, []
            self._poked.clear()
        if not reasons:
            return None
        return reasons[0] + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else "")

    def sleep(self, seconds: float, *, wakeable: bool = True) -> Optional[str]:
        """Wait ``seconds``, until a stop is asked, or (``wakeable``) until a wake: then its
        reason, once the burst settled. None when the time passed or a stop came; the wakes of
        the wait are then dropped (the next round reads everything anyway)."""
        started = time.monotonic()
        ends = started + seconds
        while not self.stopped and time.monotonic() < ends:
            if not wakeable:
                self.event.wait(ends - time.monotonic())
                continue
            self._poked.wait(ends - time.monotonic())
            with self._lock:
                woken = bool(self._reasons)
            if woken and not self.stopped:
                settle = max(self._debounce, started + self._gap - time.monotonic())
                self.event.wait(max(0.0, min(settle, ends - time.monotonic())))
                return None if self.stopped else self._take()
        self._take()
        return None


def watch(
    recoverer: Recoverer,
    *,
    interval_seconds: Optional[float],
    stop: StopSignal,
    emit: Callable[[RoundReport], None],
    backoff: Optional[Backoff] = None,
    events: Optional[ClusterEvents] = None,
) -> int:
    """Run rounds: one (``interval_seconds`` None), or one every interval until ``stop``; with
    ``events``, a relevant change in the cluster starts the next round early (not while a failed
    `pulumi up` backs off), and the interval stays the backstop."""
    try:
        return _rounds(recoverer, interval_seconds, stop, emit, backoff or Backoff(), events)
    finally:
        if events is not None:
            events.close()


def _rounds(
    recoverer: Recoverer,
    interval_seconds: Optional[float],
    stop: StopSignal,
    emit: Callable[[RoundReport], None],
    backoff: Backoff,
    events: Optional[ClusterEvents],
) -> int:
    trigger = "first"
    while True:
        report = recoverer.run_round()
        report.trigger = trigger
        emit(report)
        outcome = report.outcome
        if interval_seconds is None or outcome is RoundOutcome.UNAVAILABLE:
            return exit_status(report)
        if recoverer.rounds == 1 and outcome is RoundOutcome.CONFIG_ERROR:
            return EXIT_CONFIG_ERROR  # a stack that never loads: say so at once, not every round
        nothing_to_recover = (
            outcome is RoundOutcome.NOT_RUN and report.plan is not None and not report.plan.unavailable
        )
        if report.up is not None or nothing_to_recover:
            # An up's outcome counts; so does nothing to recover: the capacity problem is over. A
            # round that could not read live state, or ended early, says nothing.
            backoff.record(outcome)
        delay = next_round_in(interval_seconds, backoff, outcome)
        if report.ladder_moves:
            delay = interval_seconds  # the next rung is a first attempt there, not a retry
        if outcome is RoundOutcome.FAILED:
            recoverer.say(
                f"{recoverer.target.qualified}: `pulumi up` failed {backoff.failures} time(s) in a row; "
                f"next round in {delay:.0f} s"
            )
        if stop.stopped:
            return EXIT_OK
        if events is not None:
            events.follow()  # the scope of the round just read: started, or moved, or stopped
        woken = stop.sleep(delay, wakeable=events is not None and outcome is not RoundOutcome.FAILED)
        if stop.stopped:
            return EXIT_OK
        trigger = f"event: {woken}" if woken else "interval"


def publish_records(
    report: RoundReport, path: Optional[str], record_log: Optional[RecordLog], say: Callable[[str], None]
) -> None:
    """A round's recovery records: appended to ``path`` (``--records``) and sent to Cloud Logging
    (``record_log``; none with ``--no-cloud-logging`` or in a dry run), each when given."""
    records = report.recovery_records()
    if path:
        append_records(path, records, say)
    if record_log is not None:
        record_log.write(report.gcp_project, records)


def append_records(path: str, records: Sequence[dict[str, Any]], say: Callable[[str], None]) -> None:
    """Append the records as JSON lines, one write each; a file that cannot be written is a
    warning, never the end of the watch (recovery matters more than its accounting)."""
    if not records:
        return
    try:
        with open(path, "a", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps(record, sort_keys=True) + "\n")
    except OSError as exc:
        say(f"warning: --records {path}: not written ({exc.strerror or exc}); the recovery itself went on")
