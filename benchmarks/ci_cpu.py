"""Where a CI run's CPU goes: `CI=true bash .ci/run` on a fresh clone, with the kernel's process
accounting on, and its CPU-seconds split between the engine's Go build and each step of .ci/run.

    sudo .venv/bin/python benchmarks/ci_cpu.py [--cold] [--json PATH] [--keep DIR]
    .venv/bin/python benchmarks/ci_cpu.py --analyse DUMP --log LOG --started EPOCH [--json PATH]

CI must finish within 30 minutes on a 2-core machine with a cold Go cache (issue 49): 3,600
CPU-seconds at the very most, with both cores busy throughout. .ci/run builds the engine in the
background while README command 1, lint, types and README command 2 use the cores, so wall
times alone cannot say what each part costs. BSD process accounting can: the kernel writes one
record per process as it exits, with its user and system time (every thread of it) and its start.
A Go toolchain process (compile, link, asm, go, cgo, vet) belongs to the engine's build whenever it
ran; every other process belongs to the step of .ci/run it started in (its `== STEP (at N s)`
lines). Prints each step's start, wall time and CPU-seconds, the build's CPU-seconds and when
its last process ended, and the whole run's CPU-seconds against what 30 minutes on the
machine's cores could give.

`--cold` gives the run empty Go module and build caches of its own (a fresh machine's); without it
the run uses this machine's. Clones this repository's HEAD into a temporary folder (`--keep DIR`
clones there and leaves it). Needs root, for accton, and the `acct` package's accton and dump-acct
(Debian: apt-get install acct). `--analyse` reads a run made by hand instead, and needs neither:
`accton PACCT; date +%s; CI=true bash .ci/run >LOG 2>&1; accton off; dump-acct PACCT >DUMP`, the
number `date` printed being EPOCH. Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
# The processes of `go build` and `go mod`: the engine's build, whichever step was running.
GO_TOOLS = frozenset({"go", "compile", "link", "asm", "cgo", "vet", "buildid"})
BUILD = "the engine's Go build"
BEFORE_STEPS = "before the first step"
# The kernel's accounting clock, AHZ in include/uapi/linux/acct.h: 100 ticks a second for the v3
# records Linux writes (checked against /proc/stat's own totals for the same run).
TICKS_PER_SECOND = 100
CI_MINUTES = 30
# .ci/run's step headings: "== lint (at 161 s)".
_STEP = re.compile(r"^== (?P<name>.+) \(at (?P<at>\d+) s\)$")


@dataclass(frozen=True)
class Process:
    command: str
    cpu_seconds: float  # user + system, every thread of it
    started: float  # seconds since the epoch, to the second
    elapsed: float


@dataclass(frozen=True)
class Step:
    name: str
    at: int  # seconds after .ci/run started


@dataclass
class Share:
    name: str
    started: Optional[int]
    wall: Optional[int]
    cpu_seconds: float
    processes: int


def parse_accounting(text: str) -> list[Process]:
    """dump-acct's lines: command | version | user | system | elapsed (ticks) | uid | gid |
    memory | io | pid | ppid | flags | exit code | tty | start, as "Thu Dec  3 19:21:24 2026" in
    local time."""
    processes = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split("|")]
        if len(fields) < 6:
            raise ValueError(f"line {number} has {len(fields)} fields, not 15: {line!r}")
        try:
            user, system, elapsed = (float(value) / TICKS_PER_SECOND for value in fields[2:5])
            started = time.mktime(time.strptime(fields[-1], "%a %b %d %H:%M:%S %Y"))
        except ValueError as err:
            raise ValueError(f"line {number}: {err}: {line!r}") from None
        processes.append(Process(fields[0], user + system, started, elapsed))
    return processes


def parse_steps(log: str) -> list[Step]:
    """The `== STEP (at N s)` headings .ci/run's log has, in order."""
    steps = []
    for line in log.splitlines():
        match = _STEP.match(line)
        if match:
            steps.append(Step(match["name"], int(match["at"])))
    return steps


def attribute(processes: list[Process], steps: list[Step], started: float) -> tuple[list[Share], float]:
    """Each step's share and the build's (the last share), and when the build's last process
    ended, in seconds after `started`."""
    ends = [step.at for step in steps[1:]] + [None]
    shares = [Share(BEFORE_STEPS, None, None, 0.0, 0)]
    shares += [
        Share(step.name, step.at, None if end is None else end - step.at, 0.0, 0)
        for step, end in zip(steps, ends, strict=True)
    ]
    build = Share(BUILD, None, None, 0.0, 0)
    build_end = 0.0
    for process in processes:
        offset = process.started - started
        if process.command in GO_TOOLS:
            share = build
            build_end = max(build_end, offset + process.elapsed)
        else:
            # The last step that had started by then; the start times are whole seconds.
            index = sum(1 for step in steps if step.at <= offset)
            share = shares[index]
        share.cpu_seconds += process.cpu_seconds
        share.processes += 1
    return [share for share in shares if share.processes or share.name != BEFORE_STEPS] + [build], build_end


def report(shares: list[Share], build_end: float, wall: float, cores: int) -> str:
    total = sum(share.cpu_seconds for share in shares)
    budget = CI_MINUTES * 60 * cores
    width = max(len(share.name) for share in shares)
    lines = [f"{'':{width}}  {'start':>7}  {'wall':>7}  {'CPU-s':>7}  processes"]
    for share in shares:
        start = "" if share.started is None else f"{share.started} s"
        span = "" if share.wall is None else f"{share.wall} s"
        if share.name == BUILD:
            span = f"to {build_end:.0f} s"
        lines.append(
            f"{share.name:{width}}  {start:>7}  {span:>7}  {share.cpu_seconds:7.0f}  {share.processes}"
        )
    lines.append(
        f"all: {total:.0f} CPU-s in {wall:.0f} s, {total / wall:.2f} of {cores} cores busy; "
        f"{CI_MINUTES} minutes on {cores} cores give {budget} CPU-s at most"
    )
    return "\n".join(lines)


def run_ci(clone: Path, scratch: Path, cold: bool) -> tuple[int, str, float, float]:
    """Clones HEAD into CLONE and runs `CI=true bash .ci/run` there with accounting on, into
    SCRATCH/pacct (and with --cold, Go caches in SCRATCH): its exit status, its log, when it
    started and its wall time."""
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    env = dict(os.environ, CI="true")
    if cold:
        env["GOMODCACHE"] = str(scratch / "go-mod")
        env["GOCACHE"] = str(scratch / "go-build")
    accounting = scratch / "pacct"
    accounting.touch()
    subprocess.run(["accton", str(accounting)], check=True, capture_output=True)
    try:
        started = time.time()
        done = subprocess.run(
            ["bash", ".ci/run"],
            cwd=clone,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wall = time.time() - started
    finally:
        subprocess.run(["accton", "off"], check=True, capture_output=True)
    return done.returncode, done.stdout, started, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", action="store_true", help="empty Go module and build caches for the run")
    parser.add_argument("--keep", type=Path, help="clone into this (new) folder and leave it")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    parser.add_argument("--analyse", type=Path, metavar="DUMP", help="dump-acct's output for a run to read")
    parser.add_argument("--log", type=Path, help="with --analyse: .ci/run's log")
    parser.add_argument(
        "--started", type=float, help="with --analyse: when .ci/run started (seconds since 1970)"
    )
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    if args.analyse:
        if args.log is None or args.started is None:
            parser.error("--analyse needs --log LOG and --started EPOCH too")
        for path in (args.analyse, args.log):
            if not path.is_file():
                parser.error(f"{path}: no such file")
        dump, log, started = args.analyse.read_text(), args.log.read_text(), args.started
        returncode, wall = None, None
    else:
        if os.geteuid() != 0:
            parser.error("a run needs root, for accton (process accounting); or use --analyse")
        missing = [tool for tool in ("accton", "dump-acct") if shutil.which(tool) is None]
        if missing:
            parser.error(
                f"{' and '.join(missing)} not found: the acct package has them (apt-get install acct)"
            )
        if args.keep and args.keep.exists():
            parser.error(f"--keep {args.keep}: already exists; name a new folder")
        with tempfile.TemporaryDirectory(prefix="ci-cpu-") as scratch:
            clone = args.keep or Path(scratch) / "clone"
            commit = subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
            ).stdout
            now = datetime.datetime.now(datetime.timezone.utc)
            caches = "cold" if args.cold else "as they are"
            print(f"CI=true bash .ci/run on a fresh clone of {commit.strip()}, Go caches {caches}")
            print(f"machine: {cores} core(s), {platform.machine()}, {now:%Y-%m-%d %H:%M} UTC", flush=True)
            returncode, log, started, wall = run_ci(clone, Path(scratch), args.cold)
            dump = subprocess.run(
                ["dump-acct", str(Path(scratch) / "pacct")], capture_output=True, text=True, check=True
            ).stdout
            if args.cold:
                # The module cache is written read-only; let the temporary folder go.
                subprocess.run(["chmod", "-R", "u+w", scratch], check=False)
    steps = parse_steps(log)
    if not steps:
        print("error: the log has no `== STEP (at N s)` lines of .ci/run", file=sys.stderr)
        return 1
    try:
        processes = parse_accounting(dump)
    except ValueError as err:
        print(f"error: dump-acct's output cannot be read: {err}", file=sys.stderr)
        return 1
    shares, build_end = attribute(processes, steps, started)
    if wall is None:
        wall = float(steps[-1].at)
    print(report(shares, build_end, wall, cores))
    if returncode is not None:
        print(f".ci/run exited {returncode} after {int(wall) // 60} min {int(wall) % 60} s")
    if args.json:
        figures = {
            "cores": cores,
            "wall": round(wall),
            "returncode": returncode,
            "buildEnded": round(build_end),
            "shares": [asdict(share) for share in shares],
        }
        args.json.write_text(json.dumps(figures, indent=2))
    return 0 if returncode in (0, None) else 1


if __name__ == "__main__":
    sys.exit(main())
