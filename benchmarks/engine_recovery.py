"""Recovery with the real engine in the loop: `benchmarks/recovery_slo.py --engine`.

    bash .ci/engine
    .venv/bin/python benchmarks/recovery_slo.py --engine [--smoke] [--trials N] [--json FILE]

One stack with a TPU VM and a GKE training Job (the engine tier's stacks,
tests/support/harness/engine/stacks.py) is deployed by the real Pulumi CLI (.ci/engine) with the
provider doubles over the loopback fakes (docs/engine-tests.md). Then, ``--trials`` times per cause,
in a shuffled order: the cause is injected into the fakes (the VM PREEMPTED; the Job Failed),
`tpu-training recover --once` runs as an operator or a timer would start it, and the clock stops
when the fakes hold the recovered resource (the VM READY at a new generation; a new Job object of
the same name). Per cause: the whole recovery, the engine's targeted `pulumi up` within it, and the
rest (the command's start, reading the live state, deciding), p50 / max, in seconds.

Not in the loop: the interval of a watching recoverer (recovery_slo.py without --engine measures
detection), and what the real cloud adds (a TPU node takes minutes to create; the double's create
is immediate).
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from support.fakes.loopback_gcs import LoopbackGcs  # noqa: E402
from support.harness.engine.engine import EngineProject, endpoints, engine_version  # noqa: E402
from support.harness.engine.fakes import CloudTpuApi, KubernetesApi  # noqa: E402
from support.harness.engine.providers import KUBERNETES_API_VARIABLE  # noqa: E402
from support.harness.engine.stacks import GKE_CONFIG, TPU_VM_CONFIG, VM, ZONE  # noqa: E402
from support.harness.waiting import eventually  # noqa: E402

STACK = "bench"
NAMESPACE = "default"


class World:
    """The fakes, and how each cause is injected and its recovery seen."""

    def __init__(self, tpu: CloudTpuApi, kube: KubernetesApi) -> None:
        self.tpu, self.kube = tpu, kube

    def _job(self) -> dict[str, Any]:
        (job,) = self.kube.jobs[NAMESPACE]
        return job

    def preempt_vm(self) -> Callable[[], bool]:
        generation = self.tpu.node(ZONE, VM)["labels"]["recovery-generation"]  # type: ignore[index]
        self.tpu.set_state(ZONE, VM, "PREEMPTED")

        def recovered() -> bool:
            node = self.tpu.node(ZONE, VM)
            return bool(
                node and node["state"] == "READY" and node["labels"]["recovery-generation"] != generation
            )

        return recovered

    def fail_job(self) -> Callable[[], bool]:
        job = self._job()
        uid = job["metadata"]["uid"]
        failed = {
            "failed": 1,
            "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}],
        }
        self.kube.put("jobs", NAMESPACE, dict(job, status=failed))
        return lambda: bool(self.kube.jobs.get(NAMESPACE)) and self._job()["metadata"]["uid"] != uid


CAUSES: dict[str, Callable[[World], Callable[[], bool]]] = {
    "vm-preempted": World.preempt_vm,
    "job-failed": World.fail_job,
}


def quantiles(values: list[float]) -> Optional[dict[str, float]]:
    if not values:
        return None
    return {"p50": round(statistics.median(values), 2), "max": round(max(values), 2)}


def run(trials: int, json_path: Optional[Path]) -> None:
    version = engine_version()
    if version is None:
        raise SystemExit("the Pulumi engine is not built here: run `bash .ci/engine` first")
    figures: dict[str, dict[str, list[float]]] = {c: {"total": [], "up": [], "rest": []} for c in CAUSES}
    with (
        CloudTpuApi() as tpu,
        LoopbackGcs() as storage,
        KubernetesApi() as kube,
        tempfile.TemporaryDirectory() as scratch,
    ):
        folder = Path(scratch)
        project = EngineProject(
            folder,
            {
                **endpoints(tpu, storage),
                KUBERNETES_API_VARIABLE: kube.endpoint,
                "KUBECONFIG": str(kube.kubeconfig(folder)),
            },
        )
        project.init(
            STACK, {**GKE_CONFIG, **{k: v for k, v in TPU_VM_CONFIG.items() if k.endswith("tpuVms")}}
        )
        project.deploy(STACK)
        world = World(tpu, kube)
        order = [cause for cause in CAUSES for _ in range(trials)]
        random.Random(34).shuffle(order)
        for cause in order:
            recovered = CAUSES[cause](world)
            started = time.monotonic()
            done = project.recover(STACK, "--once")
            if done.returncode != 0 or not eventually(recovered, 60):
                raise SystemExit(f"{cause}: not recovered (exit {done.returncode}):\n{done.stderr[-3000:]}")
            total = time.monotonic() - started
            (round_,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            up = float(round_["up"]["durationSeconds"])
            figures[cause]["total"].append(total)
            figures[cause]["up"].append(up)
            figures[cause]["rest"].append(total - up)

    results = {
        cause: {key: quantiles(values) for key, values in each.items()} for cause, each in figures.items()
    }
    print(f"Recovery with the real engine (Pulumi {version}; {trials} trial(s) per cause; seconds)")
    print(f"{'cause':<14} {'total p50':>9} {'max':>7}  {'up p50':>7} {'max':>7}  {'rest p50':>8} {'max':>7}")
    for cause, row in results.items():
        cells = [row[key] or {"p50": float("nan"), "max": float("nan")} for key in ("total", "up", "rest")]
        print(
            f"{cause:<14} {cells[0]['p50']:9.2f} {cells[0]['max']:7.2f}  {cells[1]['p50']:7.2f} "
            f"{cells[1]['max']:7.2f}  {cells[2]['p50']:8.2f} {cells[2]['max']:7.2f}"
        )
    print("(total: the fault injected -> the fakes hold the recovered resource; up: the engine's targeted")
    print(" `pulumi up` within it; rest: the recover command's start, its live read and its decision)")
    if json_path is not None:
        json_path.write_text(json.dumps({"engine": version, "trials": trials, "causes": results}, indent=1))
