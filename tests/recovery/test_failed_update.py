"""Generations survive a failed update: preempt -> `pulumi up` fails half-way -> the node is
gone again -> `pulumi up` succeeds and re-creates it, whatever the failed update left behind.

The engine is modelled by what it keeps of the VM between updates, read in Pulumi's source
(pulumi/pulumi 1b5949891b): a resource's replacement trigger is compared with the one in the state
(pkg/resource/deploy/step_generator.go ``shouldTriggerReplace``, ~l.3683: a different value
replaces, the same is no change, and a plain `up` without --refresh never looks at the cloud); a
failed update keeps in the state what it changed, and writes the stack outputs only if the
program got as far as registering them (pkg/resource/deploy/step_executor.go
``executeRegisterResourceOutputs``, ~l.212-270). Which of those a failed update leaves depends on
when it failed, so every combination is tried."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

import pytest
from support.fakes.fake_tpu_api import FakeTpuApi
from support.harness.program import run_stack
from tpu_training_components.domain import recovery

VM = "gcp:tpu/v2Vm:V2Vm"
ZONE = "europe-west4-a"


@pytest.fixture
def live_api(monkeypatch):
    with FakeTpuApi() as api:
        monkeypatch.delenv("TPU_TRAINING_OFFLINE", raising=False)
        monkeypatch.setenv("TPU_API_ENDPOINT", api.endpoint)
        yield api


def declared_trigger(config, previous_outputs) -> int:
    run = run_stack(copy.deepcopy(config), previous_outputs=previous_outputs)
    return run.one(VM, "demo-tpu-vm").options["replacementTrigger"]


@pytest.mark.parametrize("state_keeps", ["new trigger", "old trigger"])
@pytest.mark.parametrize("outputs_written", [True, False])
def test_preempt_then_a_half_failed_up_then_a_plain_up_recreates_the_node(
    config, live_api, monkeypatch, state_keeps, outputs_written
):
    clock = {"now": datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)}
    monkeypatch.setattr(recovery, "utc_now", lambda: clock["now"])

    # Deployed and working at generation 3.
    state_trigger = 3
    outputs = {"recoveryGenerations": {"demo-tpu": 3}}

    # Preempted: the next `up` declares a new generation and replaces the node ...
    live_api.add(ZONE, "demo-tpu", "PREEMPTED", labels={"recovery-generation": "3"})
    first = declared_trigger(config, outputs)
    assert first != state_trigger  # a replacement
    # ... deletes it, and fails to create it again (no capacity). What the state and the outputs
    # keep depends on where it failed.
    live_api.nodes.clear()
    if state_keeps == "new trigger":
        state_trigger = first
    if outputs_written:
        outputs = {"recoveryGenerations": {"demo-tpu": first}}

    # Minutes later the node is still gone; a plain `pulumi up` must create it: its declared
    # trigger differs from the state's, so the engine replaces (creates) without any refresh.
    clock["now"] += timedelta(minutes=7)
    second = declared_trigger(config, outputs)
    assert second != state_trigger
    assert second > first

    # It is created at that generation; the next `up` keeps it as it is.
    state_trigger = second
    outputs = {"recoveryGenerations": {"demo-tpu": second}}
    live_api.add(ZONE, "demo-tpu", "READY", labels={"recovery-generation": str(second)})
    clock["now"] += timedelta(minutes=7)
    assert declared_trigger(config, outputs) == state_trigger


def test_a_working_node_keeps_its_own_generation_when_the_outputs_are_stale(config, live_api):
    # An update replaced the node at 20261123120000 but failed later, before the outputs were
    # written: they still say 3. The live label is what was deployed, so nothing changes.
    live_api.add(ZONE, "demo-tpu", "READY", labels={"recovery-generation": "20261123120000"})
    assert declared_trigger(config, {"recoveryGenerations": {"demo-tpu": 3}}) == 20261123120000
