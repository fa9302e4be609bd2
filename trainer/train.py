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

import signal
import sys
import time

# First, before the seconds the imports below take: a SIGTERM that arrives then must not kill the
# process half-way through a save later; it is remembered and honoured at the next step. (Once
# JAX's preemption service starts, it takes SIGTERM over; the trainer then asks it instead.)
_STOP_SIGNAL: list[int] = []


def _remember_stop(signum: int, _frame: object) -> None:
    _STOP_SIGNAL.append(signum)


signal.signal(signal.SIGTERM, _remember_stop)

import datetime  # noqa: E402
import errno  # noqa: E402
import glob  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import urllib.error  # noqa: E402
import urllib.parse  # noqa: E402
import urllib.request  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from enum import IntEnum  # noqa: E402
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence  # noqa: E402

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

COMPLETION_MARKER = "TRAINING_COMPLETE"
"""The startup script's marker (components/startup_script.py COMPLETION_MARKER): a VM that finds
it in ``CHECKPOINT_DIR`` does not train again."""
FINAL_STATE = "final_state.npz"
DAMAGED_SUFFIX = ".damaged"
"""Damaged checkpoints are moved to ``$CHECKPOINT_DIR.damaged/STEP-TIME``: out of the way of the
step that will be saved again, and kept for inspection. Beside ``CHECKPOINT_DIR``, not in it: on
``gs://`` Orbax takes any folder in it without a commit file for an unfinished save and deletes
it at the next start."""
# The model: small on purpose, so the tests that kill it dozens of times run in seconds.
INPUT_DIM = 16
OUTPUT_DIM = 4
DATA_ORDER = "teacher-v1: example i is normal(fold_in(data key, i mod examples per epoch))"
"""Names how examples are made and ordered; part of the run's identity, changed with the code."""


@dataclass(frozen=True)
class Cluster:
    """An explicit cluster (``TRAINER_COORDINATOR_ADDRESS``, ``TRAINER_NUM_PROCESSES``,
    ``TRAINER_PROCESS_ID``), for machines JAX cannot detect a cluster on: CPUs, and the tests.
    On a TPU slice JAX finds the hosts itself."""

    coordinator_address: str
    num_processes: int
    process_id: int


@dataclass(frozen=True)
class Settings:
    """The run, as the environment describes it."""

    checkpoint_dir: str
    target_examples: int
    """Examples to train on in all: ``TOTAL_EXAMPLES``, or ``TRAIN_STEPS`` (``EPOCHS``) batches of
    ``GLOBAL_BATCH_SIZE``. A run resized to another batch stops when this many are seen."""
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
    hidden_dim: int
    examples_per_epoch: int
    keep: int
    log_every: int
    state_dir: str
    distributed: str
    cluster: Optional[Cluster]
    join_timeout_seconds: int
    heartbeat_seconds: int
    shutdown_timeout_seconds: int
    """How long a process that ends waits for the others to end (JAX's shutdown barrier): one that
    failed alone then ends, and the others notice, instead of all waiting on each other."""
    restore_attempts: int
    retry_seconds: float
    storage_timeout_seconds: float
    accept_changed_run: bool
    progress_seconds: float
    """``TRAINER_PROGRESS_SECONDS``: how often the progress record is written and the save request
    read; 0 turns both off."""
    save_lead_seconds: float
    """``TRAINER_SAVE_LEAD_SECONDS``: a request whose ``before`` is further away than this waits
    (a notice days ahead is saved for shortly before its window, not at once)."""
    maintenance_url: str
    """``TRAINER_MAINTENANCE_URL``: the metadata server's ``upcoming-maintenance`` key, read every
    progress period on a TPU VM (its startup script sets it); "" (the default) reads none."""
    metadata_wait_seconds: int
    """``TRAINER_METADATA_WAIT_SECONDS``: how long one hanging GET of the metadata server's
    ``maintenance-event`` and ``preempted`` keys waits for a change (its ``timeout_sec``); they
    are watched on a TPU VM, where ``TRAINER_MAINTENANCE_URL`` is set, beside it."""
    node_name: str
    """``TRAINER_NODE_NAME``: the TPU VM's node name (its startup script sets it), which names a
    maintenance notice as recovery's save request for the same window does; "" off a TPU VM."""

    @property
    def fingerprint(self) -> dict[str, Any]:
        """What makes a checkpoint this run's: restoring one with another fingerprint would
        continue a different run. The batch size and learning rate are not in it: the stack
        rescales both when a slice is resized."""
        return {
            "model": f"mlp {INPUT_DIM}-{self.hidden_dim}-{OUTPUT_DIM} float32",
            "seed": self.seed,
            "data": f"{DATA_ORDER}; {self.examples_per_epoch} examples per epoch",
            "optimizer": "adam, constant learning rate",
        }


def _text(env: Mapping[str, str], name: str, default: Optional[str]) -> str:
    value = env.get(name, default)
    if value is None or not value.strip():
        raise ConfigError(f"{name} is not set; the stack sets it (see docs/trainer.md)")
    return value.strip()


def _integer(
    env: Mapping[str, str], name: str, default: Optional[str], *, minimum: int, maximum: int = 2**62
) -> int:
    text = _text(env, name, default)
    if not (text.isascii() and text.lstrip("-").isdigit()) or len(text) > 19:
        raise ConfigError(f"{name}={text!r} is not a whole number; it must be at least {minimum}")
    value = int(text)
    if not minimum <= value <= maximum:
        raise ConfigError(f"{name}={text!r} must be at least {minimum} and at most {maximum}")
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


def _flag(env: Mapping[str, str], name: str) -> bool:
    text = env.get(name, "").strip().lower()
    if text not in ("", "0", "1", "true", "false"):
        raise ConfigError(f"{name}={text!r} must be 1 or 0 (true or false)")
    return text in ("1", "true")


def _cluster(env: Mapping[str, str]) -> Optional[Cluster]:
    names = ("TRAINER_COORDINATOR_ADDRESS", "TRAINER_NUM_PROCESSES", "TRAINER_PROCESS_ID")
    given = [name for name in names if env.get(name, "").strip()]
    if not given:
        return None
    if len(given) != len(names):
        missing = ", ".join(name for name in names if name not in given)
        raise ConfigError(f"{', '.join(given)} set without {missing}: an explicit cluster needs all three")
    address = _text(env, names[0], None)
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"TRAINER_COORDINATOR_ADDRESS={address!r} must be HOST:PORT")
    count = _integer(env, names[1], None, minimum=1, maximum=100_000)
    index = _integer(env, names[2], None, minimum=0, maximum=count - 1)
    return Cluster(address, count, index)


def read_settings(env: Mapping[str, str]) -> Settings:
    """The run's settings from its environment; ``ConfigError`` names any variable that is wrong."""
    checkpoint_dir = _text(env, "CHECKPOINT_DIR", None).rstrip("/")
    if "://" in checkpoint_dir and not checkpoint_dir.startswith("gs://"):
        raise ConfigError(
            f"CHECKPOINT_DIR={checkpoint_dir!r}: only a local path or gs://BUCKET/PATH is supported"
        )
    if "://" not in checkpoint_dir and not os.path.isabs(checkpoint_dir):
        raise ConfigError(
            f"CHECKPOINT_DIR={checkpoint_dir!r} must be an absolute path: a relative one names another "
            f"folder on every machine and in every working directory"
        )
    batch = _integer(env, "GLOBAL_BATCH_SIZE", "32", minimum=1, maximum=2**30)
    # Bounded so that example indices fit the int32 the step computes them in.
    per_epoch = _integer(env, "TRAINER_EXAMPLES_PER_EPOCH", "10000", minimum=1, maximum=2**30)
    if env.get("TOTAL_EXAMPLES", "").strip():
        target = _integer(env, "TOTAL_EXAMPLES", None, minimum=1)
    elif env.get("TRAIN_STEPS", "").strip():
        target = _integer(env, "TRAIN_STEPS", None, minimum=1) * batch
    elif env.get("EPOCHS", "").strip():
        # The synthetic data set has TRAINER_EXAMPLES_PER_EPOCH examples.
        target = _integer(env, "EPOCHS", None, minimum=1) * per_epoch
    else:
        raise ConfigError(
            "none of TOTAL_EXAMPLES, TRAIN_STEPS and EPOCHS is set; the stack sets one "
            "(tpu-training:training)"
        )
    every_steps = env.get("TRAINER_CHECKPOINT_EVERY_STEPS", "").strip()
    state_dir = _text(env, "TRAINER_STATE_DIR", os.path.join(tempfile.gettempdir(), "tpu-trainer"))
    if not os.path.isabs(state_dir):
        raise ConfigError(f"TRAINER_STATE_DIR={state_dir!r} must be an absolute path")
    distributed = _text(env, "TRAINER_DISTRIBUTED", "auto")
    if distributed not in ("auto", "on", "off"):
        raise ConfigError(f"TRAINER_DISTRIBUTED={distributed!r} must be one of auto, on, off")
    return Settings(
        checkpoint_dir=checkpoint_dir,
        target_examples=target,
        global_batch_size=batch,
        learning_rate=_number(env, "LEARNING_RATE", "0.01", positive=True),
        interval_seconds=_number(env, "CHECKPOINT_INTERVAL_SECONDS", "600", positive=True),
        interval_steps=(
            _integer(env, "TRAINER_CHECKPOINT_EVERY_STEPS", None, minimum=1) if every_steps else None
        ),
        step_seconds=_number(env, "TRAINER_STEP_SECONDS", "0", positive=False),
        seed=_integer(env, "TRAINER_SEED", "0", minimum=0, maximum=2**31 - 1),
        hidden_dim=_integer(env, "TRAINER_HIDDEN_DIM", "32", minimum=1, maximum=65536),
        examples_per_epoch=per_epoch,
        # Two at least: the newest may be the one a kill left damaged.
        keep=_integer(env, "TRAINER_KEEP_CHECKPOINTS", "3", minimum=2, maximum=1000),
        log_every=_integer(env, "TRAINER_LOG_EVERY", "1", minimum=1),
        state_dir=state_dir,
        distributed=distributed,
        cluster=_cluster(env),
        # JAX's own defaults (jax.distributed.initialize).
        join_timeout_seconds=_integer(env, "TRAINER_JOIN_TIMEOUT_SECONDS", "300", minimum=1),
        heartbeat_seconds=_integer(env, "TRAINER_HEARTBEAT_SECONDS", "100", minimum=1),
        shutdown_timeout_seconds=_integer(env, "TRAINER_SHUTDOWN_TIMEOUT_SECONDS", "300", minimum=1),
        restore_attempts=_integer(env, "TRAINER_RESTORE_ATTEMPTS", "3", minimum=1, maximum=100),
        retry_seconds=_number(env, "TRAINER_RETRY_SECONDS", "2", positive=False),
        storage_timeout_seconds=_number(env, "TRAINER_STORAGE_TIMEOUT_SECONDS", "60", positive=True),
        accept_changed_run=_flag(env, "TRAINER_ACCEPT_CHANGED_RUN"),
        progress_seconds=_number(env, "TRAINER_PROGRESS_SECONDS", "30", positive=False),
        save_lead_seconds=_number(env, "TRAINER_SAVE_LEAD_SECONDS", "600", positive=False),
        maintenance_url=_maintenance_url(env),
        metadata_wait_seconds=_integer(env, "TRAINER_METADATA_WAIT_SECONDS", "60", minimum=1, maximum=3600),
        node_name=env.get("TRAINER_NODE_NAME", "").strip(),
    )


def _maintenance_url(env: Mapping[str, str]) -> str:
    url = env.get(MAINTENANCE_URL_VARIABLE, "").strip()
    if url and not url.startswith(("http://", "https://")):
        raise ConfigError(f"{MAINTENANCE_URL_VARIABLE}={url!r}: give an http:// or https:// URL, or nothing")
    return url


# -- Paths, checked before anything trains --------------------------------------------------------


def check_local_folder(variable: str, path: str) -> None:
    """``path`` exists (or can be made) as a folder this process can write to; ``ConfigError``
    naming ``variable`` otherwise."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"{variable}={path!r} is a file, not a folder")
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".tpu-trainer-probe-{os.getpid()}")
        with open(probe, "wb") as handle:
            handle.write(b"probe")
        os.remove(probe)
    except OSError as error:
        reason = error.strerror or describe(error)
        raise ConfigError(
            f"{variable}={path!r} is not a folder this trainer can write to: {reason}"
        ) from None


def check_bucket(settings: Settings, process: int) -> None:
    """``gs://`` is reachable and writable with this machine's credentials, within
    ``TRAINER_STORAGE_TIMEOUT_SECONDS``: ``ConfigError`` for what the stack must fix (no
    credentials, no permission, no bucket), ``TryAgain`` for what may pass."""
    from etils import epath

    outcome: list[BaseException | None] = []

    def probe() -> None:
        try:
            if not os.environ.get("FSSPEC_GCS_TOKEN"):
                # gcsfs's first choice (its token "google_default"): when it finds none, it goes
                # on to probe for a metadata server and to anonymous access, which a bucket of the
                # stack refuses, after retries. Say so at once instead.
                import google.auth

                google.auth.default()
            folder = epath.Path(settings.checkpoint_dir)
            name = folder / f".tpu-trainer-probe-{process}-{os.getpid()}"
            name.write_bytes(b"probe")
            name.unlink()
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - reported below, in one line
            outcome.append(error)

    # A thread, because the storage clients' own deadlines add up to minutes when nothing answers
    # (credential probes of a metadata server that is not there, retries with back-off).
    worker = threading.Thread(target=probe, daemon=True, name="storage-check")
    worker.start()
    worker.join(settings.storage_timeout_seconds)
    if not outcome:
        raise TryAgain(
            f"CHECKPOINT_DIR={settings.checkpoint_dir} did not answer within "
            f"{settings.storage_timeout_seconds:g} s (TRAINER_STORAGE_TIMEOUT_SECONDS)"
        )
    error = outcome[0]
    if error is None:
        return
    kind = storage_failure(error)
    message = f"CHECKPOINT_DIR={settings.checkpoint_dir} cannot be written: {describe(error)}"
    if kind == "transient":
        raise TryAgain(message)
    raise ConfigError(f"{message} (check the machine's credentials and the bucket)")


_TRANSIENT_STATUS = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "CANCELLED")
_TRANSIENT_ERRNOS = {
    errno.EIO,
    errno.EAGAIN,
    errno.EINTR,
    errno.ETIMEDOUT,
    errno.ECONNRESET,
    errno.ECONNREFUSED,
    errno.ECONNABORTED,
    errno.ENETUNREACH,
    errno.EHOSTUNREACH,
    errno.ENETDOWN,
    errno.EPIPE,
    errno.ESTALE,
}
_TRANSIENT_NAMES = {
    # google-api-core, google-auth's transport, aiohttp and requests name what did not answer.
    "ServiceUnavailable",
    "InternalServerError",
    "BadGateway",
    "GatewayTimeout",
    "TooManyRequests",
    "DeadlineExceeded",
    "RetryError",
    "TransportError",
    "ServerDisconnectedError",
    "ClientConnectionError",
    "ClientConnectorError",
    "ClientOSError",
    "ConnectionError",
    "ReadTimeout",
    "ConnectTimeout",
}


def storage_failure(error: BaseException) -> str:
    """``"transient"`` for an error that says storage did not answer (time-outs, I/O errors,
    HTTP 429 and 5xx, gRPC's UNAVAILABLE family); ``"permanent"`` for anything else: what was read
    is missing or wrong, or access is refused."""
    seen: set[int] = set()
    current: Optional[BaseException] = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (TimeoutError, ConnectionError)):
            return "transient"
        if isinstance(current, OSError) and current.errno in _TRANSIENT_ERRNOS:
            return "transient"
        if type(current).__name__ in _TRANSIENT_NAMES:
            return "transient"
        code = getattr(current, "code", None)
        if isinstance(code, int) and (code == 429 or 500 <= code <= 599):
            return "transient"
        text = str(current).lstrip()
        if text.startswith(_TRANSIENT_STATUS) or " 503 " in text or "status 503" in text:
            return "transient"
        current = current.__cause__ or current.__context__
    return "permanent"


# -- The cluster ------------------------------------------------------------------------------------


def _on_tpu_slice() -> bool:
    # GKE sets TPU_WORKER_HOSTNAMES on every TPU Pod; a TPU VM has its chips as /dev/accel* or
    # VFIO devices. JAX's own cluster detection (jax/_src/clusters/cloud_tpu_cluster.py) then
    # finds the other hosts from the same variables or from the VM's metadata.
    if os.environ.get("TPU_WORKER_HOSTNAMES") or os.environ.get("TPU_PROCESS_ADDRESSES"):
        return True
    return bool(glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*"))


GATHER_WIDTH = 64
"""Values each process offers in one exchange. Also the newest steps each offers when they agree
on what all of them can read: far more than are kept, so a step is left out of the offer only
when a process does not list it."""


class Hosts:
    """The processes of this run (one per host), and how they agree: every decision that more
    than one of them acts on is made from values all of them exchanged at the same point of the
    program, so each process computes the same answer."""

    def __init__(self, jax: Any, distributed: bool) -> None:
        self.jax = jax
        self.index: int = jax.process_index()
        self.count: int = jax.process_count()
        self.primary = self.index == 0
        # JAX's preemption service (on by default with jax.distributed) takes SIGTERM, and on
        # Cloud TPU the platform's preemption notice, and agrees on a step for all hosts.
        self.preemption_service = distributed and bool(jax.config.jax_enable_preemption_service)

    def gather(self, values: Sequence[int]) -> list[list[int]]:
        """Every process's ``values`` (at most ``GATHER_WIDTH``, the same number on every process),
        in process order, on every process."""
        if self.count == 1:
            return [list(values)]
        import numpy as np
        from jax.experimental import multihost_utils

        # Always GATHER_WIDTH values: one compiled exchange serves every call.
        padded = np.zeros(GATHER_WIDTH, dtype=np.int32)
        padded[: len(values)] = values
        rows = np.asarray(multihost_utils.process_allgather(padded)).reshape(self.count, GATHER_WIDTH)
        return [[int(value) for value in row[: len(values)]] for row in rows]

    def any(self, *flags: bool) -> tuple[bool, ...]:
        """Each flag, true when it is true on any process."""
        rows = self.gather([int(flag) for flag in flags])
        return tuple(any(row[i] for row in rows) for i in range(len(flags)))

    def agree(self, *flags: bool, token: int) -> tuple[tuple[bool, ...], int]:
        """Each flag, true when it is true on any process; and the largest ``token`` offered."""
        rows = self.gather([*(int(flag) for flag in flags), token])
        width = len(flags)
        return tuple(any(row[i] for row in rows) for i in range(width)), max(row[width] for row in rows)

    def common(self, steps: Sequence[int]) -> list[int]:
        """The steps that every process has in ``steps``, newest first."""
        offer = sorted(steps, reverse=True)[:GATHER_WIDTH]
        rows = self.gather(offer + [-1] * (GATHER_WIDTH - len(offer)))
        return sorted(set(rows[0]).intersection(*rows[1:]) - {-1}, reverse=True)

    def preempted(self, step: int) -> bool:
        """JAX's preemption sync point: true on every host at the same step once any host got the
        notice. Must be asked at every step."""
        if not self.preemption_service:
            return False
        from jax.experimental import multihost_utils

        return bool(multihost_utils.reached_preemption_sync_point(step))


def join_cluster(settings: Settings) -> tuple[Any, bool]:
    """Import JAX and join the run's other processes (JAX's cluster detection on a TPU slice, the
    explicit ``TRAINER_*`` cluster elsewhere). Returns JAX and whether it runs distributed."""
    import jax

    distributed = settings.cluster is not None or settings.distributed == "on"
    distributed = distributed or (settings.distributed == "auto" and _on_tpu_slice())
    if distributed:
        # Every host of a slice runs this same program; none may touch a device before all have
        # joined. On one host it is a one-process "cluster", which costs nothing.
        explicit = settings.cluster
        try:
            jax.distributed.initialize(
                coordinator_address=explicit.coordinator_address if explicit else None,
                num_processes=explicit.num_processes if explicit else None,
                process_id=explicit.process_id if explicit else None,
                initialization_timeout=settings.join_timeout_seconds,
                heartbeat_timeout_seconds=settings.heartbeat_seconds,
                shutdown_timeout_seconds=settings.shutdown_timeout_seconds,
            )
        except Exception as error:  # noqa: BLE001 - JAX raises several kinds; all mean "not now"
            raise TryAgain(f"could not join the cluster: {describe(error)}") from None
    # Bit-for-bit resumption needs float32 everywhere, on every backend.
    jax.config.update("jax_default_matmul_precision", "highest")
    return jax, distributed


# -- The model ----------------------------------------------------------------------------------------


class Model:
    """The model, its data and its optimizer: every piece a pure function of the seed, the example
    index and the step."""

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
        root = jax.random.key(settings.seed)
        self.init_key, self.teacher_key, self.data_key = jax.random.split(root, 3)
        self.optimizer = optax.adam(settings.learning_rate)
        batch_size, per_epoch = settings.global_batch_size, settings.examples_per_epoch
        teacher = jax.random.normal(self.teacher_key, (INPUT_DIM, OUTPUT_DIM), jnp.float32)

        def example(index: Any) -> Any:
            key = jax.random.fold_in(self.data_key, index % per_epoch)
            return jax.random.normal(key, (INPUT_DIM,), jnp.float32)

        def batch(first_example: Any) -> tuple[Any, Any]:
            # By example, not by step: a slice resized to another batch size goes on with the
            # next example, and every example of the run is seen once.
            inputs = jax.vmap(example)(first_example + jnp.arange(batch_size, dtype=jnp.int32))
            return inputs, jnp.tanh(inputs @ teacher)

        def loss(params: Any, inputs: Any, targets: Any) -> Any:
            hidden = jnp.tanh(inputs @ params["w1"] + params["b1"])
            return jnp.mean((hidden @ params["w2"] + params["b2"] - targets) ** 2)

        def train_step(state: Any, first_example: Any) -> tuple[Any, Any, Any]:
            inputs, targets = batch(first_example)
            value, grads = jax.value_and_grad(loss)(state["params"], inputs, targets)
            updates, opt_state = self.optimizer.update(grads, state["opt_state"], state["params"])
            new_state = {"params": optax.apply_updates(state["params"], updates), "opt_state": opt_state}
            # Checked on the device, with the step: a state that is no longer finite is never saved.
            finite = jnp.isfinite(value) & jnp.all(
                jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(new_state["params"])])
            )
            return new_state, value, finite

        # One compiled step, the same program at every step and after every restart: the run
        # takes the same arithmetic path whether it stopped or not. Compiled before training
        # starts (compile()), so a start's cost is all in its startup time, none in its steps.
        self._jitted = jax.jit(
            train_step,
            out_shardings=(self.replicated, self.replicated, self.replicated),
            donate_argnums=(0,),
        )
        self.train_step: Callable[[Any, int], tuple[Any, Any, Any]] = self._jitted

    def compile(self, state: Any) -> None:
        import numpy as np

        compiled = self._jitted.lower(state, np.int32(0)).compile()
        per_epoch = self.settings.examples_per_epoch
        self.train_step = lambda state, first: compiled(state, np.int32(first % per_epoch))

    def initial_state(self) -> Any:
        jax, jnp = self.jax, self.jnp
        k1, k2 = jax.random.split(self.init_key)
        hidden = self.settings.hidden_dim
        params = {
            "w1": jax.random.normal(k1, (INPUT_DIM, hidden), jnp.float32) / math.sqrt(INPUT_DIM),
            "b1": jnp.zeros((hidden,), jnp.float32),
            "w2": jax.random.normal(k2, (hidden, OUTPUT_DIM), jnp.float32) / math.sqrt(hidden),
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
        saved, ours = record.get("run"), self.settings.fingerprint
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
            "run": self.settings.fingerprint,
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


def move_folder(source: Any, target: Any) -> None:
    """Move a folder (``etils.epath`` paths): one rename on a disk; on ``gs://`` a copy of each
    object (Cloud Storage's rewrite, within the bucket) then a delete, through the same
    filesystem Orbax lists with, so its listings see the move. (gcsfs's own mv first tries the
    objects.move call, which not every bucket and no emulator offers.) A kill in between leaves the
    step where it was, to be found damaged and moved again."""
    if not str(source).startswith("gs://"):
        target.parent.mkdir(parents=True, exist_ok=True)
        source.rename(target)
        return
    names = sorted(str(item.relative_to(source)) for item in files_under(source))
    if not names:
        raise FileNotFoundError(f"no files under {source}")
    for name in names:
        (source / name).copy(target / name)
    copied = sorted(str(item.relative_to(target)) for item in files_under(target))
    if copied != names:
        raise RuntimeError(f"{target} holds {len(copied)} of the {len(names)} files of {source}; kept both")
    source.rmtree()


def files_under(folder: Any) -> Iterator[Any]:
    # One listing per folder: epath refuses a recursive glob on gs://.
    for item in folder.iterdir():
        if item.is_dir():
            yield from files_under(item)
        else:
            yield item


def _final_state_npz(jax: Any, state: Any) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, **flat_state(jax, state))
    return buffer.getvalue()


# -- Training -----------------------------------------------------------------------------------------


def list_storage_afresh() -> None:
    """gcsfs answers a listing from the listings it made before (fsspec's listings cache), so a
    step another process saved, or moved, after this one listed the folder would stay unseen or
    seen: every process must see what is in the bucket now. Set before any filesystem is made
    (fsspec.config.conf holds the defaults of new filesystems)."""
    import fsspec

    fsspec.config.conf.setdefault("gcs", {})["use_listings_cache"] = False


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
    (stop,) = hosts.any(bool(_STOP_SIGNAL))
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
        (stop_wanted, save_wanted), request = hosts.agree(bool(_STOP_SIGNAL), due, token=beacon.requested())
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
        checkpoints.write_file(FINAL_STATE, _final_state_npz(jax, state))
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
