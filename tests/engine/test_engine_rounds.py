"""The engine tier, for what a recovery round does around its update: a round against a state with
a removed Job, a Job never deployed and a pool edit pending targets the recoveries alone; a stack
with secrets is read decrypted through the CLI; `status` reads the outputs through the CLI; a
missing stack still prints its round; SIGTERM in the middle of an update lets the update finish.
These ran against the stub CLI (tests/support/fakes/stub_pulumi.py) before; here every CLI call
is the real CLI's, with the real language host; the GKE round's Jobs are on the real control plane,
written by the real pulumi-kubernetes provider and failed by the real Job controller."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Any, Iterator

import pytest
from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.engine.control_plane import ControlPlane
from support.harness.engine.engine import EngineProject, endpoints
from support.harness.engine.fakes import CloudTpuApi
from support.harness.engine.providers import HOLD_AT_VARIABLE, HOLD_VARIABLE
from support.harness.engine.stacks import GKE_CONFIG, JOB, POOL, TPU_VM_CONFIG, VM, ZONE, gke_stack
from support.harness.waiting import eventually

from tpu_training import exit_codes

STACK = "rounds"
SECRET = "wandb-4f1e9c0d-not-a-real-key"
WITHIN = 120.0
"""Seconds the real Job controller may take to act on a loaded two-core machine."""


@pytest.fixture
def cloud() -> Iterator[tuple[CloudTpuApi, LoopbackGcs]]:
    with CloudTpuApi() as tpu, LoopbackGcs() as storage:
        yield tpu, storage


@pytest.fixture
def project(programs: str, cloud: tuple[CloudTpuApi, LoopbackGcs], tmp_path: Path) -> EngineProject:
    return EngineProject(tmp_path, endpoints(*cloud), programs)


def _rounds(done: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _uid(kubernetes: ControlPlane, namespace: str, name: str) -> str:
    (item,) = [j for j in kubernetes.workloads(namespace) if j["metadata"]["name"] == name]
    return str(item["metadata"]["uid"])


def test_a_round_beside_a_removed_job_a_new_job_and_a_pool_edit_targets_the_recoveries_alone(
    programs: str, cloud: tuple[CloudTpuApi, LoopbackGcs], kubernetes: ControlPlane, tmp_path: Path
) -> None:
    tpu, _ = cloud
    namespace = "rounds-beside-edits"
    project = kubernetes.project_with_the_real_provider(tmp_path, programs, cloud)
    pool_b = dict(GKE_CONFIG["tpu-training:nodePools"][0], name="v6e-b", slices=2)
    (train,) = gke_stack(namespace)["tpu-training:jobs"]
    jobs = [
        train,
        dict(train, name="train-b", nodePool="v6e-b"),
        dict(train, name="old-job", nodePool="v6e-b"),
    ]
    project.init(
        STACK,
        gke_stack(
            namespace,
            tpuVms=TPU_VM_CONFIG["tpu-training:tpuVms"],
            nodePools=[GKE_CONFIG["tpu-training:nodePools"][0], pool_b],
            jobs=jobs,
        ),
    )
    project.deploy(STACK)
    uids = {name: _uid(kubernetes, namespace, name) for name in (JOB, "train-b", "old-job")}
    generations = project.json("stack", "output", "jobRecoveryGenerations", "--stack", STACK)

    # Edits in the stack file, not deployed: old-job removed, train-new added, JOB's pool edited.
    project.set_config(
        STACK, "tpu-training:jobs", [jobs[0], jobs[1], dict(train, name="train-new", nodePool="v6e-b")]
    )
    project.set_config(
        STACK,
        "tpu-training:nodePools",
        [dict(GKE_CONFIG["tpu-training:nodePools"][0], maxRunDuration="72h"), pool_b],
    )
    # Then the faults: the VM preempted, JOB and train-b failed.
    tpu.set_state(ZONE, VM, "PREEMPTED")
    for name in (JOB, "train-b"):
        kubernetes.fail_pods_until_the_job_fails(namespace, name, WITHIN)

    done = project.recover(STACK, "--once")
    assert done.returncode == exit_codes.EXIT_OK, done.stdout[-3000:] + done.stderr[-3000:]
    (round_,) = _rounds(done)
    assert sorted(urn.rsplit("::", 1)[-1] for urn in round_["targets"]) == [f"{VM}-vm", "train-b-job"]
    pending = sorted((c["op"], c["urn"].rsplit("::", 1)[-1]) for c in round_["pendingChanges"])
    assert ("delete", "old-job") in pending and ("create", "train-new") in pending, pending
    assert ("replace", f"{POOL}-pool") in pending, pending
    assert "train-v6e is not recovered" in done.stderr and "--apply-pending" in done.stderr

    # Only the recoveries happened: the VM and train-b anew; JOB (blocked by its pool's edit) and
    # old-job (removed, left for the user's `up`) as they were; train-new not created.
    assert tpu.node(ZONE, VM)["state"] == "READY"  # type: ignore[index]
    assert _uid(kubernetes, namespace, "train-b") != uids["train-b"]
    assert (_uid(kubernetes, namespace, JOB), _uid(kubernetes, namespace, "old-job")) == (
        uids[JOB],
        uids["old-job"],
    )
    assert "train-new" not in kubernetes.workload_names(namespace)
    outputs = project.json("stack", "output", "jobRecoveryGenerations", "--stack", STACK)
    assert set(outputs) == {JOB, "train-b", "old-job"}, "train-new was never deployed"
    assert (outputs[JOB], outputs["old-job"]) == (generations[JOB], generations["old-job"])
    assert outputs["train-b"] > generations["train-b"]


def test_a_stack_with_secrets_is_recovered_with_them_and_status_reads_its_outputs_through_the_cli(
    project: EngineProject, cloud: tuple[CloudTpuApi, LoopbackGcs]
) -> None:
    tpu, _ = cloud
    project.init(STACK, TPU_VM_CONFIG)
    project.set_secret(STACK, "tpu-training:tpuVms[0].env.WANDB_API_KEY", SECRET)
    project.deploy(STACK)
    updates = project.updates(STACK)

    # Healthy: the round reads the stack's config decrypted through the CLI and finds the VM by
    # its real name (a stand-in for the secret list would look for a node that is not there).
    kept = project.recover_round(STACK)
    assert [(d["name"], d["action"]) for d in kept["decisions"]] == [(VM, "keep")], kept
    assert kept["up"]["status"] == "not-run" and project.updates(STACK) == updates

    tpu.set_state(ZONE, VM, "PREEMPTED")
    done = project.recover(STACK, "--once")
    assert done.returncode == exit_codes.EXIT_OK, done.stdout[-3000:] + done.stderr[-3000:]
    (line,) = done.stdout.splitlines()
    round_ = json.loads(line)
    assert round_["upNeeded"] is True and round_["up"]["status"] == "succeeded", round_
    assert "  | Updating (rounds)" in done.stderr
    node = tpu.node(ZONE, VM)
    assert node is not None and SECRET in node["metadata"]["startup-script"], "the program got the secret"
    assert SECRET not in done.stdout + done.stderr

    # `tpu-training status` with no --outputs reads them through the CLI (`pulumi stack output`).
    shown = project.python("-m", "tpu_training", "status", "--stack", STACK, "--json")
    assert shown.returncode in (exit_codes.EXIT_OK, exit_codes.EXIT_UNAVAILABLE), shown.stderr[-3000:]
    status = json.loads(shown.stdout)
    assert json.dumps(status).count("preempted") >= 1, status

    # A stack file whose stack the backend does not have (a clone on another machine): the round
    # says so, as JSON, and changes nothing.
    shutil.copy(project.root / f"Pulumi.{STACK}.yaml", project.root / "Pulumi.no-such-stack.yaml")
    missing = project.recover("no-such-stack", "--once")
    assert missing.returncode == exit_codes.EXIT_UNAVAILABLE, missing.stdout[-2000:] + missing.stderr[-2000:]
    (line,) = missing.stdout.splitlines()
    assert "pulumi stack init no-such-stack" in json.loads(line)["unavailable"]


def test_sigterm_during_an_update_lets_the_update_finish_then_ends_the_watch(
    project: EngineProject, cloud: tuple[CloudTpuApi, LoopbackGcs], tmp_path: Path
) -> None:
    tpu, _ = cloud
    project.init(STACK, TPU_VM_CONFIG)
    project.deploy(STACK)
    tpu.set_state(ZONE, VM, "PREEMPTED")
    hold = tmp_path / "hold"
    hold.touch()
    project.env.update({HOLD_VARIABLE: str(hold), HOLD_AT_VARIABLE: "tpu-create"})
    watch = project.start_recover(STACK, "--watch", "3600")
    try:
        # Bounds on liveness, not speed.
        assert eventually(lambda: Path(f"{hold}.started").exists() or watch.poll() is not None, 120)
        assert watch.poll() is None, watch.communicate()
        watch.send_signal(signal.SIGTERM)
        # The watch stays for its update, held in the middle of the VM's create.
        assert not eventually(lambda: watch.poll() is not None, 1.0), (
            "the watch left in the middle of `pulumi up`"
        )
        hold.unlink()
        stdout, stderr = watch.communicate(timeout=120)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
    assert watch.returncode == exit_codes.EXIT_OK, stderr[-3000:]
    assert [r["up"]["status"] for r in map(json.loads, stdout.splitlines())] == ["succeeded"]
    assert "SIGTERM: stopping after this round" in stderr
    node = tpu.node(ZONE, VM)
    assert node is not None and node["state"] == "READY"
    assert not list((tmp_path / "state" / ".pulumi" / "locks").rglob("*.json")), "the update ended cleanly"


def test_a_round_whose_stdout_is_closed_still_recovers_and_prints_no_traceback(
    project: EngineProject, cloud: tuple[CloudTpuApi, LoopbackGcs]
) -> None:
    tpu, _ = cloud
    project.init(STACK, TPU_VM_CONFIG)
    project.deploy(STACK)
    generation = tpu.node(ZONE, VM)["labels"]["recovery-generation"]  # type: ignore[index]
    tpu.set_state(ZONE, VM, "PREEMPTED")
    round_ = project.start_recover(STACK, "--once")
    assert round_.stdout is not None
    round_.stdout.close()  # whoever read it went away at once
    _, stderr = round_.communicate(timeout=300)
    assert round_.returncode == exit_codes.EXIT_OK, stderr[-3000:]
    assert "Traceback" not in stderr
    node = tpu.node(ZONE, VM)
    assert node is not None and node["state"] == "READY"
    assert node["labels"]["recovery-generation"] != generation, "the recovery still ran"
