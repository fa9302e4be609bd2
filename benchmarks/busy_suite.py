"""README command 2's test run on a busy machine: the suite while CPU-bound processes compete.

    .venv/bin/python benchmarks/busy_suite.py [--runs 3] [--hogs N] [--json PATH]
                                              [--smoke] [-- PYTEST ARGS ...]

A test that fails only when the machine is loaded teaches people to ignore red, so the suite must
pass with the cores taken by other work. This starts N processes that each spin on one core
(default: two per core, so each test process gets about a third of a core on its turn), then runs
`python -m pytest` (README command 2's test part; the pip install before it changes nothing here)
RUNS times in a row, and prints for each run its counts of passed / failed / skipped / errors, its
wall time and the load average at its start and end, then whether every run was green.

Exits 1 when any run was not green, so a script can use it; asserts nothing about time.
`--smoke` runs one fast test module once under one competing process: a check that the benchmark
works. Arguments after `--` go to pytest instead of its configured defaults' targets: `-- -m ""`
runs the engine tier too, which README command 2 leaves to its own command (docs/tests.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
SMOKE_TESTS = ["tests/domain/test_catalogue.py", "-n0", "-q"]
# pytest's last line: "3 failed, 3240 passed, 2 skipped in 893.10s (0:14:53)".
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")


@dataclass
class Run:
    returncode: int
    passed: int
    failed: int
    skipped: int
    errors: int
    seconds: float
    load_start: float
    load_end: float
    summary: str

    @property
    def green(self) -> bool:
        return (
            self.returncode == 0
            and self.passed > 0
            and self.failed == 0
            and self.errors == 0
            and self.skipped == 0
        )


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _spin() -> None:
    # Pure CPU, no memory or I/O: a compile, a video encode, another test suite.
    while True:
        pass


def start_hogs(count: int) -> list[multiprocessing.Process]:
    hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(count)]
    for hog in hogs:
        hog.start()
    return hogs


def stop_hogs(hogs: list[multiprocessing.Process]) -> None:
    for hog in hogs:
        hog.kill()
    for hog in hogs:
        hog.join(timeout=10)


def summary_counts(output: str) -> tuple[dict[str, int], str]:
    """The counts on pytest's last summary line, and the line itself."""
    lines = [line for line in output.splitlines() if _COUNT.search(line) and " in " in line]
    if not lines:
        return {}, "(no summary line)"
    last = lines[-1].strip("= ")
    counts: dict[str, int] = {}
    for number, word in _COUNT.findall(last):
        key = "errors" if word.startswith("error") else word
        counts[key] = counts.get(key, 0) + int(number)
    return counts, last


def run_suite(pytest_args: list[str], log: Optional[Path]) -> Run:
    load_start = os.getloadavg()[0]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_args],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    if log is not None:
        log.write_text(output)
    counts, last = summary_counts(output)
    return Run(
        returncode=done.returncode,
        passed=counts.get("passed", 0),
        failed=counts.get("failed", 0),
        skipped=counts.get("skipped", 0),
        errors=counts.get("errors", 0),
        seconds=round(seconds, 1),
        load_start=round(load_start, 1),
        load_end=round(os.getloadavg()[0], 1),
        summary=last,
    )


def failed_tests(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith(("FAILED ", "ERROR "))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="suite runs in a row (default 3)")
    parser.add_argument("--hogs", type=int, help="CPU-bound processes competing (default 2 x cores)")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    parser.add_argument("--logs", type=Path, help="keep each run's pytest output in this folder")
    parser.add_argument("--smoke", action="store_true", help="one fast module, once, one process competing")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1; got {args.runs}")
    runs = 1 if args.smoke else args.runs
    hogs = 1 if args.smoke else (args.hogs if args.hogs is not None else 2 * cores())
    if hogs < 0:
        parser.error(f"--hogs must be 0 or more; got {hogs}")
    pytest_args = args.pytest_args or (SMOKE_TESTS if args.smoke else [])
    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)

    print(f"README command 2's tests, {runs} run(s), {hogs} CPU-bound process(es) competing")
    now = datetime.datetime.now(datetime.timezone.utc)
    print(
        f"machine: {cores()} core(s), {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, {now:%Y-%m-%d %H:%M} UTC"
    )
    print(f"pytest {' '.join(pytest_args) or '(configured defaults)'}")
    results: list[Run] = []
    competing = start_hogs(hogs)
    try:
        for number in range(1, runs + 1):
            log = args.logs / f"run-{number}.log" if args.logs else None
            run = run_suite(pytest_args, log)
            results.append(run)
            minutes, seconds = divmod(int(run.seconds), 60)
            print(
                f"run {number}: {'green' if run.green else 'RED'}: {run.passed} passed, {run.failed} failed, "
                f"{run.skipped} skipped, {run.errors} errors in {minutes} min {seconds} s; "
                f"load average {run.load_start} -> {run.load_end}",
                flush=True,
            )
            if log is not None and not run.green:
                for line in failed_tests(log):
                    print(f"  {line}")
    finally:
        stop_hogs(competing)
    all_green = all(run.green for run in results)
    print(f"every run green: {'yes' if all_green else 'no'}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"cores": cores(), "hogs": hogs, "runs": [dict(asdict(r), green=r.green) for r in results]},
                indent=2,
            )
        )
    return 0 if all_green else 1


if __name__ == "__main__":
    sys.exit(main())
