"""The goodput model measured: the reference trainer under the real startup script's retry loop,
killed at a known mean rate, against the model's prediction from costs measured beforehand.

    .venv/bin/python benchmarks/goodput_measured.py [--interruptions 30] [--mean-hours 2]
        [--cost-seconds 60] [--step-seconds 0.01] [--seed 21] [--json PATH] [--smoke]
        [--figure FILE.png|FILE.svg]

Time is scaled down so it runs in minutes. A calibration comes first: what the trainer's own saves
hold training up for (C), how long after it starts a save is committed (c), the step time, and
what a restart costs (R: a kill, the retry loop noticing, a new process, imports, compile,
restore), each measured on this machine in runs of their own. A row of README's table ("a 60 s
checkpoint, interruptions 2 h apart") fixes the ratio M/C, so the scaled mean time between
interruptions is M = C x (mean hours x 3600 / cost seconds), and the scaled hour is
3600 x C / cost seconds. Each case (Young's interval sqrt(2CM), then "about every hour") is one
run of the trainer under the startup script, SIGKILLed after exponentially distributed training
time of mean M; the retry loop restarts it and it resumes from its checkpoint.

The exposure clock runs while the trainer trains (from its "resume" line to the kill), as M is
the mean time between interruptions of a running workload. The gaps are stratified draws of the
exponential distribution (every block of ``--interruptions`` gaps covers its quantiles once, in a
shuffled order), so a run of minutes sees the rate it was given, not a lucky or unlucky one.

Printed for each case: the share of wall time lost (1 - useful work / wall time, restarts
included), the model's prediction (C/T + (T/2 + c)/M + R/M) / (1 + R/M) from the calibration
(components/tpu_training_components/domain/goodput.py), Young's first order C/T + T/(2M) beside it,
and what each interruption cost on average: detection (kill to the retry loop's "failed" line),
restart (to the trainer's "resume": process, imports, compile, restore), the restore alone, and
the work redone. No figure is asserted by the tests (``--smoke`` is run by
tests/trainer/test_trainer_goodput.py for its shape only: a quarter of M's work per case and one kill
half-way through it, so its figures mean nothing).

``--figure FILE`` draws each case's run as the timeline `tpu-training status --html` draws one
(tpu_training/timeline_figure.py): its steps over time from the trainer's own lines, its committed saves,
each kill a line, shaded until the trainer's next ``resume``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
# The trainer's test harness (the real startup script around it, a checkpoint store).
sys.path.insert(0, str(REPO / "tests"))

from support.harness.sandbox import Sandbox  # noqa: E402
from tpu_training_components.domain.goodput import expected_lost_fraction  # noqa: E402
from tpu_training_components.domain.run_timeline import Interruption, RunTimeline, build  # noqa: E402

from tpu_training import timeline_figure  # noqa: E402

KILLED = "SIGKILL (a preemption)"
"""The cause of every interruption the benchmark makes."""
RESTARTED = "shaded: from each kill until the trainer's next resume (detection and restart)"
HOUR = 3600.0
DEADLINE_SECONDS = 1800.0
SMOKE_WORK = 0.25
"""``--smoke``: each case's work, as a fraction of the mean time between interruptions M (a full
run does ``--interruptions`` x M), with its one interruption half-way through: seconds, not
minutes, and still a kill, a restart and every figure."""


@dataclass
class Calibration:
    """What the trainer's parts cost on this machine, measured before the cases run: the inputs of
    the prediction, never taken from the cases it is compared with."""

    save_seconds: float
    """C: what a save holds training up for (the trainer's ``saved ... seconds``)."""
    commit_seconds: float
    """c: from a save's start until it is committed (``committed ... seconds``)."""
    step_seconds: float
    restart_seconds: float
    """R: from a kill until the trainer's next ``resume`` line."""


@dataclass
class Case:
    name: str
    interval_seconds: float
    train_steps: int
    interruptions: int = 0
    attempts: int = 0
    wall_seconds: float = 0.0
    """From the first ``resume`` to ``complete``: training, saves, redone work and restarts."""
    useful_seconds: float = 0.0
    checkpoints: int = 0
    checkpoint_seconds: float = 0.0
    redone_steps: int = 0
    detect_seconds: float = 0.0
    """Kill -> the retry loop's "attempt N failed" line, summed over interruptions."""
    restart_seconds: float = 0.0
    """That line -> the trainer's ``resume`` (a new process, imports, compile, restore), summed."""
    restore_seconds: float = 0.0
    """The restores alone (the trainer's ``restore_seconds``), summed."""
    redone_seconds: float = 0.0
    measured_lost: float = 0.0
    """1 - useful work / wall time."""
    predicted: float = 0.0
    """(C/T + (T/2 + c)/M + R/M) / (1 + R/M), from the calibration."""
    predicted_young: float = 0.0
    """Young's C/T + T/(2M): restarts and the commit lag left out."""
    mean_gap_seconds: float = 0.0


def stratified_gaps(mean: float, block: int, rng: random.Random) -> Any:
    """Exponential gaps of the given mean, each block of ``block`` covering its quantiles once."""
    while True:
        quantiles = [(index + rng.random()) / block for index in range(block)]
        rng.shuffle(quantiles)
        for quantile in quantiles:
            yield -mean * math.log(1.0 - quantile)


def smoke_gaps(first: float) -> Any:
    """``--smoke``: one interruption, ``first`` into the first attempt's training; none after."""
    yield first
    while True:
        yield math.inf


def environment(steps: int, step_seconds: float, interval: float, root: Path) -> dict[str, str]:
    return {
        "TRAIN_STEPS": str(steps),
        "GLOBAL_BATCH_SIZE": "32",
        "LEARNING_RATE": "0.01",
        "CHECKPOINT_INTERVAL_SECONDS": repr(interval),
        "TRAINER_STEP_SECONDS": repr(step_seconds),
        "TRAINER_LOG_EVERY": "1000000000",
        "TRAINER_STATE_DIR": str(root / "vm-disk"),
    }


def calibrate(root: Path, step_seconds: float, saves: int, restarts: int) -> Calibration:
    """An uninterrupted run that checkpoints every 10 steps (the save and commit times, the step
    time), then a run killed ``restarts`` times (the restart time)."""
    steps = 10 * saves
    env = {**environment(steps, step_seconds, 1e9, root), "TRAINER_CHECKPOINT_EVERY_STEPS": "10"}
    sandbox = Sandbox(root / "saves", env)
    boot = sandbox.boot()
    started: Optional[float] = None
    for event in boot.next_events(time.monotonic() + DEADLINE_SECONDS):
        if event.event == "resume":
            started = event.at
    if boot.finish(timeout=60) != 0 or started is None:
        raise SystemExit("calibration run failed:\n" + boot.text())
    saved = [e.float("seconds") for e in boot.events if e.event == "saved"]
    committed = [e.float("seconds") for e in boot.events if e.event == "committed"]
    complete = [e for e in boot.events if e.event == "complete"][0]
    step_time = (complete.at - started - sum(saved)) / steps

    # Restarts: kill the trainer a few steps after each resume; time until the next resume.
    env = {**environment(10_000_000, step_seconds, 1e9, root), "TRAINER_LOG_EVERY": "1"}
    sandbox = Sandbox(root / "restarts", env)
    boot = sandbox.boot()
    gaps: list[float] = []
    killed_at: Optional[float] = None
    for event in boot.next_events(time.monotonic() + DEADLINE_SECONDS):
        if event.event == "resume" and killed_at is not None:
            gaps.append(event.at - killed_at)
            killed_at = None
            if len(gaps) == restarts:
                sandbox.close()
                break
        elif event.event == "step" and killed_at is None and event.int("step") % 5 == 0:
            killed_at = time.monotonic()
            sandbox.kill_trainer(signal.SIGKILL)
    if len(gaps) != restarts:
        raise SystemExit("restart calibration failed:\n" + boot.text()[-4000:])
    # The mean, not the median: a process's first save costs more (Orbax sets itself up), and
    # every restart pays it again, so the mean is what a run's checkpoints cost.
    return Calibration(
        statistics.fmean(saved), statistics.fmean(committed), step_time, statistics.fmean(gaps)
    )


def run_case(
    case: Case, root: Path, step_seconds: float, calibration: Calibration, mean: float, gaps: Any
) -> tuple[Case, RunTimeline]:
    """The case run, its figures filled in, and its timeline: the trainer's lines (steps, saves)
    with each kill, until the next resume."""
    sandbox = Sandbox(root, environment(case.train_steps, step_seconds, case.interval_seconds, root))
    boot = sandbox.boot()
    deadline = time.monotonic() + DEADLINE_SECONDS
    kill_at: Optional[float] = None
    resumed_at: Optional[float] = None
    first_resume: Optional[float] = None
    kills: list[float] = []
    resumes: list[Any] = []
    drawn: list[float] = []
    while True:
        ok, event = boot.next_event(deadline if kill_at is None else min(kill_at, deadline))
        if not ok:
            if kill_at is None or time.monotonic() < kill_at:
                raise SystemExit(f"{case.name}: no progress before the deadline:\n{boot.text()[-4000:]}")
            kills.append(time.monotonic())
            sandbox.kill_trainer(signal.SIGKILL)
            case.interruptions += 1
            kill_at = resumed_at = None
            continue
        if event is None:
            break
        if event.event == "resume":
            resumed_at = event.at
            first_resume = first_resume if first_resume is not None else event.at
            resumes.append(event)
            gap = next(gaps)
            if math.isfinite(gap):
                drawn.append(gap)
            kill_at = resumed_at + gap
        elif event.event == "complete":
            assert first_resume is not None
            case.wall_seconds = event.at - first_resume
            kill_at = None
    if boot.finish(timeout=120) != 0:
        raise SystemExit(f"{case.name}: the startup script failed:\n{boot.text()[-4000:]}")

    # Per interruption: the kill, the retry loop's "attempt N failed" line, the next "resume".
    failures = [
        at for at, line in boot.timed_lines if "tpu-training[" in line and "failed with status" in line
    ]
    after = resumes[1:]
    for killed, noticed, resume in zip(kills, failures, after, strict=True):
        case.detect_seconds += noticed - killed
        case.restart_seconds += resume.at - noticed
        case.restore_seconds += resume.float("restore_seconds")
        case.redone_steps += int(resume.fields["redone_steps"])
    case.attempts = len(resumes)
    saved = [event.float("seconds") for event in boot.events if event.event == "saved"]
    case.checkpoints = len(saved)
    case.checkpoint_seconds = sum(saved)
    case.redone_seconds = case.redone_steps * calibration.step_seconds
    case.useful_seconds = case.train_steps * calibration.step_seconds
    case.measured_lost = 1.0 - case.useful_seconds / case.wall_seconds
    case.predicted = expected_lost_fraction(
        calibration.save_seconds,
        mean,
        case.interval_seconds,
        restart_seconds=calibration.restart_seconds,
        commit_lag_seconds=calibration.commit_seconds,
    )
    case.predicted_young = expected_lost_fraction(calibration.save_seconds, mean, case.interval_seconds)
    case.mean_gap_seconds = statistics.fmean(drawn) if drawn else 0.0

    # The harness timed each line on the monotonic clock: placed on the wall clock, once.
    offset = time.time() - time.monotonic()

    def wall(at: float) -> datetime:
        return datetime.fromtimestamp(at + offset, timezone.utc)

    timeline = build(case.name, [(wall(event.at), event.event, dict(event.fields)) for event in boot.events])
    # The trainer's lines alone make each kill an interruption of unknown cause at its last line;
    # the benchmark knows when it killed, and why.
    kills_drawn = tuple(
        Interruption(
            wall(killed), KILLED, resumed_at=wall(resume.at), detail=f"resumed at step {resume.int('step')}"
        )
        for killed, resume in zip(kills, after, strict=True)
    )
    return case, replace(timeline, interruptions=kills_drawn)


def per_interruption(case: Case) -> str:
    n = max(1, case.interruptions)
    return (
        f"detect {case.detect_seconds / n:.2f} s, restart {case.restart_seconds / n:.2f} s "
        f"(of which restore {case.restore_seconds / n:.3f} s), redone {case.redone_seconds / n:.2f} s "
        f"({case.redone_steps / n:.1f} steps)"
    )


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interruptions", type=int, default=30, help="interruptions aimed at per case")
    parser.add_argument(
        "--mean-hours", type=float, default=2.0, help="the table row's mean time between interruptions"
    )
    parser.add_argument("--cost-seconds", type=float, default=60.0, help="the table row's checkpoint cost")
    parser.add_argument("--step-seconds", type=float, default=0.01, help="one training step's time (scaled)")
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--figure",
        type=Path,
        metavar="FILE",
        help="draw each case's run (steps, saves, kills, restarts) as a timeline into this .png or .svg file",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="1 interruption per case, a quarter of M's work: for the tests"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.interruptions = 1
    if args.figure is not None:
        try:  # before minutes of runs, not after
            timeline_figure.figure_format(args.figure)
            timeline_figure.check_writable(args.figure)
        except timeline_figure.ReportError as exc:
            parser.error(f"--figure {exc}")

    with tempfile.TemporaryDirectory(prefix="goodput-") as scratch:
        root = Path(scratch)
        calibration = calibrate(
            root / "calibrate",
            args.step_seconds,
            saves=3 if args.smoke else 20,
            restarts=1 if args.smoke else 5,
        )
        cost, step_time = calibration.save_seconds, calibration.step_seconds
        scale = cost / args.cost_seconds
        mean = args.mean_hours * HOUR * scale
        young = math.sqrt(2 * cost * mean)
        hourly = HOUR * scale
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        print(
            f"calibration: save C = {cost:.4f} s (mean of the trainer's saves, training held up), "
            f"committed c = {calibration.commit_seconds:.4f} s after it starts, "
            f"restart R = {calibration.restart_seconds:.2f} s (kill to resume), "
            f"step {step_time * 1000:.2f} ms\n"
            f"scale {scale:.3g} ({args.cost_seconds:g} s -> C): mean time between interruptions "
            f"M = {args.mean_hours:g} h -> {mean:.3f} s, one hour -> {hourly:.3f} s"
        )
        rng = random.Random(args.seed)
        cases = []
        timelines: list[RunTimeline] = []
        for name, interval in (("young", young), ("hourly", hourly)):
            predicted = expected_lost_fraction(cost, mean, interval)
            # Enough work for about the asked number of interruptions: training time = N x M.
            useful = args.interruptions * mean * max(0.05, 1.0 - predicted)
            if args.smoke:
                useful *= SMOKE_WORK
            steps = max(20, round(useful / step_time))
            if args.smoke:
                gaps = smoke_gaps(useful / 2)
            else:
                gaps = stratified_gaps(mean, max(2, args.interruptions), rng)
            case, timeline = run_case(
                Case(name, interval, steps), root / name, args.step_seconds, calibration, mean, gaps
            )
            cases.append(case)
            timelines.append(replace(timeline, name=f"{name}: a checkpoint every {interval:.3f} s (scaled)"))
            print(
                f"\n{name}: checkpoint every {interval:.3f} s ({interval / scale / 60:.1f} min unscaled), "
                f"{case.train_steps} steps, {case.interruptions} interruptions "
                f"(mean gap drawn {case.mean_gap_seconds:.3f} s), {case.attempts} attempts\n"
                f"  wall {case.wall_seconds:.2f} s, useful work {case.useful_seconds:.2f} s\n"
                f"  checkpoints        {case.checkpoint_seconds:.2f} s ({case.checkpoints} saves)\n"
                f"  per interruption   {per_interruption(case)}\n"
                f"  measured lost, 1 - useful / wall:                  {case.measured_lost * 100:.2f}%\n"
                f"  predicted, (C/T + (T/2 + c)/M + R/M) / (1 + R/M):  {case.predicted * 100:.2f}%\n"
                f"  Young's C/T + T/(2M) (no restarts, no lag):        {case.predicted_young * 100:.2f}%"
            )
        by_name = {case.name: case for case in cases}
        y, h = by_name["young"], by_name["hourly"]
        within = abs(y.measured_lost - y.predicted) / y.predicted
        table_ratio = expected_lost_fraction(
            args.cost_seconds, args.mean_hours * HOUR, HOUR
        ) / expected_lost_fraction(
            args.cost_seconds,
            args.mean_hours * HOUR,
            math.sqrt(2 * args.cost_seconds * args.mean_hours * HOUR),
        )
        print(f"\nload average after: {os.getloadavg()[0]:.2f}")
        print("Goals (docs/trainer.md, 'The goodput model measured')")
        print(
            f"  measured within 10% of predicted at Young's interval: {'yes' if within <= 0.10 else 'no'} "
            f"({y.measured_lost * 100:.2f}% vs {y.predicted * 100:.2f}%, {within * 100:.1f}% apart, "
            f"{y.interruptions} interruptions)"
        )
        print(
            f"  Young's at least as good as hourly (the table says hourly / Young's = {table_ratio:.2f}x "
            f"without restarts): {'yes' if y.measured_lost <= h.measured_lost else 'no'} "
            f"(measured {h.measured_lost / y.measured_lost:.2f}x)"
        )
        if args.figure is not None:
            title = (
                f"Goodput measured: {args.mean_hours:g} h between interruptions, "
                f"{args.cost_seconds:g} s saves (scaled)"
            )
            try:
                timeline_figure.write_figure(args.figure, timelines, title=title, shading=RESTARTED)
            except timeline_figure.ReportError as exc:
                raise SystemExit(f"error: --figure {exc}") from None
            print(f"Timeline of the cases: {args.figure}")
        if args.json:
            args.json.write_text(
                json.dumps(
                    {
                        "calibration": asdict(calibration),
                        "scale": scale,
                        "mean_seconds": mean,
                        "within": within,
                        "table_ratio": table_ratio,
                        "cases": [asdict(case) for case in cases],
                    },
                    indent=2,
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
