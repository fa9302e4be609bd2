"""The engine tier: the real Pulumi CLI and Python language host (.ci/engine) deploy, recover and
destroy a stack of this project, with the gcp provider double of ``support.harness.engine`` and the
loopback fakes as the cloud, and, for its GKE scenarios, the real pulumi-kubernetes provider on the
tier's real Kubernetes control plane. Every step, target, replacement, lock and output here is the real
engine's; docs/engine-tests.md says what the doubles do not prove.

Skipped, with the reason, where .ci/engine has not built the engine; never in CI (CI=true), where
a missing engine fails every test here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.engine.compare import (
    compare_each,
    predicted_changes,
    previewed_changes,
    write_base_plan,
)
from support.harness.engine.control_plane import ControlPlane, conditions_of
from support.harness.engine.engine import REPO, EngineProject, endpoints
from support.harness.engine.fakes import CloudTpuApi
from support.harness.engine.providers import HOLD_VARIABLE
from support.harness.engine.stacks import GKE_CONFIG, JOB, TPU_VM_CONFIG, VM, ZONE, gke_stack
from support.harness.waiting import eventually

pytestmark = pytest.mark.engine

STACK = "engine"
SECRET = "wandb-key-5f2c"
URN = f"urn:pulumi:{STACK}::tpu-training::"
STACK_URN = f"{URN}pulumi:pulumi:Stack::tpu-training-{STACK}"
VM_URN_PREFIX = f"{URN}tpu-training:compute:PreemptibleTpuVm$gcp:tpu/v2Vm:V2Vm::"
SECOND_VM_URN = f"{VM_URN_PREFIX}second-tpu-vm"
JOB_URN = f"{URN}tpu-training:gke:TpuTrainingJob$kubernetes:batch/v1:Job::train-v6e-job"
WITHIN = 120.0
"""Seconds the real Job controller may take to act on a loaded two-core machine."""


@pytest.fixture
def cloud() -> Iterator[tuple[CloudTpuApi, LoopbackGcs]]:
    with CloudTpuApi() as tpu, LoopbackGcs() as storage:
        yield tpu, storage


@pytest.fixture
def project(programs: str, cloud: tuple[CloudTpuApi, LoopbackGcs], tmp_path: Path) -> EngineProject:
    return EngineProject(tmp_path, endpoints(*cloud), programs)


def _urns(steps: list[tuple[str, str]], op: str) -> list[str]:
    return sorted(urn for step_op, urn in steps if step_op == op)


@pytest.mark.slow  # every process started cold: among the tier's longest
def test_the_readme_deploy_steps_preview_up_output_and_destroy(
    programs: str, cloud: tuple[CloudTpuApi, LoopbackGcs], tmp_path: Path
) -> None:
    tpu, storage = cloud
    # The deploy steps start every program and plugin as a new interpreter, as the real CLI and
    # language host do (the other tests fork theirs warm from the program server); the teardown,
    # which proves nothing more about a cold start, forks them too.
    project = EngineProject(tmp_path, endpoints(*cloud))
    project.init(STACK, TPU_VM_CONFIG)
    # A secret as a user sets one: an API key in the VM's environment, encrypted in the stack file.
    project.set_secret(STACK, "tpu-training:tpuVms[0].env.WANDB_API_KEY", SECRET)
    assert SECRET not in (project.root / f"Pulumi.{STACK}.yaml").read_text()
    preview = project.json("preview", "--stack", STACK)
    creates = _urns(project.steps(preview), "create")
    assert f"{VM_URN_PREFIX}{VM}-vm" in creates, creates
    assert tpu.nodes == {}, "a preview creates nothing"

    project.pulumi("up", "--yes", "--stack", STACK)
    node = tpu.node(ZONE, VM)
    assert node is not None and node["state"] == "READY"
    assert node["schedulingConfig"] == {"preemptible": True}
    assert SECRET in node["metadata"]["startup-script"], "the program got the secret decrypted"
    outputs = project.json("stack", "output", "--stack", STACK)
    assert outputs["recoveryGenerations"] == {VM: int(node["labels"]["recovery-generation"])}, outputs
    assert SECRET not in json.dumps(project.state(STACK)), "the state keeps it encrypted"

    # The README's teardown: destroy is refused while the buckets are protected...
    project.fork_from(programs)
    refused = project.pulumi("destroy", "--yes", "--stack", STACK, check=False)
    assert refused.returncode != 0 and "because it is protected" in refused.stdout + refused.stderr
    assert tpu.node(ZONE, VM) is not None, "a refused destroy deletes nothing"
    # ...then protection is lifted in place, and destroy leaves the buckets (retainOnDelete).
    project.pulumi("config", "set", "--path", "tpu-training:bucket.protect", "false", "--stack", STACK)
    lifted = project.json("preview", "--stack", STACK)
    assert _urns(project.steps(lifted), "delete") == [] and _urns(project.steps(lifted), "replace") == []
    project.deploy(STACK)
    buckets = project.json("stack", "output", "checkpointBuckets", "--stack", STACK)
    project.pulumi("destroy", "--yes", "--stack", STACK)
    assert tpu.nodes == {ZONE: []}, "destroy deletes the VM"
    kept = sorted(f"gs://{name}" for name in storage.storage.buckets)
    assert kept == sorted(buckets.values()), "the checkpoint buckets outlive the stack"
    assert project.resources(STACK) == {}
    project.pulumi("stack", "rm", "--yes", "--stack", STACK)


def _what_it_holds(resource: Any) -> Any:
    """A state entry's id, inputs and outputs (not the engine's timestamps)."""
    return resource and {key: resource.get(key) for key in ("id", "inputs", "outputs")}


def _changed_in_the_cloud(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The URNs of the cloud and cluster resources whose id, inputs or outputs differ between two
    states. Not compared: components, and providers (a
    provider's secret kubeconfig is encrypted anew at every update)."""
    return sorted(
        urn
        for urn, resource in after.items()
        if resource.get("custom")
        and not resource["type"].startswith("pulumi:providers:")
        and _what_it_holds(resource) != _what_it_holds(before.get(urn))
    )


def _deployed(project: EngineProject) -> EngineProject:
    project.init(STACK, TPU_VM_CONFIG)
    project.deploy(STACK)
    return project


def test_a_preempted_vm_and_a_failed_job_are_recreated_in_one_round_and_nothing_else_changes(
    programs: str, cloud: tuple[CloudTpuApi, LoopbackGcs], kubernetes: ControlPlane, tmp_path: Path
) -> None:
    tpu, _ = cloud
    namespace = "engine-vm-and-job"
    project = kubernetes.project_with_the_real_provider(tmp_path, programs, cloud)
    project.init(STACK, gke_stack(namespace, tpuVms=TPU_VM_CONFIG["tpu-training:tpuVms"]))
    project.deploy(STACK)
    before = project.resources(STACK)
    generation = int(tpu.node(ZONE, VM)["labels"]["recovery-generation"])  # type: ignore[index]
    (deployed,) = kubernetes.workloads(namespace)
    tpu.set_state(ZONE, VM, "PREEMPTED")
    kubernetes.fail_pods_until_the_job_fails(namespace, JOB, WITHIN)

    done = project.recover(STACK, "--once")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    node = tpu.node(ZONE, VM)
    assert node is not None and node["state"] == "READY", "the engine re-created the node"
    new_generation = int(node["labels"]["recovery-generation"])
    assert new_generation > generation
    assert node["labels"]["recovery-cause"] == "preempted"
    (job,) = kubernetes.workloads(namespace)
    assert job["metadata"]["uid"] != deployed["metadata"]["uid"], "the engine re-created the Job"

    # The engine's own account of the update: those two replaced, everything else the same.
    assert project.last_update_changes(STACK) == {"replace": 2}
    after = project.resources(STACK)
    assert _changed_in_the_cloud(before, after) == sorted([f"{VM_URN_PREFIX}{VM}-vm", JOB_URN])
    outputs = project.json("stack", "output", "--stack", STACK)
    assert outputs["recoveryGenerations"] == {VM: new_generation}, "the outputs say what the state holds"
    assert outputs["jobRecoveryGenerations"][JOB] == int(job["metadata"]["labels"]["recovery-generation"])

    # A second round finds nothing to do and runs no update.
    again = project.recover(STACK, "--once")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert project.updates(STACK) == 2


def test_a_round_that_finds_the_stack_locked_by_another_update_does_nothing_and_exits_75(
    project: EngineProject, cloud: tuple[CloudTpuApi, LoopbackGcs], tmp_path: Path
) -> None:
    tpu, _ = cloud
    _deployed(project)
    tpu.set_state(ZONE, VM, "PREEMPTED")
    hold = tmp_path / "hold"
    hold.touch()
    project.env[HOLD_VARIABLE] = str(hold)
    first = project.start_recover(STACK, "--once")
    try:
        assert eventually(lambda: Path(f"{hold}.started").exists(), 120), (
            "the first update reaches the create"
        )
        locks = list((tmp_path / "state" / ".pulumi" / "locks").rglob("*.json"))
        second = project.recover(STACK, "--once")
        assert second.returncode == 75, second.stdout + second.stderr
        assert "another update holds the stack" in second.stderr, second.stderr
        # Its holder is a live `pulumi up` on this host: the lock is judged alive and left alone.
        assert "that process still runs here; left alone" in second.stderr, second.stderr
        assert json.loads(second.stdout)["releasedLocks"] == []
        assert len(locks) == 1 and locks[0].exists(), "the live update's lock is never released"
    finally:
        hold.unlink()
        out, err = first.communicate(timeout=300)
    assert first.returncode == 0, out + err
    # Nothing lost: the one update that ran re-created the node, and the state says so.
    node = tpu.node(ZONE, VM)
    assert node is not None and node["state"] == "READY"
    outputs = project.json("stack", "output", "--stack", STACK)
    assert outputs["recoveryGenerations"] == {VM: int(node["labels"]["recovery-generation"])}
    assert len(project.json("stack", "history", "--stack", STACK)) == 2


def test_a_pending_removal_does_not_fail_a_recovery_and_stays_pending(
    project: EngineProject, cloud: tuple[CloudTpuApi, LoopbackGcs]
) -> None:
    tpu, _ = cloud
    second = dict(TPU_VM_CONFIG["tpu-training:tpuVms"][0], name="second-tpu")
    project.init(
        STACK, {**TPU_VM_CONFIG, "tpu-training:tpuVms": [*TPU_VM_CONFIG["tpu-training:tpuVms"], second]}
    )
    project.deploy(STACK)
    assert tpu.node(ZONE, "second-tpu") is not None
    # The user removes the second VM from the stack file, and before any `pulumi up` the first
    # one is preempted: the round re-creates the first and leaves the removal to the user.
    project.set_config(STACK, "tpu-training:tpuVms", TPU_VM_CONFIG["tpu-training:tpuVms"])
    tpu.set_state(ZONE, VM, "PREEMPTED")

    done = project.recover(STACK, "--once")
    assert done.returncode == 0, done.stdout + done.stderr
    (round_,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    pending = [(change["op"], change["urn"]) for change in round_["pendingChanges"]]
    assert ("delete", SECOND_VM_URN) in pending, pending
    assert tpu.node(ZONE, VM)["state"] == "READY"  # type: ignore[index]
    assert tpu.node(ZONE, "second-tpu") is not None, "a recovery round deletes nothing it did not decide"
    assert SECOND_VM_URN in project.resources(STACK)

    # The user's own `pulumi up` then applies the removal.
    project.deploy(STACK)
    assert tpu.node(ZONE, "second-tpu") is None
    assert SECOND_VM_URN not in project.resources(STACK)


# (key, value) edits of the TPU VM stack that docs/offline-plan.md's table names, each applied
# alone to the deployed stack.
_VM = TPU_VM_CONFIG["tpu-training:tpuVms"][0]
DOCUMENTED_EDITS: dict[str, tuple[str, Any]] = {
    "trainCommand": ("tpu-training:tpuVms", [dict(_VM, trainCommand="python3 /opt/trainer/train.py --v2")]),
    "env": ("tpu-training:tpuVms", [dict(_VM, env={"XLA_FLAGS": "--xla_dump_to=/tmp"})]),
    "runtimeVersion": ("tpu-training:tpuVms", [dict(_VM, runtimeVersion="tpu-vm-tf-2.17.0-pjrt")]),
    "provisioning": ("tpu-training:tpuVms", [dict(_VM, provisioning="spot")]),
    "restartGeneration": ("tpu-training:tpuVms", [dict(_VM, restartGeneration=1)]),
    "labels": ("tpu-training:labels", {"team": "research"}),
    "bucket retention": ("tpu-training:bucket", {"noncurrentVersionRetentionDays": 14}),
}


def test_compare_to_predicts_what_the_engine_previews_for_each_documented_tpu_vm_edit(
    project: EngineProject, tmp_path: Path
) -> None:
    _deployed(project)
    disagreements, _ = compare_each(project, STACK, DOCUMENTED_EDITS, tmp_path / "base.json")
    assert not disagreements, json.dumps(disagreements, indent=1)


def test_the_policy_pack_is_enforced_by_the_real_cli(project: EngineProject, policy_python: Path) -> None:
    project.init(STACK, TPU_VM_CONFIG)
    pack = str(REPO / "policy")
    clean = project.pulumi("preview", "--stack", STACK, "--policy-pack", pack, check=False)
    assert clean.returncode == 0, clean.stdout[-4000:] + clean.stderr[-4000:]
    assert "tpu-training" in clean.stdout and "Policies:" in clean.stdout, clean.stdout[-2000:]

    # The pack's process ends with the command, as the real language host's does.
    assert eventually(lambda: not _policy_packs_of(project)), _policy_packs_of(project)

    project.set_config(STACK, "tpu-training:tpuVms", [dict(_VM, externalIp=True)])
    refused = project.pulumi("preview", "--stack", STACK, "--policy-pack", pack, check=False)
    assert refused.returncode != 0, refused.stdout[-4000:]
    assert "tpu-vm-no-external-ip" in refused.stdout, refused.stdout[-4000:]
    assert "mandatory" in refused.stdout, refused.stdout[-4000:]
    assert eventually(lambda: not _policy_packs_of(project)), _policy_packs_of(project)


def _policy_packs_of(project: EngineProject) -> list[int]:
    """The running policy packs (``python -m pulumi.policy``) started for this project's commands:
    those whose environment has the project's ``PULUMI_HOME``."""
    home = f"PULUMI_HOME={project.env['PULUMI_HOME']}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if b"pulumi.policy" in (entry / "cmdline").read_bytes().split(b"\0") and home in (
                entry / "environ"
            ).read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # not a process, or one that ended meanwhile
            continue
    return found


def test_a_failed_job_waits_for_a_pending_pool_edit_then_is_recreated_alone_by_recover(
    programs: str, cloud: tuple[CloudTpuApi, LoopbackGcs], kubernetes: ControlPlane, tmp_path: Path
) -> None:
    namespace = "engine-pool-edit"
    project = kubernetes.project_with_the_real_provider(tmp_path, programs, cloud)
    project.init(STACK, gke_stack(namespace))
    project.deploy(STACK)
    (deployed,) = kubernetes.workloads(namespace)
    uid = deployed["metadata"]["uid"]
    before = project.resources(STACK)
    kubernetes.fail_pods_until_the_job_fails(namespace, JOB, WITHIN)

    # First with an edit of the Job's pool in the stack file, not yet deployed: the Job is not
    # recovered alone onto a pool that is about to change (the round is blocked, exit 1).
    pool = GKE_CONFIG["tpu-training:nodePools"][0]
    project.set_config(STACK, "tpu-training:nodePools", [dict(pool, maxRunDuration="72h")])
    blocked = project.recover(STACK, "--once")
    assert blocked.returncode == 1, blocked.stdout[-3000:] + blocked.stderr[-3000:]
    (round_,) = [json.loads(line) for line in blocked.stdout.splitlines() if line.startswith("{")]
    assert round_["up"]["status"] == "blocked", round_["up"]
    pending = [(change["op"], change["urn"].rsplit("::", 1)[-1]) for change in round_["pendingChanges"]]
    assert pending == [("replace", "v6e-4x4-pool")], pending
    assert [j["metadata"]["uid"] for j in kubernetes.workloads(namespace)] == [uid], (
        "a blocked round changes nothing"
    )
    assert _changed_in_the_cloud(before, project.resources(STACK)) == []

    # Without the pool edit, the round re-creates the Job alone.
    project.set_config(STACK, "tpu-training:nodePools", [pool])
    done = project.recover(STACK, "--once")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (job,) = kubernetes.workloads(namespace)
    assert job["metadata"]["name"] == JOB and job["metadata"]["uid"] != uid, "the engine re-created the Job"
    assert not conditions_of(job), "a new Job, not failed"
    assert project.last_update_changes(STACK) == {"replace": 1}
    assert _changed_in_the_cloud(before, project.resources(STACK)) == [JOB_URN]


def test_a_job_becomes_a_jobset_and_back_without_re_creating_the_runs_objects(
    programs: str, cloud: tuple[CloudTpuApi, LoopbackGcs], kubernetes: ControlPlane, tmp_path: Path
) -> None:
    namespace = "engine-job-to-jobset"
    project = kubernetes.project_with_the_real_provider(tmp_path, programs, cloud)
    pool = dict(GKE_CONFIG["tpu-training:nodePools"][0], slices=2)
    (job,) = gke_stack(namespace)["tpu-training:jobs"]
    # The control plane runs the JobSet controller: the stack installs no release of it.
    cluster = dict(GKE_CONFIG["tpu-training:cluster"], installJobSet=False)
    project.init(STACK, gke_stack(namespace, nodePools=[pool], cluster=cluster))
    project.deploy(STACK)
    kept = kubernetes.uids(namespace, "configmaps", "serviceaccounts", "services")
    # The run's own three (beside what the cluster puts in every namespace).
    runs = {path.split("/")[0] for path in kept if not path.endswith(("/default", "/kube-root-ca.crt"))}
    assert runs == {"configmaps", "serviceaccounts", "services"}, kept

    for slices, workloads in ((2, "jobsets"), (1, "jobs")):
        base = tmp_path / f"base-{slices}.json"
        write_base_plan(project, STACK, base)
        project.set_config(STACK, "tpu-training:jobs", [dict(job, slices=slices)])
        predicted, previewed = predicted_changes(project, STACK, base), previewed_changes(project, STACK)
        assert predicted == previewed, f"slices -> {slices}: --compare-to {predicted}, the engine {previewed}"
        replaced = sorted(urn.rsplit("::", 1)[-1] for urn, op in previewed.items() if op == "replace")
        assert replaced == [f"train-v6e-{'jobset' if slices > 1 else 'job'}"], previewed
        project.deploy(STACK)
        # The new workload, alone once a JobSet's own Jobs (train-v6e-slice-N), which the garbage
        # collector deletes after it, are gone.
        alone = eventually(lambda kind=workloads: kubernetes.workload_names(namespace, kind) == [JOB], WITHIN)
        assert alone, kubernetes.workloads(namespace, workloads)
        # The old workload is gone (a JobSet's own Jobs, train-v6e-slice-N, are not it).
        other = "jobs" if workloads == "jobsets" else "jobsets"
        assert eventually(lambda kind=other: JOB not in kubernetes.workload_names(namespace, kind), WITHIN), (
            kubernetes.workloads(namespace, other)
        )
        # The run's ServiceAccount, ConfigMap and Service are the ones first deployed.
        assert kubernetes.uids(namespace, "configmaps", "serviceaccounts", "services") == kept


def test_two_stockouts_move_a_preempted_vm_one_rung_down_its_ladder(
    project: EngineProject, cloud: tuple[CloudTpuApi, LoopbackGcs], tmp_path: Path
) -> None:
    tpu, _ = cloud
    second_zone = "europe-west4-b"
    ladder = dict(_VM, zones=[ZONE, second_zone])
    del ladder["zone"]
    project.init(STACK, {**TPU_VM_CONFIG, "tpu-training:tpuVms": [ladder]})
    project.deploy(STACK)
    assert tpu.node(ZONE, VM) is not None
    records = tmp_path / "records.jsonl"
    tpu.set_state(ZONE, VM, "PREEMPTED")

    # The API refuses the re-create as a stockout does, twice (recovery.ladder.attempts' default):
    # each round's real `pulumi up` fails, and the VM stays on its rung.
    tpu.refuse_creates = 2
    for _ in range(2):
        failed = project.recover(STACK, "--once", "--records", str(records))
        assert failed.returncode != 0, failed.stdout[-3000:]
        # The round's --json says what the API answered, not the CLI's last line (a plugin warning).
        message = json.loads(failed.stdout)["up"]["message"]
        assert message.startswith("error: creating TPU node demo-tpu: 429"), message
        assert "RESOURCE_EXHAUSTED" in message and "warning" not in message, message
        assert tpu.node(second_zone, VM) is None, "no move before the attempts are spent"
    # The third round declares it on the next rung (the second zone), where the create works.
    moved = project.recover(STACK, "--once", "--records", str(records))
    assert moved.returncode == 0, moved.stdout[-3000:] + moved.stderr[-3000:]
    node = tpu.node(second_zone, VM)
    assert node is not None and node["state"] == "READY", tpu.nodes
    assert node["labels"]["recovery-cause"] == "stockout"
    vm = project.json("stack", "output", "tpuVms", "--stack", STACK)[VM]
    assert (vm["rung"], vm["zone"]) == (1, second_zone), vm
    assert [r["cause"] for r in map(json.loads, records.read_text().splitlines()) if r.get("name") == VM][
        -1:
    ] == ["stockout"], records.read_text()[-2000:]
