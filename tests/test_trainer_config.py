"""The reference trainer refuses a run environment it cannot use with exit 2 and one line that
names the variable, its value and what is allowed, before it imports JAX (so it is quick)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainer.sandbox import TRAIN_PY

GOOD = {"CHECKPOINT_DIR": "/tmp/never-written", "TRAIN_STEPS": "10", "GLOBAL_BATCH_SIZE": "8"}


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TRAIN_PY)],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"CHECKPOINT_DIR": ""}, "CHECKPOINT_DIR is not set; the stack sets it"),
        (
            {"CHECKPOINT_DIR": "s3://bucket/run"},
            "CHECKPOINT_DIR='s3://bucket/run': only a local path or gs://",
        ),
        ({"TRAIN_STEPS": "ten"}, "TRAIN_STEPS='ten' is not a whole number; it must be at least 1"),
        ({"TRAIN_STEPS": "0"}, "TRAIN_STEPS='0' must be at least 1"),
        ({"TRAIN_STEPS": ""}, "neither TRAIN_STEPS nor EPOCHS is set"),
        ({"GLOBAL_BATCH_SIZE": "-4"}, "GLOBAL_BATCH_SIZE='-4' must be at least 1"),
        ({"LEARNING_RATE": "nan"}, "LEARNING_RATE='nan' must be a finite number above 0"),
        (
            {"CHECKPOINT_INTERVAL_SECONDS": "0"},
            "CHECKPOINT_INTERVAL_SECONDS='0' must be a finite number above 0",
        ),
        (
            {"TRAINER_CHECKPOINT_EVERY_STEPS": "1.5"},
            "TRAINER_CHECKPOINT_EVERY_STEPS='1.5' is not a whole number",
        ),
        ({"TRAINER_KEEP_CHECKPOINTS": "1"}, "TRAINER_KEEP_CHECKPOINTS='1' must be at least 2"),
        ({"TRAINER_DISTRIBUTED": "yes"}, "TRAINER_DISTRIBUTED='yes' must be one of auto, on, off"),
    ],
)
def test_bad_environment_exits_2_naming_the_variable(change, message):
    done = run({**GOOD, **change})
    assert done.returncode == 2
    assert done.stderr.startswith(f"tpu-trainer: configuration error: {message}"), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
