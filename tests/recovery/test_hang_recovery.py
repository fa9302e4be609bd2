"""Recovery acting on hung training (issue 27, item 2): a running VM, Job or JobSet whose trainer's
progress records have not advanced for its hang limit is replaced at a new generation with cause
``hung``; everything that cannot be read or believed is kept, and the round says so.

The live APIs are the loopback fakes (real google-cloud-tpu, kubernetes and google-cloud-storage
clients); the records are in the trainer's own format (docs/trainer.md)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

import pytest
from support.fakes.fake_cloud_logging import FakeCloudLogging
from support.fakes.fake_kube_api import FakeKubernetesApi, job, pod
from support.fakes.fake_tpu_api import FakeTpuApi
from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.program import REPO, refused
from support.harness.recover_runs import RecordingRunner, live_dev_stack
from tpu_training_components.domain.progress import HangCheck, ProcessProgress
from tpu_training_components.domain.recovery import Cause
from tpu_training_components.live import endpoints
from tpu_training_components.live.cloud_logging import RecordLog
from tpu_training_components.live.kube_client import ClusterRef
from tpu_training_components.live.progress_records import ProgressReading
from tpu_training_components.resources import reconcile

from tpu_training import offline, project_files
from tpu_training.recovery import recovery_round, stack_probe, watch_loop

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
ZONE = "europe-west4-a"
CLUSTER = ClusterRef("tpu-training-dev", "us-east5", "tpu-training-dev-dev")
JOB_BUCKET = "tpu-training-dev-dev-ckpt-us-east5"
VM_BUCKET = "tpu-training-dev-dev-ckpt-europe-west4"
JOB_RUN = f"gs://{JOB_BUCKET}/checkpoints/train-v6e"


def at(minutes_ago: float) -> datetime:
    return NOW - timedelta(minutes=minutes_ago)


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def record(process: int = 0, processes: int = 1, *, started: float, advanced: float, **fields: Any) -> dict:
    """A progress record as the trainer writes it; times in minutes before NOW."""
    return {
        "format": "tpu-training-progress/1",
        "process": process,
        "processes": processes,
        "phase": "training",
        "step": 40,
        "started_at": stamp(at(started)),
        "advanced_at": stamp(at(advanced)),
        "written_at": stamp(at(min(advanced, 0.2))),
        "step_seconds": 2.0,
        **fields,
    }


def reading(*records: dict) -> ProgressReading:
    from tpu_training_components.domain.progress import read_record

    parsed = [read_record(json.dumps(r))[0] for r in records]
    assert all(isinstance(p, ProcessProgress) for p in parsed)
    return ProgressReading(records=[p for p in parsed if p is not None])


# --- Jobs and JobSets -------------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path, monkeypatch) -> Iterator[FakeKubernetesApi]:
    from support.fakes.fake_kube_api import FakeJobSetApi

    with FakeJobSetApi() as kube:
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path)))
        yield kube


def decide_job(kube: FakeKubernetesApi, found: ProgressReading, *, hang_minutes=None, kind="Job"):
    (decision,) = reconcile.reconcile_jobs(
        CLUSTER,
        [("train-v6e", "default", kind)],
        hang_checks={"train-v6e": HangCheck(JOB_RUN, hang_minutes)},
        read_progress=lambda folder: found,
        now=NOW,
    )
    return decision


def running_job(kube: FakeKubernetesApi, *, pod_started: float = 60) -> None:
    """The Job, created two hours ago, its Pod started ``pod_started`` minutes ago."""
    item = job("train-v6e", generation=3, active=4, ready=4)
    item["metadata"]["creationTimestamp"] = stamp(at(120)).replace(".000", "")
    kube.add("default", item)
    kube.add_pod("default", pod("train-v6e", stamp(at(pod_started))))


def test_a_job_whose_training_stalled_past_its_limit_is_replaced_as_hung(cluster):
    running_job(cluster)
    decision = decide_job(cluster, reading(record(started=55, advanced=12)))
    assert (decision.action, decision.generation, decision.cause) == ("replace", 4, Cause.HUNG)
    assert "Job is running (4 Pods ready), but its training is hung: process 0 of 1" in decision.reason
    assert "has not advanced for 12.0 min (limit 10.0 min)" in decision.reason


def test_within_its_limit_or_with_a_longer_hang_minutes_it_is_kept(cluster):
    running_job(cluster)
    kept = decide_job(cluster, reading(record(started=55, advanced=8)))
    assert (kept.action, kept.cause, kept.warn) == ("keep", None, False)
    assert kept.reason.endswith("progress: process 0 of 1 (training, step 40) advanced 8.0 min ago")
    longer = decide_job(cluster, reading(record(started=55, advanced=12)), hang_minutes=15)
    assert longer.action == "keep"


def test_records_from_before_the_current_pods_started_say_nothing(cluster):
    """A Job whose Pod was re-created (a disruption, flex-start re-provisioning for 20 minutes):
    the last record of the Pod before it is old, and must not make the new one look hung."""
    running_job(cluster, pod_started=2)
    decision = decide_job(cluster, reading(record(started=90, advanced=25)))
    assert decision.action == "keep" and decision.cause is None
    assert "progress unknown (no progress published since it was created), so no hang is judged" in (
        decision.reason
    )


def test_a_workload_that_never_published_is_kept_and_said_so(cluster):
    running_job(cluster)
    decision = decide_job(cluster, ProgressReading())
    assert decision.action == "keep" and not decision.warn
    assert "progress unknown (no progress published since it was created)" in decision.reason


def test_unreadable_progress_or_pods_is_unknown_never_hung(cluster):
    running_job(cluster)

    def broken(folder: str) -> ProgressReading:
        raise ConnectionError("bucket unreachable")

    (decision,) = reconcile.reconcile_jobs(
        CLUSTER,
        [("train-v6e", "default")],
        hang_checks={"train-v6e": HangCheck(JOB_RUN)},
        read_progress=broken,
        now=NOW,
    )
    assert (decision.action, decision.warn) == ("keep", True)
    assert "progress unknown (not read: ConnectionError: bucket unreachable)" in decision.reason

    # One record of two unreadable, the other advancing: the unreadable one may be the stalled host.
    doubtful = ProgressReading(
        records=reading(record(0, 2, started=55, advanced=1)).records,
        problems=[f"{JOB_RUN}/progress.process-1.json: not JSON"],
    )
    decision = decide_job(cluster, doubtful)
    assert decision.action == "keep" and decision.warn
    assert "progress.process-1.json: not JSON" in decision.reason

    # No Pod listed for a Job that says its Pods are ready: when its training began is unknown.
    cluster.pods.clear()
    decision = decide_job(cluster, reading(record(started=55, advanced=30)))
    assert decision.action == "keep" and decision.warn
    assert "no Pod of it has started" in decision.reason


def test_one_stalled_host_of_a_multislice_jobset_is_the_jobset_hung(cluster):
    from support.fakes.fake_kube_api import jobset

    cluster.add_jobset("default", jobset("train-v6e", generation=5, ready=2))
    cluster.add_pod("default", pod("train-v6e", stamp(at(60)), index=0))
    cluster.add_pod("default", pod("train-v6e", stamp(at(59)), index=1))
    found = reading(
        record(0, 4, started=58, advanced=0.5),
        record(1, 4, started=58, advanced=0.4),
        record(2, 4, started=58, advanced=14),  # stuck in a collective, still writing
        record(3, 4, started=58, advanced=0.5),
    )
    decision = decide_job(cluster, found, kind="JobSet")
    assert (decision.action, decision.generation, decision.cause) == ("replace", 6, Cause.HUNG)
    assert "process 2 of 4 (training, step 40) has not advanced for 14.0 min" in decision.reason


def test_workloads_that_do_not_train_are_not_judged_and_cost_no_pod_call(cluster):
    cluster.add("default", job("train-v6e", generation=3, active=4, ready=2))  # Pods pending
    decision = decide_job(cluster, reading(record(started=55, advanced=50)))
    assert decision.action == "keep" and "progress" not in decision.reason
    assert cluster.calls == ["/apis/batch/v1/namespaces/default/jobs"]


# --- TPU VMs ----------------------------------------------------------------------------------


def decide_vm(tpu: FakeTpuApi, found: ProgressReading | Exception, **node: Any):
    def read(folder: str) -> ProgressReading:
        if isinstance(found, Exception):
            raise found
        return found

    tpu.add(ZONE, "demo-tpu", "READY", labels={"recovery-generation": "7"}, health="HEALTHY", **node)
    (decision,) = reconcile.reconcile_tpu_vms(
        "tpu-training-dev",
        [("demo-tpu", ZONE)],
        hang_checks={"demo-tpu": HangCheck(f"gs://{VM_BUCKET}/checkpoints/demo-tpu", 20)},
        read_progress=read,
        now=NOW,
        client=endpoints.tpu_nodes_client(tpu.endpoint),
    )
    return decision


def test_a_ready_vm_whose_training_hung_is_replaced(monkeypatch):
    with FakeTpuApi() as tpu:
        decision = decide_vm(tpu, reading(record(started=100, advanced=25)), createTime=stamp(at(120)))
    assert (decision.action, decision.generation, decision.cause) == ("replace", 8, Cause.HUNG)
    assert decision.reason.startswith("node is READY, but its training is hung")
    assert "(limit 20.0 min)" in decision.reason


def test_a_vm_re_created_since_the_records_were_written_is_not_judged_by_them():
    with FakeTpuApi() as tpu:
        decision = decide_vm(tpu, reading(record(started=100, advanced=25)), createTime=stamp(at(5)))
    assert decision.action == "keep" and decision.cause is None


def test_a_vm_whose_bucket_cannot_be_read_is_kept_with_a_warning():
    with FakeTpuApi() as tpu:
        decision = decide_vm(tpu, PermissionError("403 storage.objects.list"), createTime=stamp(at(120)))
    assert (decision.action, decision.warn) == ("keep", True)
    assert "not read: PermissionError: 403 storage.objects.list" in decision.reason


def test_progress_from_the_future_is_not_believed():
    future = record(started=100, advanced=-30)
    future["written_at"] = stamp(at(-30))
    with FakeTpuApi() as tpu:
        decision = decide_vm(tpu, reading(future), createTime=stamp(at(120)))
    assert (decision.action, decision.warn) == ("keep", True)
    assert "in the future" in decision.reason


def test_an_unhealthy_or_preempted_vm_is_decided_by_its_state_not_its_progress():
    with FakeTpuApi() as tpu:
        tpu.add(ZONE, "demo-tpu", "PREEMPTED", labels={"recovery-generation": "7"})
        (decision,) = reconcile.reconcile_tpu_vms(
            "tpu-training-dev",
            [("demo-tpu", ZONE)],
            hang_checks={"demo-tpu": HangCheck(f"gs://{VM_BUCKET}/checkpoints/demo-tpu")},
            read_progress=lambda folder: pytest.fail("a preempted node's progress is not read"),
            now=NOW,
            client=endpoints.tpu_nodes_client(tpu.endpoint),
        )
    assert (decision.action, decision.cause) == ("replace", Cause.PREEMPTED)


# --- A whole round, records in the bucket -----------------------------------------------------


def test_a_round_replaces_the_hung_job_alone_and_says_why_in_its_json(tmp_path, monkeypatch):
    running = job("train-v6e", generation=1, active=4, ready=4)
    healthy = {"labels": {"recovery-generation": "3"}, "health": "HEALTHY", "createTime": stamp(at(300))}
    with (
        live_dev_stack(tmp_path, monkeypatch, "READY", running, **healthy),
        LoopbackGcs(JOB_BUCKET, VM_BUCKET) as gcs,
    ):
        client = endpoints.storage_client("tpu-training-dev", gcs.endpoint)
        monkeypatch.setenv(endpoints.STORAGE_ENDPOINT_VARIABLE, gcs.endpoint)
        # live_dev_stack's Pod started 2026-11-20T09:00Z: records since then count.
        client.bucket(JOB_BUCKET).blob("checkpoints/train-v6e/progress.process-0.json").upload_from_string(
            json.dumps(record(started=60, advanced=45))
        )
        client.bucket(VM_BUCKET).blob("checkpoints/demo-tpu/progress.process-0.json").upload_from_string(
            json.dumps(record(started=200, advanced=0.5))
        )
        runner = RecordingRunner()
        said: list[str] = []
        rec = recovery_round.Recoverer(
            stack_probe.Target(project_files.load_project(REPO), "dev", "dev"),
            probe=stack_probe.Probe(clock=lambda: NOW),
            up=runner,
            say=said.append,
            clock=lambda: NOW,
        )
        report = rec.run_round()
    decisions = {d["name"]: d for d in report.to_json()["decisions"]}
    assert decisions["train-v6e"]["action"] == "replace" and decisions["train-v6e"]["cause"] == "hung"
    assert decisions["demo-tpu"]["action"] == "keep" and decisions["demo-tpu"]["cause"] is None
    assert "advanced 0.5 min ago" in decisions["demo-tpu"]["reason"]
    assert report.plan is not None and [d.name for d in report.plan.recovering] == ["train-v6e"]
    assert runner.rounds and runner.rounds[0] is not None and runner.rounds[0].jobs == {"train-v6e"}

    # Its goodput record: the cause, when the training stalled, how long recovery took.
    (record_,) = report.recovery_records()
    assert record_["format"] == "tpu-training-recovery/1"
    assert (record_["kind"], record_["name"], record_["cause"]) == ("job", "train-v6e", "hung")
    assert record_["badput"] == "infrastructure_recovery_from_disruption"
    assert record_["stalledSince"] == stamp(at(45))
    assert record_["stalledSeconds"] == 45 * 60.0
    assert record_["upStatus"] == "succeeded" and record_["recoverySeconds"] == 0.0  # the clock stood still

    # Published as the watcher publishes each round's records: appended to --records, and sent to
    # the stack's project in Cloud Logging (a fake that checks the request against Logging v2).
    assert report.gcp_project == "tpu-training-dev"
    records_file = tmp_path / "records.jsonl"
    with FakeCloudLogging() as logging_api:
        watch_loop.publish_records(
            report, str(records_file), RecordLog(said.append, logging_api.endpoint), said.append
        )
    assert [json.loads(line) for line in records_file.read_text().splitlines()] == [record_]
    (entry,) = logging_api.entries
    assert entry["jsonPayload"] == record_ and entry["logName"].startswith("projects/tpu-training-dev/logs/")


def test_records_are_appended_and_an_unwritable_file_is_a_warning(tmp_path):
    said: list[str] = []
    target = tmp_path / "records.jsonl"
    watch_loop.append_records(str(target), [{"name": "a"}, {"name": "b"}], said.append)
    watch_loop.append_records(str(target), [{"name": "c"}], said.append)
    assert [json.loads(line)["name"] for line in target.read_text().splitlines()] == ["a", "b", "c"]
    nowhere = tmp_path / "no-such-dir" / "r.jsonl"
    watch_loop.append_records(str(nowhere), [{"name": "d"}], said.append)
    assert said == [
        f"warning: --records {nowhere}: not written (No such file or directory); the recovery itself went on"
    ]


# --- The stack keys ---------------------------------------------------------------------------


def load_settings(config: dict[str, Any]):
    """The dev stack's settings for this config, as the program reads them."""
    from tpu_training import stack_config

    loaded: list[Any] = []
    encoded = {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}
    offline.run(
        lambda: loaded.append(stack_config.load("dev", project_root=REPO)),
        project="tpu-training",
        stack="dev",
        config=encoded,
    )
    return loaded[0]


def test_hang_keys_are_checked_and_reach_every_vm_and_job(config):
    from tpu_training import stack_config

    config["tpu-training:recovery"] = {"hangMinutes": 45}
    config["tpu-training:jobs"][0]["hangMinutes"] = 12
    checks = stack_config.derived.hang_checks(load_settings(config))
    assert checks["demo-tpu"] == HangCheck(f"gs://{VM_BUCKET}/checkpoints/demo-tpu", 45.0)
    assert checks["train-v6e"] == HangCheck(JOB_RUN, 12.0)

    config["tpu-training:recovery"] = {"hangDetection": False}
    assert stack_config.derived.hang_checks(load_settings(config)) == {}

    config["tpu-training:recovery"] = {"hangMinutes": 0}
    assert "hangMinutes" in refused(config) and "must be at least 1" in refused(config)
