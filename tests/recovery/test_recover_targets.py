"""A recovery `pulumi up` changes only what recovery decided: it targets the stack and the
recovered VMs and Jobs, names every other pending change and leaves it alone, refuses to create
what was never deployed, and costs one VM at any stack size. Every CLI call has a deadline.

The engine semantics this relies on (targets diff only the targets, `--refresh` refreshes only
them, reads and stack outputs still happen, untargeted creates fail a dependent target) are cited
with file and line of pulumi/pulumi in ``tpu_training/recovery/recovery_targets.py``'s docstring; this
file pins
the URNs and flags the round hands to the CLI."""

from __future__ import annotations

import json
import os
import time

import pytest
import yaml
from support.fakes import stub_pulumi
from support.fakes.fake_kube_api import FakeKubernetesApi, job
from support.fakes.fake_tpu_api import FakeTpuApi
from support.harness.in_process import run_recover
from support.harness.program import REPO
from support.harness.recover_runs import (
    STACK_URN,
    VM_URN,
    RecordingRunner,
    dev_targets,
    live_dev_stack,
    recoverer,
    run_snippet,
    set_behaviour,
)
from tpu_training_components.domain.recovery_rounds import RoundOutcome

from tpu_training import exit_codes, offline, project_files
from tpu_training.recovery import (
    pulumi_process,
    recovery_round,
    recovery_targets,
    round_report,
    stack_probe,
)
from tpu_training.recovery.automation import AutomationUp, PendingChange
from tpu_training.recovery.pulumi_process import DeadlineCommand, PulumiUnavailable

ZONE = "europe-west4-a"
JOB_URN = (
    "urn:pulumi:dev::tpu-training::tpu-training:gke:TpuTrainingJob$kubernetes:batch/v1:Job::train-v6e-job"
)
BUCKET_URN = (
    "urn:pulumi:dev::tpu-training::tpu-training:storage:CheckpointBucket$gcp:storage/bucket:Bucket"
    "::tpu-training-dev-dev-ckpt-europe-west4-bucket"
)


@pytest.fixture
def apis(tmp_path, monkeypatch):
    """The dev stack live on loopback: demo-tpu PREEMPTED (to recover), train-v6e running."""
    with live_dev_stack(
        tmp_path, monkeypatch, "PREEMPTED", job("train-v6e", generation=1, active=4, ready=4)
    ) as apis:
        yield apis


def test_the_targets_are_the_stack_and_the_recovered_resources_alone():
    targets = dev_targets(("tpuVm", "demo-tpu"), ("job", "train-v6e"))
    assert targets.stack == STACK_URN
    assert targets.urns["demo-tpu"] == VM_URN
    assert targets.urns["train-v6e"].endswith("$kubernetes:batch/v1:Job::train-v6e-job")
    # What the engine needs in the state before it can replace the VM: its component, its
    # service account, network... (a pending create among them blocks a targeted update).
    assert (
        "urn:pulumi:dev::tpu-training::tpu-training:compute:PreemptibleTpuVm::demo-tpu"
        in (targets.dependencies[VM_URN])
    )


def test_a_recovery_round_runs_up_targeted_at_the_vm_alone(apis):
    runner = RecordingRunner()
    rec, said = recoverer(runner)
    report = rec.run_round()
    assert runner.previews == 1
    assert runner.targets == [[VM_URN]]
    assert report.targets == (VM_URN,)
    assert round_report.exit_status(report) == exit_codes.EXIT_OK


def test_pending_changes_beside_the_recovery_are_named_and_left_alone(apis):
    pending = [
        PendingChange(VM_URN, "replace"),  # the recovery itself
        PendingChange(BUCKET_URN, "update", ("lifecycleRules",)),
        PendingChange(JOB_URN, "replace", ("spec",)),
    ]
    runner = RecordingRunner(pending=pending)
    rec, said = recoverer(runner)
    report = rec.run_round()
    assert runner.targets == [[VM_URN]]
    assert [p.urn for p in report.pending] == [BUCKET_URN, JOB_URN]
    assert (
        "warning: pending change left alone (deploy it with `pulumi up`, or recover with --apply-pending): "
        "gcp:storage/bucket:Bucket tpu-training-dev-dev-ckpt-europe-west4-bucket: update (lifecycleRules)"
    ) in said
    assert any("kubernetes:batch/v1:Job train-v6e-job: replace (spec)" in line for line in said)
    assert report.to_json()["pendingChanges"][0] == {
        "urn": BUCKET_URN,
        "op": "update",
        "keys": ["lifecycleRules"],
    }


def test_apply_pending_is_an_explicit_full_update(apis):
    runner = RecordingRunner(pending=[PendingChange(BUCKET_URN, "update", ("labels",))])
    rec, said = recoverer(runner)
    rec.apply_pending = True
    rec.run_round()
    assert runner.targets == [None]  # no --target: everything pending is applied
    assert any("--apply-pending: applied too: gcp:storage/bucket:Bucket" in line for line in said)


def test_a_vm_never_deployed_is_a_pending_change_not_a_recovery(apis):
    # Added to the stack file but never deployed: absent from the cloud reads as "create", but
    # creating it is the user's edit, not recovery's to apply.
    runner = RecordingRunner(pending=[PendingChange(VM_URN, "create")], deployed=["train-v6e"])
    rec, said = recoverer(runner)
    report = rec.run_round()
    assert runner.targets == []
    assert report.outcome is RoundOutcome.BLOCKED and report.up is not None
    assert round_report.exit_status(report) == round_report.EXIT_UP_FAILED
    assert any("demo-tpu was never deployed: creating it is a pending change" in line for line in said)


def test_a_recovery_that_needs_an_undeployed_dependency_is_refused_not_half_done(apis):
    # The engine would fail a targeted update whose target depends on an untargeted create
    # (step_generator.go "untargeted create"): say so instead.
    (component,) = [
        u for u in dev_targets(("tpuVm", "demo-tpu")).dependencies[VM_URN] if u.endswith("::demo-tpu")
    ]
    runner = RecordingRunner(pending=[PendingChange(component, "create")])
    rec, said = recoverer(runner)
    report = rec.run_round()
    assert runner.targets == []
    assert report.outcome is RoundOutcome.BLOCKED and report.up is not None
    assert any(line.startswith("warning: demo-tpu cannot be recovered alone: it needs") for line in said)


def test_a_dry_run_shows_the_targeted_command(apis):
    rec, said = recoverer(None)
    report = rec.run_round()
    assert report.outcome is RoundOutcome.DRY_RUN and report.up is not None
    assert report.up.message.endswith(f"--target {VM_URN}` not run")
    assert STACK_URN not in report.up.message


def test_at_256_vms_a_round_that_recovers_one_vm_targets_one_vm(scratch_project, monkeypatch):
    zones = ["europe-west4-a", "us-central1-a", "us-east1-d", "us-east5-a"]
    vms = [
        {
            "name": f"vm-{i}",
            "zone": zones[i % 4],
            "acceleratorType": "v5litepod-8" if zones[i % 4] != "europe-west4-a" else "v3-8",
            "runtimeVersion": "tpu-vm-tf-2.16.1-pjrt",
            "provisioning": "spot",
            "trainCommand": "python3 train.py",
        }
        for i in range(256)
    ]
    (scratch_project / "Pulumi.big.yaml").write_text(
        yaml.safe_dump({"config": {"gcp:project": "big-project", "tpu-training:tpuVms": vms}})
    )
    with FakeTpuApi() as tpu:
        for vm in vms:
            tpu.add(vm["zone"], vm["name"], "PREEMPTED" if vm["name"] == "vm-77" else "READY",
                    labels={"recovery-generation": "1"})  # fmt: skip
        monkeypatch.setenv("TPU_API_ENDPOINT", tpu.endpoint)
        runner = RecordingRunner()
        report = recoverer(runner, "big", scratch_project)[0].run_round()
        assert len(tpu.calls) == 4  # one list call per zone
    assert report.ended_early is None, report.reason
    (targets,) = runner.targets
    assert len(targets) == 1 and targets[0].endswith("$gcp:tpu/v2Vm:V2Vm::vm-77-vm")


# --- through the CLI stub: the flags the Automation API passes ---------------------------------


def test_the_cli_gets_a_preview_then_an_up_with_exactly_these_targets(apis, stub):
    set_behaviour(stub, pending=[{"op": "update", "urn": BUCKET_URN, "diffReasons": ["labels"]}])
    done = run_recover("--stack", "dev", "--once", "--json")
    assert done.returncode == exit_codes.EXIT_OK, done.stderr
    commands = [c[1:] for c in stub_pulumi.calls(stub)]
    assert commands[:5] == [
        ["version"],
        ["stack", "select", "--stack", "dev"],
        # The state, for what an interrupted update may have left
        # (tpu_training/recovery/interrupted_updates.py).
        ["stack", "export", "--stack", "dev"],
        ["stack", "select", "--stack", "dev"],
        ["stack", "output", "--json", "--stack", "dev"],
    ]
    assert ["preview", "--json", "--stack", "dev"] in commands
    (up,) = [c for c in commands if c[0] == "up"]
    assert [up[i + 1] for i, word in enumerate(up) if word == "--target"] == [VM_URN]
    assert "--refresh" in up
    report = json.loads(done.stdout)
    assert report["targets"] == [VM_URN]
    assert [p["urn"] for p in report["pendingChanges"]] == [BUCKET_URN]
    assert (
        "gcp:storage/bucket:Bucket tpu-training-dev-dev-ckpt-europe-west4-bucket: update (labels)"
        in done.stderr
    )


@pytest.mark.parametrize("behaviour", [{"preview": "fail"}, {"preview": "garbage"}])
def test_a_preview_that_fails_changes_nothing_and_asks_to_try_later(apis, stub, behaviour):
    set_behaviour(stub, **behaviour)
    done = run_recover("--stack", "dev", "--once")
    assert done.returncode == exit_codes.EXIT_TRY_LATER, done.stderr
    assert not [c for c in stub_pulumi.calls(stub) if c[1] == "up"]
    assert "Traceback" not in done.stderr + done.stdout


def test_every_cli_call_has_a_deadline(stub, monkeypatch):
    monkeypatch.setattr(pulumi_process, "VERSION_TIMEOUT_SECONDS", 0.5)
    set_behaviour(stub, hang="version")
    started = time.monotonic()
    with pytest.raises(PulumiUnavailable, match=r"does not answer.*did not finish within 0\.5 s"):
        DeadlineCommand(grace_seconds=0.5)
    assert time.monotonic() - started < 5


def test_a_config_read_that_hangs_is_stopped_and_the_round_tries_later(
    apis, stub, monkeypatch, scratch_project
):
    monkeypatch.setattr(pulumi_process, "CLI_TIMEOUT_SECONDS", 1.0)
    (scratch_project / "Pulumi.dev.yaml").write_text(
        "config:\n  gcp:project: tpu-training-dev\n  tpu-training:tpuVms:\n    secure: AAABAHhlbmNyeXB0ZWQ=\n"
    )
    set_behaviour(stub, hang="config")
    cli = AutomationUp(scratch_project, lambda line: None, grace_seconds=0.5)
    rec = recovery_round.Recoverer(
        stack_probe.Target(project_files.load_project(scratch_project), "dev", "dev"),
        probe=stack_probe.Probe(),
        up=cli,
        say=lambda line: None,
        decrypt=cli.read_config,
    )
    started = time.monotonic()
    report = rec.run_round()
    assert time.monotonic() - started < 10
    assert report.outcome is RoundOutcome.TRY_LATER and "did not finish within 1 s" in report.reason
    assert round_report.exit_status(report) == exit_codes.EXIT_TRY_LATER


def test_cli_output_that_is_not_utf8_is_a_clear_error_not_a_traceback(stub):
    set_behaviour(stub, version_output="\xff\xfe\x00garbage\n")
    with pytest.raises(PulumiUnavailable, match="which is not a version"):
        AutomationUp(REPO, lambda line: None)


def test_a_dry_run_never_starts_the_cli_when_it_needs_no_secrets(apis, stub):
    set_behaviour(stub, hang="version")  # a CLI that would hang the run
    done = run_recover("--stack", "dev", "--once", "--dry-run")
    assert done.returncode == exit_codes.EXIT_OK, done.stderr
    assert stub_pulumi.calls(stub) == []
    assert f"--target {VM_URN}" in done.stdout


def test_engine_urns_chain_every_ancestor_type_but_the_root_stack():
    def registration(urn: str, type_: str, name: str, parent: str) -> offline.Registration:
        return offline.Registration(urn, type_, name, parent, False, {}, {})

    root = "urn:pulumi:s::p::pulumi:pulumi:Stack::p-s"
    # What the SDK's mock monitor records (its own URN scheme) ...
    outer = registration("urn:pulumi:s::p::pulumi:pulumi:Stack$a:b:Outer::o", "a:b:Outer", "o", root)
    inner = registration("urn:pulumi:s::p::a:b:Outer$a:b:Inner::i", "a:b:Inner", "i", outer.urn)
    leaf = registration("urn:pulumi:s::p::a:b:Inner$x:y:Leaf::l", "x:y:Leaf", "l", inner.urn)
    # ... and what the engine names them.
    assert recovery_targets.engine_urns([outer, inner, leaf], "p", "s") == {
        outer.urn: "urn:pulumi:s::p::a:b:Outer::o",
        inner.urn: "urn:pulumi:s::p::a:b:Outer$a:b:Inner::i",
        leaf.urn: "urn:pulumi:s::p::a:b:Outer$a:b:Inner$x:y:Leaf::l",
    }


def test_a_vm_lost_twice_is_recreated_without_refresh(apis):
    # Lost, then a targeted `up --refresh` dropped it from the state and failed to create it (no
    # capacity): the preview now says "create", but the stack deployed it. Recovery creates it,
    # without --refresh, which the engine refuses for a target missing from the state.
    runner = RecordingRunner(pending=[PendingChange(VM_URN, "create")])
    report = recoverer(runner)[0].run_round()
    assert runner.targets == [[VM_URN]] and runner.refreshes == [False]
    assert report.outcome is RoundOutcome.SUCCEEDED and report.up is not None


def test_a_pending_provider_change_blocks_a_targeted_update(apis):
    # The engine takes every provider into a targeted update: a pending provider change cannot be
    # left alone, and a new default provider version fails the update; say so, change nothing.
    provider = "urn:pulumi:dev::tpu-training::pulumi:providers:gcp::default_10_3_0"
    runner = RecordingRunner(pending=[PendingChange(provider, "create")])
    rec, said = recoverer(runner)
    report = rec.run_round()
    assert runner.targets == []
    assert report.outcome is RoundOutcome.BLOCKED and report.up is not None
    assert any(
        "a provider change is pending (pulumi:providers:gcp default_10_3_0: create)" in line for line in said
    )
    assert not any("left alone (deploy it" in line for line in said)


def test_a_process_the_cli_leaves_behind_holding_its_pipes_does_not_hold_the_call(stub):
    set_behaviour(stub, linger=30)
    started = time.monotonic()
    assert DeadlineCommand().version is not None
    assert time.monotonic() - started < 8


def test_unreadable_outputs_make_the_round_try_later(apis, stub):
    set_behaviour(stub, outputs="not an object")  # `pulumi stack output --json` prints a string
    done = run_recover("--stack", "dev", "--once")
    assert done.returncode == exit_codes.EXIT_TRY_LATER, done.stderr
    assert not [c for c in stub_pulumi.calls(stub) if c[1] == "up"]


_HANGING_JOBS_ROUND = """
import functools, os, sys
from tpu_training_components.live import kube_api
from tpu_training.commands import recover
from tpu_training.recovery import stack_probe
probe = stack_probe.Probe(read_jobs=functools.partial(kube_api.list_live_jobs, deadline=1.0))
sys.exit(recover.main(["--stack", "dev", "--once", "--dry-run"], probe=probe))
"""


@pytest.mark.slow
def test_a_jobs_list_past_its_deadline_exits_75_by_the_interpreters_own_exit(tmp_path):
    # The list's request is cut off at the deadline (no thread is left blocked in its socket read):
    # the exit status is the round's (75), never an abort from interpreter teardown (134).
    with FakeTpuApi() as tpu, FakeKubernetesApi() as kube:
        tpu.add(ZONE, "demo-tpu", "READY", labels={"recovery-generation": "3"})
        kube.add("default", job("train-v6e", generation=1, active=4, ready=4))
        kube.delay_seconds = 30
        env = dict(os.environ, TPU_API_ENDPOINT=tpu.endpoint, KUBECONFIG=str(kube.kubeconfig(tmp_path)))
        env.pop("TPU_TRAINING_OFFLINE", None)
        done = run_snippet(_HANGING_JOBS_ROUND, env)
    assert done.returncode == exit_codes.EXIT_TRY_LATER, done.stderr
    assert "DeadlineExceeded: listing Jobs in default" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_dry_run_exits_as_the_readme_says(apis, stub):
    # README "Hands-free recovery": 0 when it decided (upNeeded says whether a recovery is due),
    # 75 when live state could not be read; never a CLI call without secrets.
    tpu, _ = apis
    done = run_recover("--stack", "dev", "--once", "--dry-run", "--json")
    assert done.returncode == exit_codes.EXIT_OK, done.stderr
    assert json.loads(done.stdout)["upNeeded"] is True
    tpu.fail_with = 503
    done = run_recover("--stack", "dev", "--once", "--dry-run", "--json")
    assert done.returncode == exit_codes.EXIT_TRY_LATER, done.stderr
    assert stub_pulumi.calls(stub) == []
