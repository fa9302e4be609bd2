"""The engine tier: a recovery round killed with SIGKILL in the middle of its update, as a host
crash, an OOM kill or a cancelled CI runner kills it, and the next round carrying on by itself.

Each test deploys once, then for each kill point of a TPU VM's or a Job's replacement (before the
delete, between the delete and the create, after the API made the new object and before the
engine recorded it: ``support.harness.engine.providers.HOLD_POINTS``) preempts or fails it, holds the
round's `pulumi up` there, kills the round and every process of the project (the recoverer, the
CLI, its plugins), and runs the next round. That round must end with one live generation, the
state holding exactly that one (no pending operation, nothing marked for replacement), no lock,
the outputs naming it and its cause the one the killed round began with; nothing else changed; a
further round and a `pulumi preview` find nothing to do. Every lock, pending operation and state
entry here is the real engine's (Pulumi v3.274.1); tpu_training/recovery/interrupted_updates.py says what it
leaves at each point."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.engine.engine import EngineProject, endpoints
from support.harness.engine.fakes import CloudTpuApi, KubernetesApi
from support.harness.engine.providers import HOLD_AT_VARIABLE, HOLD_VARIABLE, KUBERNETES_API_VARIABLE
from support.harness.engine.stacks import (
    FLEX_START_CONFIG,
    FLEX_START_VM,
    FLEX_START_ZONE,
    GKE_CONFIG,
    JOB,
    QUEUED_URN,
    TPU_VM_CONFIG,
    VM,
    ZONE,
)
from support.harness.waiting import eventually

pytestmark = [pytest.mark.engine, pytest.mark.slow]

STACK = "engine"
URN = f"urn:pulumi:{STACK}::tpu-training::"
VM_URN = f"{URN}tpu-training:compute:PreemptibleTpuVm$gcp:tpu/v2Vm:V2Vm::{VM}-vm"
JOB_URN = f"{URN}tpu-training:gke:TpuTrainingJob$kubernetes:batch/v1:Job::{JOB}-job"
FAILED = {"failed": 5, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
UNCHANGED = {"same", "read", "refresh"}


@pytest.fixture
def cloud():
    with CloudTpuApi() as tpu, LoopbackGcs() as storage:
        yield tpu, storage


def _processes_of(project: EngineProject) -> list[int]:
    """The processes that run with this project's PULUMI_HOME: its CLI, plugins, programs."""
    key = f"PULUMI_HOME={project.env['PULUMI_HOME']}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if key in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _kill(project: EngineProject, round_: subprocess.Popen) -> None:
    """SIGKILL to the round and to every process of the project, as a crash of its host."""
    round_.kill()
    deadline = time.monotonic() + 30
    while (left := _processes_of(project)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    assert not _processes_of(project), "every process of the killed round is gone"
    round_.communicate(timeout=30)


def _killed_at(project: EngineProject, point: str, hold: Path) -> None:
    """A recovery round (``--once``) killed while its update waits at ``point``."""
    hold.touch()
    project.env.update({HOLD_VARIABLE: str(hold), HOLD_AT_VARIABLE: point})
    try:
        killed = project.start_recover(STACK, "--once")
        started = Path(f"{hold}.started")
        assert eventually(lambda: started.exists() or killed.poll() is not None, 120), point
        assert killed.poll() is None, f"the round ended before {point}: {killed.communicate()}"
        _kill(project, killed)
    finally:
        hold.unlink(missing_ok=True)
        Path(f"{hold}.started").unlink(missing_ok=True)
        for variable in (HOLD_VARIABLE, HOLD_AT_VARIABLE):
            project.env.pop(variable, None)


def _locks(project: EngineProject) -> list[Path]:
    return list((project.root.parent / "state" / ".pulumi" / "locks").rglob("*.json"))


def _round(done: subprocess.CompletedProcess) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_settled(
    project: EngineProject,
    point: str,
    kind: str,
    name: str,
    generation: int,
    cause: str,
    others: dict[str, Any],
) -> None:
    """The state holds exactly the live generation of VM or Job ``name`` (``kind``: ``tpuVms`` or
    ``jobs``), nothing pending, no lock, nothing else changed; the stack's outputs (its root
    resource's, in the same read) name that generation, and ``lastRecoveries`` its ``cause``."""
    urn = VM_URN if kind == "tpuVms" else JOB_URN
    deployment = project.state(STACK)["deployment"]
    assert not deployment.get("pending_operations"), deployment.get("pending_operations")
    (entry,) = [r for r in deployment["resources"] if r["urn"] == urn]
    assert not entry.get("pendingReplacement")
    assert entry["replacementTrigger"] == generation
    assert _locks(project) == []
    resources = {r["urn"]: r for r in deployment["resources"]}
    assert _others(resources, urn) == others, f"{point}: nothing else changed"
    (root,) = [r for r in deployment["resources"] if r["type"] == "pulumi:pulumi:Stack"]
    outputs = root["outputs"]
    generations = "recoveryGenerations" if kind == "tpuVms" else "jobRecoveryGenerations"
    assert outputs[generations] == {name: generation}, point
    last = outputs["lastRecoveries"][kind][name]
    assert (last["generation"], last["cause"]) == (generation, cause), (point, last)


def _assert_nothing_left_to_do(project: EngineProject) -> None:
    again = _round(project.recover(STACK, "--once"))
    assert not again["upNeeded"] and again["settled"] == [] and again["releasedLocks"] == [], again
    preview = project.json("preview", "--stack", STACK)
    assert [s for s in project.steps(preview) if s[0] not in UNCHANGED] == []


def _others(resources: dict[str, Any], but: str) -> dict[str, Any]:
    """Every cloud or cluster resource but ``but``: its id and inputs (providers, whose secret
    kubeconfig is encrypted anew at every update, and components left out)."""
    return {
        urn: (r.get("id"), r.get("inputs"))
        for urn, r in resources.items()
        if r.get("custom") and urn != but and not r["type"].startswith("pulumi:providers:")
    }


def test_a_round_killed_anywhere_in_a_vms_replacement_is_carried_on_by_the_next(
    programs: str, cloud: tuple[CloudTpuApi, LoopbackGcs], tmp_path: Path
) -> None:
    tpu, _ = cloud
    project = EngineProject(tmp_path, endpoints(*cloud), programs)
    project.init(STACK, TPU_VM_CONFIG)
    project.deploy(STACK)
    others = _others(project.resources(STACK), VM_URN)

    for point in ("tpu-delete", "tpu-create", "tpu-created"):
        tpu.set_state(ZONE, VM, "PREEMPTED")
        _killed_at(project, point, tmp_path / "hold-file")
        assert _locks(project), f"{point}: the killed update left its lock"
        made = tpu.node(ZONE, VM)
        if point == "tpu-created":
            # The killed update made the new node: it is the one that must go on training.
            assert made is not None and made["state"] == "READY"
            generation = int(made["labels"]["recovery-generation"])
            resumed = project.start_recover(STACK, "--watch", "10")
            try:
                first = _first_line(resumed, 120)  # the watch's first round's report, once it ends
            finally:
                resumed.send_signal(signal.SIGTERM)
                out, err = resumed.communicate(timeout=120)
            assert resumed.returncode == 0, out[-3000:] + err[-3000:]
            assert first, f"the watch reported no round: {err[-3000:]}"
            report = json.loads(first)
            assert report["up"]["status"] == "succeeded", report  # its first round did it
            (decision,) = report["decisions"]
            assert decision["action"] == "keep" and decision["resumed"] and decision["cause"] == "preempted"
            assert any("adopted into the state" in line for line in report["settled"]), report
        else:
            report = _round(project.recover(STACK, "--once"))
        assert any("released the lock of a dead update" in line for line in report["releasedLocks"]), report
        node = tpu.node(ZONE, VM)
        assert node is not None and node["state"] == "READY", point
        if point == "tpu-created":
            assert node["createTime"] == made["createTime"], "the node the killed round made is kept"
        generation = int(node["labels"]["recovery-generation"])
        assert node["labels"]["recovery-cause"] == "preempted", (point, node["labels"])
        _assert_settled(project, point, "tpuVms", VM, generation, "preempted", others)
    _assert_nothing_left_to_do(project)


def _first_line(process: subprocess.Popen, seconds: float) -> str:
    """The first line ``process`` writes on its standard output within ``seconds`` ("" if none)."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], seconds)
    return process.stdout.readline() if ready else ""


def test_a_round_killed_anywhere_in_a_jobs_replacement_is_carried_on_by_the_next(
    programs: str, cloud: tuple[CloudTpuApi, LoopbackGcs], tmp_path: Path
) -> None:
    with KubernetesApi() as kube:
        project = EngineProject(
            tmp_path,
            {
                **endpoints(*cloud),
                KUBERNETES_API_VARIABLE: kube.endpoint,
                "KUBECONFIG": str(kube.kubeconfig(tmp_path)),
            },
            programs,
        )
        project.init(STACK, GKE_CONFIG)
        project.deploy(STACK)
        others = _others(project.resources(STACK), JOB_URN)

        # Before the delete, the Job is as the VM is (tpu-delete above: a lock, a pending delete
        # the engine drops); left out here for the suite's time.
        for point in ("kube-create", "kube-created"):
            (job,) = kube.jobs["default"]
            kube.put("jobs", "default", dict(job, status=FAILED))
            _killed_at(project, point, tmp_path / "hold-file")
            assert _locks(project), f"{point}: the killed update left its lock"
            made = list(kube.jobs.get("default", []))
            report = _round(project.recover(STACK, "--once"))
            assert any("released the lock of a dead update" in line for line in report["releasedLocks"]), (
                report
            )
            (live,) = kube.jobs["default"]
            if point == "kube-created":
                assert [j["metadata"]["uid"] for j in made] == [live["metadata"]["uid"]], (
                    "kept, not made again"
                )
            else:
                assert live["metadata"]["uid"] != job["metadata"]["uid"], point
            generation = int(live["metadata"]["labels"]["recovery-generation"])
            assert live["metadata"]["annotations"]["tpu-training/recovery-cause"] == "failed", point
            _assert_settled(project, point, "jobs", JOB, generation, "failed", others)
        _assert_nothing_left_to_do(project)


def test_a_round_killed_while_it_re_requests_a_queued_vm_is_carried_on_by_the_next(
    programs: str, cloud: tuple[CloudTpuApi, LoopbackGcs], tmp_path: Path
) -> None:
    """The kill points of a queued VM's replacement are the API's own: its delete and its
    create are long-running operations the provider waits on (``CloudTpuApi.unfinished_polls``
    holds them), killed once the API has done its part: the old request deleted, the new one
    taken. The next round finds it gone and requests it, or adopts the new request (its place in
    the queue kept)."""
    tpu, _ = cloud
    project = EngineProject(tmp_path, endpoints(*cloud), programs)
    project.init(STACK, FLEX_START_CONFIG)
    project.deploy(STACK)
    others = _others(project.resources(STACK), QUEUED_URN)

    def generation() -> int:
        request = tpu.queued_resource(FLEX_START_ZONE, FLEX_START_VM)
        assert request is not None
        return int(request["tpu"]["nodeSpec"][0]["node"]["labels"]["recovery-generation"])

    for point in ("deleted", "requested"):
        tpu.grant(FLEX_START_ZONE, FLEX_START_VM)
        tpu.suspend(FLEX_START_ZONE, FLEX_START_VM)  # the run reached its maxRunDuration
        old = generation()
        # The API does its part; its operation never says so.
        tpu.unfinished_polls, tpu.unfinished_only = None, "delete-" if point == "deleted" else "create-"
        killed = project.start_recover(STACK, "--once")
        try:

            def reached(point: str = point, old: int = old, killed: subprocess.Popen = killed) -> bool:
                request = tpu.queued_resource(FLEX_START_ZONE, FLEX_START_VM)
                done = request is None if point == "deleted" else request is not None and generation() != old
                return done or killed.poll() is not None

            assert eventually(reached, 120), point
            assert killed.poll() is None, f"the round ended before {point}: {killed.communicate()}"
            _kill(project, killed)
        finally:
            tpu.unfinished_polls = 0
        taken = tpu.queued_resource(FLEX_START_ZONE, FLEX_START_VM)
        report = _round(project.recover(STACK, "--once"))
        request = tpu.queued_resource(FLEX_START_ZONE, FLEX_START_VM)
        assert request is not None and request["state"]["state"] == "WAITING_FOR_RESOURCES", (point, report)
        if point == "requested":
            assert taken is not None and request["createTime"] == taken["createTime"], (
                "adopted, not asked again"
            )
            assert any("adopted into the state" in line for line in report["settled"]), report
        labels = request["tpu"]["nodeSpec"][0]["node"]["labels"]
        # Killed once the old request was deleted, the round had written its cause nowhere yet:
        # the next round finds the request missing, and says so.
        cause = "missing" if point == "deleted" else "flex-start-expired"
        assert labels["recovery-cause"] == cause, (point, labels)
        deployment = project.state(STACK)["deployment"]
        assert not deployment.get("pending_operations"), (point, deployment.get("pending_operations"))
        (entry,) = [r for r in deployment["resources"] if r["urn"] == QUEUED_URN]
        assert (
            not entry.get("pendingReplacement") and entry["outputs"].get("state") == "WAITING_FOR_RESOURCES"
        )
        assert entry["inputs"]["generation"] == generation() > old, entry["inputs"]
        assert _locks(project) == []
        assert _others({r["urn"]: r for r in deployment["resources"]}, QUEUED_URN) == others, point
    _assert_nothing_left_to_do(project)
