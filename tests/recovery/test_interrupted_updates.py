"""What a killed or failed recovery update left in the state, settled from live state
(tpu_training/recovery/interrupted_updates.py), and a round that does it
(tpu_training/recovery/recovery_round.py ``Recoverer._settle``).

The states here have the shape the engine tier saw Pulumi v3.274.1 leave when a round was killed
(tests/engine/test_engine_crash.py): after the delete of a replacement, the old resource marked
``pendingReplacement``; once the create started, a pending ``creating`` operation with the new
resource's inputs and replacement trigger, no ID and no outputs."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from support.fakes.fake_kube_api import job
from support.harness.recover_runs import RecordingRunner, live_dev_stack, recoverer
from tpu_training_components.domain.recovery import Cause, keep, live_generation, replace
from tpu_training_components.domain.recovery_rounds import RecoveryRound, RoundOutcome, with_resumed_causes

from tpu_training import exit_codes
from tpu_training.recovery import round_report
from tpu_training.recovery.automation import failure_message
from tpu_training.recovery.interrupted_updates import (
    Live,
    any_interrupted,
    generation_of,
    interruptions,
    object_id,
    settle,
)

VM_URN = "urn:pulumi:dev::tpu-training::tpu-training:compute:PreemptibleTpuVm$gcp:tpu/v2Vm:V2Vm::demo-tpu-vm"
BUCKET_URN = "urn:pulumi:dev::tpu-training::gcp:storage/bucket:Bucket::ckpt"
NODE_ID = "projects/p/locations/europe-west4-a/nodes/demo-tpu"
OLD, NEW = 20261202074615, 20261202074620


def vm(generation: int, cause: str, **fields: Any) -> dict[str, Any]:
    labels = {"recovery-generation": str(generation), "recovery-cause": cause}
    return {
        "urn": VM_URN,
        "custom": True,
        "type": "gcp:tpu/v2Vm:V2Vm",
        "inputs": {"name": "demo-tpu", "labels": labels},
        "replacementTrigger": generation,
        **fields,
    }


def state(resources: list[dict[str, Any]], operations: list[dict[str, Any]] = ()) -> dict[str, Any]:
    deployment: dict[str, Any] = {"resources": [{"urn": BUCKET_URN, "id": "ckpt"}, *resources]}
    if operations:
        deployment["pending_operations"] = list(operations)
    return {"version": 3, "deployment": deployment}


# The state a round killed between the delete and the create leaves (or after the create).
KILLED = state(
    [vm(OLD, "missing", id=NODE_ID, outputs={"state": "READY"}, pendingReplacement=True)],
    [{"resource": vm(NEW, "preempted"), "type": "creating"}],
)


def test_a_killed_round_after_its_create_is_adopted_with_the_live_id_and_its_cause() -> None:
    found = interruptions(KILLED, {VM_URN})
    settled = settle(KILLED, found, {VM_URN: Live(True, NEW)})
    (entry,) = [r for r in settled.state["deployment"]["resources"] if r["urn"] == VM_URN]
    assert entry["id"] == NODE_ID and generation_of(entry) == NEW and "pendingReplacement" not in entry
    assert entry["outputs"] == entry["inputs"], "outputs until the round's refresh reads them"
    assert "pending_operations" not in settled.state["deployment"]
    assert settled.adopted == {VM_URN: Cause.PREEMPTED} and settled.resumed == {}
    assert "adopted into the state as " + NODE_ID in settled.lines[0]
    assert KILLED["deployment"]["pending_operations"], "the state read is not changed in place"


def test_a_killed_round_before_its_create_is_cleared_and_its_cause_carried_on() -> None:
    settled = settle(KILLED, interruptions(KILLED, {VM_URN}), {VM_URN: Live(False)})
    assert [r["urn"] for r in settled.state["deployment"]["resources"]] == [BUCKET_URN]
    assert "pending_operations" not in settled.state["deployment"]
    assert settled.resumed == {VM_URN: Cause.PREEMPTED} and settled.adopted == {}
    assert len(settled.lines) == 2 and "removed from the state" in settled.lines[1]


def test_an_old_object_that_still_exists_is_no_longer_marked_so_its_replacement_deletes_it() -> None:
    marked = state([vm(OLD, "missing", id=NODE_ID, pendingReplacement=True)])
    settled = settle(marked, interruptions(marked, {VM_URN}), {VM_URN: Live(True, OLD)})
    (entry,) = [r for r in settled.state["deployment"]["resources"] if r["urn"] == VM_URN]
    assert "pendingReplacement" not in entry and entry["id"] == NODE_ID
    assert "still exists" in settled.lines[0]


@pytest.mark.parametrize("live", [Live(None), Live(True, None)])
def test_nothing_is_changed_when_the_live_state_says_nothing_certain(live: Live) -> None:
    settled = settle(KILLED, interruptions(KILLED, {VM_URN}), {VM_URN: live})
    assert settled.unknown == [VM_URN] and settled.lines == [] and settled.state == KILLED


def test_only_the_resources_recovery_manages_are_looked_at() -> None:
    other = state([], [{"resource": {"urn": BUCKET_URN}, "type": "creating"}])
    assert any_interrupted(other)
    assert interruptions(other, {VM_URN}) == {}
    assert not any_interrupted(state([vm(OLD, "missing", id=NODE_ID)]))


def test_a_pending_delete_or_update_is_not_an_interruption_the_round_settles() -> None:
    # The engine drops every pending operation but a create at its next write (pkg/backend/snapshot.go).
    deleting = state([vm(OLD, "missing", id=NODE_ID)], [{"resource": vm(OLD, "missing"), "type": "deleting"}])
    assert interruptions(deleting, {VM_URN}) == {}


def test_a_generation_is_read_from_either_form_of_the_replacement_trigger() -> None:
    assert generation_of({"replacementTrigger": 7}) == 7
    assert generation_of({"replacementTrigger": 7.0}) == 7
    assert generation_of({"replacementTrigger": "recovery 7, restart 2"}) == 7
    assert generation_of({"replacementTrigger": True}) is None
    assert generation_of({}) is None


def test_resumed_causes_cross_to_the_program_and_into_last_recoveries() -> None:
    told = RecoveryRound(True, frozenset({"demo-tpu"}), resumed={"demo-tpu": "preempted"})
    assert RecoveryRound.from_env(told.to_env()) == told
    with pytest.raises(ValueError, match="resumed"):
        RecoveryRound.from_env('{"targeted": true, "tpuVms": [], "jobs": [], "resumed": {"a": "bored"}}')
    exported = {
        "tpuVms": {"demo-tpu": {"action": "create", "cause": "missing", "generation": OLD}},
        "jobs": {},
    }
    kept = with_resumed_causes(exported, {"demo-tpu": "preempted"}, {"tpuVms": {"demo-tpu": NEW}}, "T")
    assert kept["tpuVms"]["demo-tpu"] == {
        "action": "replace",
        "cause": "preempted",
        "reason": "an interrupted update made it; recorded by the round that carried it on",
        "generation": NEW,
        "decidedAt": "T",
        "resumed": True,
    }
    created = {
        "tpuVms": {"demo-tpu": {"action": "create", "cause": "missing", "generation": NEW}},
        "jobs": {},
    }
    redone = with_resumed_causes(created, {"demo-tpu": "preempted"}, {"tpuVms": {"demo-tpu": NEW}}, "T")
    assert redone["tpuVms"]["demo-tpu"] == {
        "action": "create",
        "cause": "preempted",
        "generation": NEW,
        "resumed": True,
    }


def test_a_failed_updates_message_carries_the_apis_error_not_the_last_warning() -> None:
    output = "\n".join(
        [
            "code: 255",
            "stdout: Updating (dev):",
            "  ++ gcp:tpu:V2Vm demo-tpu-vm creating replacement (0s); error: creating TPU node: 500",
            "Diagnostics:",
            "    error: update failed",
            '    error: creating TPU node demo-tpu: 500 {"error": {"code": 500, "status": "INTERNAL"}}',
            "    error: update failed",
            "stderr: warning: using pulumi-resource-gcp from $PATH at /plugins/pulumi-resource-gcp",
        ]
    )
    message = failure_message(output)
    assert message.startswith('error: creating TPU node demo-tpu: 500 {"error"'), message
    assert message.count("update failed") == 1 and "warning" not in message
    assert failure_message("just a line\nwarning: x") == "just a line | warning: x"


# --- A round that settles ---------------------------------------------------------------------


@pytest.fixture
def dev_vm(tmp_path, monkeypatch):
    """The dev stack's live APIs, its VM READY at generation NEW, its Job running."""
    fields = {"labels": {"recovery-generation": str(NEW), "recovery-cause": "preempted"}, "health": "HEALTHY"}
    running = job("train-v6e", generation=1, active=4, ready=4)
    with live_dev_stack(tmp_path, monkeypatch, "READY", running, **fields) as apis:
        yield apis


def test_a_round_adopts_what_a_killed_round_made_and_records_that_recovery_as_resumed(dev_vm) -> None:
    runner = RecordingRunner()
    runner.state = copy.deepcopy(KILLED)
    rec, said = recoverer(runner)
    report = rec.run_round()
    (imported,) = runner.imports
    assert "pending_operations" not in imported["deployment"]
    assert runner.refreshed == [[VM_URN]], "its outputs are read before the round's update"
    (vm_decision,) = [d for kind, d in report.decisions if kind == "tpuVm"]
    assert (vm_decision.action, vm_decision.resumed, vm_decision.cause) == ("keep", True, Cause.PREEMPTED)
    assert report.outcome is RoundOutcome.SUCCEEDED
    (told,) = runner.rounds
    assert told is not None and "demo-tpu" in told.tpu_vms and told.resumed == {"demo-tpu": "preempted"}
    assert any(VM_URN == urn for urn in runner.targets[0] or []), "its up writes it into the outputs"
    records = [r for r in report.recovery_records() if r["name"] == "demo-tpu"]
    assert [(r["action"], r["cause"], r["resumed"]) for r in records] == [("replace", "preempted", True)]
    assert report.to_json()["settled"] == report.settled and report.settled
    assert any(line.startswith("info: settled: demo-tpu-vm: a killed update created it") for line in said)
    # The next round finds the state settled and does nothing more to it.
    again = rec.run_round()
    assert again.settled == [] and len(runner.imports) == 1


def test_a_round_that_cannot_read_the_live_state_leaves_an_interruption_as_it_is(dev_vm) -> None:
    tpu, _ = dev_vm
    tpu.fail_with = 503
    runner = RecordingRunner()
    runner.state = copy.deepcopy(KILLED)
    report = recoverer(runner)[0].run_round()
    assert runner.imports == [] and runner.stacks == []
    assert report.outcome is RoundOutcome.TRY_LATER and "left as it is" in (report.reason or "")
    assert round_report.exit_status(report) == exit_codes.EXIT_TRY_LATER


def test_a_state_that_changes_while_the_round_settles_it_is_left_to_the_update_that_runs(dev_vm) -> None:
    class Moving(RecordingRunner):
        def export_state(self, stack: str) -> dict[str, Any]:
            self.exports += 1
            moved = copy.deepcopy(self.state)
            moved["deployment"]["resources"][0]["id"] = f"ckpt-{self.exports}"  # an update writes on
            return moved

    runner = Moving()
    runner.state = copy.deepcopy(KILLED)
    report = recoverer(runner)[0].run_round()
    assert runner.imports == [] and report.outcome is RoundOutcome.TRY_LATER
    assert "an update is running" in (report.reason or "")


def test_a_failed_updates_cause_is_carried_on_by_the_next_round_of_the_watch(dev_vm) -> None:
    tpu, _ = dev_vm
    tpu.nodes["europe-west4-a"][0]["state"] = "PREEMPTED"
    runner = RecordingRunner(RoundOutcome.FAILED)
    rec, _ = recoverer(runner)
    failed = rec.run_round()
    assert failed.outcome is RoundOutcome.FAILED
    # The update deleted the node and failed to create the new one: the state keeps the old
    # resource marked for replacement, and the node is gone.
    tpu.nodes["europe-west4-a"].clear()
    runner.state = state([vm(NEW, "preempted", id=NODE_ID, pendingReplacement=True)])
    runner.status = RoundOutcome.SUCCEEDED
    carried = rec.run_round()
    (vm_decision,) = [d for kind, d in carried.decisions if kind == "tpuVm"]
    assert (vm_decision.action, vm_decision.cause, vm_decision.resumed) == ("create", Cause.PREEMPTED, True)
    assert runner.rounds[-1] is not None and runner.rounds[-1].resumed == {"demo-tpu": "preempted"}


def test_an_interrupted_first_create_is_adopted_by_the_id_its_inputs_give() -> None:
    # The old resource is gone from the state (an earlier round removed it), and the round after
    # was killed once its create was made: no entry holds the ID.
    creating = vm(NEW, "preempted")
    creating["inputs"].update(zone="europe-west4-a")
    first = state([], [{"resource": creating, "type": "creating"}])
    settled = settle(first, interruptions(first, {VM_URN}), {VM_URN: Live(True, NEW)}, "p")
    (entry,) = [r for r in settled.state["deployment"]["resources"] if r["urn"] == VM_URN]
    assert entry["id"] == NODE_ID and settled.adopted == {VM_URN: Cause.PREEMPTED}
    job = {"type": "kubernetes:batch/v1:Job", "inputs": {"metadata": {"name": "train-v6e"}}}
    assert object_id(job, "p") == "default/train-v6e"
    assert object_id({"type": "gcp:storage/bucket:Bucket", "inputs": {"name": "b"}}, "p") is None


def test_the_live_generation_of_a_replace_decision_is_the_one_running_not_the_next() -> None:
    assert live_generation(replace("demo-tpu", OLD, "node is PREEMPTED", Cause.PREEMPTED)) == OLD
    assert live_generation(keep("demo-tpu", OLD, "node is READY")) == OLD
    assert live_generation(keep("demo-tpu", None, "node is READY")) is None


def test_a_state_this_version_cannot_read_is_passed_over_not_a_crash() -> None:
    odd = {
        "deployment": {
            "resources": ["x", {"urn": ["unhashable"]}],
            "pending_operations": [1, {"resource": 2}],
        }
    }
    assert interruptions(odd, {VM_URN}) == {}
    assert any_interrupted({"deployment": "x"}) is False


def test_a_node_the_killed_round_made_and_that_was_preempted_since_is_adopted_then_replaced(
    tmp_path, monkeypatch
) -> None:
    fields = {"labels": {"recovery-generation": str(NEW), "recovery-cause": "preempted"}}
    running = job("train-v6e", generation=1, active=4, ready=4)
    with live_dev_stack(tmp_path, monkeypatch, "PREEMPTED", running, **fields):
        runner = RecordingRunner()
        runner.state = copy.deepcopy(KILLED)
        report = recoverer(runner)[0].run_round()
    (imported,) = runner.imports
    (entry,) = [r for r in imported["deployment"]["resources"] if r["urn"] == VM_URN]
    assert generation_of(entry) == NEW and not entry.get("pendingReplacement"), "adopted, not cleared"
    (vm_decision,) = [d for kind, d in report.decisions if kind == "tpuVm"]
    assert (vm_decision.action, vm_decision.cause, vm_decision.resumed) == ("replace", Cause.PREEMPTED, False)
    assert report.outcome is RoundOutcome.SUCCEEDED


def test_a_round_killed_after_it_adopted_a_node_but_before_its_update_is_carried_on(dev_vm) -> None:
    # What the import left: the adopted resource, its outputs still its inputs.
    adopted = vm(NEW, "preempted", id=NODE_ID)
    adopted["outputs"] = copy.deepcopy(adopted["inputs"])
    runner = RecordingRunner()
    runner.state = state([adopted])
    report = recoverer(runner)[0].run_round()
    assert runner.imports == [], "nothing in the state to change"
    assert runner.refreshed == [[VM_URN]]
    (vm_decision,) = [d for kind, d in report.decisions if kind == "tpuVm"]
    assert (vm_decision.action, vm_decision.resumed, vm_decision.cause) == ("keep", True, Cause.PREEMPTED)
    assert runner.rounds[-1] is not None and runner.rounds[-1].resumed == {"demo-tpu": "preempted"}
    assert report.settled == [
        "demo-tpu-vm: adopted by a round killed before its own update; that update runs now"
    ]


def test_a_node_made_in_another_zone_than_the_old_one_is_adopted_by_its_own_id() -> None:
    # A move down a capacity ladder: the killed update was making the node in the next zone.
    creating = vm(NEW, "stockout")
    creating["inputs"].update(zone="europe-west4-b", project="p")
    moved = state(
        [vm(OLD, "preempted", id=NODE_ID, pendingReplacement=True)],
        [{"resource": creating, "type": "creating"}],
    )
    settled = settle(moved, interruptions(moved, {VM_URN}), {VM_URN: Live(True, NEW)}, "p")
    (entry,) = [r for r in settled.state["deployment"]["resources"] if r["urn"] == VM_URN]
    assert entry["id"] == "projects/p/locations/europe-west4-b/nodes/demo-tpu"


def test_a_provider_whose_outputs_are_its_inputs_is_not_taken_for_an_adopted_resource() -> None:
    provider = {"urn": "urn:pulumi:dev::tpu-training::pulumi:providers:gcp::default", "custom": True}
    provider.update(type="pulumi:providers:gcp", inputs={"project": "p"}, outputs={"project": "p"})
    assert not any_interrupted(state([provider]))


# --- A TPU VM requested from the queue (QueuedTpuVm, a dynamic resource) ------------------------

QUEUED_URN = (
    "urn:pulumi:dev::tpu-training::tpu-training:compute:PreemptibleTpuVm$pulumi-python:dynamic:Resource"
    "::demo-tpu-queued"
)
REQUEST_ID = "projects/p/locations/us-east5-a/queuedResources/demo-tpu"


def queued(generation: int, cause: str, **fields: Any) -> dict[str, Any]:
    labels = {"recovery-generation": str(generation), "recovery-cause": cause}
    node = {"acceleratorType": "v6e-8", "labels": labels}
    return {
        "urn": QUEUED_URN,
        "custom": True,
        "type": "pulumi-python:dynamic:Resource",
        "inputs": {
            "project": "p",
            "zone": "us-east5-a",
            "queuedResourceId": "demo-tpu",
            "apiVersion": "v2",
            "body": {"tpu": {"nodeSpec": [{"nodeId": "demo-tpu", "node": node}]}},
            "generation": f"recovery {generation}, restart 0",
        },
        **fields,
    }


def test_a_queued_vm_a_killed_round_requested_is_adopted_by_its_request_id_and_cause() -> None:
    killed = state(
        [queued(OLD, "missing", id=REQUEST_ID, outputs={"state": "ACTIVE"}, pendingReplacement=True)],
        [{"resource": queued(NEW, "preempted"), "type": "creating"}],
    )
    settled = settle(killed, interruptions(killed, {QUEUED_URN}), {QUEUED_URN: Live(True, NEW)})
    (entry,) = [r for r in settled.state["deployment"]["resources"] if r["urn"] == QUEUED_URN]
    assert entry["id"] == REQUEST_ID and generation_of(entry) == NEW
    assert settled.adopted == {QUEUED_URN: Cause.PREEMPTED}
    # Until the round's refresh reads it, it is one a later round recognises as adopted.
    assert any_interrupted(settled.state) and QUEUED_URN in interruptions(settled.state, {QUEUED_URN})


def test_a_queued_vm_whose_old_request_stands_is_unmarked_so_its_replacement_deletes_it_first() -> None:
    marked = state(
        [queued(OLD, "missing", id=REQUEST_ID, outputs={"state": "SUSPENDED"}, pendingReplacement=True)]
    )
    settled = settle(marked, interruptions(marked, {QUEUED_URN}), {QUEUED_URN: Live(True, OLD)})
    (entry,) = [r for r in settled.state["deployment"]["resources"] if r["urn"] == QUEUED_URN]
    assert "pendingReplacement" not in entry and "still exists" in settled.lines[0]
    assert object_id(queued(NEW, "stockout"), "p") == REQUEST_ID
    # Another dynamic resource is not one recovery manages.
    other = {"type": "pulumi-python:dynamic:Resource", "inputs": {"name": "x"}, "replacementTrigger": 3}
    assert object_id(other, "p") is None and generation_of(other) == 3
