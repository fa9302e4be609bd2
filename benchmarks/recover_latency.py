"""How fast the recover watcher notices a preempted TPU VM, and what a round costs.

    .venv/bin/python benchmarks/recover_latency.py [--vms 64] [--interval 1.0] [--trials 5]

A loopback Cloud TPU API holds a stack's VMs, all READY, in four zones. The watcher
(`tpu-training recover`'s own loop, with `pulumi up` replaced by a recorder) runs a round every
INTERVAL seconds; the benchmark flips one node to PREEMPTED at a random moment and measures the
time until the watcher decides to run `pulumi up`. The bound is one interval plus one round.
It then counts the API calls one round makes for growing numbers of VMs: one per zone, however
many VMs. Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import yaml  # noqa: E402
from support.fakes.fake_tpu_api import FakeTpuApi  # noqa: E402
from tpu_training_components.domain.recovery_rounds import RecoveryRound, RoundOutcome  # noqa: E402
from tpu_training_components.resources.reconcile import GENERATIONS_OUTPUT  # noqa: E402

from tpu_training import project_files  # noqa: E402
from tpu_training.recovery import recovery_round, stack_probe, watch_loop  # noqa: E402
from tpu_training.recovery.automation import PendingChange, UpResult  # noqa: E402

ZONES = ("europe-west4-a", "us-central1-a", "us-central1-b", "us-central1-f")
PROJECT_ID = "tpu-training-bench"


def bench_project(folder: Path, vms: int) -> stack_probe.Target:
    """This project's Pulumi.yaml and program, with a stack of ``vms`` preemptible v3-8s."""
    shutil.copy(REPO / "Pulumi.yaml", folder)
    (folder / "infra").symlink_to(REPO / "infra")
    (folder / "trainer").symlink_to(REPO / "trainer")
    config = {
        "gcp:project": PROJECT_ID,
        "tpu-training:tpuVms": [
            {
                "name": f"vm-{index}",
                "zone": ZONES[index % len(ZONES)],
                "acceleratorType": "v3-8",
                "runtimeVersion": "tpu-vm-tf-2.16.1-pjrt",
                "provisioning": "preemptible",
                "trainCommand": "python3 train.py",
            }
            for index in range(vms)
        ],
    }
    (folder / "Pulumi.bench.yaml").write_text(yaml.safe_dump({"config": config}))
    return stack_probe.Target(project_files.load_project(folder), "bench", "bench")


class Recorder:
    """Stands in for `pulumi up`: notes when the watcher decided to run it."""

    def __init__(self) -> None:
        self.called = threading.Event()
        self.at = 0.0

    def __call__(
        self,
        stack: str,
        targets: Optional[Sequence[str]] = None,
        *,
        refresh: bool = True,
        recovery_round: Optional[RecoveryRound] = None,
    ) -> UpResult:
        self.at = time.monotonic()
        self.called.set()
        return UpResult(RoundOutcome.SUCCEEDED, "recorded", 0.0)

    def pending_changes(self, stack: str) -> list[PendingChange]:
        return []  # a deployed stack with no edit waiting

    def stack_outputs(self, stack: str) -> dict[str, Any]:
        # Every VM of any size was deployed.
        return {GENERATIONS_OUTPUT: {f"vm-{i}": 1 for i in range(100_000)}}

    def export_state(self, stack: str) -> dict[str, Any]:
        return {"version": 3, "deployment": {"resources": []}}  # nothing an interrupted update left

    def import_state(self, stack: str, state: dict[str, Any]) -> tuple[str, ...]:
        raise AssertionError("a state with nothing interrupted is never written back")

    def refresh(self, stack: str, urns: Sequence[str]) -> tuple[str, ...]:
        raise AssertionError("a state with nothing interrupted is never refreshed")


def detection(
    target: stack_probe.Target, vms: int, api: FakeTpuApi, interval: float, rng: random.Random
) -> tuple[float, float]:
    """(seconds from the preemption to the decision to run `pulumi up`, median round seconds)."""
    for zone in api.nodes.values():
        for node in zone:
            node["state"] = "READY"
    recorder = Recorder()
    rounds: list[float] = []
    rec = recovery_round.Recoverer(target, probe=stack_probe.Probe(), up=recorder, say=lambda line: None)
    stop = watch_loop.StopSignal(lambda line: None)
    watcher = threading.Thread(
        target=watch_loop.watch,
        kwargs={
            "recoverer": rec,
            "interval_seconds": interval,
            "stop": stop,
            "emit": lambda report: rounds.append(report.duration_seconds),
        },
    )
    watcher.start()
    time.sleep(interval * (1 + rng.random()))  # some moment within a later interval
    victim = f"vm-{rng.randrange(vms)}"  # one of the stack's own
    for node in api.nodes[ZONES[int(victim[3:]) % len(ZONES)]]:
        if node["name"] == victim:
            node["state"] = "PREEMPTED"
    flipped = time.monotonic()
    decided = recorder.called.wait(timeout=60)
    stop.event.set()
    watcher.join()
    if not decided:
        raise SystemExit("the watcher never decided to run `pulumi up`")
    return recorder.at - flipped, statistics.median(rounds)


def calls_per_round(target: stack_probe.Target, api: FakeTpuApi) -> int:
    before = len(api.calls)
    recovery_round.Recoverer(target, probe=stack_probe.Probe(), up=None, say=lambda line: None).run_round()
    return len(api.calls) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=64)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between rounds")
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(1)

    with FakeTpuApi() as api, tempfile.TemporaryDirectory() as scratch:
        os.environ["TPU_API_ENDPOINT"] = api.endpoint
        sizes = sorted({8, args.vms, 4 * args.vms})
        targets = {}
        for vms in sizes:
            folder = Path(scratch) / f"vms-{vms}"
            folder.mkdir()
            targets[vms] = bench_project(folder, vms)
        for index in range(max(sizes)):
            api.add(ZONES[index % len(ZONES)], f"vm-{index}", "READY", labels={"recovery-generation": "0"})

        latencies, round_times = [], []
        for _ in range(args.trials):
            latency, round_time = detection(targets[args.vms], args.vms, api, args.interval, rng)
            latencies.append(latency)
            round_times.append(round_time)
        bound = args.interval + max(round_times)
        print(
            f"detection of one preempted node among {args.vms} TPU VMs "
            f"({args.trials} trials, interval {args.interval:g} s)"
        )
        print(f"  latency: median {statistics.median(latencies):.3f} s, max {max(latencies):.3f} s")
        print(
            f"  round:   median {statistics.median(round_times):.3f} s "
            f"(config read + {len(ZONES)} list calls)"
        )
        print(
            f"  bound:   interval + one round = {bound:.3f} s -> "
            f"{'within' if max(latencies) <= bound else 'OVER'}"
        )
        print("API calls per round (one per zone, whatever the VM count):")
        for vms in sizes:
            print(f"  {vms:4d} VMs: {calls_per_round(targets[vms], api)} calls")


if __name__ == "__main__":
    main()
