"""The capacity ladder of a TPU VM (domain/capacity_ladder.py): its config, the rungs' order, how a
refused create is classified from the Cloud TPU API's own error, and where the program declares a
VM (a running one never moves; a recovery round's rung is declared)."""

from __future__ import annotations

import json

import pytest
from support.program import refused, run_stack
from tpu_training_components.domain.capacity_ladder import (
    CreateFailure,
    LadderState,
    Rung,
    after_create,
    build_ladder,
    classify_create_failure,
    declare,
    failure_of,
    state_from_records,
    zone_to_judge,
)
from tpu_training_components.domain.recovery_rounds import ROUND_ENV, RecoveryRound

VMS = "tpu-training:tpuVms"
A, B = "us-central1-a", "us-central1-b"
LADDER = build_ladder([A, B], ["spot", "on-demand"])


def _held_out(config):
    """The held-out stack of issue 36: one VM, zones [a, b], provisioning [spot, on-demand]."""
    for key in ("tpu-training:cluster", "tpu-training:nodePools", "tpu-training:jobs"):
        config.pop(key)
    vm = config[VMS][0]
    vm.pop("zone")
    vm.update(zones=[A, B], provisioning=["spot", "on-demand"])  # v3-8: offered in both zones
    return config


def _vm(run):
    return run.one("gcp:tpu/v2Vm:V2Vm", "demo-tpu-vm").inputs


# --- The rungs and their order -------------------------------------------------------------------


def test_capacity_is_the_outer_loop_and_zones_the_inner():
    assert LADDER == (Rung(A, "spot"), Rung(B, "spot"), Rung(A, "on-demand"), Rung(B, "on-demand"))


def test_the_held_out_stack_plans_clean_in_the_first_zone_as_spot(config):
    run = run_stack(_held_out(config))
    vm = _vm(run)
    assert vm["zone"] == A and vm["schedulingConfig"] == {"spot": True}
    assert run.outputs["tpuVms"]["demo-tpu"]["rung"] == 0
    assert not [w for w in run.warnings if "ladder" in w or "zone" in w]


def test_zone_alone_is_a_ladder_of_one(config):
    run = run_stack(config)
    assert run.outputs["tpuVms"]["demo-tpu"] | {"state": None, "health": None} == {
        "zone": "europe-west4-a",
        "provisioning": "preemptible",
        "rung": 0,
        "state": None,
        "health": None,
    }


def test_zone_and_zones_both_given_is_an_error_naming_both(config):
    config = _held_out(config)
    config[VMS][0]["zone"] = A
    message = refused(config)
    assert "zone (us-central1-a) and zones (us-central1-a, us-central1-b) are both given" in message


def test_zones_in_two_regions_is_an_error_naming_the_zones(config):
    config = _held_out(config)
    config[VMS][0]["zones"] = [A, "us-east1-c"]
    message = refused(config)
    assert "tpu-training:tpuVms[0].zones" in message
    assert "us-central1-a, us-east1-c are in 2 regions" in message and "checkpoint bucket" in message


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("zones", [], "is empty"),
        ("zones", [A, A], "repeats us-central1-a"),
        ("provisioning", ["spot", "spot"], "repeats spot"),
        ("provisioning", ["spot", "flex-start"], "flex-start"),
    ],
)
def test_a_bad_ladder_is_refused_naming_the_key(config, key, value, said):
    config = _held_out(config)
    config[VMS][0][key] = value
    message = refused(config)
    assert f"tpu-training:tpuVms[0].{key}" in message and said in message


@pytest.mark.parametrize("attempts", [0, -1, 101, "2", 1.5])
def test_ladder_attempts_are_validated(config, attempts):
    config["tpu-training:recovery"] = {"ladder": {"attempts": attempts}}
    message = refused(config)
    assert "tpu-training:recovery.ladder.attempts" in message


# --- Classifying a refused create ------------------------------------------------------------------

# Each example with where its words come from. The codes: google/rpc/code.proto (googleapis):
# INVALID_ARGUMENT 3 (HTTP 400), PERMISSION_DENIED 7 (403), RESOURCE_EXHAUSTED 8 (429),
# FAILED_PRECONDITION 9 (400).
ERRORS = [
    # The Cloud TPU API's stockout, as `gcloud compute tpus tpu-vm create` prints the failed
    # operation's google.rpc.Status (quoted in SkyPilot sky/backends/cloud_vm_ray_backend.py, 2024).
    (
        '{"code": 8, "message": "There is no more capacity in the zone \\"us-central1-a\\"; you can try in '
        'another zone where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions)"}',
        CreateFailure.STOCKOUT,
    ),
    # The same through pulumi-gcp's operation waiter ("Error code 8, message: ...").
    (
        "error: 1 error occurred: * Error waiting to create V2Vm: Error waiting for Creating V2Vm: "
        'Error code 8, message: There is no more capacity in the zone "us-central1-a"',
        CreateFailure.STOCKOUT,
    ),
    # The synchronous answer the engine tier's fake gives (tests/support/engine/fakes.py).
    (
        "googleapi: Error 429: There is no more capacity in the zone 'us-central1-a', RESOURCE_EXHAUSTED",
        CreateFailure.STOCKOUT,
    ),
    # A reserved create without reserved capacity (code 9, quoted in SkyPilot as above).
    (
        '{"code": 9, "message": "Insufficient reserved capacity. Contact customer support."}',
        CreateFailure.STOCKOUT,
    ),
    # gcloud's quota refusal (RESOURCE_EXHAUSTED with quota wording; Cloud TPU quotas page).
    (
        "ERROR: (gcloud.compute.tpus.create) RESOURCE_EXHAUSTED: Quota limit "
        "'TPUV2sPodPerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0 in region us-central1.",
        CreateFailure.QUOTA,
    ),
    ("googleapi: Error 403: Quota 'TPUS_PER_PROJECT' exceeded, QUOTA_EXCEEDED", CreateFailure.QUOTA),
    (
        "googleapi: Error 403: Permission 'tpu.nodes.create' denied on resource, PERMISSION_DENIED",
        CreateFailure.PERMISSION,
    ),
    ('{"code": 3, "message": "CloudTpu received an invalid AcceleratorType"}', CreateFailure.INVALID),
    (
        "Error code 9, message: FAILED_PRECONDITION: the network has no subnetwork in the region",
        CreateFailure.INVALID,
    ),
    ("error: update failed: context deadline exceeded", CreateFailure.UNKNOWN),
    ("", CreateFailure.UNKNOWN),
]


@pytest.mark.parametrize(("text", "expected"), ERRORS)
def test_a_refused_create_is_classified_from_the_apis_own_error(text, expected):
    assert classify_create_failure(text) is expected


def test_an_update_of_several_vms_attributes_errors_by_resource_name():
    message = (
        "urn:...V2Vm::other-vm error: googleapi: Error 403: PERMISSION_DENIED\n"
        "urn:...V2Vm::demo-tpu-vm error: Error code 8, message: There is no more capacity in the zone"
    )
    assert failure_of("demo-tpu", message, ["demo-tpu", "other"]) is CreateFailure.STOCKOUT
    assert failure_of("other", message, ["demo-tpu", "other"]) is CreateFailure.PERMISSION
    assert failure_of("third", message, ["demo-tpu", "third"]) is CreateFailure.UNKNOWN


# --- Moving down, and back up ----------------------------------------------------------------------


def test_two_stockouts_move_one_rung_and_a_fresh_loss_climbs_back():
    state = declare(LADDER, None, 2).state
    assert state.rung == LADDER[0]
    state, _ = after_create(LADDER, state, CreateFailure.STOCKOUT)
    again = declare(LADDER, state, 2)
    assert again.state.rung == LADDER[0] and not again.moved  # one stockout: the same rung
    state, _ = after_create(LADDER, again.state, CreateFailure.STOCKOUT)
    moved = declare(LADDER, state, 2)
    assert moved.moved and moved.state.rung == LADDER[1]  # B spot: one rung down
    assert "2 stockouts in a row on rung 0 (us-central1-a spot)" in moved.line
    state, _ = after_create(LADDER, moved.state, None)  # created on B
    assert declare(LADDER, state, 2).state.rung == LADDER[0]  # its next loss tries A again


@pytest.mark.parametrize("failure", [CreateFailure.QUOTA, CreateFailure.PERMISSION, CreateFailure.INVALID])
def test_quota_permission_and_invalid_errors_never_move_the_ladder(failure):
    state = LadderState(LADDER[0])
    for _ in range(5):
        state, line = after_create(LADDER, state, failure)
        assert "the ladder does not move" in line
        declared = declare(LADDER, state, 2)
        assert not declared.moved
        state = declared.state
    assert state.rung == LADDER[0]
    assert "raise" in line or "grant" in line or "fix" in line


def test_the_last_rung_is_tried_again():
    state = LadderState(LADDER[-1], 5)
    declared = declare(LADDER, state, 2)
    assert declared.state.rung == LADDER[-1] and "the last rung" in declared.line


def test_records_carry_the_stockouts_across_runs():
    rung = {"zone": A, "provisioning": "spot"}
    records = [
        {
            "kind": "tpuVm",
            "name": "demo-tpu",
            "rung": rung,
            "upStatus": "failed",
            "createFailure": "stockout",
        },
        {"kind": "job", "name": "demo-tpu", "rung": rung, "upStatus": "failed", "createFailure": "stockout"},
        {
            "kind": "tpuVm",
            "name": "demo-tpu",
            "rung": rung,
            "upStatus": "failed",
            "createFailure": "stockout",
        },
    ]
    state = state_from_records(LADDER, "demo-tpu", records)
    assert state == LadderState(LADDER[0], 2)
    assert declare(LADDER, state, 2).state.rung == LADDER[1]
    assert state_from_records(LADDER, "other", records) is None


def test_a_vm_is_judged_in_the_zone_it_lives_in():
    assert zone_to_judge("vm", [A, B], {(B, "vm")}, set()) == B
    assert zone_to_judge("vm", [A, B], set(), {B}) == B  # may be there: kept, never replaced on unknown
    assert zone_to_judge("vm", [A, B], set(), set()) == A


# --- What the program declares ---------------------------------------------------------------------


def _deployed_on(zone, provisioning):
    return {"tpuVms": {"demo-tpu": {"zone": zone, "provisioning": provisioning, "rung": 1}}}


def test_a_running_vm_stays_on_its_rung_when_the_ladder_is_reordered(config):
    config = _held_out(config)
    config[VMS][0]["zones"] = [B, A]
    config[VMS][0]["provisioning"] = ["on-demand", "spot"]
    run = run_stack(config, previous_outputs=_deployed_on(A, "spot"))
    vm = _vm(run)
    assert vm["zone"] == A and vm["schedulingConfig"] == {"spot": True}
    # Its new place, (b, on-demand), (a, on-demand), (b, spot), (a, spot): the VM itself unchanged.
    assert run.outputs["tpuVms"]["demo-tpu"]["rung"] == 3


def test_a_recovery_round_declares_the_rung_it_was_told(config, monkeypatch):
    round_ = RecoveryRound(False, frozenset({"demo-tpu"}), rungs={"demo-tpu": Rung(B, "spot")})
    monkeypatch.setenv(ROUND_ENV, round_.to_env())
    run = run_stack(_held_out(config), previous_outputs=_deployed_on(A, "spot"))
    assert _vm(run)["zone"] == B
    assert run.outputs["tpuVms"]["demo-tpu"]["rung"] == 1


def test_a_round_rung_off_the_ladder_is_refused(config, monkeypatch):
    round_ = RecoveryRound(False, frozenset({"demo-tpu"}), rungs={"demo-tpu": Rung("us-central1-c", "spot")})
    monkeypatch.setenv(ROUND_ENV, round_.to_env())
    message = refused(_held_out(config))
    assert "rung us-central1-c spot is not on its ladder" in message


def test_round_rungs_survive_the_environment():
    round_ = RecoveryRound(True, frozenset({"demo-tpu"}), rungs={"demo-tpu": Rung(B, "on-demand")})
    assert RecoveryRound.from_env(round_.to_env()) == round_
    assert json.loads(round_.to_env())["rungs"] == {"demo-tpu": {"zone": B, "provisioning": "on-demand"}}
