"""The offline preview importers get (tpu_training_components.preview): the documented example runs
as written, a program's own config reaches it, and a bad argument raises as in `pulumi preview`."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re

import pulumi
import pytest
from support.harness.program import REPO
from tpu_training_components import CheckpointBucket, InvalidArgument, PreemptibleTpuVm, TrainingRecovery
from tpu_training_components.preview import preview


def _example(marker: str = "# preview example") -> str:
    page = (REPO / "docs" / "using-the-components.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", page, re.S) if b.startswith(marker)]
    return block


def test_the_documented_example_runs_as_written_and_prints_what_it_says():
    block = _example()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block, "docs/using-the-components.md", "exec"), {})  # noqa: S102 - the page's own example
    expected = re.findall(r"^# (.*)$", block, re.M)[1:]  # after the block's own "# preview example"
    assert expected and expected[0].startswith("demo-tpu-vm ")
    assert printed.getvalue().strip().splitlines() == expected


def test_it_records_components_and_cloud_resources_with_their_inputs():
    planned = preview(lambda: CheckpointBucket("ckpt", {"region": "us-east5", "bucket_name": "acme-ckpt"}))
    assert [(r.type, r.name, r.custom) for r in planned.resources] == [
        ("tpu-training:storage:CheckpointBucket", "ckpt", False),
        ("gcp:storage/bucket:Bucket", "ckpt-bucket", True),
    ]
    assert planned.one("gcp:storage/bucket:Bucket", "ckpt-bucket").inputs["location"] == "US-EAST5"


def test_the_program_reads_the_config_it_is_given():
    def program() -> None:
        region = pulumi.Config("acme").require("region")
        CheckpointBucket("ckpt", {"region": region, "bucket_name": "acme-ckpt"})

    planned = preview(program, project="acme", config={"acme:region": "europe-west4"})
    assert planned.one("gcp:storage/bucket:Bucket", "ckpt-bucket").inputs["location"] == "EUROPE-WEST4"


def test_the_documented_bad_arguments_print_what_the_page_says():
    block = _example("# bad arguments example")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block, "docs/using-the-components.md", "exec"), {})  # noqa: S102 - the page's own example
    said = block[block.index("\n# ", block.index("print(")) :]
    expected = [line.removeprefix("# ") for line in said.strip().splitlines()]
    assert printed.getvalue().splitlines() == expected


def test_a_bad_argument_raises_as_in_pulumi_preview():
    with pytest.raises(InvalidArgument, match="'nowhere' is not a region name"):
        preview(lambda: CheckpointBucket("ckpt", {"region": "nowhere", "bucket_name": "acme-ckpt"}))


def test_recovery_without_live_state_keeps_the_last_deployed_generation():
    def program() -> None:
        recovery = TrainingRecovery(
            "recovery",
            {
                "project": "acme",
                "tpu_vms": [{"name": "demo-tpu", "zone": "europe-west4-a"}],
                "read_live_state": False,
            },
        )
        PreemptibleTpuVm(
            "demo-tpu",
            {
                "zone": "europe-west4-a",
                "accelerator_type": "v3-8",
                "runtime_version": "tpu-ubuntu2204-base",
                "train_command": "python3 train.py",
                "checkpoint_dir": "gs://acme-ckpt/checkpoints/demo-tpu",
                "service_account_email": "trainer@acme.iam.gserviceaccount.com",
                "recovery_generation": recovery.vm_generation("demo-tpu"),
            },
        )

    planned = preview(program, previous_outputs={"recoveryGenerations": {"demo-tpu": 3}})
    vm = planned.one("gcp:tpu/v2Vm:V2Vm", "demo-tpu-vm")
    assert vm.inputs["labels"]["recovery-generation"] == "3"


def test_it_runs_on_a_thread_whose_event_loop_was_closed():
    # An earlier asyncio.run() (or a test) leaves the thread without a current loop.
    asyncio.set_event_loop(None)
    planned = preview(lambda: CheckpointBucket("ckpt", {"region": "us-east5", "bucket_name": "acme-ckpt"}))
    assert len(planned.resources) == 2


def _one_vm(zone: str = "europe-west4-a", provisioning: str = "preemptible"):
    def program() -> None:
        PreemptibleTpuVm(
            "demo-tpu",
            {
                "zone": zone,
                "accelerator_type": "v3-8",
                "runtime_version": "tpu-ubuntu2204-base",
                "provisioning": provisioning,
                "train_command": "python3 train.py",
                "checkpoint_dir": "gs://acme-ckpt/checkpoints/demo-tpu",
                "service_account_email": "trainer@acme.iam.gserviceaccount.com",
            },
        )

    return program


def test_a_preview_warns_of_a_zone_the_tables_do_not_list_for_the_generation():
    assert preview(_one_vm()).warnings == []
    (warning,) = preview(_one_vm(zone="us-west1-a")).warnings
    assert warning.startswith("demo-tpu-vm: zone us-west1-a is not listed for TPU v3 in our table of ")


def test_a_preview_warns_of_a_save_that_does_not_fit_a_preemptible_vms_notice():
    """As the stack's plan does (checks.warnings): the same domain rule, given the save's cost."""
    assert preview(_one_vm(), checkpoint_cost_seconds=20).warnings == []
    (warning,) = preview(_one_vm(), checkpoint_cost_seconds=60).warnings
    assert warning.startswith(
        "demo-tpu-vm: a checkpoint takes 60 s (checkpointing.costSeconds), but a preemptible or Spot "
        "TPU VM gives its trainer 25 s of its 30 s notice"
    )
    assert preview(_one_vm(provisioning="on-demand"), checkpoint_cost_seconds=60).warnings == []


def test_a_preview_says_what_it_costs_per_hour():
    """The plan's estimate (domain/cost_estimate.py): a preemptible v3-8 in europe-west4."""
    planned = preview(_one_vm())
    assert planned.cost.total("training") == (pytest.approx(2.244), [])
    assert planned.cost.to_json()["whileTraining"]["usdPerHour"] == pytest.approx(2.244)


def test_a_jobs_grace_and_a_spot_pools_notice_are_judged_as_the_stack_judges_them():
    """declared_warnings over recorded resources: a Job's Pods' grace against the save with its
    margin (none asked: Kubernetes' 30 s), a Spot TPU pool's 15 s, a flex-start pool's zones."""
    from tpu_training_components.domain.declared_warnings import declared_warnings
    from tpu_training_components.preview import PreviewedResource

    def job(grace):
        pod = {} if grace is None else {"terminationGracePeriodSeconds": grace}
        return PreviewedResource(
            "kubernetes:batch/v1:Job", "train", {"spec": {"template": {"spec": pod}}}, True
        )

    def pool(**node_config):
        inputs = {
            "nodeConfig": {"machineType": "ct6e-standard-4t", **node_config},
            "nodeLocations": ["us-east5-a"],
        }
        return PreviewedResource("gcp:container/nodePool:NodePool", "v6e", inputs, True)

    assert declared_warnings([job(120), pool(flexStart=True)], 60) == []
    (grace,) = declared_warnings([job(None)], 60)
    assert grace.startswith("train: a checkpoint takes 60 s") and "the Pods' grace is 30 s" in grace
    (spot,) = declared_warnings([pool(spot=True)], 20)
    assert spot.startswith("v6e: a checkpoint takes 20 s") and "Spot GKE node gives its Pods 15 s" in spot
    assert declared_warnings([job(None), pool(spot=True)]) == []  # no save cost given: nothing to judge
