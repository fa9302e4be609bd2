"""A run's identity and its examples: the reference trainer refuses a checkpoint of another run
and leaves it as it is, continues a resized slice by examples until every example is seen, and
stops a run whose loss is no longer finite before anything of it is saved. One process each (the
agreement between processes is tests/trainer/test_trainer_hosts.py's), started as a Pod is: the command
and the environment, nothing else."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from support.harness.sandbox import (
    PROGRESS_RECORD,
    TRAIN_PY,
    Event,
    LocalStore,
    Output,
    Pod,
    checkpoint_snapshot,
)

pytestmark = pytest.mark.usefixtures("jax_compilation_cache")

DEADLINE = 120.0
_STARTED: list[Pod] = []


@pytest.fixture(autouse=True)
def _nothing_left_running() -> Iterator[None]:
    yield
    while _STARTED:
        _STARTED.pop().close()


def start(scratch: Path, checkpoints: Path, **env: str) -> Output:
    pod = Pod(command=(sys.executable, str(TRAIN_PY)), env={"CHECKPOINT_DIR": str(checkpoints), **env})
    _STARTED.append(pod)
    return pod.start(scratch)


def named(output: Output, name: str) -> list[Event]:
    return [event for event in output.events if event.event == name]


def error_line(output: Output) -> str:
    [line] = [line for line in output.lines if line.startswith("tpu-trainer: ") and "(exit " in line]
    return line.rstrip("\n")


RUN = {"TRAIN_STEPS": "20", "GLOBAL_BATCH_SIZE": "32", "TRAINER_CHECKPOINT_EVERY_STEPS": "10"}


def test_a_checkpoint_of_another_run_is_refused_and_left_as_it_is(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    first = start(tmp_path / "a", checkpoints, **RUN)
    assert first.finish(timeout=DEADLINE) == 0, first.text()
    before = checkpoint_snapshot(checkpoints)
    assert {name.split("/")[0] for name in before} >= {"10", "20"}

    # Another seed: another run (other data, other initial parameters), not a continuation.
    seed = start(tmp_path / "b", checkpoints, **RUN, TRAINER_SEED="1")
    assert seed.finish(timeout=DEADLINE) == 3, seed.text()
    assert error_line(seed) == (
        f"tpu-trainer: refusing to resume: checkpoint step 20 in {checkpoints}: another run (seed 0 -> 1); "
        f"set TRAINER_ACCEPT_CHANGED_RUN=1 to continue from it anyway, or give the run another "
        f"CHECKPOINT_DIR (exit 3)"
    )
    assert not named(seed, "resume") and not named(seed, "skip")
    assert checkpoint_snapshot(checkpoints) == before

    # Another model: refused even when told to accept a changed run; its arrays cannot fit.
    model = start(tmp_path / "c", checkpoints, **RUN, TRAINER_HIDDEN_DIM="64", TRAINER_ACCEPT_CHANGED_RUN="1")
    assert model.finish(timeout=DEADLINE) == 3, model.text()
    assert "another model (model 'mlp 16-32-4 float32' -> 'mlp 16-64-4 float32')" in error_line(model)
    assert checkpoint_snapshot(checkpoints) == before

    # Told to accept another seed: it goes on from the checkpoint, and says so.
    accepted = start(tmp_path / "d", checkpoints, **RUN, TRAINER_SEED="1", TRAINER_ACCEPT_CHANGED_RUN="1")
    assert accepted.finish(timeout=DEADLINE) == 0, accepted.text()
    [accept] = named(accepted, "accept")
    assert accept.fields["changed"] == "seed 0 -> 1"
    [resume] = named(accepted, "resume")
    assert resume.int("step") == 20


def test_a_resized_slice_goes_on_by_examples_and_sees_each_example_once(tmp_path):
    """The docs' resize: 9,600 examples in batches of 32 (300 steps), stopped at step 200's
    checkpoint, then a slice four times larger: batches of 128 (75 steps for the whole run). The
    new slice restores 6,400 examples' worth and trains the other 3,200: 25 steps, not 75-200."""
    checkpoints = tmp_path / "checkpoints"
    small = {"TRAIN_STEPS": "300", "GLOBAL_BATCH_SIZE": "32", "TRAINER_CHECKPOINT_EVERY_STEPS": "50"}
    first = start(tmp_path / "a", checkpoints, **small)
    deadline = time.monotonic() + DEADLINE
    for event in first.next_events(deadline):
        if event.event == "committed" and event.int("step") == 200:
            first.process.send_signal(signal.SIGKILL)
            break
    assert first.finish(timeout=DEADLINE) == -signal.SIGKILL

    large = {"TRAIN_STEPS": "75", "GLOBAL_BATCH_SIZE": "128", "TRAINER_CHECKPOINT_EVERY_STEPS": "50"}
    second = start(tmp_path / "b", checkpoints, **large)
    assert second.finish(timeout=DEADLINE) == 0, second.text()
    [resume] = named(second, "resume")
    assert (resume.int("step"), resume.int("examples"), resume.int("target_examples")) == (200, 6400, 9600)
    [complete] = named(second, "complete")
    assert (complete.int("step"), complete.int("examples")) == (225, 9600)

    # Every example once: the first slice's batches up to its checkpoint, then the second's.
    ranges = [tuple(map(int, e.fields["examples"].split("-"))) for e in named(first, "step")][:200]
    ranges += [tuple(map(int, e.fields["examples"].split("-"))) for e in named(second, "step")]
    assert ranges[0][0] == 0 and ranges[-1][1] == 9600
    gaps = [(end, next_start) for (_, end), (next_start, _) in zip(ranges, ranges[1:], strict=False)]
    assert all(end == next_start for end, next_start in gaps), "a gap or an overlap"
    assert {end - start_ for start_, end in ranges[200:]} == {128}
    assert (checkpoints / "TRAINING_COMPLETE").read_text() == "completed step 225, 9600 examples\n"


def test_a_loss_that_stops_being_finite_ends_the_run_before_anything_of_it_is_saved(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    run = start(
        tmp_path / "a",
        checkpoints,
        TRAIN_STEPS="20",
        GLOBAL_BATCH_SIZE="32",
        LEARNING_RATE="1e30",
        TRAINER_CHECKPOINT_EVERY_STEPS="1",
    )
    assert run.finish(timeout=DEADLINE) == 4, run.text()
    line = error_line(run)
    assert line.startswith("tpu-trainer: training diverged: the loss at step ") and line.endswith(" (exit 4)")
    diverged_at = int(line.split("the loss at step ")[1].split()[0])
    saved = sorted(int(name) for name in (p.name for p in checkpoints.iterdir()) if name.isdigit())
    # Every step before it was finite and saved; the step that was not, and nothing after it.
    assert saved and max(saved) == diverged_at - 1, (saved, diverged_at)
    assert not (checkpoints / "TRAINING_COMPLETE").exists() and not (checkpoints / "final_state.npz").exists()
    assert not named(run, "complete")
    names = [name for name in LocalStore(checkpoints).names() if not name.startswith(PROGRESS_RECORD)]
    assert sorted(names) == sorted(str(step) for step in saved)
