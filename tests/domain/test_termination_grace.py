"""How long a stopped trainer may take to save: the Pods ask for a grace of their own
(checkpointing.podGraceSeconds), not derived from the checkpoint's time, and the plan warns where
the grace or the capacity gives less than the save takes. Facts from GKE's
and Compute Engine's docs, cited in components/tpu_training_components/domain/termination_grace.py."""

from __future__ import annotations

import re

import pytest
from support.harness.program import refused, run_components, run_stack
from support.harness.workloads import tpu_pool, workload_args
from tpu_training_components import TpuTrainingJob, TpuTrainingJobSet
from tpu_training_components.domain.job_manifests import TrainingJobSpec, job_manifest
from tpu_training_components.domain.startup_script import render_shutdown_script
from tpu_training_components.domain.termination_grace import (
    PREEMPTIBLE_TPU_VM,
    SPOT_GKE_POOL,
    TPU_VM_SHUTDOWN_SECONDS,
    grace_fit_problem,
    pod_grace_seconds,
    save_fit_problem,
)
from tpu_training_components.errors import InvalidArgument


@pytest.mark.parametrize(
    ("cost", "grace"),
    [
        (60, 120),  # the dev stack: 1.5 x 60 s + 30 s = 120 s
        (57.3, 120),  # re-measured a little lower: the same step, the running Job stays
        (20, 60),
        (0.4, 60),  # never less than the margin, above Kubernetes' default 30 s
        (61, 300),  # just past a step: the next one
        (400, 1200),
        (2380, 3600),  # 1.5 x 2380 + 30 = 3600: GKE honours a drain's grace up to an hour
        (5000, 3600),  # and no more
    ],
)
def test_the_pods_ask_for_the_save_with_a_margin_in_steps(cost, grace):
    assert pod_grace_seconds(cost) == grace


@pytest.mark.parametrize("cost", [0, -1, float("nan"), float("inf")])
def test_a_cost_that_is_no_time_is_refused(cost):
    with pytest.raises(ValueError, match="must be a number of seconds above 0"):
        pod_grace_seconds(cost)


def test_the_grace_is_in_the_pod_template_only_when_asked_for():
    spec = TrainingJobSpec(
        name="train",
        namespace="default",
        image="us-docker.pkg.dev/p/r/trainer:v1",
        command=("python3", "train.py"),
        node_selector={},
        chips_per_vm=4,
        vms=1,
        service_account="train",
    )
    assert "terminationGracePeriodSeconds" not in job_manifest(spec)["spec"]["template"]["spec"]
    spec = TrainingJobSpec(**{**spec.__dict__, "termination_grace_seconds": 120})
    assert job_manifest(spec)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 120


def test_the_shutdown_script_waits_what_the_warning_counts():
    assert f"GRACE={TPU_VM_SHUTDOWN_SECONDS}\n" in render_shutdown_script(vm_name="v")
    assert PREEMPTIBLE_TPU_VM.seconds == TPU_VM_SHUTDOWN_SECONDS


def test_a_save_that_fits_is_no_problem():
    assert save_fit_problem(25, PREEMPTIBLE_TPU_VM, 600) is None
    assert save_fit_problem(15, SPOT_GKE_POOL, 600) is None
    assert "losing up to one checkpoint interval (600 s)" in str(save_fit_problem(16, SPOT_GKE_POOL, 600))


def test_the_dev_stack_fits_its_own_preemptible_vms_notice(config):
    """The template every stack is copied from plans clean: its 20 s save fits the 25 s."""
    assert config["tpu-training:checkpointing"]["costSeconds"] == 20
    assert [w for w in run_stack(config).warnings if "costSeconds" in w] == []


def test_a_60_s_save_on_the_dev_stacks_preemptible_vm_is_warned_about(config):
    config["tpu-training:checkpointing"]["costSeconds"] = 60
    run = run_stack(config)
    [warning] = [w for w in run.warnings if "costSeconds" in w]
    assert warning == (
        "tpu-training:tpuVms[0] (demo-tpu): a checkpoint takes 60 s (checkpointing.costSeconds), but a "
        "preemptible or Spot TPU VM gives its trainer 25 s of its 30 s notice (the shutdown script): when "
        "preempted, the run is killed before its stop save is committed and resumes from the checkpoint "
        "before, losing up to one checkpoint interval (2277 s) of training. Make the save fit "
        "(asynchronous, smaller), or use on-demand or reserved capacity, which stops only for maintenance"
    )


def test_a_job_on_spot_nodes_is_warned_about_and_one_on_flex_start_is_not(config):
    assert not [w for w in run_stack(config).warnings if "costSeconds" in w]  # 20 s fits the VM's 25 s
    pool = config["tpu-training:nodePools"][0]
    pool["provisioning"] = "spot"
    warnings = [w for w in run_stack(config).warnings if "costSeconds" in w]
    assert len(warnings) == 1 and warnings[0].startswith(
        "tpu-training:jobs[0] (train-v6e): a checkpoint takes 20 s (checkpointing.costSeconds), but a "
        "Spot GKE node gives its Pods 15 s of its 30 s preemption notice"
    )
    assert "extend the Pods' window to 120 s (GKE 1.35.0-gke.1171000 and later" in warnings[0]


def test_no_checkpointing_no_warning(config):
    del config["tpu-training:checkpointing"]
    assert not [w for w in run_stack(config).warnings if "costSeconds" in w]


def test_the_dev_stacks_job_asks_for_the_default_grace_and_a_set_one(config):
    run = run_stack(config)
    job = run.one("kubernetes:batch/v1:Job", "train-v6e-job")
    assert job.inputs["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 120
    config["tpu-training:checkpointing"]["podGraceSeconds"] = 600
    job = run_stack(config).one("kubernetes:batch/v1:Job", "train-v6e-job")
    assert job.inputs["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 600
    # Without checkpointing the stack knows no save time: Kubernetes' default.
    del config["tpu-training:checkpointing"]
    job = run_stack(config).one("kubernetes:batch/v1:Job", "train-v6e-job")
    assert "terminationGracePeriodSeconds" not in job.inputs["spec"]["template"]["spec"]


def test_a_grace_that_covers_the_save_is_no_problem():
    assert grace_fit_problem(60, 120) is None  # 1.5 x 60 + 30 = 120
    assert grace_fit_problem(5000, 3600) is None  # no grace GKE honours would cover it
    assert "checkpointing.podGraceSeconds to 300;" in str(grace_fit_problem(61, 120))


def test_a_save_re_measured_past_the_grace_is_warned_about_with_the_value_to_set(config):
    config["tpu-training:checkpointing"]["costSeconds"] = 120
    [warning] = [w for w in run_stack(config).warnings if "podGraceSeconds" in w]
    assert warning == (
        "tpu-training:checkpointing.podGraceSeconds (train-v6e): a checkpoint takes 120 s "
        "(checkpointing.costSeconds), and the stop save needs 210 s with its margin (1.5 x the save + "
        "30 s), but the Pods' grace is 120 s (checkpointing.podGraceSeconds): a drain or a maintenance "
        "event kills the trainer before its stop save is committed. Set checkpointing.podGraceSeconds "
        "to 300; that changes the Pod template and so replaces a running Job, which restarts from its "
        "last checkpoint: do it between runs"
    )
    config["tpu-training:checkpointing"]["podGraceSeconds"] = 300
    assert not [w for w in run_stack(config).warnings if "podGraceSeconds" in w]
    del config["tpu-training:jobs"]  # no Pod, no grace to warn about
    assert not [w for w in run_stack(config).warnings if "podGraceSeconds" in w]


@pytest.mark.parametrize(
    ("grace", "says"),
    [(3601, "must be at most 3600"), (-1, "must be at least 0"), (90.5, "must be a whole number")],
)
def test_a_stack_refuses_a_grace_gke_does_not_honour(config, grace, says):
    config["tpu-training:checkpointing"]["podGraceSeconds"] = grace
    message = refused(config)
    assert f"tpu-training:checkpointing.podGraceSeconds = {grace}: " in message and says in message


@pytest.mark.parametrize(
    ("grace", "says"),
    [
        (3601, "termination_grace_seconds: 3601 is out of range; allowed: 0-3600"),
        (-5, "termination_grace_seconds: -5 is out of range; allowed: 0-3600"),
        (2.5, "termination_grace_seconds = 2.5: Input should be a valid integer"),
    ],
)
@pytest.mark.parametrize("component", [TpuTrainingJob, TpuTrainingJobSet])
def test_a_workload_refuses_a_grace_that_is_no_time_gke_honours(component, grace, says):
    def body() -> None:
        component("train", workload_args(tpu_pool().selection, termination_grace_seconds=grace))

    with pytest.raises(InvalidArgument, match=re.escape(says)):
        run_components(body)
