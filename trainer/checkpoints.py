"""Checkpoints in ``CHECKPOINT_DIR``, through Orbax: restoring the newest one every process can
read and verify (one that cannot be read for now is retried, one of another run refused, a
damaged one moved aside into ``$CHECKPOINT_DIR.damaged/``), saving asynchronously, and keeping
the newest ``TRAINER_KEEP_CHECKPOINTS`` once a newer one is committed and verified. Every
decision is taken by all processes together (``hosts.Hosts``); nothing good is deleted. Orbax and
etils are imported when a reader or a writer is made."""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Mapping, Optional

from hosts import Hosts
from model import Model, checksum, fingerprint
from outcomes import IncompatibleCheckpoint, TryAgain, describe, log, quoted
from progress import Beacon
from settings import Settings
from storage import move_folder, storage_failure

DAMAGED_SUFFIX = ".damaged"
"""Damaged checkpoints are moved to ``$CHECKPOINT_DIR.damaged/STEP-TIME``: out of the way of the
step that will be saved again, and kept for inspection. Beside ``CHECKPOINT_DIR``, not in it: on
``gs://`` Orbax takes any folder in it without a commit file for an unfinished save and deletes
it at the next start."""


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
