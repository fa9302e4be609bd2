#!/usr/bin/env python3
"""The reference trainer: what a trainer run by this project's stacks must do, in one file.

A small multi-layer perceptron learns a fixed random "teacher" function on synthetic data. Every
batch is a pure function of the step number (``jax.random.fold_in(key, step)``), and the model,
the data and the optimizer are float32 with no nondeterministic operation, so on one machine a
run that is killed and resumed any number of times ends with exactly the parameters of a run that
never stopped (``tests/test_trainer_resume.py`` checks it bit for bit).

The contract it keeps (docs/trainer.md):

- It reads the stack's environment: ``CHECKPOINT_DIR`` (a local path or ``gs://``),
  ``TRAIN_STEPS`` (or ``EPOCHS``), ``GLOBAL_BATCH_SIZE``, ``LEARNING_RATE``,
  ``CHECKPOINT_INTERVAL_SECONDS``.
- At every start it restores the newest *valid* checkpoint: one that restores and whose stored
  checksum matches what was restored; an incomplete or corrupt one is skipped for the one before.
- It saves every ``CHECKPOINT_INTERVAL_SECONDS`` of training and at the last step.
- On SIGTERM (the shutdown script, or Kubernetes evicting the Pod) it saves once and exits 143:
  not 0, which would tell the retry loop and the Job that training is complete.
- On completion it writes ``$CHECKPOINT_DIR/TRAINING_COMPLETE`` (the startup script writes it
  too after exit 0; a Job has no other writer) and ``final_state.npz``, then exits 0. A start that
  finds the last step already saved does only that.
- On a TPU slice of several hosts it initialises multi-host JAX before touching a device.

Run it as ``python3 train.py``; it takes no arguments. Exit codes: 0 complete, 143 stopped by
SIGTERM after saving, 2 bad configuration, anything else a failure the retry loop retries.
"""

from __future__ import annotations

import signal
import sys
import time

# First, before the seconds the imports below take: a SIGTERM that arrives then must not kill the
# process half-way through a save later; it is remembered and honoured at the next step.
_STOP_SIGNAL: list[int] = []


def _remember_stop(signum: int, _frame: object) -> None:
    _STOP_SIGNAL.append(signum)


signal.signal(signal.SIGTERM, _remember_stop)

import glob  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any, Callable, Mapping, Optional  # noqa: E402

COMPLETION_MARKER = "TRAINING_COMPLETE"
"""The startup script's marker (components/startup_script.py COMPLETION_MARKER): a VM that finds
it in ``CHECKPOINT_DIR`` does not train again."""
FINAL_STATE = "final_state.npz"
EXIT_COMPLETE = 0
EXIT_BAD_CONFIG = 2
EXIT_STOPPED = 128 + signal.SIGTERM
LOG_PREFIX = "tpu-trainer:"

# The model: small on purpose, so the tests that kill it dozens of times run in seconds.
INPUT_DIM = 16
HIDDEN_DIM = 32
OUTPUT_DIM = 4


class ConfigError(ValueError):
    """A variable of the run's environment that the trainer cannot use."""


@dataclass(frozen=True)
class Settings:
    """The run, as the environment describes it."""

    checkpoint_dir: str
    train_steps: int
    global_batch_size: int
    learning_rate: float
    interval_seconds: float
    """``CHECKPOINT_INTERVAL_SECONDS``: training time between checkpoints."""
    interval_steps: Optional[int]
    """``TRAINER_CHECKPOINT_EVERY_STEPS``: when set, checkpoint every that many steps instead of by
    time, so a test can say exactly which steps a kill may lose."""
    step_seconds: float
    """``TRAINER_STEP_SECONDS``: time each step spends as if computing (sleeps), so a scaled-down
    benchmark has steps of a known length. 0 in real use."""
    seed: int
    keep: int
    log_every: int
    progress_file: str
    distributed: str


def _text(env: Mapping[str, str], name: str, default: Optional[str]) -> str:
    value = env.get(name, default)
    if value is None or not value.strip():
        raise ConfigError(f"{name} is not set; the stack sets it (see docs/trainer.md)")
    return value.strip()


def _integer(env: Mapping[str, str], name: str, default: Optional[str], *, minimum: int) -> int:
    text = _text(env, name, default)
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not a whole number; it must be at least {minimum}") from None
    if value < minimum:
        raise ConfigError(f"{name}={text!r} must be at least {minimum}")
    return value


def _number(env: Mapping[str, str], name: str, default: Optional[str], *, positive: bool) -> float:
    text = _text(env, name, default)
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not a number") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "above 0" if positive else "of at least 0"
        raise ConfigError(f"{name}={text!r} must be a finite number {bound}")
    return value


def read_settings(env: Mapping[str, str]) -> Settings:
    """The run's settings from its environment; ``ConfigError`` names any variable that is wrong."""
    checkpoint_dir = _text(env, "CHECKPOINT_DIR", None).rstrip("/")
    if "://" in checkpoint_dir and not checkpoint_dir.startswith("gs://"):
        raise ConfigError(
            f"CHECKPOINT_DIR={checkpoint_dir!r}: only a local path or gs://BUCKET/PATH is supported"
        )
    batch = _integer(env, "GLOBAL_BATCH_SIZE", "32", minimum=1)
    if env.get("TRAIN_STEPS", "").strip():
        steps = _integer(env, "TRAIN_STEPS", None, minimum=1)
    elif env.get("EPOCHS", "").strip():
        # The stack passes EPOCHS when the run is sized by epochs; the synthetic data set has
        # TRAINER_EXAMPLES_PER_EPOCH examples, so an epoch is that many over the global batch.
        epochs = _integer(env, "EPOCHS", None, minimum=1)
        examples = _integer(env, "TRAINER_EXAMPLES_PER_EPOCH", "10000", minimum=1)
        steps = epochs * -(-examples // batch)
    else:
        raise ConfigError("neither TRAIN_STEPS nor EPOCHS is set; the stack sets one (tpu-training:training)")
    every_steps = env.get("TRAINER_CHECKPOINT_EVERY_STEPS", "").strip()
    directory = _text(env, "TRAINER_STATE_DIR", os.path.join(tempfile.gettempdir(), "tpu-trainer"))
    key = hashlib.sha256(checkpoint_dir.encode()).hexdigest()[:16]
    distributed = _text(env, "TRAINER_DISTRIBUTED", "auto")
    if distributed not in ("auto", "on", "off"):
        raise ConfigError(f"TRAINER_DISTRIBUTED={distributed!r} must be one of auto, on, off")
    return Settings(
        checkpoint_dir=checkpoint_dir,
        train_steps=steps,
        global_batch_size=batch,
        learning_rate=_number(env, "LEARNING_RATE", "0.01", positive=True),
        interval_seconds=_number(env, "CHECKPOINT_INTERVAL_SECONDS", "600", positive=True),
        interval_steps=(
            _integer(env, "TRAINER_CHECKPOINT_EVERY_STEPS", None, minimum=1) if every_steps else None
        ),
        step_seconds=_number(env, "TRAINER_STEP_SECONDS", "0", positive=False),
        seed=_integer(env, "TRAINER_SEED", "0", minimum=0),
        # Two at least: the newest may be the one a kill left corrupt.
        keep=_integer(env, "TRAINER_KEEP_CHECKPOINTS", "3", minimum=2),
        log_every=_integer(env, "TRAINER_LOG_EVERY", "1", minimum=1),
        progress_file=os.path.join(directory, f"progress-{key}.json"),
        distributed=distributed,
    )


def log(event: str, **fields: Any) -> None:
    """One line per event: ``tpu-trainer: EVENT key=value ...``, flushed at once, so the startup
    script's log (and a test reading it) sees each line as it happens."""
    parts = [LOG_PREFIX, event, *(f"{key}={value}" for key, value in fields.items())]
    print(" ".join(parts), flush=True)


def _on_tpu_slice() -> bool:
    # GKE sets TPU_WORKER_HOSTNAMES on every TPU Pod; a TPU VM has its chips as /dev/accel* or
    # VFIO devices. JAX's own cluster detection (jax/_src/clusters/cloud_tpu_cluster.py) then
    # finds the other hosts from the same variables or from the VM's metadata.
    if os.environ.get("TPU_WORKER_HOSTNAMES") or os.environ.get("TPU_PROCESS_ADDRESSES"):
        return True
    return bool(glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*"))


def _initialise_jax(settings: Settings) -> Any:
    import jax

    if settings.distributed == "on" or (settings.distributed == "auto" and _on_tpu_slice()):
        # Every host of a slice runs this same program; none may touch a device before all have
        # joined. On one host it is a one-process "cluster", which costs nothing.
        jax.distributed.initialize()
    # Bit-for-bit resumption needs float32 everywhere, on every backend.
    jax.config.update("jax_default_matmul_precision", "highest")
    return jax


class Model:
    """The model, its data and its optimizer: every piece a pure function of the seed and step."""

    def __init__(self, jax: Any, settings: Settings) -> None:
        import jax.numpy as jnp
        import optax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        self.jax, self.jnp, self.settings = jax, jnp, settings
        devices = jax.devices()
        if settings.global_batch_size % len(devices):
            raise ConfigError(
                f"GLOBAL_BATCH_SIZE={settings.global_batch_size} must be a multiple of the "
                f"{len(devices)} devices it is split over"
            )
        # Data parallel: the batch is split over every device of every host, the state is
        # replicated. The stack keeps the per-core batch constant (Google's Training on TPU Pods page).
        mesh = Mesh(devices, ("data",))
        self.replicated = NamedSharding(mesh, PartitionSpec())
        self.by_batch = NamedSharding(mesh, PartitionSpec("data"))
        root = jax.random.key(settings.seed)
        self.init_key, self.teacher_key, self.data_key = jax.random.split(root, 3)
        self.optimizer = optax.adam(settings.learning_rate)

        teacher = jax.random.normal(self.teacher_key, (INPUT_DIM, OUTPUT_DIM), jnp.float32)

        def batch(step: Any) -> tuple[Any, Any]:
            key = jax.random.fold_in(self.data_key, step)
            inputs = jax.random.normal(key, (settings.global_batch_size, INPUT_DIM), jnp.float32)
            return inputs, jnp.tanh(inputs @ teacher)

        def loss(params: Any, inputs: Any, targets: Any) -> Any:
            hidden = jnp.tanh(inputs @ params["w1"] + params["b1"])
            return jnp.mean((hidden @ params["w2"] + params["b2"] - targets) ** 2)

        def train_step(state: Any, step: Any) -> tuple[Any, Any]:
            inputs, targets = batch(step)
            value, grads = jax.value_and_grad(loss)(state["params"], inputs, targets)
            updates, opt_state = self.optimizer.update(grads, state["opt_state"], state["params"])
            return {"params": optax.apply_updates(state["params"], updates), "opt_state": opt_state}, value

        # One compiled step, the same program at every step and after every restart: the run
        # takes the same arithmetic path whether it stopped or not. Compiled before training
        # starts (compile()), so a start's cost is all in its startup time, none in its steps.
        self._jitted = jax.jit(
            train_step, out_shardings=(self.replicated, self.replicated), donate_argnums=(0,)
        )
        self.train_step: Callable[[Any, Any], tuple[Any, Any]] = self._jitted

    def compile(self, state: Any) -> None:
        import numpy as np

        compiled = self._jitted.lower(state, np.int32(0)).compile()
        self.train_step = lambda state, step: compiled(state, np.int32(step))

    def initial_state(self) -> Any:
        jax, jnp = self.jax, self.jnp
        k1, k2 = jax.random.split(self.init_key)
        params = {
            "w1": jax.random.normal(k1, (INPUT_DIM, HIDDEN_DIM), jnp.float32) / math.sqrt(INPUT_DIM),
            "b1": jnp.zeros((HIDDEN_DIM,), jnp.float32),
            "w2": jax.random.normal(k2, (HIDDEN_DIM, OUTPUT_DIM), jnp.float32) / math.sqrt(HIDDEN_DIM),
            "b2": jnp.zeros((OUTPUT_DIM,), jnp.float32),
        }
        state = {"params": params, "opt_state": self.optimizer.init(params)}
        return jax.device_put(state, self.replicated)

    def abstract_state(self) -> Any:
        """Shapes, dtypes and shardings to restore into."""
        jax = self.jax
        return jax.tree.map(
            lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=self.replicated),
            jax.eval_shape(self.initial_state),
        )


def flat_state(jax: Any, state: Any) -> dict[str, Any]:
    """The state as ``{key path: numpy array}``, from this host's copy of the replicated arrays."""
    import numpy as np

    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    return {
        jax.tree_util.keystr(path): np.asarray(leaf.addressable_data(0))
        if hasattr(leaf, "addressable_data")
        else np.asarray(leaf)
        for path, leaf in leaves
    }


def checksum(jax: Any, state: Any) -> str:
    """SHA-256 over every array's path, dtype, shape and bytes: two states with equal checksums
    are equal bit for bit."""
    digest = hashlib.sha256()
    for key, array in sorted(flat_state(jax, state).items()):
        digest.update(f"{key}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


class Progress:
    """The furthest step this machine trained to, in a local file rewritten after every step:
    the next start compares it with the step it restores to and logs the steps redone. A new VM
    or Pod has no such file, and the log says "unknown"."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)

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


class Checkpoints:
    """Orbax checkpoints in ``CHECKPOINT_DIR``: the state and, beside it, its step and checksum."""

    def __init__(self, jax: Any, model: Model, settings: Settings) -> None:
        import orbax.checkpoint as ocp
        from etils import epath

        self.jax, self.model, self.ocp, self.epath = jax, model, ocp, epath
        self.directory = epath.Path(settings.checkpoint_dir)
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=settings.keep,
                # Orbax writes in the background, but save() below waits for it: a save has
                # finished (and costs what it costs, Young's C) before training goes on, and a
                # SIGTERM exit never leaves one half-written. Only the "writing" line comes
                # between: the moment the save's temporary folder exists and is being filled.
                enable_async_checkpointing=True,
                # A kill during a save leaves a temporary directory; the next start removes it.
                cleanup_tmp_directories=True,
                # Saves happen when this trainer decides (by time), not on orbax's step schedule.
                save_interval_steps=1,
            ),
            item_names=("state", "meta"),
        )

    def save(self, step: int, state: Any) -> float:
        ocp = self.ocp
        started = time.monotonic()
        meta = {"step": step, "checksum": checksum(self.jax, state)}
        saved = self.manager.save(
            step, args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
        )
        log("writing", step=step)
        self.manager.wait_until_finished()
        if not saved:
            raise RuntimeError(f"orbax did not save step {step} in {self.directory}")
        return time.monotonic() - started

    def restore_newest_valid(self) -> tuple[Optional[int], Any]:
        """The newest checkpoint that restores and matches its checksum, and its state; skipped
        ones are logged with the reason. (None, None) when there is none."""
        ocp = self.ocp
        self.manager.reload()
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                restored = self.manager.restore(
                    step,
                    args=ocp.args.Composite(
                        state=ocp.args.StandardRestore(self.model.abstract_state()),
                        meta=ocp.args.JsonRestore(),
                    ),
                )
                meta, state = restored["meta"], restored["state"]
                if not isinstance(meta, dict) or meta.get("step") != step:
                    raise ValueError(f"its metadata {meta!r} names another step")
                found, want = checksum(self.jax, state), str(meta.get("checksum"))
                if found != want:
                    raise ValueError(f"checksum {found[:12]} differs from the saved {want[:12]}")
            except Exception as error:  # noqa: BLE001 - any failure means "not this one"
                reason = " ".join(f"{type(error).__name__}: {error}".split())[:300]
                log("skip", step=step, reason=json.dumps(reason))
                continue
            self._drop_newer_than(step)
            return step, state
        self._drop_newer_than(-1)
        return None, None

    def _drop_newer_than(self, step: int) -> None:
        # The damaged checkpoints after the one restored: this run will save those steps again,
        # and orbax will not write over a step that exists.
        if self.jax.process_index() != 0:
            return
        for newer in sorted(s for s in self.manager.all_steps() if s > step):
            log("delete", step=newer, reason="damaged")
            self.manager.delete(newer)

    def write_file(self, name: str, data: bytes) -> None:
        (self.directory / name).write_bytes(data)


def _final_state_npz(jax: Any, state: Any) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, **flat_state(jax, state))
    return buffer.getvalue()


def train(settings: Settings, *, clock: Callable[[], float] = time.monotonic) -> int:
    """One attempt: restore, train to the end or to SIGTERM, save. Returns the exit code."""
    started = clock()
    jax = _initialise_jax(settings)
    model = Model(jax, settings)
    checkpoints = Checkpoints(jax, model, settings)
    try:
        return _train(jax, model, checkpoints, settings, started, clock)
    finally:
        checkpoints.manager.close()


def _train(
    jax: Any,
    model: Model,
    checkpoints: Checkpoints,
    settings: Settings,
    started: float,
    clock: Callable[[], float],
) -> int:
    primary = jax.process_index() == 0
    progress = Progress(f"{settings.progress_file[: -len('.json')]}-{jax.process_index()}.json")

    restore_started = clock()
    step, state = checkpoints.restore_newest_valid()
    restore_seconds = clock() - restore_started
    if step is None:
        step, state = 0, model.initial_state()
    model.compile(state)
    reached = progress.read()
    redone = "unknown" if reached is None else max(0, reached - step)
    log(
        "resume",
        step=step,
        restore_seconds=f"{restore_seconds:.3f}",
        redone_steps=redone,
        reached_before="unknown" if reached is None else reached,
        startup_seconds=f"{clock() - started:.3f}",
        train_steps=settings.train_steps,
        processes=jax.process_count(),
    )

    saved_step = step
    last_save = clock()
    while step < settings.train_steps and not _STOP_SIGNAL:
        step_started = clock()
        state, loss = model.train_step(state, step)
        loss = float(loss)  # waits for the step: its time is real, and so is the progress record
        if settings.step_seconds:
            time.sleep(max(0.0, settings.step_seconds - (clock() - step_started)))
        step += 1
        progress.write(step)
        if step % settings.log_every == 0 or step == settings.train_steps:
            log("step", step=step, loss=f"{loss:.6f}", seconds=f"{clock() - step_started:.4f}")
        due = (
            step % settings.interval_steps == 0
            if settings.interval_steps is not None
            else clock() - last_save >= settings.interval_seconds
        )
        if due and step < settings.train_steps:
            log("saving", step=step, reason="interval")
            log("saved", step=step, seconds=f"{checkpoints.save(step, state):.4f}")
            saved_step, last_save = step, clock()

    if _STOP_SIGNAL:
        if step != saved_step:
            log("saving", step=step, reason="sigterm")
            log("saved", step=step, seconds=f"{checkpoints.save(step, state):.4f}")
        log("stopped", step=step, signal="SIGTERM", exit=EXIT_STOPPED)
        return EXIT_STOPPED

    if step != saved_step:
        log("saving", step=step, reason="final")
        log("saved", step=step, seconds=f"{checkpoints.save(step, state):.4f}")
    if primary:
        # Idempotent: a kill between these writes and the exit makes the next start repeat them.
        checkpoints.write_file(FINAL_STATE, _final_state_npz(jax, state))
        checkpoints.write_file(COMPLETION_MARKER, f"completed step {step}\n".encode())
    log("complete", step=step, checksum=checksum(jax, state))
    return EXIT_COMPLETE


def main() -> int:
    try:
        settings = read_settings(os.environ)
    except ConfigError as error:
        print(f"{LOG_PREFIX} configuration error: {error}", file=sys.stderr, flush=True)
        return EXIT_BAD_CONFIG
    try:
        return train(settings)
    except ConfigError as error:
        print(f"{LOG_PREFIX} configuration error: {error}", file=sys.stderr, flush=True)
        return EXIT_BAD_CONFIG


if __name__ == "__main__":
    sys.exit(main())
