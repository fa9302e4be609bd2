"""The startup and shutdown scripts, checked by shellcheck and run for real under bash, with a fake
trainer and a stand-in for the storage CLI on PATH."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tpu_training_components.startup_script import render_shutdown_script, render_startup_script

CHECKPOINT_DIR = "gs://ckpt-bucket/checkpoints/demo-tpu"
SHELLCHECK = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")

# `gcloud storage ls|cp` over a local folder standing in for Cloud Storage.
FAKE_GCLOUD = r"""#!/bin/bash
set -eu
[ "$1" = storage ] || exit 2
path="$FAKE_GCS/${3#gs://}"
case "$2" in
  ls) [ -e "$path" ] ;;
  cp) target="$FAKE_GCS/${4#gs://}"; mkdir -p "$(dirname "$target")"; cat > "$target" ;;
  *) exit 2 ;;
esac
"""

# Resumes from its checkpoint, advances 10 steps and saves; fails on its first two attempts.
FAKE_TRAINER = r"""#!/bin/bash
set -eu
ckpt="$FAKE_GCS/${CHECKPOINT_DIR#gs://}/step"
mkdir -p "$(dirname "$ckpt")"
step=$(cat "$ckpt" 2>/dev/null || echo 0)
echo "resume from step $step batch $GLOBAL_BATCH_SIZE" >> "$TRAINER_LOG"
echo $((step + 10)) > "$ckpt"
attempts=$(( $(cat "$TRAINER_LOG" | wc -l) ))
[ "$attempts" -ge 3 ]
"""

# Trains "forever"; on SIGTERM saves a final checkpoint and exits.
LONG_TRAINER = r"""#!/bin/bash
trap 'echo "final checkpoint saved" >> "$TRAINER_LOG"; exit 143' TERM
echo started >> "$TRAINER_LOG"
while true; do sleep 0.1; done
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def sandbox(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _write(bin_dir / "gcloud", FAKE_GCLOUD)
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        FAKE_GCS=str(tmp_path / "gcs"),
        TRAINER_LOG=str(tmp_path / "trainer.log"),
        TPU_TRAINING_STATE_DIR=str(tmp_path / "state"),
        TPU_TRAINING_RETRY_DELAY="0",
    )
    return tmp_path, env


def _startup(trainer: Path, tmp_path: Path) -> Path:
    script = render_startup_script(
        vm_name="demo-tpu",
        checkpoint_dir=CHECKPOINT_DIR,
        train_command=f"{trainer} --flag 'with spaces'",
        environment={"GLOBAL_BATCH_SIZE": "1024", "QUOTED": "it's $HOME"},
        setup_command=f"echo setup >> {tmp_path / 'setup.log'}",
    )
    return _write(tmp_path / "startup.sh", script)


def test_scripts_pass_shellcheck(tmp_path):
    startup = _startup(tmp_path / "train", tmp_path)
    shutdown = _write(tmp_path / "shutdown.sh", render_shutdown_script(vm_name="demo-tpu"))
    result = subprocess.run([SHELLCHECK, str(startup), str(shutdown)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_retries_resume_mark_completion_then_do_nothing(sandbox):
    tmp_path, env = sandbox
    startup = _startup(_write(tmp_path / "train", FAKE_TRAINER), tmp_path)

    first = subprocess.run(["bash", str(startup)], env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stdout + first.stderr
    assert (tmp_path / "trainer.log").read_text().splitlines() == [
        "resume from step 0 batch 1024",
        "resume from step 10 batch 1024",
        "resume from step 20 batch 1024",
    ]
    assert "attempt 1 failed with status 1; retrying" in first.stdout
    assert "attempt 2 failed with status 1; retrying" in first.stdout
    assert "training completed after 3 attempt(s)" in first.stdout
    marker = tmp_path / "gcs" / "ckpt-bucket/checkpoints/demo-tpu/TRAINING_COMPLETE"
    assert "after 3 attempt(s)" in marker.read_text()
    assert (tmp_path / "setup.log").read_text() == "setup\n"

    # Next boot (or a re-created VM): the marker is there, so nothing trains and nothing is set up.
    second = subprocess.run(["bash", str(startup)], env=env, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0
    assert "training already completed" in second.stdout
    assert len((tmp_path / "trainer.log").read_text().splitlines()) == 3
    assert (tmp_path / "setup.log").read_text() == "setup\n"


def test_shutdown_signals_the_trainer_and_stops_the_loop(sandbox):
    tmp_path, env = sandbox
    startup = _startup(_write(tmp_path / "train", LONG_TRAINER), tmp_path)
    shutdown = _write(tmp_path / "shutdown.sh", render_shutdown_script(vm_name="demo-tpu", grace_seconds=5))
    running = subprocess.Popen(["bash", str(startup)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while "started" not in _read(tmp_path / "trainer.log") and time.monotonic() < deadline:
            time.sleep(0.05)
        subprocess.run(["bash", str(shutdown)], env=env, check=True, timeout=30)
        out, _ = running.communicate(timeout=30)
    finally:
        if running.poll() is None:
            running.send_signal(signal.SIGKILL)
    assert running.returncode == 0
    assert "final checkpoint saved" in _read(tmp_path / "trainer.log")
    assert "while the VM shuts down; the next boot resumes" in out
    assert not (tmp_path / "gcs" / "ckpt-bucket/checkpoints/demo-tpu/TRAINING_COMPLETE").exists()


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_bad_environment_names_are_refused():
    with pytest.raises(ValueError, match="environment variable name '1BAD'"):
        render_startup_script(
            vm_name="x", checkpoint_dir=CHECKPOINT_DIR, train_command="t", environment={"1BAD": "v"}
        )
