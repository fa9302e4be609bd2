"""`tpu-training recover --watch`: a change in the cluster starts the next round within
seconds (tpu_training/recovery/recover_events.py, StopSignal.wake), an irrelevant one does not, the
interval stays
the backstop, and `--no-events` turns it off. Live state: the dev stack on the loopback fakes.

Every wait is bounded; the Kubernetes semantics the watcher relies on are cited in
tests/live/test_kube_watch.py."""

from __future__ import annotations

import threading
import time

import pytest
from support.fakes.fake_kube_api import job, node, watched_pod
from support.harness.program import REPO
from support.harness.recover_runs import RecordingRunner, live_dev_stack, recoverer
from support.harness.waiting import eventually
from tpu_training_components.live.kube_watch import WatchLimits

from tpu_training import exit_codes, project_files, stack_config
from tpu_training.commands import recover
from tpu_training.recovery import recover_events, round_report, stack_probe, watch_loop

QUICK = WatchLimits(server_timeout_seconds=5, first_backoff_seconds=0.05, backoff_cap_seconds=0.2)
RUNNING_JOB = job("train-v6e", generation=1, active=4, ready=4)
FAILED = (("Failed", "True", "BackoffLimitExceeded"),)


@pytest.fixture
def apis(tmp_path, monkeypatch):
    with live_dev_stack(
        tmp_path, monkeypatch, "READY", RUNNING_JOB, labels={"recovery-generation": "3"}
    ) as apis:
        apis[1].put("pods", "default", watched_pod("train-v6e-0"))
        apis[1].put("nodes", "", node("gke-v6e-1"))
        yield apis


class Watch:
    """`watch_loop.watch` in a thread with cluster events, every round's (time, trigger) noted."""

    def __init__(self, interval: float = 60.0) -> None:
        self.runner = RecordingRunner()
        self.rec, self.said = recoverer(self.runner)
        self.stop = watch_loop.StopSignal(self.said.append)
        self.events = recover_events.ClusterEvents(self.stop.wake, self.said.append, limits=QUICK)
        inner = self.rec.probe

        def probing(settings):
            self.reads.append(time.monotonic())  # the round reads the live state: it has seen
            self.events.note(settings)
            return inner(settings)

        self.rec.probe = probing
        self.reads: list[float] = []
        self.rounds: list[tuple[float, str]] = []
        self.status: list[int] = []
        self.thread = threading.Thread(target=self._run, args=(interval,))
        self.thread.start()

    def _run(self, interval: float) -> None:
        self.status.append(
            watch_loop.watch(
                self.rec,
                interval_seconds=interval,
                stop=self.stop,
                emit=lambda report: self.rounds.append((time.monotonic(), report.to_json()["trigger"])),
                events=self.events,
            )
        )

    def end(self) -> None:
        self.stop.request_stop()
        self.thread.join(10)
        assert not self.thread.is_alive() and self.status == [exit_codes.EXIT_OK]


def test_a_failed_job_starts_a_round_within_two_seconds_and_a_ready_flip_does_not(apis):
    tpu, kube = apis
    w = Watch()
    try:
        # The first round, then the watcher on what it read: Jobs and Pods in default, the pool's Nodes.
        assert eventually(lambda: {r[0] for r in kube.watch_requests} == {"jobs", "pods", "nodes"}, 20)
        assert [trigger for _, trigger in w.rounds] == ["first"]
        kube.put("pods", "default", watched_pod("train-v6e-0", ready=False))
        kube.put("jobs", "default", job("train-v6e", generation=1, active=4, ready=3))
        assert not eventually(lambda: len(w.reads) > 1, 1.5)

        failed = time.monotonic()
        kube.put("jobs", "default", job("train-v6e", generation=1, conditions=FAILED, failed=1))
        assert eventually(lambda: len(w.reads) > 1, 2.0)
        assert w.reads[1] - failed < 2.0
        assert eventually(lambda: len(w.rounds) > 1, 30.0)  # its `pulumi up` (a recorder) done
        assert w.rounds[1][1] == "event: Job default/train-v6e: Failed=True (BackoffLimitExceeded)"
        assert w.runner.stacks == ["dev"]  # the woken round recovered the Job
    finally:
        w.end()
    assert kube.watch_requests and not any(t.name.startswith("watch ") for t in threading.enumerate())


def test_the_interval_stays_the_backstop_for_tpu_vms(apis):
    tpu, _ = apis
    w = Watch(interval=1.0)
    try:
        assert eventually(lambda: len(w.rounds) >= 1, 30.0)
        tpu.nodes["europe-west4-a"][0]["state"] = "PREEMPTED"  # no watch: the next interval sees it
        assert eventually(lambda: w.runner.stacks == ["dev"], 30.0)
        assert w.rounds[1][1] == "interval"
    finally:
        w.end()


def test_wakes_coalesce_into_one_round_and_wait_out_the_gap():
    stop = watch_loop.StopSignal(lambda line: None, debounce_seconds=0.05, gap_seconds=0.3)
    stop.wake("Pod default/a: phase Failed")
    stop.wake("Pod default/b: phase Failed")
    started = time.monotonic()
    assert stop.sleep(5) == "Pod default/a: phase Failed (and 1 more)"
    assert 0.25 <= time.monotonic() - started < 1.0  # not sooner than the gap after the last round
    assert stop.sleep(0.05) is None  # consumed: the next wait is a plain interval


def test_a_failed_up_backs_off_whatever_the_cluster_says():
    stop = watch_loop.StopSignal(lambda line: None, debounce_seconds=0.0, gap_seconds=0.0)
    stop.wake("Job default/a: deleted")
    started = time.monotonic()
    assert stop.sleep(0.3, wakeable=False) is None
    assert time.monotonic() - started >= 0.29
    assert stop.sleep(0.05) is None  # the wake was for the round that has come


def test_a_stop_ends_a_wait_at_once():
    stop = watch_loop.StopSignal(lambda line: None)
    threading.Timer(0.1, stop.request_stop).start()
    started = time.monotonic()
    assert stop.sleep(30) is None and stop.stopped
    assert time.monotonic() - started < 1.0


def test_every_round_says_what_started_it_in_json():
    report = round_report.RoundReport(
        "dev", 2, "2026-11-26T12:00:00Z", trigger="event: Job default/a: deleted"
    )
    assert report.to_json()["trigger"] == "event: Job default/a: deleted"
    assert round_report.RoundReport("dev", 1, "2026-11-26T12:00:00Z").to_json()["trigger"] == "first"


@pytest.mark.parametrize(
    ("flags", "watched"), [(["--watch", "10"], True), (["--watch", "10", "--no-events"], False)]
)
def test_no_events_turns_the_watcher_off(monkeypatch, flags, watched):
    seen = {}
    monkeypatch.setattr(watch_loop.StopSignal, "install", lambda self: None)
    monkeypatch.setattr(recover, "watch", lambda rec, **kw: seen.update(kw) or 0)
    assert recover.main(["--stack", "dev", "--dry-run", *flags]) == 0
    assert isinstance(seen["events"], recover_events.ClusterEvents) is watched


def test_a_stack_without_a_cluster_watches_nothing_and_the_dev_stack_its_own_jobs_pods_and_nodes():
    project = project_files.load_project(REPO)
    settings = stack_probe.load_settings(stack_probe.Target(project, "dev", "dev")).settings
    cluster, scope = recover_events.scope_of(settings)
    assert cluster.path == "projects/tpu-training-dev/locations/us-east5/clusters/tpu-dev"
    assert (scope.job_namespaces, scope.jobset_namespaces, scope.pod_namespaces) == (
        ("default",),
        (),
        ("default",),
    )
    assert scope.node_selector == "tpu-training/node-pool in (v6e-4x4)"
    no_cluster = settings.model_copy(update={"cluster": None})
    assert isinstance(no_cluster, stack_config.StackConfig) and recover_events.scope_of(no_cluster) is None
