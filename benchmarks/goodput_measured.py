"""The goodput model measured: the reference trainer under the real startup script's retry loop,
killed at a known mean rate, against Young's prediction for the same checkpoint cost and rate.

    .venv/bin/python benchmarks/goodput_measured.py [--interruptions 30] [--mean-hours 2]
        [--cost-seconds 60] [--step-seconds 0.01] [--seed 21] [--json PATH] [--smoke]

Time is scaled down so it runs in minutes. The checkpoint cost C is what the trainer's own saves
take on this machine (measured first); a row of README's table ("a 60 s checkpoint, interruptions
2 h apart") fixes the ratio M/C, so the scaled mean time between interruptions is
M = C x (mean hours x 3600 / cost seconds), and the scaled hour is 3600 x C / cost seconds. Each
case (Young's interval sqrt(2CM), then "about every hour") is one run of the trainer under the
startup script, SIGKILLed (the hard failure Young's model assumes) after exponentially distributed
training time of mean M; the retry loop restarts it and it resumes from its checkpoint.

The exposure clock runs while the trainer trains (from its "resume" line to the kill), as M is
the mean time between interruptions of a running workload. The gaps are stratified draws of the
exponential distribution (every block of ``--interruptions`` gaps covers its quantiles once, in a
shuffled order), so a run of minutes sees the rate it was given, not a lucky or unlucky one.

Printed for each case: measured time lost to checkpoint writes (the trainer's save times) and to
redone work (steps redone after each kill, from the trainer's log, x the step time), as a
fraction of training time, next to Young's first-order C/T + T/(2M) (components/goodput.py) and
the exact expectation for Poisson interruptions with restarts left out; also the restart time
(process start, imports, compile, restore) that the first-order model leaves out, and the direct
figure 1 - useful work / training time. No figure is asserted by the tests (``--smoke`` is run by
tests/test_trainer_goodput.py for its shape only: a quarter of M's work per case and one kill
half-way through it, so its figures mean nothing).
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
# The trainer's test harness (the real startup script around it, a checkpoint store).
sys.path.insert(0, str(REPO / "tests"))

from tpu_training_components.domain.goodput import expected_lost_fraction  # noqa: E402

from support.sandbox import Sandbox  # noqa: E402

HOUR = 3600.0
DEADLINE_SECONDS = 1800.0
SMOKE_WORK = 0.25
"""``--smoke``: each case's work, as a fraction of the mean time between interruptions M (a full
run does ``--interruptions`` x M), with its one interruption half-way through: seconds, not
minutes, and still a kill, a restart and every figure."""


@dataclass
class Case:
    name: str
    interval_seconds: float
    train_steps: int
    interruptions: int = 0
    attempts: int = 0
    wall_seconds: float = 0.0
    training_seconds: float = 0.0
    restart_seconds: float = 0.0
    checkpoint_seconds: float = 0.0
    checkpoints: int = 0
    mean_checkpoint_seconds: float = 0.0
    redone_steps: int = 0
    redone_seconds: float = 0.0
    measured_lost: float = 0.0
    direct_lost: float = 0.0
    predicted_young: float = 0.0
    predicted_exact: float = 0.0
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


def exact_lost_fraction(cost: float, mean: float, interval: float) -> float:
    """Expected fraction of training time lost with Poisson interruptions of mean ``mean``, a
    checkpoint of ``cost`` after every ``interval`` of work and instant restarts: a segment of
    interval + cost takes M (e^((T+C)/M) - 1) on average (the renewal argument)."""
    expected = mean * math.expm1((interval + cost) / mean)
    return 1.0 - interval / expected


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


def calibrate(root: Path, step_seconds: float, saves: int) -> tuple[float, float]:
    """An uninterrupted run that checkpoints every 10 steps: the mean save time and step time."""
    steps = 10 * saves
    env = {**environment(steps, step_seconds, 1e9, root), "TRAINER_CHECKPOINT_EVERY_STEPS": "10"}
    sandbox = Sandbox(root, env)
    boot = sandbox.boot()
    started: Optional[float] = None
    for event in boot.next_events(time.monotonic() + DEADLINE_SECONDS):
        if event.event == "resume":
            started = event.at
    if boot.finish(timeout=60) != 0 or started is None:
        raise SystemExit("calibration run failed:\n" + boot.text())
    saved = [e.float("seconds") for e in boot.events if e.event == "saved"]
    complete = [e for e in boot.events if e.event == "complete"][0]
    step_time = (complete.at - started - sum(saved)) / steps
    # The mean, not the median: a process's first save costs more (orbax sets itself up), and
    # every restart pays it again, so the mean is what a run's checkpoints cost.
    return statistics.fmean(saved), step_time


def run_case(case: Case, root: Path, step_seconds: float, step_time: float, mean: float, gaps: Any) -> Case:
    sandbox = Sandbox(root, environment(case.train_steps, step_seconds, case.interval_seconds, root))
    boot = sandbox.boot()
    begin = time.monotonic()
    deadline = begin + DEADLINE_SECONDS
    kill_at: Optional[float] = None
    resumed_at: Optional[float] = None
    drawn: list[float] = []
    finished = False
    while not finished:
        ok, event = boot.next_event(deadline if kill_at is None else min(kill_at, deadline))
        if not ok:
            if kill_at is None or time.monotonic() < kill_at:
                raise SystemExit(f"{case.name}: no progress before the deadline:\n{boot.text()[-4000:]}")
            sandbox.kill_trainer(signal.SIGKILL)
            case.interruptions += 1
            assert resumed_at is not None
            case.training_seconds += time.monotonic() - resumed_at
            kill_at = resumed_at = None
            continue
        if event is None:
            break
        if event.event == "resume":
            resumed_at = event.at
            gap = next(gaps)
            if math.isfinite(gap):
                drawn.append(gap)
            kill_at = resumed_at + gap
            if event.fields["redone_steps"] != "unknown":
                case.redone_steps += int(event.fields["redone_steps"])
        elif event.event == "complete":
            assert resumed_at is not None
            case.training_seconds += event.at - resumed_at
            kill_at = resumed_at = None
            finished = True
    if boot.finish(timeout=120) != 0:
        raise SystemExit(f"{case.name}: the startup script failed:\n{boot.text()[-4000:]}")
    case.wall_seconds = time.monotonic() - begin

    # Restarts: from each "training attempt N" line of the startup script to the trainer's
    # "resume" line (process start, imports, compile, restore).
    attempt_starts = [
        at for at, line in boot.timed_lines if "tpu-training[" in line and "training attempt" in line
    ]
    resumes = [event.at for event in boot.events if event.event == "resume"]
    case.attempts = len(resumes)
    case.restart_seconds = sum(r - a for a, r in zip(attempt_starts, resumes, strict=True))
    saved = [event.float("seconds") for event in boot.events if event.event == "saved"]
    case.checkpoints = len(saved)
    case.checkpoint_seconds = sum(saved)
    case.mean_checkpoint_seconds = statistics.fmean(saved) if saved else 0.0
    case.redone_seconds = case.redone_steps * step_time
    case.measured_lost = (case.checkpoint_seconds + case.redone_seconds) / case.training_seconds
    case.direct_lost = 1.0 - case.train_steps * step_time / case.training_seconds
    cost = case.mean_checkpoint_seconds
    case.predicted_young = expected_lost_fraction(cost, mean, case.interval_seconds)
    case.predicted_exact = exact_lost_fraction(cost, mean, case.interval_seconds)
    case.mean_gap_seconds = statistics.fmean(drawn) if drawn else 0.0
    return case


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
        "--smoke", action="store_true", help="1 interruption per case, a quarter of M's work: for the tests"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.interruptions = 1

    with tempfile.TemporaryDirectory(prefix="goodput-") as scratch:
        root = Path(scratch)
        cost, step_time = calibrate(root / "calibrate", args.step_seconds, saves=3 if args.smoke else 20)
        scale = cost / args.cost_seconds
        mean = args.mean_hours * HOUR * scale
        young = math.sqrt(2 * cost * mean)
        hourly = HOUR * scale
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        print(
            f"checkpoint cost C = {cost:.4f} s (mean of the trainer's saves), "
            f"step {step_time * 1000:.2f} ms; "
            f"scale {scale:.3g} ({args.cost_seconds:g} s -> C): mean time between interruptions "
            f"M = {args.mean_hours:g} h -> {mean:.3f} s, one hour -> {hourly:.3f} s"
        )
        rng = random.Random(args.seed)
        cases = []
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
            case = run_case(
                Case(name, interval, steps), root / name, args.step_seconds, step_time, mean, gaps
            )
            cases.append(case)
            print(
                f"\n{name}: checkpoint every {interval:.3f} s ({interval / scale / 60:.1f} min unscaled), "
                f"{case.train_steps} steps, {case.interruptions} interruptions "
                f"(mean gap drawn {case.mean_gap_seconds:.3f} s), {case.attempts} attempts\n"
                f"  training time {case.training_seconds:.2f} s, wall {case.wall_seconds:.2f} s\n"
                f"  checkpoint writes {case.checkpoint_seconds:.2f} s ({case.checkpoints} saves, "
                f"mean {case.mean_checkpoint_seconds:.4f} s)\n"
                f"  redone work       {case.redone_seconds:.2f} s ({case.redone_steps} steps)\n"
                f"  restarts          {case.restart_seconds:.2f} s ({case.attempts - 1} restarts, not in "
                f"Young's model: {case.restart_seconds / max(1, case.attempts - 1):.2f} s each)\n"
                f"  measured lost (writes + redone) / training time: {case.measured_lost * 100:.2f}%\n"
                f"  measured lost, direct (1 - useful / training):   {case.direct_lost * 100:.2f}%\n"
                f"  predicted, Young's first order C/T + T/(2M):     {case.predicted_young * 100:.2f}%\n"
                f"  predicted, exact for Poisson interruptions:      {case.predicted_exact * 100:.2f}%\n"
                f"  with restarts, lost / wall time:                 "
                f"{(case.wall_seconds - case.train_steps * step_time) / case.wall_seconds * 100:.2f}%"
            )
        by_name = {case.name: case for case in cases}
        y, h = by_name["young"], by_name["hourly"]
        # The goal compares the direct figure: Young's model counts as lost everything since the
        # last completed checkpoint, including a save a kill cut short and the step in progress,
        # which the breakdown (finished saves + whole steps redone) cannot see.
        within = abs(y.direct_lost - y.predicted_young) / y.predicted_young
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
            f"(direct {y.direct_lost * 100:.2f}% vs {y.predicted_young * 100:.2f}%, "
            f"{within * 100:.1f}% apart; "
            f"writes + redone {y.measured_lost * 100:.2f}%)"
        )
        print(
            f"  Young's at least as good as hourly (the table says hourly / Young's = {table_ratio:.2f}x): "
            f"{'yes' if y.direct_lost <= h.direct_lost else 'no'} "
            f"(measured {h.direct_lost / y.direct_lost:.2f}x)"
        )
        if args.json:
            args.json.write_text(
                json.dumps(
                    {
                        "cost_seconds": cost,
                        "step_seconds": step_time,
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
