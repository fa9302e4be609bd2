#!/usr/bin/env python3
"""The reference trainer: what a trainer run by this project's stacks must do. This is its entry,
and it reads as the contract does: settings, paths, the cluster, restore, the training loop with its
saves and its stop, exit codes; each part is a module beside it (docs/trainer.md, "Where it is").

A small multi-layer perceptron learns a fixed random "teacher" function on synthetic data. Every
example is a pure function of its index (``jax.random.fold_in(key, index)``), and the model, the
data and the optimizer are float32 with no nondeterministic operation, so a run that is killed and
resumed any number of times ends with exactly the parameters of a run that never stopped
(``tests/trainer/test_trainer_resume.py`` and ``tests/trainer/test_trainer_hosts.py`` check it bit for
bit, on one process and on a cluster of several).

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

Run it as ``python3 train.py`` (the modules beside it are imported from its folder); it takes no
arguments. Exit codes: 0 complete, 2 bad configuration, 3 a checkpoint of another run, 4 training
diverged, 75 storage or cluster unreachable for now (try again), 143 stopped by SIGTERM after
saving; anything else is a failure the retry loop retries.
"""

from __future__ import annotations

from hosts import StopSignal  # first, and quick: the trainer's modules import the standard library only

# Before the imports below and the seconds a start takes: a SIGTERM that arrives then must not
# kill the process half-way through a save later; it is remembered and honoured at the next step.
STOP_SIGNAL = StopSignal().listen()

import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable, Optional  # noqa: E402

from checkpoints import CheckpointReader, Checkpoints, Restored, restore  # noqa: E402
from hosts import Hosts, join_cluster  # noqa: E402
from model import Model, checksum, final_state_npz  # noqa: E402
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
    fail,
    log,
)
from progress import Beacon, Progress  # noqa: E402
from settings import Settings, read_settings  # noqa: E402
from storage import check_bucket, check_local_folder, list_storage_afresh  # noqa: E402

COMPLETION_MARKER = "TRAINING_COMPLETE"
"""The startup script's marker (components/startup_script.py COMPLETION_MARKER): a VM that finds
it in ``CHECKPOINT_DIR`` does not train again."""
FINAL_STATE = "final_state.npz"


def main() -> int:
    """The run's settings from the environment, one attempt at training, and its exit code."""
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
    progress = Progress.of_run(settings, hosts.index)
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


if __name__ == "__main__":
    sys.exit(main())
