"""Run the reference trainer as the stacks run it, on this machine: under the startup script the
project renders for a TPU VM, or as a GKE Job's container. For the tests (tests/test_trainer_*.py)
and the goodput benchmark (benchmarks/goodput_measured.py); not uploaded with the trainer.

The startup script is the real one (``render_startup_script``), run by bash with its state in a
temporary folder; only ``gcloud storage`` is a stand-in (``ls`` and ``cp -`` on local paths), as in
tests/test_startup_script.py. ``CHECKPOINT_DIR`` is a local folder.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence

from tpu_training_components.domain.job_manifests import (
    TrainingJobSpec,
    job_manifest,
    run_parameters_manifest,
)
from tpu_training_components.domain.startup_script import (
    COMPLETION_MARKER,
    render_shutdown_script,
    render_startup_script,
)

TRAIN_PY = Path(__file__).resolve().parent / "train.py"
TRAIN_COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(TRAIN_PY))}"

# `gcloud storage ls PATH` and `gcloud storage cp - PATH` on local paths: all the startup script
# asks of it. Anything else is refused, so a new use of gcloud in the script shows up here.
FAKE_GCLOUD = r"""#!/bin/bash
set -eu
[ "$1" = storage ] || exit 2
case "$2" in
  ls) [ -e "$3" ] ;;
  cp) [ "$3" = - ] || exit 2; mkdir -p "$(dirname "$4")"; cat > "$4" ;;
  *) exit 2 ;;
esac
"""

EVENT = re.compile(r"^tpu-trainer: (?P<event>\w+)(?P<fields>( .*)?)$")


@dataclass(frozen=True)
class Event:
    """One line of the trainer's log, with the time this process read it."""

    at: float
    event: str
    fields: Mapping[str, str]

    def int(self, key: str) -> int:
        return int(self.fields[key])

    def float(self, key: str) -> float:
        return float(self.fields[key])


def parse(line: str, at: float) -> Optional[Event]:
    match = EVENT.match(line.rstrip("\n"))
    if not match:
        return None
    # Values with spaces are JSON strings, which shlex reads as one word.
    try:
        words = shlex.split(match.group("fields"))
    except ValueError:
        return None
    if not all(re.match(r"^\w+=", word) for word in words):
        return None
    fields = dict(word.split("=", 1) for word in words)
    return Event(at, match.group("event"), fields)


class Output:
    """Reads a process's output on a thread, so the caller can wait for lines with a deadline."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self.timed_lines: list[tuple[float, str]] = []
        self.events: list[Event] = []
        self._queue: queue.Queue[Optional[Event]] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            at = time.monotonic()
            self.lines.append(line)
            self.timed_lines.append((at, line))
            event = parse(line, at)
            if event is not None:
                self.events.append(event)
                self._queue.put(event)
        self._queue.put(None)

    def next_events(self, deadline: float) -> Iterator[Event]:
        """The trainer's events as they come, until the output ends or the deadline passes."""
        while True:
            try:
                event = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError("no trainer output before the deadline:\n" + self.text()) from None
            if event is None:
                return
            yield event

    def next_event(self, deadline: float) -> tuple[bool, Optional[Event]]:
        """``(True, event)``, ``(True, None)`` at the end of the output, ``(False, None)`` when
        the deadline passes first."""
        try:
            return True, self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return False, None

    def text(self) -> str:
        return "".join(self.lines)

    def finish(self, timeout: float) -> int:
        code = self.process.wait(timeout=timeout)
        self._thread.join(timeout=timeout)
        return code


@dataclass
class Sandbox:
    """A TPU VM on this machine: the rendered scripts, their state folder and a checkpoint folder."""

    root: Path
    environment: Mapping[str, str]
    """The run's environment as the stack would export it (``TRAIN_STEPS``, ...)."""
    vm_name: str = "sandbox-tpu"
    train_command: str = TRAIN_COMMAND
    checkpoint_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.checkpoint_dir = self.root / "checkpoints"
        bin_dir = self.root / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        _write(bin_dir / "gcloud", FAKE_GCLOUD)
        self.startup = _write(
            self.root / "startup.sh",
            render_startup_script(
                vm_name=self.vm_name,
                checkpoint_dir=str(self.checkpoint_dir),
                train_command=self.train_command,
                environment=dict(self.environment),
            ),
        )
        self.shutdown = _write(self.root / "shutdown.sh", render_shutdown_script(vm_name=self.vm_name))
        self.state_dir = self.root / "state"
        self.env = dict(
            os.environ,
            PATH=f"{bin_dir}:{os.environ['PATH']}",
            TPU_TRAINING_STATE_DIR=str(self.state_dir),
            # The loop's back-off starts at 0 s and so stays there: restarts are immediate.
            TPU_TRAINING_RETRY_DELAY="0",
            PYTHONUNBUFFERED="1",
        )

    @property
    def marker(self) -> Path:
        return self.checkpoint_dir / COMPLETION_MARKER

    def boot(self) -> Output:
        """Run the startup script, as a VM does at boot."""
        process = subprocess.Popen(
            ["bash", str(self.startup)],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        return Output(process)

    def trainer_pid(self) -> int:
        return int((self.state_dir / "trainer.pid").read_text())

    def kill_trainer(self, sig: int = signal.SIGKILL) -> None:
        """Signal the running attempt's whole process group, as a crash or the OOM killer would."""
        os.killpg(self.trainer_pid(), sig)

    def power_off(self, boot: Output) -> None:
        """Everything the boot started dies at once: the VM is gone without a shutdown script."""
        for pgid in {self.trainer_pid(), boot.process.pid}:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        boot.finish(timeout=30)
        # A new VM starts with an empty /run.
        for name in ("trainer.pid", "stopping"):
            (self.state_dir / name).unlink(missing_ok=True)

    def run_shutdown_script(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(self.shutdown)], env=self.env, capture_output=True, text=True, timeout=60
        )


@dataclass
class Pod:
    """A GKE training Job's Pod run on this machine: its container's command, with the environment
    the kubelet builds from the Job's ``env`` and its ConfigMap (``envFrom``), and a fresh
    filesystem of its own (``TMPDIR``) like every new Pod."""

    command: Sequence[str]
    env: Mapping[str, str]

    def start(self, scratch: Path) -> Output:
        scratch.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(scratch),
            "TMPDIR": str(scratch),
            "PYTHONUNBUFFERED": "1",
            **self.env,
        }
        process = subprocess.Popen(
            list(self.command), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        return Output(process)


def job_pod(checkpoint_dir: Path, run_parameters: Mapping[str, str]) -> Pod:
    """The Pod of a single-host training Job that runs the reference trainer, built from the
    manifests the stack applies (components/job_manifests.py)."""
    spec = TrainingJobSpec(
        name="train-sandbox",
        namespace="default",
        image="us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:latest",
        command=(sys.executable, str(TRAIN_PY)),
        node_selector={},
        chips_per_vm=1,
        vms=1,
        service_account="train-sandbox",
        env={"CHECKPOINT_DIR": str(checkpoint_dir)},
        run_parameters=dict(run_parameters),
    )
    container = job_manifest(spec)["spec"]["template"]["spec"]["containers"][0]
    config_maps = {spec.run_parameters_name: run_parameters_manifest(spec)["data"]}
    env: dict[str, str] = {}
    for source in container["envFrom"]:
        env.update(config_maps[source["configMapRef"]["name"]])
    # A variable in `env` wins over the same name from `envFrom` (Kubernetes' EnvFromSource).
    env.update({entry["name"]: entry["value"] for entry in container["env"]})
    return Pod(command=container["command"], env=env)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def load_final_state(checkpoint_dir: Path) -> dict[str, object]:
    """The final parameters and optimizer state a completed run left (``final_state.npz``)."""
    import numpy as np

    with np.load(checkpoint_dir / "final_state.npz") as archive:
        return {key: archive[key] for key in archive.files}
