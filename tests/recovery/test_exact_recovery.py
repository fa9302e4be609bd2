"""A recovery round exact at the engine: it never names the root stack as a target, its outputs
say what the state holds after a targeted update, and it never re-creates a Job or JobSet half
old (its node pool or run parameters with an edit nobody has deployed).

What the engine does, read in Pulumi's own source (pulumi/pulumi at
1b5949891b3cefcb9974752b24a5ecef0acc86c8, v3.259.0-14; ``sg`` = pkg/resource/deploy/step_generator.go):

- the root stack and every provider are always part of a targeted update
  (sg ``generateSteps``: ``isImplicitlyTargetedResource``, l.1287-1300), and the stack's outputs
  are written at the end of the update (pkg/resource/deploy/step_executor.go
  ``executeRegisterResourceOutputs``, l.212-270);
- a named target's dependents and children may be deleted (sg ``getTargetDependents``,
  l.2543-2573, from ``determineAllowedResourcesToDeleteFromTargets``); a delete of one that is not
  itself named fails the update, error 2014 "will be destroyed but was not specified in --target
  list" (sg ``GenerateDeletes``, l.2510-2535; sdk/go/common/diag/errors.go l.79-82). Every
  resource is a child of the root stack, so naming it fails every round while any resource
  removed from the stack file waits for a deploy; not named, the removed resource gets an
  untargeted same step and stays (sg l.2445-2452);
- an untargeted resource keeps its old inputs and outputs (sg l.1313-1317 "If not targeted, stub
  out the provider check and use the old inputs directly", l.1555-1558), and an untargeted one
  not in the state is not created: a skipped create, not written to the checkpoint, whose outputs
  the program sees unknown (sg l.1760-1780; pkg/resource/deploy/step.go ``NewSkippedCreateStep``,
  ``SameStep.Apply``);
- the CLI hands its environment to the language host (sdk/go/common/resource/plugin/plugin.go
  ``ExecPlugin``, l.500-505, l.601-603) and the Python host to the program
  (sdk/python/cmd/pulumi-language-python/main.go ``Run``, l.1066-1094): that is how
  ``TPU_TRAINING_RECOVERY_ROUND`` reaches the program.

The whole round against the real engine (a removed Job, a Job never deployed, a pool edit beside
the recoveries) is tests/engine/test_engine_rounds.py's first test.
"""

from __future__ import annotations

import copy
import os

import pytest
from support.fakes.fake_kube_api import job
from support.harness.program import dev_config, run_stack
from support.harness.recover_runs import (
    STACK_URN,
    VM_URN,
    RecordingRunner,
    dev_targets,
    live_dev_stack,
    recoverer,
)
from tpu_training_components.domain.capacity_ladder import Rung
from tpu_training_components.domain.recovery_rounds import ROUND_ENV, RecoveryRound, RoundOutcome, as_deployed
from tpu_training_components.errors import InvalidArgument

from tpu_training import exit_codes, offline
from tpu_training.recovery import recovery_targets, round_report
from tpu_training.recovery.automation import PendingChange

ZONE = "europe-west4-a"
FAILED = (("Failed", "True", "BackoffLimitExceeded"),)
PROJECT = "tpu-training"
COMPONENTS = f"urn:pulumi:dev::{PROJECT}::tpu-training:gke"
REMOVED = f"{COMPONENTS}:TpuTrainingJob::old-job"
"""A Job removed from the stack file whose deletion nobody has deployed: still in the state."""
REMOVED_JOB = f"{COMPONENTS}:TpuTrainingJob$kubernetes:batch/v1:Job::old-job-job"


def job_urn(name: str) -> str:
    return f"{COMPONENTS}:TpuTrainingJob$kubernetes:batch/v1:Job::{name}-job"


def pool_urn(name: str) -> str:
    return f"{COMPONENTS}:FlexStartTpuNodePool$gcp:container/nodePool:NodePool::{name}-pool"


@pytest.fixture
def apis(tmp_path, monkeypatch):
    """The dev stack live on loopback: demo-tpu PREEMPTED, train-v6e Failed: both to recover."""
    with live_dev_stack(
        tmp_path, monkeypatch, "PREEMPTED", job("train-v6e", generation=1, conditions=FAILED)
    ) as apis:
        yield apis


# --- 1. the root stack is never a target --------------------------------------------------------


def test_a_removed_resource_waiting_for_a_deploy_is_left_alone_and_the_root_is_never_a_target(apis):
    removed = [PendingChange(REMOVED, "delete"), PendingChange(REMOVED_JOB, "delete")]
    runner = RecordingRunner(pending=removed)
    rec, said = recoverer(runner)
    report = rec.run_round()
    (targets,) = runner.targets
    assert STACK_URN not in targets  # naming it would make old-job an allowed delete, and fail
    assert targets == [VM_URN, job_urn("train-v6e")]
    assert any(line.endswith("tpu-training:gke:TpuTrainingJob old-job: delete") for line in said)
    assert round_report.exit_status(report) == exit_codes.EXIT_OK


# --- 2. outputs say what the state holds --------------------------------------------------------

PREVIOUS = {
    "recoveryGenerations": {"demo-tpu": 3},
    "jobRecoveryGenerations": {"train-v6e": 1, "old-job": 5},
    "jobs": {"old-job": {"namespace": "default"}},
    "nodePools": {"v6e-4x4": {"topology": "2x4"}},  # deployed before a pool edit
    "trainingEnvironments": {"demo-tpu": {"OLD": "1"}},
}


def run_program(round_: RecoveryRound | None, previous=PREVIOUS, config=None) -> offline.ProgramRun:
    """The stack program as a `pulumi up` runs it, live state read from the loopback APIs, told
    of ``round_`` as `tpu-training recover` tells it."""
    saved = {name: os.environ.pop(name, None) for name in (ROUND_ENV, "TPU_TRAINING_OFFLINE")}
    if round_ is not None:
        os.environ[ROUND_ENV] = round_.to_env()
    try:
        return run_stack(config or dev_config(), previous_outputs=copy.deepcopy(previous))
    finally:
        os.environ.pop(ROUND_ENV, None)
        os.environ.update({k: v for k, v in saved.items() if v is not None})


def test_after_a_targeted_update_the_outputs_say_what_the_state_holds(apis):
    # The round recovers demo-tpu alone (train-v6e is blocked, say). The program decides for both,
    # but the engine changes demo-tpu only: train-v6e keeps its deployed generation, old-job is
    # still in the state, and the pool keeps its deployed shape.
    outputs = run_program(RecoveryRound(targeted=True, tpu_vms=frozenset({"demo-tpu"}))).outputs
    assert outputs["recoveryGenerations"]["demo-tpu"] > 3  # recovered: its new generation
    assert outputs["jobRecoveryGenerations"] == {"train-v6e": 1, "old-job": 5}
    assert outputs["nodePools"] == PREVIOUS["nodePools"]
    assert outputs["jobs"] == PREVIOUS["jobs"]  # train-v6e was never listed, so it is not now
    assert outputs["trainingEnvironments"]["demo-tpu"] != {"OLD": "1"}  # its new one, deployed now


def test_a_full_update_lists_every_configured_vm_and_job(apis):
    outputs = run_program(None).outputs
    assert set(outputs["jobRecoveryGenerations"]) == {"train-v6e"}
    assert outputs["jobRecoveryGenerations"]["train-v6e"] > 1
    assert outputs["nodePools"]["v6e-4x4"]["topology"] == "4x4"


def test_a_job_never_deployed_stays_out_of_the_outputs_of_a_targeted_update(apis):
    # train-v6e was never deployed (no output names it): untargeted, the engine skips its create.
    previous = {"recoveryGenerations": {"demo-tpu": 3}}
    outputs = run_program(RecoveryRound(targeted=True, tpu_vms=frozenset({"demo-tpu"})), previous).outputs
    assert outputs["jobRecoveryGenerations"] == {}
    assert outputs["jobs"] == {}


def test_as_deployed_keeps_removed_ones_and_leaves_out_never_deployed_ones():
    previous = {"kept": 1, "removed": 2, "recovered": 3}
    new = {"kept": 10, "recovered": 30, "never-deployed": 40}
    assert as_deployed(previous, new, {"recovered"}) == {"kept": 1, "removed": 2, "recovered": 30}
    assert as_deployed(None, new, {"recovered"}) == {"recovered": 30}


@pytest.mark.parametrize("text", ["", "{}", "[1]", '{"targeted": "yes", "tpuVms": [], "jobs": []}'])
def test_a_round_variable_no_round_writes_is_refused_with_its_name(apis, text, monkeypatch):
    monkeypatch.setenv(ROUND_ENV, text)
    with pytest.raises(InvalidArgument, match=f"{ROUND_ENV} = .* is not what `tpu-training recover` sets"):
        run_stack(dev_config())


# --- 3. half-old workloads ----------------------------------------------------------------------


def test_a_jobs_shape_comes_from_its_pool_and_its_run_parameters():
    targets = dev_targets(("job", "train-v6e"))
    sources = targets.sources[job_urn("train-v6e")]
    assert pool_urn("v6e-4x4") in sources
    assert {u.rsplit("::", 1)[1] for u in sources} == {"v6e-4x4-pool", "train-v6e-run-parameters"}


@pytest.mark.parametrize(
    "edit",
    [
        PendingChange(pool_urn("v6e-4x4"), "replace", ("placementPolicy",)),  # a topology edit
        PendingChange(
            f"{COMPONENTS}:TpuTrainingJob$kubernetes:core/v1:ConfigMap::train-v6e-run-parameters",
            "update",
            ("data",),
        ),
    ],
    ids=["pool", "run-parameters"],
)
def test_a_job_whose_pool_or_parameters_have_a_pending_edit_is_blocked_alone(apis, edit):
    # Re-created alone, the Job would take the edit (its node selector, its parameters) while the
    # untargeted pool or ConfigMap keeps the deployed one: Pods Pending for ever, or half-old
    # parameters. The VM is recovered all the same.
    runner = RecordingRunner(pending=[edit])
    rec, said = recoverer(runner)
    report = rec.run_round()
    assert runner.targets == [[VM_URN]]
    (line,) = [line for line in said if "train-v6e is not recovered" in line]
    assert edit.shown in line and "--apply-pending" in line
    # The VM's rung too (domain/capacity_ladder.py): a ladder of one, its zone and capacity type.
    rungs = {"demo-tpu": Rung(ZONE, "preemptible")}
    assert runner.rounds[0] == RecoveryRound(True, frozenset({"demo-tpu"}), frozenset(), {}, rungs)
    assert round_report.exit_status(report) == exit_codes.EXIT_OK


def test_a_blocked_job_alone_is_a_blocked_round(apis):
    tpu, _ = apis
    tpu.nodes[ZONE][0]["state"] = "READY"
    runner = RecordingRunner(pending=[PendingChange(pool_urn("v6e-4x4"), "update", ("nodeConfig",))])
    report = recoverer(runner)[0].run_round()
    assert runner.targets == []
    assert report.outcome is RoundOutcome.BLOCKED and report.up is not None
    assert round_report.exit_status(report) == round_report.EXIT_UP_FAILED


def test_apply_pending_recovers_it_with_its_pool_in_one_full_update(apis):
    runner = RecordingRunner(pending=[PendingChange(pool_urn("v6e-4x4"), "update", ("nodeConfig",))])
    rec, _ = recoverer(runner)
    rec.apply_pending = True
    rec.run_round()
    assert runner.targets == [None]
    (told,) = runner.rounds
    assert told is not None and not told.targeted and told.jobs == {"train-v6e"}


def test_set_against_blocks_only_the_workload_whose_sources_have_edits():
    targets = recovery_targets.RecoveryTargets(
        STACK_URN,
        {"a": job_urn("a"), "b": job_urn("b")},
        sources={job_urn("a"): frozenset({pool_urn("p")}), job_urn("b"): frozenset({pool_urn("q")})},
    )
    chosen = recovery_targets.set_against(targets, [PendingChange(pool_urn("p"), "update")], {"a", "b"})
    assert chosen.targets == (job_urn("b"),)
    assert list(chosen.half_old) == ["a"]
