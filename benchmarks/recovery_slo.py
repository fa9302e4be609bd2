"""Recovery SLO: per cause of lost training, how long until a round sees it and until `pulumi up`
starts, polling alone vs watching the cluster.

    .venv/bin/python benchmarks/recovery_slo.py [--smoke] [--trials N] [--interval SECONDS] [--json FILE]
        [--figure FILE.png|FILE.svg]
    .venv/bin/python benchmarks/recovery_slo.py --engine ...   (the real engine: engine_recovery.py)

A closed loop: `tpu-training recover`'s own `watch()` and `Recoverer` with the real `Probe` (the real
Cloud TPU and Kubernetes clients) against the loopback fakes of both APIs, with `pulumi up`
replaced by a recorder that notes when it started and then puts back what a real update would
(the Job or JobSet re-created at a new generation, the VM READY, the flex-start VM's queued
request granted anew). Each cause of ``CAUSES`` is
injected ``--trials`` times, in a shuffled order, at a random moment of the interval, first with
rounds every interval alone ("polling"), then with the cluster watcher beside them ("watching").

Per cause and mode: detection (fault -> the first round reading live state after it), time to
`pulumi up` started, p50 / p95 / max; and false detections: a `pulumi up` for a cause that needs
none (a Pod evicted: its Job's controller replaces the Pod) or at a moment nothing was injected.
Targets (issue 27): Jobs and JobSets detected p50 <= 2 s with watches; TPU VMs (polled in both
modes: the Cloud TPU API has no watch) within one interval plus one round.

A hung trainer (its progress record frozen, timed from the moment the stall reaches
``hangMinutes``) and a maintenance notice on a GKE node of the Job's pool (timed to the moment the
simulated trainer read recovery's save request; "in time" when its save was done before the
window) are causes like the others. The simulated trainer's healthy records jitter up to 3x its
step time: a hang detected then is a false detection. To add a cause, add a ``Cause`` to
``CAUSES``: how to inject it into the fakes, and whether a `pulumi up` must follow.

``--figure FILE`` draws the trials as the timeline `tpu-training status --html` draws a run's
(tpu_training/timeline_figure.py): a panel per mode, each fault a line in its cause's colour, shaded
until recovery acted on it (``RECOVERED``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import yaml  # noqa: E402
from support.fakes.fake_kube_api import FakeJobSetApi, job, jobset, node, watched_pod  # noqa: E402
from support.fakes.loopback_gcs import LoopbackGcs  # noqa: E402
from support.harness.engine.fakes import CloudTpuApi  # noqa: E402
from support.harness.recover_runs import RecordingRunner  # noqa: E402
from support.harness.waiting import eventually  # noqa: E402
from tpu_training_components.domain.capacity_ladder import Rung  # noqa: E402
from tpu_training_components.domain.queued_resources import QueuedRequest, queued_resource_body  # noqa: E402
from tpu_training_components.domain.recovery_rounds import Backoff, RoundOutcome  # noqa: E402
from tpu_training_components.domain.run_timeline import Interruption, RunTimeline  # noqa: E402
from tpu_training_components.live import endpoints  # noqa: E402

from tpu_training import project_files, stack_config, timeline_figure  # noqa: E402
from tpu_training.recovery import recover_events, recovery_round, stack_probe, watch_loop  # noqa: E402
from tpu_training.recovery.automation import UpResult  # noqa: E402

ZONE, NEXT_ZONE = "us-central1-a", "us-central1-b"
"""The TPU VM's capacity ladder: (a, preemptible), (b, preemptible), (a, on-demand), (b, on-demand)."""
NAMESPACE = "default"
VM, JOB, JOBSET = "demo-tpu", "train-job", "train-js"
FLEX, FLEX_ZONE = "flex-tpu", "us-east5-a"
"""A flex-start TPU VM, requested from the Cloud TPU queue (its run ends at its maxRunDuration)."""
PROJECT = "tpu-training-bench"
POOL = "v6e-4x4"
SLICE_PODS = 4
HANG_MINUTES = 1
STEP_SECONDS = 2.0
"""The simulated trainer's mean step time; each record's last step is up to 3x that ago."""


def bench_project(folder: Path) -> stack_probe.Target:
    """This project's Pulumi.yaml and program, with a stack of one preemptible TPU VM, one
    flex-start TPU VM, one Job and one JobSet on a GKE pool."""
    shutil.copy(REPO / "Pulumi.yaml", folder)
    (folder / "infra").symlink_to(REPO / "infra")
    (folder / "trainer").symlink_to(REPO / "trainer")
    workload = {"nodePool": POOL, "image": "trainer:1", "command": ["python3", "train.py"]}
    config = {
        "gcp:project": PROJECT,
        "tpu-training:tpuVms": [
            {
                "name": FLEX,
                "zone": FLEX_ZONE,
                "acceleratorType": "v6e-8",
                "runtimeVersion": "v2-alpha-tpuv6e",
                "provisioning": "flex-start",
                "maxRunDuration": "72h",
                "trainCommand": "python3 train.py",
            },
            {
                "name": VM,
                "zones": [ZONE, NEXT_ZONE],
                "acceleratorType": "v3-8",
                "runtimeVersion": "tpu-vm-tf-2.16.1-pjrt",
                "provisioning": ["preemptible", "on-demand"],
                "trainCommand": "python3 train.py",
            },
        ],
        "tpu-training:cluster": {"name": "tpu-bench", "location": "us-east5"},
        "tpu-training:nodePools": [
            {
                "name": POOL,
                "machineType": "ct6e-standard-4t",
                "topology": "4x4",
                "slices": 2,  # one for the Job, one for the JobSet
                "nodeLocations": ["us-east5-a"],
            }
        ],
        "tpu-training:jobs": [{"name": JOB, **workload}, {"name": JOBSET, "workload": "jobset", **workload}],
        # Hang detection's shortest limit: a minute without a step (see the "hung" cause).
        "tpu-training:recovery": {"hangMinutes": HANG_MINUTES},
    }
    (folder / "Pulumi.bench.yaml").write_text(yaml.safe_dump({"config": config}))
    return stack_probe.Target(project_files.load_project(folder), "bench", "bench")


class World:
    """The fakes, and the healthy state `pulumi up` puts back."""

    def __init__(self, tpu: CloudTpuApi, kube: FakeJobSetApi, progress: Any, job_folder: str) -> None:
        self.tpu, self.kube = tpu, kube
        self.generation = 1
        tpu.add(ZONE, VM, "READY", labels={"recovery-generation": "1"}, health="HEALTHY")
        self.request_flex()
        kube.put("jobs", NAMESPACE, job(JOB, generation=1, active=SLICE_PODS, ready=SLICE_PODS))
        kube.put("jobsets", NAMESPACE, jobset(JOBSET, generation=1, ready=2))
        # Started long enough ago that a stall can reach the hang limit (time is not waited for).
        self.started = time.time() - 10 * HANG_MINUTES * 60
        for index in range(SLICE_PODS):
            kube.put("pods", NAMESPACE, job_pod(index, self.started))
            kube.put("nodes", "", node(f"gke-{POOL}-{index}", pool=POOL))
        self.trainer = Trainer(progress, job_folder, self.started)
        self.refusals: dict[str, tuple[str, int]] = {}
        """Zone -> the Cloud TPU API's error for a create there, and how many more to refuse."""
        self.declared: list[tuple[float, Rung]] = []
        """Each recovery's rung for the VM, and when its `pulumi up` ran (time.time())."""
        self.fault_at = 0.0
        """When the last capacity fault was injected (time.time())."""
        self.ready: list[tuple[float, str]] = []
        """When the VM was created READY (time.time()), and in which zone."""
        self.window: Optional[tuple[str, float]] = None
        """The maintenance announced last: its request id, its window's start (epoch seconds)."""
        self.windows = 0

    def restart_job_pods(self) -> None:
        """The re-created Job's Pods, training from their checkpoint; dated as if they started
        a while ago, so that the next hang injected can reach its limit at once."""
        self.started = time.time() - 2 * HANG_MINUTES * 60
        for index in range(SLICE_PODS):
            self.kube.put("pods", NAMESPACE, job_pod(index, self.started))
        self.trainer.restarted(self.started)

    def request_flex(self) -> None:
        """What `pulumi up` does for the flex-start VM: its request (the old one deleted first),
        granted at once, its node READY at the current generation."""
        self.tpu.queued.setdefault(FLEX_ZONE, {}).pop(FLEX, None)
        self.tpu.nodes[FLEX_ZONE] = [n for n in self.tpu.nodes.get(FLEX_ZONE, []) if n["name"] != FLEX]
        node = {
            "acceleratorType": "v6e-8",
            "runtimeVersion": "v2-alpha-tpuv6e",
            "labels": {"recovery-generation": str(self.generation)},
        }
        request = queued_resource_body(
            QueuedRequest("flex-start", max_run_seconds=72 * 3600),
            project=PROJECT,
            zone=FLEX_ZONE,
            node_id=FLEX,
            node=node,
        )
        request.update(
            name=f"projects/{PROJECT}/locations/{FLEX_ZONE}/queuedResources/{FLEX}",
            createTime=self.tpu.now(),
            state={"state": "WAITING_FOR_RESOURCES"},
        )
        self.tpu.queued[FLEX_ZONE][FLEX] = request
        self.tpu.grant(FLEX_ZONE, FLEX)
        self.tpu.set_state(FLEX_ZONE, FLEX, "READY", health="HEALTHY")

    def vm(self) -> dict[str, Any]:
        return next(node for zone in (ZONE, NEXT_ZONE) for node in self.tpu.nodes.get(zone, []))

    def recreate(self, rung: Optional[Rung], flex: bool = False) -> Optional[str]:
        """What a `pulumi up` does here: re-create what is not working at a new generation, the
        VM on ``rung`` (None: not recovered by this update), the flex-start VM's request when
        ``flex``. Returns the API's error when the VM's create was refused (``refusals``)."""
        self.generation += 1
        error = None
        if flex:
            self.request_flex()
        if rung is not None:
            now = time.time()
            self.declared.append((now, rung))
            for zone in (ZONE, NEXT_ZONE):  # delete-before-replace: the old node goes first
                self.tpu.nodes[zone] = [n for n in self.tpu.nodes.get(zone, []) if n["name"] != VM]
            refused = self.refusals.get(rung.zone)
            if refused is not None and refused[1] > 0:
                error = refused[0]
                self.refusals[rung.zone] = (refused[0], refused[1] - 1)
            else:
                self.tpu.add(
                    rung.zone,
                    VM,
                    "READY",
                    labels={"recovery-generation": str(self.generation)},
                    health="HEALTHY",
                )
                self.ready.append((now, rung.zone))
        live_job = self.kube.jobs[NAMESPACE][0]
        if live_job["status"].get("conditions") or self.trainer.hung_since is not None:
            self.kube.remove("jobs", NAMESPACE, JOB)
            self.kube.put(
                "jobs", NAMESPACE, job(JOB, generation=self.generation, active=SLICE_PODS, ready=SLICE_PODS)
            )
            self.restart_job_pods()
        if self.kube.jobsets[NAMESPACE][0]["status"].get("conditions"):
            self.kube.remove("jobsets", NAMESPACE, JOBSET)
            self.kube.put("jobsets", NAMESPACE, jobset(JOBSET, generation=self.generation, ready=2))
        return error


def job_pod(index: int, started: float, **changes: Any) -> dict[str, Any]:
    """A Pod of the Job, as its template labels it, started at ``started`` (epoch seconds)."""
    item = watched_pod(f"{JOB}-{index}", **changes)
    item["metadata"]["labels"]["app.kubernetes.io/name"] = JOB
    item["status"]["startTime"] = _utc(started)
    return item


def _utc(seconds: float) -> str:
    return (
        datetime.fromtimestamp(seconds, timezone.utc)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


class Trainer:
    """The Job's trainer as recovery sees it: a progress record rewritten every 0.2 s, its last
    step up to 3x the mean step time ago (jitter: never hung), frozen when ``hang`` is called.
    It reads the save request recovery writes and, 0.3 s later (its save), records it done."""

    def __init__(self, client: Any, folder: str, started: float) -> None:
        self.bucket_name, self.prefix = folder[len("gs://") :].split("/", 1)
        self.bucket = client.bucket(self.bucket_name)
        self.started = started + 1
        self.hung_since: Optional[float] = None
        self.request: Optional[tuple[str, float]] = None
        """The save request read (id, when), and ``done`` the ones saved for, with when."""
        self.done: dict[str, float] = {}
        self.rng = random.Random(3)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="bench-trainer")
        self.thread.start()

    def hang(self) -> None:
        """The step stops advancing; its last advance is the hang limit ago, so from now on the
        workload is hung (detection is timed from here, the record written at once)."""
        with self.lock:
            self.hung_since = time.time() - HANG_MINUTES * 60 - 0.5
            self._write(time.time())

    def restarted(self, started: float) -> None:
        with self.lock:
            self.started, self.hung_since = started + 1, None

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(10)

    def _run(self) -> None:
        while not self.stopping.wait(0.2):
            now = time.time()
            self._read_request(now)
            with self.lock:  # a record computed before a hang never lands after it
                self._write(now)

    def _write(self, now: float) -> None:
        jitter = self.rng.uniform(0, 3 * STEP_SECONDS)
        advanced = self.hung_since if self.hung_since is not None else now - jitter
        record = {
            "format": "tpu-training-progress/1",
            "process": 0,
            "processes": 1,
            "phase": "training",
            "step": int((now - self.started) / STEP_SECONDS),
            "started_at": _utc(self.started),
            "advanced_at": _utc(max(advanced, self.started)),
            "written_at": _utc(now),
            "step_seconds": STEP_SECONDS,
            "request_done": max(self.done, key=self.done.__getitem__) if self.done else None,
        }
        try:
            self.bucket.blob(f"{self.prefix}/progress.process-0.json").upload_from_string(json.dumps(record))
        except Exception:  # noqa: BLE001 - the next period writes again, as the trainer does
            pass

    def _read_request(self, now: float) -> None:
        if self.request is not None and self.request[0] not in self.done and now - self.request[1] >= 0.3:
            self.done[self.request[0]] = now
        try:
            text = self.bucket.blob(f"{self.prefix}/save-request.json").download_as_text()
        except Exception:  # noqa: BLE001 - none yet
            return
        identity = json.loads(text).get("id")
        if isinstance(identity, str) and (self.request is None or self.request[0] != identity):
            self.request = (identity, now)


@dataclass(frozen=True)
class Cause:
    """One way training is lost: how to inject it, whether a `pulumi up` must follow, and
    whether only polling can see it (the TPU API has no watch)."""

    inject: Callable[[World], None]
    needs_up: bool
    polled: bool = False
    after: Callable[[World], None] = lambda world: None
    """What the cluster does by itself once the round saw it (the Pod replaced)."""
    acted: Optional[Callable[[World], Optional[float]]] = None
    """For a cause that needs no `pulumi up`: when (time.time()) recovery's action reached the
    training (a save request read by the trainer); its "up" column is then that time."""
    in_time: Optional[Callable[[World], bool]] = None
    """Whether the action came in time (the save done before the window)."""
    ups: int = 1
    """The `pulumi up` runs it takes (a stockout: one per refused create, and the one that works)."""
    moves: Optional[int] = None
    """Rung changes it must make (the capacity ladder): counted, and a different count is missed."""


def _fail_job(world: World) -> None:
    world.kube.put(
        "jobs",
        NAMESPACE,
        job(JOB, generation=world.generation, conditions=(("Failed", "True", "BackoffLimitExceeded"),)),
    )


def _fail_jobset(world: World) -> None:
    failed = jobset(JOBSET, generation=world.generation, conditions=(("Failed", "FailedJobs"),))
    world.kube.put("jobsets", NAMESPACE, failed)


def _evict_pod(world: World) -> None:
    evicted = job_pod(0, world.started, phase="Failed", disruption="EvictionByEvictionAPI")
    world.kube.put("pods", NAMESPACE, evicted)


def _replace_pod(world: World) -> None:
    # The Job's controller replaces it; the trainer's processes of the others go on (one record
    # for the slice here), so the progress judged is that of the Pods started before.
    world.kube.remove("pods", NAMESPACE, f"{JOB}-0")
    world.kube.put("pods", NAMESPACE, job_pod(0, world.started))


def _hang(world: World) -> None:
    world.trainer.hang()


MAINTENANCE_LEAD_SECONDS = 120
"""How far ahead each injected maintenance window starts (GKE announces days ahead; the round
only has to write the request before the trainer's own lead)."""


def _announce_maintenance(world: World) -> None:
    window = int(time.time()) + MAINTENANCE_LEAD_SECONDS + world.windows
    world.windows += 1
    world.window = (f"maintenance-gke-gke-{POOL}-0-{window}", float(window))
    world.kube.put("nodes", "", node(f"gke-{POOL}-0", pool=POOL, maintenance=str(window)))


def _maintenance_done(world: World) -> None:
    world.kube.put("nodes", "", node(f"gke-{POOL}-0", pool=POOL))


def _request_read(world: World) -> Optional[float]:
    request = world.trainer.request
    return request[1] if world.window and request and request[0] == world.window[0] else None


def _saved_before_window(world: World) -> bool:
    if world.window is None:
        return False
    identity, window = world.window
    done = eventually(lambda: identity in world.trainer.done, 5, every=0.05)
    return done and world.trainer.done[identity] < window


def _preempt_vm(world: World) -> None:
    world.vm()["state"] = "PREEMPTED"


def _end_flex_start_run(world: World) -> None:
    # "After the requested run duration, the TPU VMs are deleted and the queued resource moves to
    # the SUSPENDED state" (Cloud TPU, "Request TPUs using Flex-start").
    world.tpu.suspend(FLEX_ZONE, FLEX)


ATTEMPTS = 2
"""recovery.ladder.attempts, its default: stockouts on one rung before the next."""
# The Cloud TPU API's errors as pulumi-gcp quotes them (tests/domain/test_capacity_ladder.py has sources).
STOCKOUT_ERROR = f"googleapi: Error 429: There is no more capacity in the zone '{ZONE}', RESOURCE_EXHAUSTED"
QUOTA_ERROR = "googleapi: Error 403: Quota 'TPUS_PER_PROJECT' exceeded, QUOTA_EXCEEDED"
PERMISSION_ERROR = "googleapi: Error 403: Permission 'tpu.nodes.create' denied on resource, PERMISSION_DENIED"
REFUSALS = ATTEMPTS + 1
"""How many creates a quota or permission fault refuses: one more than a stockout would need to move."""


def _refusing(error: str, times: int) -> Callable[[World], None]:
    def inject(world: World) -> None:
        # The VM's own first zone refuses (for a stockout, until the ladder moved it away).
        world.refusals[ZONE] = (error, times)
        world.fault_at = time.time()
        _preempt_vm(world)

    return inject


def _ready_after(zone: Optional[str]) -> Callable[[World], Optional[float]]:
    """When the VM was last created READY (in ``zone``, or anywhere), after the fault."""

    def ready(world: World) -> Optional[float]:
        found = [at for at, where in world.ready if zone in (None, where) and at >= world.fault_at]
        return found[0] if found else None

    return ready


def _moves(world: World, since: float) -> int:
    """Recoveries of the VM declared on another rung than the one before them, since ``since``."""
    rungs = [rung for at, rung in world.declared if at >= since]
    return sum(1 for before, after in zip(rungs, rungs[1:], strict=False) if after != before)


def _lift_refusals(world: World) -> None:
    world.refusals.clear()


def _refused_then_fixed(error: str) -> Cause:
    """A fault that never moves the ladder (quota, permission): once it is fixed (the refusals
    end), the VM is READY on its first rung, having moved 0 times."""
    return Cause(
        _refusing(error, REFUSALS),
        needs_up=True,
        polled=True,
        after=_lift_refusals,
        acted=_ready_after(ZONE),
        ups=REFUSALS + 1,
        moves=0,
    )


CAUSES: dict[str, Cause] = {
    "job-failed": Cause(_fail_job, needs_up=True),
    "jobset-failed": Cause(_fail_jobset, needs_up=True),
    "pod-evicted": Cause(_evict_pod, needs_up=False, after=_replace_pod),
    "vm-preempted": Cause(_preempt_vm, needs_up=True, polled=True),
    # A flex-start VM's run reached its maxRunDuration: its request is SUSPENDED, and re-requested.
    "flex-start-expired": Cause(_end_flex_start_run, needs_up=True, polled=True),
    # Timed from the moment the stall reaches hangMinutes: no event shows a hang, rounds do.
    "job-hung": Cause(_hang, needs_up=True, polled=True),
    # A GKE node of the Job's pool announced for maintenance: no `pulumi up`, a save request.
    "maintenance": Cause(
        _announce_maintenance,
        needs_up=False,
        after=_maintenance_done,
        acted=_request_read,
        in_time=_saved_before_window,
    ),
    # The first zone has no capacity: two refused creates there, then READY on the next rung
    # (timed from the preemption to READY there; a watch does not back off before the move).
    "vm-stockout": Cause(
        _refusing(STOCKOUT_ERROR, 10**6),
        needs_up=True,
        polled=True,
        after=_lift_refusals,
        acted=_ready_after(NEXT_ZONE),
        ups=ATTEMPTS + 1,
        moves=1,
    ),
    # Quota and permission refusals never move the ladder: after they are fixed (the refusals
    # end), the VM is READY on its first rung, having moved 0 times.
    "vm-quota": _refused_then_fixed(QUOTA_ERROR),
    "vm-permission": _refused_then_fixed(PERMISSION_ERROR),
}
"""Every cause measured. A new one (hung, maintenance) is one entry here."""


class RecordingUp(RecordingRunner):
    """Stands in for `pulumi up`: notes when it started, then re-creates what was lost."""

    def __init__(self, world: World) -> None:
        super().__init__(deployed=(VM, FLEX, JOB, JOBSET))
        self.world = world
        self.started: list[float] = []

    def __call__(self, *args: Any, **kwargs: Any) -> UpResult:
        self.started.append(time.monotonic())
        told = kwargs.get("recovery_round")
        rung = told.rungs.get(VM) if told is not None and VM in told.tpu_vms else None
        error = self.world.recreate(rung, flex=told is not None and FLEX in told.tpu_vms)
        result = super().__call__(*args, **kwargs)
        if error is not None:
            # As the engine reports a refused create: the resource's URN, then the API's error.
            return UpResult(
                RoundOutcome.FAILED, f"{VM}-vm: creating failed: {error}", result.duration_seconds
            )
        return result


@dataclass
class Figures:
    detection: list[float] = field(default_factory=list)
    up: list[float] = field(default_factory=list)
    false_detections: int = 0
    missed: int = 0
    late: int = 0
    """Actions that did not come in time (a save not done before its window)."""
    moves: Optional[int] = None
    """Rung changes of the VM's capacity ladder, summed over the trials (ladder causes only)."""


RECOVERED = (
    "shaded: from the fault until recovery acted\n(`pulumi up` started; maintenance: save request read; "
    "stockout, quota, permission: VM READY again; evicted Pod: seen)"
)
"""What the figure's shaded gaps span, said under its time axis."""


def _wall(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


class Loop:
    """`watch_loop.watch` running in a thread for one mode, every round's reading time noted."""

    def __init__(
        self, target: stack_probe.Target, world: World, interval: float, watching: bool, gap: float
    ) -> None:
        self.world, self.interval = world, interval
        self.up = RecordingUp(world)
        self.reads: list[float] = []
        self.rounds: list[str] = []
        self.interruptions: list[Interruption] = []
        """Each trial's fault, for the figure: its cause, when, and until recovery acted."""
        self.said: list[str] = []
        self.stop = watch_loop.StopSignal(self.said.append, gap_seconds=gap)
        self.settle = (
            (gap + watch_loop.WAKE_DEBOUNCE_SECONDS if watching else 0.0) + 0.2 + min(1.0, interval / 2)
        )
        """Between trials: the round a recovery's own events wake (the Job deleted and re-created)
        has come and gone before the next fault."""
        self.events = recover_events.ClusterEvents(self.stop.wake, self.said.append) if watching else None
        probe = stack_probe.Probe()

        def probing(settings: Any) -> Any:
            self.reads.append(time.monotonic())
            if self.events is not None:
                self.events.note(settings)
            return probe(settings)

        recoverer = recovery_round.Recoverer(
            target,
            probe=probing,
            up=self.up,
            say=self.said.append,
            notices=stack_probe.notice_step(probe, write=True),
        )
        self.thread = threading.Thread(
            target=watch_loop.watch,
            kwargs={
                "recoverer": recoverer,
                "interval_seconds": interval,
                "stop": self.stop,
                "emit": lambda report: self.rounds.append(report.trigger),
                "events": self.events,
                # Retries of a refused create every interval (the default back-off's first wait
                # is 60 s); a move to the next rung never waits (tpu-training recover).
                "backoff": Backoff(first_seconds=interval, cap_seconds=interval),
            },
        )
        self.thread.start()

    def wait(self, check: Callable[[], bool], seconds: float) -> bool:
        return eventually(check, seconds, every=0.005)

    def end(self) -> None:
        self.stop.request_stop()
        self.thread.join(60)


def trial(loop: Loop, name: str, cause: Cause, figures: Figures, rng: random.Random) -> None:
    """Inject ``cause`` (named ``name``) at a random moment, and measure until its round has
    ended; its fault and when recovery acted on it go into ``loop.interruptions``."""
    ups_before = len(loop.up.started)
    spread = loop.interval if cause.polled or loop.events is None else min(1.0, loop.interval)
    threading.Event().wait(loop.settle + rng.uniform(0, spread))
    figures.false_detections += len(loop.up.started) - ups_before  # an up nobody asked for
    ups_before = len(loop.up.started)
    injected, injected_at = time.monotonic(), time.time()
    cause.inject(loop.world)
    fault = Interruption(_wall(injected_at), name, detail="missed")
    loop.interruptions.append(fault)  # an open gap until recovery is seen to act
    bound = loop.interval + 60
    if not loop.wait(lambda: any(at >= injected for at in loop.reads), bound):
        figures.missed += 1
        return
    seen = next(index for index, at in enumerate(loop.reads) if at >= injected)
    figures.detection.append(loop.reads[seen] - injected)
    loop.wait(lambda: len(loop.rounds) > seen, bound)  # that round has ended

    def acted_after(seconds: float, how: str) -> None:
        loop.interruptions[-1] = Interruption(fault.at, name, fault.at + timedelta(seconds=seconds), how)

    if cause.moves is not None:
        ready = _ladder_trial(loop, cause, figures, injected_at, ups_before)
        if ready is not None:
            acted_after(ready - injected_at, "VM READY again")
        return
    ups = loop.up.started[ups_before:]
    if cause.needs_up and ups:
        figures.up.append(ups[0] - injected)
        acted_after(ups[0] - injected, "`pulumi up` started")
    elif cause.needs_up:
        figures.missed += 1
    elif cause.acted is None:
        acted_after(loop.reads[seen] - injected, "seen by a round; nothing to do")
    figures.false_detections += len(ups) - (1 if cause.needs_up and ups else 0)
    if cause.acted is not None:
        acted = cause.acted
        if loop.wait(lambda: acted(loop.world) is not None, bound):
            figures.up.append((acted(loop.world) or injected_at) - injected_at)
            acted_after((acted(loop.world) or injected_at) - injected_at, "save request read")
            if cause.in_time is not None and not cause.in_time(loop.world):
                figures.late += 1
        else:
            figures.missed += 1
    cause.after(loop.world)


def _ladder_trial(
    loop: Loop, cause: Cause, figures: Figures, injected_at: float, ups_before: int
) -> Optional[float]:
    """A capacity-ladder fault: wait for the VM READY where it must end, timed from the fault;
    then its `pulumi up` runs and its rung changes, each against what the cause expects.
    Returns when (time.time()) the VM was READY, None if it never was."""
    assert cause.acted is not None and cause.moves is not None
    acted = cause.acted
    ready: Optional[float] = None
    if loop.wait(lambda: acted(loop.world) is not None, loop.interval * (cause.ups + 2) + 60):
        ready = acted(loop.world) or injected_at
        figures.up.append(ready - injected_at)
    else:
        figures.missed += 1
    loop.wait(lambda: len(loop.rounds) >= len(loop.reads), 10)  # every round that read has ended
    ups = len(loop.up.started) - ups_before
    figures.false_detections += max(0, ups - cause.ups)
    moved = _moves(loop.world, injected_at)
    figures.moves = (figures.moves or 0) + moved
    if moved != cause.moves or ups < cause.ups:
        figures.missed += 1
    cause.after(loop.world)
    return ready


def quantiles(values: list[float]) -> Optional[dict[str, float]]:
    if not values:
        return None
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]
    return {"p50": statistics.median(ordered), "p95": p95, "max": ordered[-1]}


def shown(figures: Optional[dict[str, float]]) -> str:
    if figures is None:
        return f"{'—':>7} {'—':>7} {'—':>7}"
    return " ".join(f"{figures[k]:7.2f}" for k in ("p50", "p95", "max"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="one trial per cause, a 0.5 s interval, shorter waits: seconds"
    )
    parser.add_argument("--trials", type=int, default=8, help="trials per cause and mode")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between rounds (the backstop)")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument(
        "--figure",
        type=Path,
        metavar="FILE",
        help="draw every trial's fault and how long until recovery acted, as a timeline, into this "
        ".png or .svg file",
    )
    parser.add_argument(
        "--engine",
        action="store_true",
        help="the real Pulumi engine's `pulumi up` in the loop, timed to the recovered resource "
        "(benchmarks/engine_recovery.py; needs `bash .ci/engine`)",
    )
    args = parser.parse_args()
    if args.figure is not None:
        if args.engine:
            parser.error(
                "--figure draws the loopback loop's trials; --engine times the real engine's instead"
            )
        try:  # before minutes of trials, not after
            timeline_figure.figure_format(args.figure)
            timeline_figure.check_writable(args.figure)
        except timeline_figure.ReportError as exc:
            parser.error(f"--figure {exc}")
    if args.engine:
        import engine_recovery

        engine_recovery.run(1 if args.smoke else args.trials, args.json)
        return
    trials, interval = (1, 0.5) if args.smoke else (args.trials, args.interval)
    # --smoke: shorter waits all round, the gap between rounds included (its figures are not the
    # command's; it shows the loop works).
    gap = 0.3 if args.smoke else watch_loop.MIN_SECONDS_BETWEEN_ROUNDS
    rng = random.Random(27)
    results: dict[str, dict[str, Any]] = {}
    round_seconds: list[float] = []
    timelines: list[RunTimeline] = []

    with CloudTpuApi() as tpu, FakeJobSetApi() as kube, tempfile.TemporaryDirectory() as scratch:
        os.environ["TPU_API_ENDPOINT"] = tpu.endpoint
        os.environ["KUBECONFIG"] = str(kube.kubeconfig(Path(scratch)))
        target = bench_project(Path(scratch))
        settings = stack_probe.load_settings(target).settings
        folders = {
            **{vm.name: stack_config.derived.vm_checkpoint_dir(settings, vm) for vm in settings.tpu_vms},
            **{j.name: stack_config.derived.job_checkpoint_dir(settings, j) for j in settings.jobs},
        }
        gcs = LoopbackGcs(*sorted({folder[len("gs://") :].split("/")[0] for folder in folders.values()}))
        gcs.__enter__()
        os.environ[endpoints.STORAGE_ENDPOINT_VARIABLE] = gcs.endpoint
        progress = endpoints.storage_client(settings.gcp_project, gcs.endpoint)
        world = World(tpu, kube, progress, folders[JOB])
        # A first round outside the clock: the program's modules and the clients load once.
        said: list[str] = []
        warm = recovery_round.Recoverer(
            target, probe=stack_probe.Probe(), up=RecordingUp(world), say=said.append
        )
        first = warm.run_round()
        if first.outcome is not RoundOutcome.NOT_RUN or first.plan is None or first.plan.unavailable:
            raise SystemExit(
                "the healthy stack's first round did not say 'nothing to recover':\n" + "\n".join(said)
            )
        for mode in ("polling", "watching"):
            loop = Loop(target, world, interval, watching=mode == "watching", gap=gap)
            started = loop.wait(lambda rounds=loop.rounds: len(rounds) >= 1, 60)
            if mode == "watching":  # its streams listed and watching: Jobs, JobSets, Pods, Nodes
                started = started and loop.wait(lambda: len({r[0] for r in kube.watch_requests}) == 4, 30)
            if not started:
                loop.end()
                raise SystemExit(f"{mode}: the loop did not start:\n" + "\n".join(loop.said))
            order = [name for name in CAUSES for _ in range(trials)]
            rng.shuffle(order)
            figures = {name: Figures() for name in CAUSES}
            for name in order:
                trial(loop, name, CAUSES[name], figures[name], rng)
            loop.end()
            timelines.append(
                RunTimeline(f"{mode}: {trials} trial(s) per cause", interruptions=tuple(loop.interruptions))
            )
            for name, each in figures.items():
                results.setdefault(name, {})[mode] = {
                    "trials": trials,
                    "detection": quantiles(each.detection),
                    "up": quantiles(each.up),
                    "falseDetections": each.false_detections,
                    "missed": each.missed,
                    "late": each.late,
                    "moves": each.moves,
                }
            round_seconds.append(statistics.median(warm_round(target, world) for _ in range(3)))
        one_round = max(round_seconds)
        world.trainer.stop()
        gcs.__exit__(None, None, None)

    print(
        f"Recovery SLO ({'smoke, ' if args.smoke else ''}{trials} trial(s) per cause and mode, "
        f"interval {interval:g} s; seconds)"
    )
    heading = f"{'detect p50':>10} {'p95':>7} {'max':>7}  {'up p50':>7} {'p95':>7} {'max':>7}"
    width = max(len(name) for name in CAUSES)
    print(f"{'cause':<{width}} {'mode':<9} {heading}  false  missed  late")
    for name, modes in results.items():
        for mode, row in modes.items():
            detect, up = shown(row["detection"]), shown(row["up"])
            counts = f"{row['falseDetections']:5d}  {row['missed']:6d}  {row['late']:4d}"
            print(f"{name:<{width}} {mode:<9} {detect:>26}  {up}  {counts}")
    print(
        "(up: `pulumi up` started; for maintenance, the trainer read the save request; for vm-stockout,\n"
        " vm-quota and vm-permission, the VM READY again: on the next rung after the stockouts, on its\n"
        f" first rung once the quota or permission is fixed after {REFUSALS} refusals)"
    )
    goals = []
    watched = [results[name]["watching"]["detection"] for name in ("job-failed", "jobset-failed")]
    goals.append(
        (
            "Jobs and JobSets detected p50 <= 2 s with watches",
            all(d is not None and d["p50"] <= 2.0 for d in watched),
            ", ".join(f"{d['p50']:.2f} s" if d else "none" for d in watched),
        )
    )
    # A preempted VM read by its node, a flex-start VM whose run ended by its queued request.
    vm = [
        results[cause][mode]["detection"]
        for cause in ("vm-preempted", "flex-start-expired")
        for mode in ("polling", "watching")
    ]
    bound = interval + one_round
    goals.append(
        (
            f"TPU VMs detected within interval + one round ({bound:.2f} s)",
            all(d is not None and d["max"] <= bound for d in vm),
            ", ".join(f"max {d['max']:.2f} s" if d else "none" for d in vm),
        )
    )
    hung = [results["job-hung"][mode]["detection"] for mode in ("polling", "watching")]
    goals.append(
        (
            f"hangs detected within hangMinutes + interval + one round ({bound:.2f} s past the limit)",
            all(d is not None and d["max"] <= bound for d in hung),
            ", ".join(f"max {d['max']:.2f} s" if d else "none" for d in hung),
        )
    )
    saves = [results["maintenance"][mode] for mode in ("polling", "watching")]
    goals.append(
        (
            "every maintenance notice turned into a save before its window",
            all(row["late"] == 0 and row["missed"] == 0 and row["up"] is not None for row in saves),
            ", ".join(f"{row['late']} late, {row['missed']} missed" for row in saves),
        )
    )
    stockouts = [results["vm-stockout"][mode] for mode in ("polling", "watching")]
    goals.append(
        (
            f"a stockout moves the VM one rung after {ATTEMPTS} refused creates, READY there",
            all(row["missed"] == 0 and row["moves"] == row["trials"] for row in stockouts),
            ", ".join(f"{row['moves']} move(s) in {row['trials']} trial(s)" for row in stockouts),
        )
    )
    refusals = [
        results[name][mode] for name in ("vm-quota", "vm-permission") for mode in ("polling", "watching")
    ]
    goals.append(
        (
            "0 moves for quota and permission faults",
            all(row["moves"] == 0 and row["missed"] == 0 for row in refusals),
            f"{sum(row['moves'] or 0 for row in refusals)} move(s)",
        )
    )
    falses = sum(row["falseDetections"] for modes in results.values() for row in modes.values())
    goals.append(("no false detection", falses == 0, f"{falses}"))
    print("Goals (issue 27)")
    for what, reached, value in goals:
        print(f"  {what}: {'yes' if reached else 'NO'} ({value})")
    if args.figure is not None:
        title = f"Recovery SLO: faults by cause, interval {interval:g} s"
        try:
            timeline_figure.write_figure(args.figure, timelines, title=title, shading=RECOVERED)
        except timeline_figure.ReportError as exc:
            raise SystemExit(f"error: --figure {exc}") from None
        print(f"Timeline of the trials: {args.figure}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "trials": trials,
                    "interval": interval,
                    "roundSeconds": one_round,
                    "causes": results,
                    "goals": [{"goal": g, "reached": r, "value": v} for g, r, v in goals],
                },
                indent=2,
            )
        )


def warm_round(target: stack_probe.Target, world: World) -> float:
    """Seconds of one round with nothing to recover: the list calls and the config read."""
    rec = recovery_round.Recoverer(
        target, probe=stack_probe.Probe(), up=RecordingUp(world), say=lambda line: None
    )
    return rec.run_round().duration_seconds


if __name__ == "__main__":
    main()
