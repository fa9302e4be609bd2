"""The run as its environment describes it: every variable the trainer reads, its default and its
bounds (docs/trainer.md, "Environment"). ``read_settings`` refuses a bad value with a
``ConfigError`` that names the variable, so the trainer exits 2 before it trains. Standard
library only."""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from typing import Mapping, Optional

from outcomes import ConfigError

MAINTENANCE_URL_VARIABLE = "TRAINER_MAINTENANCE_URL"


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
