"""Recovery rounds (`tpu-training recover`) and `status` on a stack whose TPU VM is requested from
the Cloud TPU queue, against the TPU fake that serves queued resources at v2 and v2alpha1: the
round's probe reads the request before the nodes, keeps one that waits, re-requests one the
service suspended, and moves a request that failed for want of capacity one rung down its
ladder at once (it waited as long as it was allowed to)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from support.harness.engine.fakes import CloudTpuApi
from support.harness.program import REPO
from support.harness.recover_runs import RecordingRunner
from tpu_training_components.domain.capacity_ladder import Rung
from tpu_training_components.domain.queued_resources import QueuedRequest, queued_resource_body
from tpu_training_components.domain.recovery_rounds import RoundOutcome
from tpu_training_components.live.progress_records import ProgressReading
from tpu_training_components.resources.queued_tpu_vm import QueuedTpuVmProvider

from tpu_training import project_files
from tpu_training.recovery import recovery_round, stack_probe

A, B = "us-central1-a", "us-central1-b"
VM = "demo-tpu"


def _queued_stack(config: dict[str, Any]) -> dict[str, Any]:
    """The dev stack's VM alone, queued on a ladder of two zones, waiting at most 6 hours."""
    for key in ("tpu-training:cluster", "tpu-training:nodePools", "tpu-training:jobs"):
        config.pop(key)
    vm = config["tpu-training:tpuVms"][0]
    vm.pop("zone")
    vm.update(zones=[A, B], provisioning="spot", queued={"validFor": "6h"})
    return config


@pytest.fixture
def stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, Any]
) -> Iterator[tuple[stack_probe.Target, CloudTpuApi]]:
    shutil.copy(REPO / "Pulumi.yaml", tmp_path)
    (tmp_path / "infra").symlink_to(REPO / "infra")
    (tmp_path / "trainer").symlink_to(REPO / "trainer")
    (tmp_path / "Pulumi.queued.yaml").write_text(yaml.safe_dump({"config": _queued_stack(config)}))
    with CloudTpuApi() as tpu:
        monkeypatch.setenv("TPU_API_ENDPOINT", tpu.endpoint)
        yield stack_probe.Target(project_files.load_project(tmp_path), "queued", "queued"), tpu


def _request(zone: str, generation: int = 3) -> None:
    """The request as the stack's last update left it, at ``generation``."""
    node = {"acceleratorType": "v3-8", "runtimeVersion": "tpu-vm-tf-2.16.1-pjrt", "labels": {}}
    node["labels"] = {"recovery-generation": str(generation)}
    body = queued_resource_body(
        QueuedRequest("spot", valid_for_seconds=6 * 3600), project="p", zone=zone, node_id=VM, node=node
    )
    props = {"project": "p", "zone": zone, "queuedResourceId": VM, "apiVersion": "v2", "body": body}
    QueuedTpuVmProvider().create({**props, "generation": generation})


def _round(target: stack_probe.Target, runner: RecordingRunner) -> Any:
    probe = stack_probe.Probe(read_progress=lambda folder: ProgressReading())
    return recovery_round.Recoverer(target, probe=probe, up=runner, say=lambda line: None).run_round()


def test_a_waiting_request_is_kept_round_after_round_and_runs_no_update(stack) -> None:
    target, tpu = stack
    _request(A)
    runner = RecordingRunner(deployed=(VM,))
    for _ in range(3):
        report = _round(target, runner)
        (decision,) = [d for _, d in report.decisions]
        assert decision.action == "keep" and "WAITING_FOR_RESOURCES" in decision.reason
        assert report.outcome is RoundOutcome.NOT_RUN
    assert runner.rounds == [], "no update: re-requesting would lose its place in the queue"
    assert tpu.node(A, VM) is None


def test_a_suspended_request_is_requested_again_on_its_rung_alone(stack) -> None:
    target, tpu = stack
    _request(A)
    tpu.grant(A, VM)
    tpu.suspend(A, VM)
    runner = RecordingRunner(deployed=(VM,))
    report = _round(target, runner)
    (decision,) = [d for _, d in report.decisions]
    assert (decision.action, str(decision.cause)) == ("replace", "preempted")
    ((targets,), (round_,)) = (runner.targets, runner.rounds)
    assert targets == [
        "urn:pulumi:queued::tpu-training::tpu-training:compute:PreemptibleTpuVm"
        "$pulumi-python:dynamic:Resource::demo-tpu-queued"
    ]
    assert round_ is not None and round_.rungs[VM] == Rung(A, "spot"), (
        "a fresh loss starts at the preferred rung"
    )


def test_a_request_that_failed_for_capacity_moves_one_rung_down_at_once(stack) -> None:
    target, tpu = stack
    _request(A)
    tpu.fail_queued(A, VM, 8, "There is no more capacity in the zone")
    runner = RecordingRunner(deployed=(VM,))
    report = _round(target, runner)
    (decision,) = [d for _, d in report.decisions]
    assert (decision.action, str(decision.cause)) == ("replace", "stockout")
    assert "declared on rung 1 (us-central1-b spot)" in decision.reason, decision.reason
    (round_,) = runner.rounds
    assert round_ is not None and round_.rungs[VM] == Rung(B, "spot") and round_.stockouts == {VM}
    assert report.stockout_moves == {VM}


def test_a_request_the_api_refused_is_kept_and_said_and_moves_nothing(stack) -> None:
    target, tpu = stack
    _request(A)
    tpu.fail_queued(A, VM, 3, "Invalid runtime version")
    report = _round(target, RecordingRunner(deployed=(VM,)))
    (decision,) = [d for _, d in report.decisions]
    assert (decision.action, decision.warn) == ("keep", True) and "Invalid runtime version" in decision.reason


def test_status_says_a_queued_vm_waits_for_capacity_and_since_when(
    stack, monkeypatch, tmp_path, capsys
) -> None:
    from support.fakes.loopback_gcs import LoopbackGcs
    from tpu_training_components.live import endpoints

    from tpu_training.commands import status

    target, tpu = stack
    _request(A)
    outputs = tmp_path / "outputs.json"
    outputs.write_text("{}")
    with LoopbackGcs() as storage:
        monkeypatch.setenv(endpoints.STORAGE_ENDPOINT_VARIABLE, storage.endpoint)
        monkeypatch.chdir(target.project.root)
        status.main(["--stack", "queued", "--outputs", str(outputs), "--json"])
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    created = tpu.queued_resource(A, VM)["createTime"].replace("T", " ")  # type: ignore[index]
    assert run["live"].startswith(
        f"queued resource is WAITING_FOR_RESOURCES: waiting for capacity since {created[:16]} UTC"
    )
