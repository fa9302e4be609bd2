"""The held-out residue of issue 37 (item 4): each input is refused with a message that names the
key and the value and says what is allowed, never a traceback; or, where the provider takes the
input, accepted."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml
from support.harness.in_process import run_plan
from support.harness.program import REPO, refused, run_stack
from tpu_training_components.domain import naming
from tpu_training_components.domain.scaling import plan_training


def _write_stack(project, name: str, edit) -> None:
    document = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    edit(document["config"])
    (project / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(document))


def test_a_4300_digit_batch_in_the_stack_file_is_a_config_error(scratch_project):
    digits = "9" * 4300  # the most digits Python reads into an int, and too many to print one

    def edit(config):
        config["tpu-training:training"]["perCoreBatchSize"] = int(digits)

    _write_stack(scratch_project, "big", edit)
    result = run_plan("--stack", "big", cwd=scratch_project)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert (
        "tpu-training:training.perCoreBatchSize = a whole number of about 4301 digits: must be at most "
        "9223372036854775807"
    ) in result.stderr


def test_plan_training_refuses_a_batch_past_int64_by_its_size():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "per_core_batch_size must be a whole number from 1 to 2**63 - 1, got a number of about 4301"
        ),
    ):
        plan_training(per_core_batch_size=10**4300, cores=8, total_examples=1000)
    assert plan_training(per_core_batch_size=2**63 - 1, cores=1, total_examples=1).environment()[
        "GLOBAL_BATCH_SIZE"
    ] == str(2**63 - 1)
    with pytest.raises(ValueError, match=re.escape("x 8 cores is a global batch past 2**63 - 1")):
        plan_training(per_core_batch_size=2**62, cores=8, total_examples=1)


def test_a_learning_rate_scaled_to_zero_is_refused(config):
    with pytest.raises(ValueError, match="reference_cores must be a whole number from 1 to 2"):
        plan_training(
            per_core_batch_size=8,
            cores=8,
            epochs=1,
            base_learning_rate=0.1,
            learning_rate_scaling="sqrt",
            reference_cores=10**400,
        )
    with pytest.raises(ValueError, match="is 0.0, not a finite number above 0"):
        plan_training(
            per_core_batch_size=8,
            cores=8,
            epochs=1,
            base_learning_rate=1e-320,
            learning_rate_scaling="sqrt",
            reference_cores=2**63 - 1,
        )
    config["tpu-training:training"].update(learningRateScaling="sqrt", referenceCores=10**400)
    message = refused(config)
    assert "tpu-training:training.referenceCores = a whole number of about 401 digits" in message
    config["tpu-training:training"].update(referenceCores=2**63 - 1, baseLearningRate=1e-320)
    message = refused(config)
    assert "tpu-training:training: base_learning_rate 1e-320 scaled sqrt to 8 cores" in message
    assert "is 0.0, not a finite number above 0" in message


@pytest.mark.parametrize("key", ["noncurrentVersionRetentionDays", "noncurrentVersionsKept"])
def test_bucket_retention_past_the_apis_int32_is_refused(config, key):
    config["tpu-training:bucket"] = {key: 10**20}
    message = refused(config)
    assert f"tpu-training:bucket.{key} = 100000000000000000000" in message
    assert "must be at most 2147483647" in message


@pytest.mark.parametrize(
    ("machine_type", "says"),
    [
        ("e2-standard-3", "e2-standard comes with 2, 4, 8, 16, 32 vCPUs"),
        ("n2-standard-6", "n2-standard comes with 2, 4, 8, 16, 32, 48, 64, 80, 96, 128 vCPUs"),
    ],
)
def test_a_system_machine_type_that_does_not_exist_is_refused(config, machine_type, says):
    config["tpu-training:cluster"]["systemMachineType"] = machine_type
    message = refused(config)
    assert f'tpu-training:cluster.systemMachineType = "{machine_type}"' in message and says in message


@pytest.mark.parametrize("machine_type", ["e2-standard-4", "e2-micro", "n2-highmem-8", "c3-standard-22"])
def test_real_and_unlisted_machine_types_pass(machine_type):
    assert naming.machine_type_problem(machine_type) is None


@pytest.mark.parametrize(
    "network",
    [
        "projects/p/global/networks/default",
        "projects/123456789012/global/networks/default",
        "https://www.googleapis.com/compute/v1/projects/p/global/networks/default",
    ],
)
def test_a_vm_network_given_as_the_providers_self_link_is_taken(config, network):
    config["tpu-training:network"] = {"create": False}
    config["tpu-training:tpuVms"][0]["network"] = network
    vm = run_stack(config).one("gcp:tpu/v2Vm:V2Vm", "demo-tpu-vm")
    assert vm.inputs["networkConfig"]["network"] == network


def test_a_full_standard_output_is_named_and_no_traceback():
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "tpu_training", "plan"],
            cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert result.returncode == 73
    assert result.stderr.startswith(
        "error: cannot write the plan to standard output: No space left on device\n"
    )
    assert "Traceback" not in result.stderr and "None" not in result.stderr
