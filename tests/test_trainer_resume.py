"""The resume contract, verified by killing the real trainer (trainer/train.py, JAX on CPU) under
the real startup script (rendered by components/startup_script.py, run by bash), and as a GKE
Job's Pod. Every interrupted run must finish with exactly the final state of a run that never
stopped, and redo at most one checkpoint interval of steps per kill.

No test sleeps or times anything: each waits for the trainer's own log lines (with a deadline
only against a hang), and kill points are steps, not moments.
"""

from __future__ import annotations

import random
import re
import signal
import time
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np
import pytest

from trainer.sandbox import Event, Output, Sandbox, job_pod, load_final_state

STEPS = 120
EVERY = 10
"""Checkpoint every 10 steps (TRAINER_CHECKPOINT_EVERY_STEPS): a kill may lose at most 10."""
RUN = {
    "TRAIN_STEPS": str(STEPS),
    "GLOBAL_BATCH_SIZE": "32",
    "LEARNING_RATE": "0.01",
    # The stack's interval in seconds is there too, as on a VM; the step override wins so the
    # steps a kill may lose are known exactly.
    "CHECKPOINT_INTERVAL_SECONDS": "3600",
    "TRAINER_CHECKPOINT_EVERY_STEPS": str(EVERY),
}
DEADLINE = 120.0


def vm(tmp_path: Path, **extra: str) -> Sandbox:
    # The trainer's progress record is on the VM's disk (TRAINER_STATE_DIR), not in its /run.
    return Sandbox(tmp_path, {**RUN, "TRAINER_STATE_DIR": str(tmp_path / "vm-disk"), **extra})


def events(output: Output) -> Iterator[Event]:
    return output.next_events(time.monotonic() + DEADLINE)


def assert_same_state(got: Mapping[str, object], want: Mapping[str, object]) -> None:
    assert sorted(got) == sorted(want)
    for key in want:
        a, b = np.asarray(got[key]), np.asarray(want[key])
        # Float32 everywhere but Adam's step count.
        assert a.dtype == b.dtype == (np.int32 if key.endswith(".count") else np.float32), key
        assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"{key} differs"


def resumes(output: Output) -> list[Event]:
    return [event for event in output.events if event.event == "resume"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Mapping[str, object]:
    """The final state of a run that is never interrupted."""
    sandbox = vm(tmp_path_factory.mktemp("reference"))
    boot = sandbox.boot()
    assert boot.finish(timeout=DEADLINE) == 0, boot.text()
    [resume] = resumes(boot)
    assert resume.int("step") == 0 and resume.fields["redone_steps"] == "unknown"
    assert "training completed after 1 attempt(s)" in boot.text()
    assert sandbox.marker.exists()
    saved = [event.int("step") for event in boot.events if event.event == "saved"]
    assert saved == list(range(EVERY, STEPS + 1, EVERY))
    return load_final_state(sandbox.checkpoint_dir)


def test_the_reference_state_is_float32_and_trained(reference):
    assert {key for key in reference if "params" in key} == {
        f"['params']['{name}']" for name in ("b1", "b2", "w1", "w2")
    }
    assert all(np.isfinite(np.asarray(value)).all() for value in reference.values())


def test_sigkill_at_random_steps_resumes_bit_for_bit(tmp_path, reference):
    kill_steps = sorted(random.Random(21).sample(range(3, STEPS - 2), 5))
    sandbox = vm(tmp_path)
    boot = sandbox.boot()
    pending = list(kill_steps)
    reached_at_kill: list[int] = []
    for event in events(boot):
        if event.event == "step" and pending and event.int("step") >= pending[0]:
            sandbox.kill_trainer(signal.SIGKILL)
            reached_at_kill.append(event.int("step"))
            pending.pop(0)
            # Arm the next kill only once the next attempt has resumed.
            for later in events(boot):
                if later.event == "resume":
                    break
    assert boot.finish(timeout=DEADLINE) == 0, boot.text()
    assert not pending, f"kills not done at steps {pending}"
    assert f"training completed after {len(kill_steps) + 1} attempt(s)" in boot.text()
    assert len(re.findall(r"attempt \d+ failed with status 137", boot.text())) == len(kill_steps)

    after_kills = resumes(boot)[1:]
    assert len(after_kills) == len(kill_steps)
    for seen, resume in zip(reached_at_kill, after_kills, strict=True):
        reached, restored = resume.int("reached_before"), resume.int("step")
        # The trainer's own record of how far it got is at least the last step it logged.
        assert reached >= seen
        assert resume.int("redone_steps") == reached - restored
        assert 0 <= reached - restored <= EVERY, resume
        assert restored % EVERY == 0
    assert_same_state(load_final_state(sandbox.checkpoint_dir), reference)


def test_sigterm_through_the_shutdown_script_saves_and_stops_the_loop(tmp_path, reference):
    sandbox = vm(tmp_path)
    boot = sandbox.boot()
    for event in events(boot):
        if event.event == "step" and event.int("step") == 37:
            done = sandbox.run_shutdown_script()
            assert done.returncode == 0, done.stdout + done.stderr
            break
    assert boot.finish(timeout=DEADLINE) == 0, boot.text()
    stopped = [event for event in boot.events if event.event == "stopped"]
    assert len(stopped) == 1 and stopped[0].fields["exit"] == "143"
    final_step = stopped[0].int("step")
    # It saved exactly where it stopped (37, or a step or two later), off the 10-step schedule.
    assert final_step >= 37
    assert [e.fields["reason"] for e in boot.events if e.event == "saving"][-1] in ("sigterm", "interval")
    assert "while the VM shuts down; the next boot resumes" in boot.text()
    assert "attempt 2" not in boot.text()
    assert not sandbox.marker.exists()

    # The next boot resumes from the SIGTERM checkpoint: nothing redone.
    second = sandbox.boot()
    assert second.finish(timeout=DEADLINE) == 0, second.text()
    [resume] = resumes(second)
    assert resume.int("step") == final_step and resume.int("redone_steps") == 0
    assert sandbox.marker.exists()
    assert_same_state(load_final_state(sandbox.checkpoint_dir), reference)


def _corrupt_array_data(step_dir: Path) -> None:
    # The arrays' bytes only (tensorstore's OCDBT data files), the metadata left intact: what a
    # bad disk or a torn write does. Orbax may not notice; the trainer's checksum does.
    files = sorted(p for p in (step_dir / "state").glob("ocdbt.process_*/d/*") if p.stat().st_size > 1024)
    assert files, f"no array data under {step_dir}"
    for path in files:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))


def _half_copy(step_dir: Path) -> None:
    # What an interrupted copy or a lost upload leaves: the folder, with the state's files gone.
    for path in sorted((step_dir / "state").rglob("*"), reverse=True):
        if path.is_file() and path.name != "_METADATA":
            path.unlink()


@pytest.mark.parametrize("damage", [_corrupt_array_data, _half_copy], ids=["corrupt", "half-written"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(tmp_path, reference, damage):
    sandbox = vm(tmp_path)
    boot = sandbox.boot()
    for event in events(boot):
        if event.event == "step" and event.int("step") == 65:
            sandbox.power_off(boot)
            break
    steps = sorted(int(p.name) for p in sandbox.checkpoint_dir.iterdir() if p.name.isdigit())
    newest = steps[-1]
    assert newest >= 60 and len(steps) >= 2
    damage(sandbox.checkpoint_dir / str(newest))

    second = sandbox.boot()
    assert second.finish(timeout=DEADLINE) == 0, second.text()
    # The damaged step is either tried and skipped, or not offered at all by Orbax (which lists a
    # step only once it finds it finalized; seen in CI under load): never restored.
    skipped = [event.int("step") for event in second.events if event.event == "skip"]
    assert skipped in ([newest], []), second.text()
    [resume] = resumes(second)
    assert resume.int("step") == newest - EVERY
    assert_same_state(load_final_state(sandbox.checkpoint_dir), reference)


def test_a_kill_while_a_save_is_in_flight_leaves_a_temporary_folder_the_restart_ignores(tmp_path, reference):
    sandbox = vm(tmp_path)
    boot = sandbox.boot()
    caught: list[tuple[int, list[str]]] = []
    kills = 0
    for event in events(boot):
        # "writing": the save's temporary folder exists and its files are being written.
        if event.event == "writing" and not caught and kills < 8:
            sandbox.kill_trainer(signal.SIGKILL)
            kills += 1
            step = event.int("step")
            leftovers = [p.name for p in sandbox.checkpoint_dir.iterdir() if p.name.startswith(f"{step}.")]
            if not (sandbox.checkpoint_dir / str(step)).exists() and leftovers:
                caught.append((step, leftovers))
    assert boot.finish(timeout=DEADLINE) == 0, boot.text()
    # At least one kill found the save half-way: its temporary folder on disk, the step's own
    # folder not yet there. (A kill that lands after the write finished is simply another kill.)
    assert caught, f"no kill landed inside a save in {kills} tries:\n{boot.text()}"
    step, _ = caught[0]
    resume_after = resumes(boot)[kills]
    assert resume_after.int("step") == step - EVERY
    assert resume_after.int("redone_steps") == EVERY
    assert not [p.name for p in sandbox.checkpoint_dir.iterdir() if ".orbax-checkpoint-tmp" in p.name]
    assert_same_state(load_final_state(sandbox.checkpoint_dir), reference)


def test_gke_pod_restarts_resume_bit_for_bit(tmp_path, reference):
    """A Job's Pods: each new Pod is a new process with an empty filesystem, started with the
    Job's command and environment. A node lost (SIGKILL), an eviction (SIGTERM, which Kubernetes
    sends first), then a Pod that runs to completion."""
    checkpoint_dir = tmp_path / "bucket" / "checkpoints" / "train-sandbox"
    pod = job_pod(checkpoint_dir, {**RUN})
    assert pod.env["CHECKPOINT_DIR"] == str(checkpoint_dir) and pod.env["TRAIN_STEPS"] == str(STEPS)

    first = pod.start(tmp_path / "pod-1")
    for event in events(first):
        if event.event == "step" and event.int("step") == 23:
            first.process.send_signal(signal.SIGKILL)
            break
    assert first.finish(timeout=DEADLINE) == -signal.SIGKILL

    second = pod.start(tmp_path / "pod-2")
    for event in events(second):
        if event.event == "resume":
            assert event.int("step") == 20
            # A new Pod has no record of how far the last one got.
            assert event.fields["redone_steps"] == "unknown"
        if event.event == "step" and event.int("step") == 71:
            second.process.send_signal(signal.SIGTERM)
            break
    assert second.finish(timeout=DEADLINE) == 143, second.text()
    stopped = [event.int("step") for event in second.events if event.event == "stopped"]

    third = pod.start(tmp_path / "pod-3")
    assert third.finish(timeout=DEADLINE) == 0, third.text()
    [resume] = resumes(third)
    assert resume.int("step") == stopped[0] >= 71
    assert [event.event for event in third.events][-1] == "complete"
    # No startup script on GKE: the trainer writes the marker itself.
    assert (checkpoint_dir / "TRAINING_COMPLETE").exists()
    assert_same_state(load_final_state(checkpoint_dir), reference)

    # A Pod of a re-created Job after completion: restores the last step, trains nothing, exits 0.
    fourth = pod.start(tmp_path / "pod-4")
    assert fourth.finish(timeout=DEADLINE) == 0, fourth.text()
    assert [event.event for event in fourth.events] == ["resume", "complete"]
