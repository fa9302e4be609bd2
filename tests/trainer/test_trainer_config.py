"""The reference trainer refuses a run environment it cannot use with exit 2 and one line that
names the variable, its value and what is allowed, before it imports JAX (so it is quick)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from support.harness.sandbox import TRAIN_PY

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
        ({"TRAIN_STEPS": ""}, "none of TOTAL_EXAMPLES, TRAIN_STEPS and EPOCHS is set"),
        ({"TOTAL_EXAMPLES": "1e4"}, "TOTAL_EXAMPLES='1e4' is not a whole number"),
        ({"TRAIN_STEPS": "９"}, "TRAIN_STEPS='９' is not a whole number"),
        ({"TRAIN_STEPS": "9" * 400}, f"TRAIN_STEPS='{'9' * 400}' is not a whole number"),
        (
            {"CHECKPOINT_DIR": "checkpoints/run"},
            "CHECKPOINT_DIR='checkpoints/run' must be an absolute path",
        ),
        ({"TRAINER_STATE_DIR": "state"}, "TRAINER_STATE_DIR='state' must be an absolute path"),
        ({"TRAINER_ACCEPT_CHANGED_RUN": "yes"}, "TRAINER_ACCEPT_CHANGED_RUN='yes' must be 1 or 0"),
        (
            {"TRAINER_NUM_PROCESSES": "2"},
            "TRAINER_NUM_PROCESSES set without TRAINER_COORDINATOR_ADDRESS, TRAINER_PROCESS_ID",
        ),
        (
            {
                "TRAINER_COORDINATOR_ADDRESS": "10.0.0.1:8476",
                "TRAINER_NUM_PROCESSES": "2",
                "TRAINER_PROCESS_ID": "2",
            },
            "TRAINER_PROCESS_ID='2' must be at least 0 and at most 1",
        ),
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
    assert done.stderr.endswith(" (exit 2)\n") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize(
    ("variable", "path", "message"),
    [
        ("CHECKPOINT_DIR", "/etc/hostname", "is a file, not a folder"),
        ("CHECKPOINT_DIR", "/proc/tpu-training", "is not a folder this trainer can write to"),
        ("TRAINER_STATE_DIR", "/proc/tpu-trainer", "is not a folder this trainer can write to"),
    ],
)
def test_a_folder_the_trainer_cannot_write_exits_2_before_it_trains(tmp_path, variable, path, message):
    # Checked before JAX is imported: a path that cannot work fails in a second, not at the
    # first checkpoint.
    env = {
        **GOOD,
        "CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "TRAINER_STATE_DIR": str(tmp_path / "state"),
    }
    done = run({**env, variable: path})
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr
        == f"tpu-trainer: configuration error: {variable}={path!r} {message}"
        + (done.stderr.split(message, 1)[1])
    )
    assert done.stderr.endswith(" (exit 2)\n") and "Traceback" not in done.stderr


def test_gs_without_credentials_exits_2_at_once(tmp_path):
    # No Application Default Credentials on this machine, and none given to gcsfs: said at once,
    # not after the storage clients' minutes of probing for a metadata server and retrying.
    done = run(
        {
            **GOOD,
            "CHECKPOINT_DIR": "gs://tpu-training-ckpt/run",
            "HOME": str(tmp_path),
            "TRAINER_STATE_DIR": str(tmp_path),
        }
    )
    assert done.returncode == 2, done.stderr
    assert (
        "CHECKPOINT_DIR=gs://tpu-training-ckpt/run cannot be written: DefaultCredentialsError" in done.stderr
    )
    assert "Traceback" not in done.stderr


def test_gs_that_does_not_answer_exits_75_within_the_storage_timeout(tmp_path):
    # A Cloud Storage endpoint where nothing listens (the clients' own endpoint setting, as the
    # loopback tests use): the clients retry with back-off; the trainer gives up after
    # TRAINER_STORAGE_TIMEOUT_SECONDS and says "try again", which the retry loop and the Job do.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    done = run(
        {
            **GOOD,
            "CHECKPOINT_DIR": "gs://tpu-training-ckpt/run",
            "HOME": str(tmp_path),
            "TRAINER_STATE_DIR": str(tmp_path),
            "FSSPEC_GCS_TOKEN": "anon",
            "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}",
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "TRAINER_STORAGE_TIMEOUT_SECONDS": "2",
        }
    )
    assert done.returncode == 75, done.stderr
    assert done.stderr.endswith(
        "tpu-trainer: try again later: CHECKPOINT_DIR=gs://tpu-training-ckpt/run did not answer within 2 s "
        "(TRAINER_STORAGE_TIMEOUT_SECONDS) (exit 75)\n"
    ), done.stderr
