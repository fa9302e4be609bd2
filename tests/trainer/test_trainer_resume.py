"""The resume contract, verified by killing the real trainer (trainer/train.py, JAX on CPU) under
the real startup script (components/tpu_training_components/domain/startup_script.py, run by
bash), and as a GKE Job's Pod. Every interrupted run must finish with exactly the final state of a
run that never stopped, and redo at most one checkpoint interval of steps per kill.

Most tests run twice: with ``CHECKPOINT_DIR`` a local folder, and, as on a TPU VM or GKE, on
``gs://``: Cloud Storage served on loopback (tests/support/fakes/loopback_gcs.py) to the trainer's own
clients (tensorstore's gcs driver, gcsfs). A kill during a save is checked against each one's way
of saving: Orbax renames a temporary folder on a disk, and writes a commit file last on ``gs://``.
The GKE Pods, which always checkpoint to a bucket, run on ``gs://`` only.

No test sleeps or times anything: each waits for the trainer's own log lines (with a deadline
only against a hang), and kill points are steps or requests, not moments.
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
from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.sandbox import (
    CheckpointStore,
    Event,
    GcsStore,
    LocalStore,
    Output,
    Pod,
    Sandbox,
    job_pod,
    load_final_state,
)

pytestmark = pytest.mark.usefixtures("jax_compilation_cache")

STEPS = 60
EVERY = 10
"""Checkpoint every 10 steps (TRAINER_CHECKPOINT_EVERY_STEPS): a kill may lose at most 10. Six
checkpoints a run, more than the three the trainer keeps, so old ones are deleted too."""
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
BUCKET = "ckpt-bucket"
COMMIT_FILE = "commit_success.txt"
"""What Orbax writes last into a checkpoint on ``gs://`` (orbax/checkpoint/_src/path/atomicity.py,
CommitFileTemporaryPath); on a local disk it renames a temporary folder instead."""


@pytest.fixture
def gcs() -> Iterator[LoopbackGcs]:
    """The loopback Cloud Storage, one per test, checked after the test: it answered every request
    the trainer's clients sent as Cloud Storage would (nothing was refused). One per test, not per
    module: the emulator writes out the metadata of every object it holds at each upload, so a
    server shared by the module's runs spent most of its time re-encoding earlier tests' objects."""
    with LoopbackGcs(BUCKET) as server:
        yield server
        assert not server.refused, (
            f"requests the loopback Cloud Storage cannot answer faithfully: {server.refused}"
        )


@pytest.fixture(params=["local", "gs"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CheckpointStore]:
    """``CHECKPOINT_DIR``: a local folder, or a prefix of its own in the loopback bucket."""
    if request.param == "local":
        yield LocalStore(tmp_path / "checkpoints")
        return
    server: LoopbackGcs = request.getfixturevalue("gcs")
    yield GcsStore(server.endpoint, BUCKET, f"{tmp_path.name}/checkpoints")


_STARTED: list[Sandbox | Pod] = []


@pytest.fixture(autouse=True)
def _nothing_left_running() -> Iterator[None]:
    # A test that fails half-way must not leave a retry loop restarting the trainer for ever.
    yield
    while _STARTED:
        _STARTED.pop().close()


def vm(tmp_path: Path, store: CheckpointStore, **extra: str) -> Sandbox:
    # The trainer's progress record is on the VM's disk (TRAINER_STATE_DIR), not in its /run.
    sandbox = Sandbox(tmp_path, {**RUN, "TRAINER_STATE_DIR": str(tmp_path / "vm-disk"), **extra}, store=store)
    _STARTED.append(sandbox)
    return sandbox


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


def steps_saved(store: CheckpointStore) -> list[int]:
    return sorted(int(name) for name in store.names() if name.isdigit())


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Mapping[str, object]:
    """The final state of a run that is never interrupted (on a local disk: the ``gs`` runs must
    end with the same bytes)."""
    root = tmp_path_factory.mktemp("reference")
    sandbox = vm(root, LocalStore(root / "checkpoints"))
    boot = sandbox.boot()
    assert boot.finish(timeout=DEADLINE) == 0, boot.text()
    [resume] = resumes(boot)
    assert resume.int("step") == 0 and resume.fields["redone_steps"] == "unknown"
    assert "training completed after 1 attempt(s)" in boot.text()
    assert sandbox.completed
    saved = [event.int("step") for event in boot.events if event.event == "saved"]
    assert saved == list(range(EVERY, STEPS + 1, EVERY))
    assert steps_saved(sandbox.checkpoints) == saved[-3:]  # TRAINER_KEEP_CHECKPOINTS' default
    return load_final_state(sandbox.checkpoints)


def test_the_reference_state_is_float32_and_trained(reference):
    assert {key for key in reference if "params" in key} == {
        f"['params']['{name}']" for name in ("b1", "b2", "w1", "w2")
    }
    assert all(np.isfinite(np.asarray(value)).all() for value in reference.values())


def test_sigkill_at_random_steps_resumes_bit_for_bit(tmp_path, store, reference):
    kill_steps = sorted(random.Random(21).sample(range(3, STEPS - 2), 5))
    # Steps of 30 ms (TRAINER_STEP_SECONDS sleeps; the state is the same): the test reads the
    # trainer's lines as they come, and on a loaded machine it read them late enough, with steps
    # taking a millisecond or two, that the run had completed before the last kill was sent.
    sandbox = vm(tmp_path, store, TRAINER_STEP_SECONDS="0.03")
    boot = sandbox.boot()
    pending = list(kill_steps)
    at_kill: list[tuple[int, int]] = []
    for event in events(boot):
        if event.event == "step" and pending and event.int("step") >= pending[0]:
            sandbox.kill_trainer(signal.SIGKILL)
            # The newest step this attempt knew to be committed: the restart may not go back
            # further. (A save still in flight may or may not have been committed.)
            committed = [e.int("step") for e in boot.events if e.event == "committed"]
            at_kill.append((event.int("step"), max(committed, default=0)))
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
    for (seen, committed), resume in zip(at_kill, after_kills, strict=True):
        reached, restored = resume.int("reached_before"), resume.int("step")
        # The trainer's own record of how far it got is at least the last step it logged.
        assert reached >= seen
        assert resume.int("redone_steps") == reached - restored
        # Nothing committed is lost; at most the interval and the save in flight are redone.
        assert committed <= restored <= reached, resume
        assert restored % EVERY == 0
    assert sandbox.completed
    assert_same_state(load_final_state(store), reference)


def test_sigterm_through_the_shutdown_script_saves_once_and_stops_the_loop(tmp_path, store, reference):
    # Steps of 200 ms (TRAINER_STEP_SECONDS; a real step takes time too): the shutdown script's
    # SIGTERM, sent at step 31, lands before step 40's interval save, so the trainer's own save on
    # SIGTERM is the one that must happen. The 1.8 s between them is what the script's start may
    # take on a loaded machine: at 20 ms a step, a CI run with the load average near 5 saw SIGTERM
    # arrive only at step 40.
    sandbox = vm(tmp_path, store, TRAINER_STEP_SECONDS="0.2")
    boot = sandbox.boot()
    for event in events(boot):
        if event.event == "step" and event.int("step") == 31:
            done = sandbox.run_shutdown_script()
            assert done.returncode == 0, done.stdout + done.stderr
            break
    assert boot.finish(timeout=DEADLINE) == 0, boot.text()
    stopped = [event for event in boot.events if event.event == "stopped"]
    assert len(stopped) == 1 and stopped[0].fields["exit"] == "143"
    final_step = stopped[0].int("step")
    assert 31 <= final_step < 40, f"SIGTERM took over 8 steps to arrive:\n{boot.text()}"
    # It saved once more, where it stopped, off the 10-step schedule.
    saves = [(event.int("step"), event.fields["reason"]) for event in boot.events if event.event == "saving"]
    assert saves == [(10, "interval"), (20, "interval"), (30, "interval"), (final_step, "sigterm")]
    assert steps_saved(store) == [20, 30, final_step]  # the three newest
    assert "while the VM shuts down; the next boot resumes" in boot.text()
    assert "attempt 2" not in boot.text()
    assert not sandbox.completed

    # The next boot resumes from the SIGTERM checkpoint: nothing redone.
    second = sandbox.boot()
    assert second.finish(timeout=DEADLINE) == 0, second.text()
    [resume] = resumes(second)
    assert resume.int("step") == final_step and resume.int("redone_steps") == 0
    assert sandbox.completed
    assert_same_state(load_final_state(store), reference)


def _corrupt_array_data(store: CheckpointStore, step: int) -> None:
    # The arrays' bytes only (the OCDBT data files each process writes, ocdbt.process_N/d/), the
    # metadata and the combined index (state/d/, whose damage OCDBT detects itself) left intact:
    # what a bad disk or a torn write does. Orbax does not notice; the trainer's checksum does.
    data = {
        name: store.read(name)
        for name in store.files(f"{step}/state")
        if re.search(r"/ocdbt\.process_\d+/d/", name)
    }
    large = sorted(name for name, content in data.items() if len(content) > 1024)
    assert large, f"no array data under {step}/state: {sorted(data)}"
    for name in large:
        content = bytearray(data[name])
        content[len(content) // 2] ^= 0x01
        store.write(name, bytes(content))


def _half_copy(store: CheckpointStore, step: int) -> None:
    # What an interrupted copy or a lost upload leaves: the step, with the state's files gone.
    for name in store.files(f"{step}/state"):
        if not name.endswith("/_METADATA"):
            store.delete(name)


@pytest.mark.parametrize("damage", [_corrupt_array_data, _half_copy], ids=["corrupt", "half-written"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(tmp_path, store, reference, damage):
    sandbox = vm(tmp_path, store)
    boot = sandbox.boot()
    for event in events(boot):
        if event.event == "committed" and event.int("step") == 30:
            sandbox.power_off(boot)
            break
    steps = steps_saved(store)
    newest = steps[-1]
    assert newest == 30 and len(steps) >= 2
    damage(store, newest)
    damaged_files = sorted(name[len(f"{newest}/") :] for name in store.files(str(newest)))

    second = sandbox.boot()
    assert second.finish(timeout=DEADLINE) == 0, second.text()
    # Committed before the power went, the damaged step is offered, tried and skipped.
    skipped = [event.int("step") for event in second.events if event.event == "skip"]
    assert skipped == [newest], second.text()
    assert len(resumes(second)) == 1, second.text()
    [resume] = resumes(second)
    assert resume.int("step") == newest - EVERY
    assert resume.int("redone_steps") == resume.int("reached_before") - (newest - EVERY)
    assert_same_state(load_final_state(store), reference)
    # Moved aside, whole, never deleted: the damaged step is kept for inspection, beside
    # CHECKPOINT_DIR, where Orbax's clean-up of unfinished saves does not look.
    [moved] = [event.fields["to"] for event in second.events if event.event == "moved"]
    folder = moved.rsplit("/", 1)[-1]
    assert moved == f"{store.url}.damaged/{folder}"
    assert sorted(name.split("/", 1)[1] for name in beside(store, ".damaged").files(folder)) == damaged_files


def beside(store: CheckpointStore, suffix: str) -> CheckpointStore:
    """The folder beside ``store``'s, named as it with ``suffix``."""
    if isinstance(store, LocalStore):
        return LocalStore(store.path.with_name(store.path.name + suffix))
    assert isinstance(store, GcsStore)
    return GcsStore(store.endpoint, store.bucket, store.prefix + suffix)


def test_a_kill_while_a_save_is_in_flight_leaves_a_temporary_folder_the_restart_ignores(tmp_path, reference):
    # On a disk Orbax writes a checkpoint into a temporary folder and renames it when complete.
    store = LocalStore(tmp_path / "checkpoints")
    sandbox = vm(tmp_path, store)
    boot = sandbox.boot()
    caught: list[tuple[int, list[str]]] = []
    kills = 0
    for event in events(boot):
        # "saved": the arrays are off the device; the save's temporary folder exists and Orbax
        # writes its files in the background while training goes on.
        if event.event == "saved" and not caught and kills < 8:
            sandbox.kill_trainer(signal.SIGKILL)
            kills += 1
            step = event.int("step")
            names = store.names()
            leftovers = [name for name in names if name.startswith(f"{step}.")]
            if not store.exists(str(step)) and leftovers:
                caught.append((step, leftovers))
                # Old steps go only once a newer one is committed: with step's save in flight, the
                # three before it (TRAINER_KEEP_CHECKPOINTS) are all still there.
                committed = sorted(int(name) for name in names if name.isdigit())
                assert committed == list(range(EVERY, step, EVERY))[-3:], (step, names)
    assert boot.finish(timeout=DEADLINE) == 0, boot.text()
    # At least one kill found the save half-way: its temporary folder on disk, the step's own
    # folder not yet there. (A kill that lands after the write finished is simply another kill.)
    assert caught, f"no kill landed inside a save in {kills} tries:\n{boot.text()}"
    step, _ = caught[0]
    resume_after = resumes(boot)[kills]
    assert resume_after.int("step") == step - EVERY
    assert resume_after.int("reached_before") >= step
    assert not [name for name in store.names() if ".orbax-checkpoint-tmp" in name]
    assert_same_state(load_final_state(store), reference)


def test_a_kill_before_the_commit_file_on_gs_leaves_a_step_the_restart_ignores(tmp_path, gcs, reference):
    """On ``gs://`` Orbax writes a checkpoint in place and its commit file last. The VM dies as
    the trainer starts that last upload (the server sees it and kills the trainer, so the kill
    lands there every time): every other object of step 50 is in the bucket. The restart must not
    take it for a checkpoint, and step 50 must be saved again, whole: a later start restores it."""
    store = GcsStore(gcs.endpoint, BUCKET, f"{tmp_path.name}/checkpoints")
    sandbox = vm(tmp_path, store)
    commit = f"{store.prefix}/50/{COMMIT_FILE}"
    killed: list[list[str]] = []

    def die_before_the_commit_file(method: str, path: str, query: dict[str, str]) -> bool:
        if killed or query.get("name") != commit:
            return True
        killed.append([name[len(store.prefix) + 1 :] for name in gcs.objects(BUCKET, f"{store.prefix}/50/")])
        sandbox.kill_trainer(signal.SIGKILL)
        return False

    gcs.intercept = die_before_the_commit_file
    try:
        boot = sandbox.boot()
        assert boot.finish(timeout=DEADLINE) == 0, boot.text()
    finally:
        gcs.intercept = None
    [written] = killed
    assert "50/state/_METADATA" in written and "50/_CHECKPOINT_METADATA" in written, written
    assert f"50/{COMMIT_FILE}" not in written
    _, restart = resumes(boot)
    assert restart.int("step") == 40 and restart.int("reached_before") >= 50
    assert all(store.exists(f"{step}/{COMMIT_FILE}") for step in steps_saved(store))
    assert_same_state(load_final_state(store), reference)

    # Step 50, saved again over what the killed save left: the newest checkpoint once step 60 is
    # gone, and it restores (its checksum holds) to the same end.
    for name in store.files("60") + ["TRAINING_COMPLETE", "final_state.npz"]:
        store.delete(name)
    again = sandbox.boot()
    assert again.finish(timeout=DEADLINE) == 0, again.text()
    [resume] = resumes(again)
    assert resume.int("step") == 50 and not [e for e in again.events if e.event == "skip"]
    assert_same_state(load_final_state(store), reference)


def test_gke_pod_restarts_resume_bit_for_bit(tmp_path, gcs, reference):
    """A Job's Pods: each new Pod is a new process with an empty filesystem, started with the
    Job's command and environment, checkpointing to its bucket. A node lost (SIGKILL), an eviction
    (SIGTERM, which Kubernetes sends first), then a Pod that runs to completion."""
    store = GcsStore(gcs.endpoint, BUCKET, f"{tmp_path.name}/checkpoints/train-sandbox")
    pod = job_pod(store, {**RUN})
    _STARTED.append(pod)
    assert pod.env["CHECKPOINT_DIR"] == store.url and pod.env["TRAIN_STEPS"] == str(STEPS)

    first = pod.start(tmp_path / "pod-1")
    for event in events(first):
        # Once step 20 is committed (a save is written in the background while training goes on).
        if event.event == "committed" and event.int("step") == 20:
            first.process.send_signal(signal.SIGKILL)
            break
    assert first.finish(timeout=DEADLINE) == -signal.SIGKILL

    second = pod.start(tmp_path / "pod-2")
    for event in events(second):
        if event.event == "resume":
            assert event.int("step") == 20
            # A new Pod has no record of how far the last one got.
            assert event.fields["redone_steps"] == "unknown"
        if event.event == "step" and event.int("step") == 41:
            second.process.send_signal(signal.SIGTERM)
            break
    assert second.finish(timeout=DEADLINE) == 143, second.text()
    stopped = [event.int("step") for event in second.events if event.event == "stopped"]

    third = pod.start(tmp_path / "pod-3")
    assert third.finish(timeout=DEADLINE) == 0, third.text()
    [resume] = resumes(third)
    assert resume.int("step") == stopped[0] >= 41
    assert [event.event for event in third.events][-1] == "complete"
    # No startup script on GKE: the trainer writes the marker itself, into the bucket.
    assert store.read("TRAINING_COMPLETE") == f"completed step {STEPS}, {STEPS * 32} examples\n".encode()
    assert_same_state(load_final_state(store), reference)

    # A Pod of a re-created Job after completion: restores the last step, trains nothing, exits 0.
    fourth = pod.start(tmp_path / "pod-4")
    assert fourth.finish(timeout=DEADLINE) == 0, fourth.text()
    assert [event.event for event in fourth.events] == ["resume", "complete"]
