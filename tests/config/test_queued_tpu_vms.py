"""Queued TPU VMs in the stack file (``tpuVms[].provisioning: flex-start``, ``queued``,
``maxRunDuration``, ``slices``): what plans, what is refused and why, and how recovery is told to
read them. Flex-start's rules: Cloud TPU "Request TPUs using Flex-start"
(https://cloud.google.com/tpu/docs/request-using-flex-start, read 2026-12-02): v5e and v6e, up to
7 days, through the queued resources API only."""

from __future__ import annotations

from typing import Any

import pytest
from support.harness.discovery import schema_errors
from support.harness.program import refused, run_stack

VMS = "tpu-training:tpuVms"
QUEUED = "pulumi-python:dynamic:Resource"
FLEX_V6E = {
    "acceleratorType": "v6e-8",
    "zone": "us-east5-a",
    "runtimeVersion": "v2-alpha-tpuv6e",
    "provisioning": "flex-start",
    "maxRunDuration": "72h",
}


def _vms_only(config: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The dev config without its GKE part, its TPU VM changed by ``fields``."""
    for key in ("tpu-training:cluster", "tpu-training:nodePools", "tpu-training:jobs"):
        config.pop(key)
    config[VMS][0].update(fields)
    return config


def test_a_flex_start_v6e_vm_plans_clean_as_one_request_that_conforms_to_v2alpha1(config):
    run = run_stack(_vms_only(config, **FLEX_V6E))
    assert run.warnings == []
    assert not run.by_type("gcp:tpu/v2Vm:V2Vm"), "a flex-start VM is never created directly"
    (queued,) = run.by_type(QUEUED)
    assert queued.inputs["apiVersion"] == "v2alpha1"
    body = queued.inputs["body"]
    assert schema_errors("tpu", "v2alpha1", "QueuedResource", body) == []
    assert body["provisioningModel"] == "FLEX_START" and body["runDuration"] == {"maxRunDuration": "259200s"}
    assert body["tpu"]["nodeSpec"][0]["nodeId"] == config[VMS][0]["name"]


@pytest.mark.parametrize(
    ("fields", "key", "words"),
    [
        (
            {"maxRunDuration": "8d"},
            'maxRunDuration = "8d"',
            "691200s is longer than flex-start's limit of 7 days",
        ),
        ({"maxRunDuration": None}, "maxRunDuration", "flex-start needs one"),
        (
            {"acceleratorType": "v4-8", "zone": "us-central2-b", "runtimeVersion": "tpu-vm-v4-base"},
            'provisioning = "flex-start"',
            "flex-start TPU VMs are offered for TPU v5e, v6e only, not v4",
        ),
        ({"provisioning": "spot"}, 'maxRunDuration = "72h"', "is for flex-start only"),
        (
            {"provisioning": "preemptible", "queued": {}, "maxRunDuration": None},
            'provisioning = "preemptible"',
            "'preemptible' cannot be queued",
        ),
        ({"maxRunDuration": "3 days"}, 'maxRunDuration = "3 days"', "is not a duration"),
        ({"queued": {"validFor": "6h", "validUntil": "x"}}, "queued.validUntil", "unknown key"),
        ({"slices": 0}, "slices = 0", "must be at least 1"),
    ],
)
def test_a_request_that_cannot_be_made_is_refused_naming_the_key_and_what_is_allowed(
    config, fields, key, words
):
    vm = {**FLEX_V6E, **fields}
    message = refused(_vms_only(config, **{k: v for k, v in vm.items() if v is not None}))
    (line,) = [line for line in message.splitlines() if "tpuVms[0]" in line]
    assert f"tpu-training:tpuVms[0].{key}" in line and words in line, line


def test_a_spot_vm_that_waits_in_two_slices_is_one_v2_multislice_request(config):
    run = run_stack(
        _vms_only(
            config,
            **{**FLEX_V6E, "provisioning": "spot", "maxRunDuration": None},
            queued={"validFor": "6h", "validAfter": "30m"},
            slices=2,
        )
    )
    (queued,) = run.by_type(QUEUED)
    body = queued.inputs["body"]
    assert queued.inputs["apiVersion"] == "v2"
    assert schema_errors("tpu", "v2", "QueuedResource", body) == []
    assert body["queueingPolicy"] == {"validUntilDuration": "21600s", "validAfterDuration": "1800s"}
    assert body["tpu"]["nodeSpec"][0]["multisliceParams"]["nodeCount"] == 2


def test_a_flex_start_zone_our_table_does_not_list_is_a_warning_not_an_error(config):
    run = run_stack(_vms_only(config, **{**FLEX_V6E, "zone": "europe-west4-a"}))
    assert run.by_type(QUEUED)
    assert any("not listed for flex-start TPU v6e VMs" in w for w in run.warnings), run.warnings


def test_a_ladder_from_flex_start_to_spot_requests_the_first_rung_and_creates_the_second(config):
    run = run_stack(_vms_only(config, **{**FLEX_V6E, "provisioning": ["flex-start", "spot"]}))
    assert run.by_type(QUEUED) and not run.by_type("gcp:tpu/v2Vm:V2Vm")


def test_the_readmes_queued_example_plans_as_one_flex_start_request(config):
    import re

    import yaml
    from support.harness.program import REPO

    (block,) = [
        b
        for b in re.findall(r"```yaml\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
        if "flex-start" in b
    ]
    (vm,) = yaml.safe_load(block)["tpu-training:tpuVms"]
    vm["setupCommand"] = config[VMS][0]["setupCommand"]  # "as the dev stack's"
    config = _vms_only(config)
    config[VMS] = [vm]
    run = run_stack(config)
    (queued,) = run.by_type(QUEUED)
    assert queued.inputs["body"]["provisioningModel"] == "FLEX_START" and run.warnings == []


def test_the_plan_and_preflight_see_a_queued_vm_as_a_tpu_vm(config):
    from tpu_training import plan_output
    from tpu_training.commands import preflight

    run = run_stack(_vms_only(config, **FLEX_V6E, slices=2))
    name = config[VMS][0]["name"]
    assert [d[:3] for d in plan_output.decisions(run)] == [("TPU VM", name, "kept")]
    assert (name, "us-east5-a", "v6e-8", "v2-alpha-tpuv6e") in preflight.declared(run, "p").tpu_vms
    shown = plan_output.render_tree(run)
    assert f"pulumi-python:dynamic:Resource  {name}-queued" in shown
    assert plan_output.DYNAMIC_PROVIDER_INPUT not in shown, "its pickled provider is no input a reader checks"
