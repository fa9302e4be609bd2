"""How long the offline plan takes, against what it cannot go below and against xpk's dry-run.

    .venv/bin/python benchmarks/plan_speed.py [--rounds 7] [--sizes 16,64,128,256] [--xpk PATH]
                                              [--smoke] [--json PATH]

Every measured run is a fresh process, as a user runs it (`tpu-training plan --stack S`,
output to /dev/null). A round runs every case once, in a shuffled order; the figures are the
medians over the rounds, each case's first run (which checks that it works) not counted. Peak
memory is each run's own maximum resident set (`os.wait4`), not the children's total.

- P1: the dev plan against its import floor (a process that imports exactly the modules the dev
  plan loads, listed by a plan run, with the collector off and the same exit as the plan),
  the part of that floor the Pulumi SDK and providers make up alone, and, when xpk is installed
  (`--xpk PATH`, or on PATH), `xpk cluster create --tpu-type=v6e-16 --flex --dry-run`, which only
  prints commands.
- P2: generated stacks of N TPU VMs (four zones, three regions) with N/4 flex-start node pools
  and N/4 Jobs (four namespaces), each against the dev plan, and the cost of each added resource.
- P3: the largest stack planned with --live against loopback fakes of the Cloud TPU and
  Kubernetes APIs: the calls it makes (one per zone; per namespace one for its Jobs and, as its
  Jobs train, one for their Pods, which recovery's hang check reads) for every size.

Prints numbers and whether the goals in docs/plan-speed.md are met; asserts nothing about time.
`--smoke` runs the smallest case once, without xpk: a check that the benchmark works.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests")]  # the loopback fakes the tests use

from support.fakes.fake_kube_api import FakeKubernetesApi, job, pod  # noqa: E402
from support.fakes.fake_tpu_api import FakeTpuApi  # noqa: E402
from tpu_training_components.domain import catalogue, tpu_availability  # noqa: E402

# (zone, accelerator type, provisioning) for VM i: four zones in three regions, each a zone our
# availability table lists for the generation (checked in `_vm_shapes`).
VM_SHAPES = (
    ("europe-west4-a", "v3-8", "preemptible"),
    ("us-central1-a", "v5litepod-8", "spot"),
    ("us-central1-b", "v6e-8", "spot"),
    ("us-east5-b", "v6e-8", "spot"),
)
CLUSTER_REGION = "us-east5"
# (machine type, topology, zone) for pool i: single- and multi-host v6e flex-start slices in the
# zones Google lists for v6e flex-start.
POOL_SHAPES = (
    ("ct6e-standard-4t", "2x2", "us-east5-a"),
    ("ct6e-standard-4t", "4x4", "us-east5-b"),
)
NAMESPACES = ("default", "research", "team-a", "team-b")
SDK_PACKAGES = ("pulumi", "pulumi_gcp", "pulumi_kubernetes")
"""The Pulumi SDK and providers: their part of the floor is what no change to this project's code
can take away."""
CLIENT_LIBRARIES = ("google.cloud.tpu", "google.cloud.container", "kubernetes")
"""What the live probes import; an offline plan reads no live state and needs none of them."""

XPK_ARGS = (
    "cluster create --dry-run --project=tpu-training-dev --zone=europe-west4-a --cluster=tpu-dev "
    "--tpu-type=v6e-16 --flex"
).split()
"""As tests/fixtures/xpk-1.16.0/cluster-create-v6e-16-flex.txt recorded it."""

# Runs the plan as `tpu-training plan` does, and writes the modules it loaded when it exits
# (at exit, whichever way the plan ends): each module once, by the first name it was loaded
# under, but `__main__` (tpu_training/__main__.py, the CLI's entry).
DUMP_MODULES = """\
import atexit, json, runpy, sys
target, args = sys.argv[1], sys.argv[2:]
def dump():
    names, seen = [], set()
    for name, module in list(sys.modules.items()):
        if module is not None and id(module) not in seen:
            seen.add(id(module))
            if name != "__main__":  # the CLI's entry, which runs the command when imported
                names.append(name)
    with open(target, "w") as file:
        json.dump(names, file)
atexit.register(dump)
sys.argv = ["tpu-training", "plan", *args]
runpy.run_module("tpu_training", run_name="__main__", alter_sys=True)
"""

# The floor: a fresh interpreter, the collector off (as the plan has it), every module the plan
# loaded imported in the order it loaded them (the program folder on the path, as the plan puts
# it), then the plan's own exit (tpu_training.command_line.exit_quickly). Names that cannot be
# imported by name are counted.
IMPORT_FLOOR = """\
import gc
gc.disable()
import importlib, json, sys
sys.path.append(sys.argv[2])
missed = 0
for name in json.load(open(sys.argv[1])):
    if name not in sys.modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missed += 1
sys.stderr.write(f"not importable by name: {missed}\\n")
gc.freeze()
sys.exit(0)
"""


class BenchmarkError(Exception):
    """A case did not run as it should: no figure is worth printing."""


@dataclass
class Case:
    key: str
    label: str
    argv: list[str]
    cwd: Path
    env: dict[str, str]
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)
    peaks_kib: list[int] = field(default_factory=list)
    resources: Optional[int] = None

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpu_seconds)

    @property
    def peak_mib(self) -> float:
        return statistics.median(self.peaks_kib) / 1024


@dataclass(frozen=True)
class StackSize:
    vms: int

    @property
    def pools(self) -> int:
        return self.vms // 4

    @property
    def jobs(self) -> int:
        return self.vms // 4

    @property
    def stack(self) -> str:
        return f"bench-{self.vms}"

    @property
    def label(self) -> str:
        return f"{self.vms} VMs, {self.pools} pools, {self.jobs} Jobs"


# ---------------------------------------------------------------------------------------------
# Generated stacks
# ---------------------------------------------------------------------------------------------


def _vm_shapes() -> tuple[tuple[str, str, str], ...]:
    for zone, accelerator, _ in VM_SHAPES:
        warning = tpu_availability.zone_warning(catalogue.accelerator_type(accelerator).generation, zone)
        if warning:
            raise BenchmarkError(f"VM_SHAPES: {accelerator} in {zone}: {warning}")
    return VM_SHAPES


def stack_config(size: StackSize) -> dict[str, Any]:
    """A valid stack (README "Configuration") of ``size``: VMs round-robin over VM_SHAPES, pools
    over POOL_SHAPES, one Job on each pool, Jobs round-robin over NAMESPACES."""
    shapes = _vm_shapes()
    pools = [
        {
            "name": f"pool-{index:03d}",
            "machineType": machine_type,
            "topology": topology,
            "nodeLocations": [zone],
        }
        for index, (machine_type, topology, zone) in (
            (i, POOL_SHAPES[i % len(POOL_SHAPES)]) for i in range(size.pools)
        )
    ]
    return {
        "gcp:project": "tpu-training-bench",
        "tpu-training:labels": {"team": "ml-platform"},
        "tpu-training:tpuVms": [
            {
                "name": f"vm-{index:03d}",
                "zone": zone,
                "acceleratorType": accelerator,
                "runtimeVersion": "tpu-vm-tf-2.16.1-pjrt",
                "provisioning": provisioning,
                "trainCommand": "python3 /opt/train.py",
            }
            for index, (zone, accelerator, provisioning) in (
                (i, shapes[i % len(shapes)]) for i in range(size.vms)
            )
        ],
        "tpu-training:training": {
            "perCoreBatchSize": 128,
            "totalExamples": 100000,
            "baseLearningRate": 0.1,
            "learningRateScaling": "linear",
        },
        "tpu-training:checkpointing": {"costSeconds": 60},
        "tpu-training:cluster": {"name": "tpu-bench", "location": CLUSTER_REGION},
        "tpu-training:nodePools": pools,
        "tpu-training:jobs": [
            {
                "name": f"train-{index:03d}",
                "nodePool": pool["name"],
                "namespace": NAMESPACES[index % len(NAMESPACES)],
                "image": "us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:latest",
                "command": ["python3", "/opt/train.py"],
            }
            for index, pool in enumerate(pools)
        ],
    }


_PLAIN = re.compile(r"[a-z][a-z0-9./:-]*")
_NOT_PLAIN = {"true", "false", "null", "yes", "no", "on", "off", "y", "n"}


def _scalar(value: Any) -> str:
    if value == {} or value == []:
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if _PLAIN.fullmatch(value) and value not in _NOT_PLAIN and ": " not in value:
        return value
    return json.dumps(value)  # a double-quoted scalar, the same in YAML


def to_yaml(value: Any, indent: str = "") -> list[str]:
    """Block-style YAML, as people write stack files (only what `stack_config` produces)."""
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{indent}{key}:")
                lines.extend(to_yaml(item, indent + "  "))
            else:
                lines.append(f"{indent}{key}: {_scalar(item)}")
    else:
        for item in value:
            if isinstance(item, dict):
                first, *rest = to_yaml(item, indent + "  ")
                lines.append(f"{indent}- {first.lstrip()}")
                lines.extend(rest)
            else:
                lines.append(f"{indent}- {_scalar(item)}")
    return lines


def scratch_project(folder: Path, sizes: list[StackSize]) -> None:
    """This project's Pulumi.yaml, dev stack and program, and a stack file per size: the plan
    finds Pulumi.yaml from its working directory, as the CLI does."""
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml"):
        shutil.copy(REPO / name, folder / name)
    (folder / "infra").symlink_to(REPO / "infra", target_is_directory=True)
    (folder / "trainer").symlink_to(REPO / "trainer", target_is_directory=True)
    for size in sizes:
        text = "\n".join(to_yaml({"config": stack_config(size)})) + "\n"
        (folder / f"Pulumi.{size.stack}.yaml").write_text(text)


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------


def run(case: Case, *, record: bool, capture: bool = True) -> tuple[str, str]:
    """One run of a case, which must succeed: (stdout, stderr), or ("", "") when not
    ``capture``d (output to /dev/null). ``record``: keep its wall time, from start to reaping,
    and the process's own peak RSS."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(
            case.argv,
            cwd=case.cwd,
            env=case.env,
            stdin=subprocess.DEVNULL,
            stdout=out if capture else subprocess.DEVNULL,
            stderr=err if capture else subprocess.DEVNULL,
        )
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if process.returncode != 0:
        tail = "\n".join((stderr or stdout).strip().splitlines()[-5:])
        raise BenchmarkError(f"{case.label}: exit status {process.returncode}\n{tail}")
    if record:
        case.seconds.append(elapsed)
        case.cpu_seconds.append(usage.ru_utime + usage.ru_stime)
        case.peaks_kib.append(usage.ru_maxrss)  # KiB on Linux
    return stdout, stderr


_RESOURCES = re.compile(r"^Stack \S+: (\d+) resources\b", re.MULTILINE)


def resources_in(case: Case, output: str, *, warnings_allowed: bool) -> int:
    match = _RESOURCES.search(output)
    if match is None:
        raise BenchmarkError(f"{case.label}: the plan printed no resource count")
    warnings = [line for line in output.splitlines() if line.startswith("warning:")]
    if warnings and not warnings_allowed:
        raise BenchmarkError(f"{case.label}: the generated stack is not clean: {warnings[0]}")
    return int(match.group(1))


def import_case(
    key: str, label: str, modules: list[str], modules_file: Path, folder: Path, env: dict[str, str]
) -> Case:
    """A process that only imports ``modules``, listed in ``modules_file`` (see IMPORT_FLOOR)."""
    return Case(
        key,
        f"{label} ({len(modules)} modules)",
        [sys.executable, "-c", IMPORT_FLOOR, str(modules_file), str(folder / "infra")],
        folder,
        env,
    )


def plan_case(key: str, label: str, stack: str, folder: Path, env: dict[str, str], *extra: str) -> Case:
    return Case(
        key, label, [sys.executable, "-m", "tpu_training", "plan", "--stack", stack, *extra], folder, env
    )


def find_xpk(given: Optional[str]) -> Optional[str]:
    if given:
        if not shutil.which(given):
            raise BenchmarkError(f"--xpk {given}: not an executable")
        return given
    return shutil.which("xpk")


class LiveApis:
    """Loopback Cloud TPU and Kubernetes APIs holding every VM (READY) and Job (running) of the
    largest stack, so a --live plan decides `keep` for each after one call per zone and two per
    namespace (its Jobs, then the Pods of those that train)."""

    def __init__(self, folder: Path, largest: StackSize) -> None:
        self.tpu = FakeTpuApi()
        self.kube = FakeKubernetesApi()
        config = stack_config(largest)
        for vm in config["tpu-training:tpuVms"]:
            self.tpu.add(vm["zone"], vm["name"], "READY", labels={"recovery-generation": "0"})
        for entry in config["tpu-training:jobs"]:
            self.kube.add(entry["namespace"], job(entry["name"], active=4, ready=4))
            self.kube.add_pod(entry["namespace"], pod(entry["name"], "2026-11-26T00:00:00Z"))
        self.kubeconfig = self.kube.kubeconfig(folder)

    def __enter__(self) -> LiveApis:
        self.tpu.__enter__()
        self.kube.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kube.__exit__(*exc)
        self.tpu.__exit__(*exc)

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return dict(base, TPU_API_ENDPOINT=self.tpu.endpoint, KUBECONFIG=str(self.kubeconfig))

    def calls(self) -> tuple[int, int]:
        return len(self.tpu.calls), len(self.kube.calls)


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


def _proc_field(path: str, pattern: str) -> Optional[str]:
    try:
        found = re.search(pattern, Path(path).read_text(), re.MULTILINE)
    except OSError:
        return None
    return found.group(1) if found else None


def machine() -> str:
    model = _proc_field("/proc/cpuinfo", r"^model name\s*:\s*(.+)$") or platform.machine()
    kib = _proc_field("/proc/meminfo", r"^MemTotal:\s*(\d+) kB")
    memory = f", {int(kib) / 1024**2:.0f} GiB" if kib else ""
    return f"{os.cpu_count()} CPUs ({model}){memory}, {platform.system()}, Python {platform.python_version()}"


def row(label: str, case: Case, dev: Case, extra: str = "") -> str:
    return (
        f"  {label:<44} {case.median:7.3f} {case.median / dev.median:6.2f}x {case.cpu:7.3f}"
        f" {case.cpu / dev.cpu:6.2f}x {case.peak_mib:8.1f}{'  ' + extra if extra else ''}"
    )


HEADER = f"  {'case':<44} {'wall s':>7} {'x dev':>7} {'CPU s':>7} {'x dev':>7} {'peak MiB':>8}"


def goal_line(goal: str, figure: Optional[float], limit: float) -> tuple[str, dict[str, Any]]:
    if figure is None:
        return f"  [n/a] {goal}: not measured", {"goal": goal, "reached": None, "ratio": None}
    reached = figure <= limit
    return (
        f"  [{'yes' if reached else 'NO '}] {goal}: {figure:.2f}x",
        {"goal": goal, "reached": reached, "ratio": round(figure, 4)},
    )


# ---------------------------------------------------------------------------------------------


def parse_sizes(text: str) -> list[StackSize]:
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give VM counts such as 16,64,128,256") from None
    if not counts or any(count < 4 or count % 4 for count in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: each VM count is a multiple of 4, at least 4")
    return [StackSize(count) for count in counts]


@dataclass
class Measured:
    dev: Case
    floor: Case
    floor_note: str
    sdk_floor: Case
    modules: list[str]
    xpk: Optional[Case]
    xpk_version: Optional[str]
    generated: list[Case]
    live: Case
    calls: list[tuple[StackSize, int, int, int, int]]
    """(size, TPU API calls, Kubernetes API calls, zones, namespaces) of one --live plan each."""

    @property
    def client_libraries(self) -> list[str]:
        """The modules of CLIENT_LIBRARIES among those the dev plan loaded."""
        return [
            name
            for name in self.modules
            if name.startswith(CLIENT_LIBRARIES[:2]) or name.split(".")[0] == "kubernetes"
        ]

    @property
    def cases(self) -> list[Case]:
        return [
            self.dev,
            self.floor,
            self.sdk_floor,
            *([self.xpk] if self.xpk else []),
            *self.generated,
            self.live,
        ]


def _zones_and_namespaces(size: StackSize) -> tuple[int, int]:
    return len({shape[0] for shape in VM_SHAPES[: size.vms]}), len(NAMESPACES[: size.jobs])


def _expected_calls(size: StackSize) -> tuple[int, int]:
    """TPU API calls (one per zone) and Kubernetes API calls (per namespace: its Jobs, then its
    Pods, as every Job of these stacks trains and so has its progress judged)."""
    zones, namespaces = _zones_and_namespaces(size)
    return zones, 2 * namespaces


def measure(folder: Path, sizes: list[StackSize], xpk: Optional[str], rounds: int, smoke: bool) -> Measured:
    """Check every case once, then time ``rounds`` interleaved rounds. With ``smoke``, the checking
    runs are the only samples (and the dev plan gets one of its own)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("TPU_API_ENDPOINT", "GKE_API_ENDPOINT", "KUBECONFIG")
    }
    scratch_project(folder, sizes)

    # The dev plan's modules, from a run of the plan itself (which also checks it).
    modules_file = folder / "plan-modules.json"
    listing = Case(
        "list", "dev plan (listing its modules)", [sys.executable, "-c", DUMP_MODULES], folder, env
    )
    listing.argv += [str(modules_file), "--stack", "dev"]
    dev = plan_case("dev", "dev plan", "dev", folder, env)
    dev.resources = resources_in(dev, run(listing, record=False)[0], warnings_allowed=True)
    modules = json.loads(modules_file.read_text())
    floor = import_case("floor", "import floor", modules, modules_file, folder, env)
    floor_note = run(floor, record=smoke)[1].strip()
    sdk_modules_file = folder / "sdk-modules.json"
    sdk_modules = [name for name in modules if name.split(".")[0] in SDK_PACKAGES]
    sdk_modules_file.write_text(json.dumps(sdk_modules))
    sdk_floor = import_case("sdk-floor", "  of which the SDK's", sdk_modules, sdk_modules_file, folder, env)
    run(sdk_floor, record=smoke)

    xpk_case, xpk_version = None, None
    if xpk:
        home = folder / "xpk-home"  # xpk writes ~/.config/xpk/config.yaml: here, not the user's
        home.mkdir()
        xpk_env = dict(env, TELEMETRY_ENABLED="false", HOME=str(home))
        xpk_case = Case("xpk", "xpk dry-run", [xpk, *XPK_ARGS], folder, xpk_env)
        found = re.search(r"Starting xpk v(\S+)", run(xpk_case, record=smoke)[0])
        xpk_version = found.group(1) if found else "unknown"
        xpk_case.label = f"xpk {xpk_version} dry-run"

    generated = []
    for size in sizes:
        case = plan_case(f"vms-{size.vms}", size.label, size.stack, folder, env)
        case.resources = resources_in(case, run(case, record=smoke)[0], warnings_allowed=False)
        generated.append(case)

    largest = sizes[-1]
    with LiveApis(folder, largest) as apis:
        # A live run must never find real credentials: it talks to the loopback fakes only.
        live_env = apis.env(
            dict(env, NO_GCE_CHECK="True", GOOGLE_APPLICATION_CREDENTIALS=str(folder / "no-credentials.json"))
        )
        live = plan_case("live", f"{largest.label}, --live", largest.stack, folder, live_env, "--live")
        calls = []
        for size in sizes:
            before = apis.calls()
            if size == largest:
                run(live, record=smoke)
            else:
                run(plan_case("live", "", size.stack, folder, live_env, "--live"), record=False)
            tpu_calls, kube_calls = (now - then for now, then in zip(apis.calls(), before, strict=True))
            calls.append((size, tpu_calls, kube_calls, *_zones_and_namespaces(size)))

        measured = Measured(
            dev, floor, floor_note, sdk_floor, modules, xpk_case, xpk_version, generated, live, calls
        )
        order = random.Random(12)
        for _ in range(0 if smoke else rounds):
            for case in order.sample(measured.cases, len(measured.cases)):
                before = apis.calls()
                run(case, record=True, capture=False)
                made = tuple(now - then for now, then in zip(apis.calls(), before, strict=True))
                if case is live and made != _expected_calls(largest):
                    raise BenchmarkError(f"{live.label}: made {made} calls in a timed run")
        if smoke:
            run(dev, record=True, capture=False)
    return measured


def report(measured: Measured, largest: StackSize) -> list[dict[str, Any]]:
    """Print the tables and the goals; the goals as JSON-ready entries."""
    dev, floor, xpk = measured.dev, measured.floor, measured.xpk
    print("P1  the dev plan, its import floor and xpk's dry-run")
    print(HEADER)
    print(row(f"dev plan ({dev.resources} resources)", dev, dev))
    print(row(floor.label, floor, dev, f"collector off, the plan's exit; {measured.floor_note}"))
    sdk = measured.sdk_floor
    print(row(sdk.label, sdk, dev, f"{', '.join(SDK_PACKAGES)} and what they import"))
    if xpk:
        print(row(xpk.label, xpk, dev, "cluster create --tpu-type=v6e-16 --flex"))
    else:
        print("  xpk dry-run: skipped, xpk is not installed (pip install xpk==1.16.0, or --xpk PATH)")
    against = f"  dev plan / import floor = {dev.median / floor.median:.2f}x (CPU {dev.cpu / floor.cpu:.2f}x)"
    if xpk:
        against += f"; dev plan / xpk dry-run = {dev.median / xpk.median:.2f}x (CPU {dev.cpu / xpk.cpu:.2f}x)"
    print(against)
    if xpk:
        print(
            f"  the SDK's imports alone / xpk dry-run = {sdk.median / xpk.median:.2f}x time, "
            f"{sdk.peak_mib / xpk.peak_mib:.2f}x peak memory"
        )
    listed, loaded = ", ".join(CLIENT_LIBRARIES), ", ".join(measured.client_libraries)
    print(f"  client libraries the offline plan loads ({listed}): {loaded or 'none'}")

    print("\nP2  generated stacks against the dev plan")
    print(HEADER + f" {'resources':>9}  ms per added resource")
    previous = dev
    for case in measured.generated:
        assert case.resources is not None and dev.resources is not None and previous.resources is not None
        per_added = 1000 * (case.median - dev.median) / max(1, case.resources - dev.resources)
        marginal = 1000 * (case.median - previous.median) / max(1, case.resources - previous.resources)
        print(
            row(
                case.label,
                case,
                dev,
                f"{case.resources:7d}  {per_added:5.2f} vs dev, {marginal:5.2f} vs previous",
            )
        )
        previous = case

    print("\nP3  --live plans against loopback Cloud TPU and Kubernetes APIs")
    print(HEADER)
    print(row(measured.live.label, measured.live, dev))
    for size, tpu_calls, kube_calls, zones, namespaces in measured.calls:
        same = "yes" if (tpu_calls, kube_calls) == (zones, 2 * namespaces) else "NO"
        print(
            f"  {size.label + ':':<26} {tpu_calls} TPU + {kube_calls} Kubernetes API calls; "
            f"= zones + 2 x namespaces ({zones} + 2 x {namespaces}): {same}"
        )

    print("\nGoals (docs/plan-speed.md)")
    largest_case = measured.generated[-1]
    goals = []
    for goal, figure, limit in (
        ("dev plan <= 1.0x xpk's dry-run", dev.median / xpk.median if xpk else None, 1.0),
        ("dev plan <= 1.1x its import floor", dev.median / floor.median, 1.1),
        (
            "256 VMs + 64 pools + 64 Jobs <= 2x the dev plan",
            largest_case.median / dev.median if largest.vms == 256 else None,
            2.0,
        ),
        ("dev plan peak memory <= xpk's", dev.peak_mib / xpk.peak_mib if xpk else None, 1.0),
    ):
        line, entry = goal_line(goal, figure, limit)
        print(line)
        goals.append(entry)
    return goals


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed runs of every case (default 7)")
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=parse_sizes("16,64,128,256"),
        help="VM counts of the generated stacks (default 16,64,128,256)",
    )
    parser.add_argument("--xpk", metavar="PATH", help="the xpk command (default: xpk on PATH, if any)")
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON to PATH")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the smallest size, no xpk, one run of each case: does it all work? (figures are rough)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    sizes: list[StackSize] = args.sizes[:1] if args.smoke else args.sizes
    started = time.monotonic()
    # The machine's load slows some runs: the load average says how loaded it was.
    load_before = ", ".join(f"{figure:.2f}" for figure in os.getloadavg())
    header: dict[str, Any] = {"date": datetime.date.today().isoformat(), "machine": machine()}
    print(f"Plan speed, {header['date']}, {header['machine']}")
    if args.smoke:
        print("smoke run: one run of each case, figures are rough\n")
    else:
        print(f"{args.rounds} rounds, each case once per round in a shuffled order; medians\n")
    try:
        xpk = None if args.smoke else find_xpk(args.xpk)
        with tempfile.TemporaryDirectory(prefix="plan-speed-") as scratch:
            measured = measure(Path(scratch), sizes, xpk, args.rounds, args.smoke)
    except BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    goals = report(measured, sizes[-1])
    load = ", ".join(f"{figure:.2f}" for figure in os.getloadavg())
    print(f"\n({time.monotonic() - started:.0f} s in all; load average before {load_before}, after {load})")
    if args.json:
        document = dict(
            header,
            rounds=0 if args.smoke else args.rounds,
            xpk_version=measured.xpk_version,
            modules=len(measured.modules),
            client_libraries_loaded=measured.client_libraries,
            cases={
                c.key: {
                    "label": c.label,
                    "resources": c.resources,
                    "median_seconds": round(c.median, 4),
                    "seconds": [round(s, 4) for s in c.seconds],
                    "peak_mib": round(c.peak_mib, 1),
                }
                for c in measured.cases
            },
            live_calls=[
                {"vms": s.vms, "tpu": t, "kubernetes": k, "zones": z, "namespaces": n}
                for s, t, k, z, n in measured.calls
            ],
            goals=goals,
        )
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
