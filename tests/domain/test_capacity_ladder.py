"""The capacity ladder of a TPU VM (domain/capacity_ladder.py): its config, the rungs' order, how a
refused create is classified from the Cloud TPU API's own error, and where the program declares a
VM (a running one never moves; a recovery round's rung is declared)."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from support.fakes.fake_tpu_api import FakeTpuApi
from support.harness.in_process import run_plan
from support.harness.program import REPO, refused, run_stack
from support.harness.recover_runs import RecordingRunner
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
    with_stockout_causes,
    zone_to_judge,
)
from tpu_training_components.domain.recovery_rounds import ROUND_ENV, RecoveryRound, RoundOutcome
from tpu_training_components.live.progress_records import ProgressReading

from tpu_training import project_files
from tpu_training.recovery import recovery_round, stack_probe, watch_loop
from tpu_training.recovery.automation import UpResult

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
    # The synchronous answer the engine tier's fake gives (tests/support/harness/engine/fakes.py).
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


def test_a_move_for_stockouts_is_the_vms_cause_on_its_label_and_in_last_recoveries(config, monkeypatch):
    moved = RecoveryRound(
        False, frozenset({"demo-tpu"}), rungs={"demo-tpu": Rung(B, "spot")}, stockouts=frozenset({"demo-tpu"})
    )
    assert RecoveryRound.from_env(moved.to_env()) == moved
    monkeypatch.setenv(ROUND_ENV, moved.to_env())
    run = run_stack(_held_out(config), previous_outputs=_deployed_on(A, "spot"))
    assert _vm(run)["labels"]["recovery-cause"] == "stockout"
    # lastRecoveries: the program's own decision (it saw the VM missing) with the round's cause.
    found = {"tpuVms": {"demo-tpu": {"action": "create", "cause": "missing"}, "other": {"cause": "hung"}}}
    assert with_stockout_causes(found, {"demo-tpu"})["tpuVms"] == {
        "demo-tpu": {"action": "create", "cause": "stockout"},
        "other": {"cause": "hung"},
    }


def test_a_round_rung_off_the_ladder_is_refused(config, monkeypatch):
    round_ = RecoveryRound(False, frozenset({"demo-tpu"}), rungs={"demo-tpu": Rung("us-central1-c", "spot")})
    monkeypatch.setenv(ROUND_ENV, round_.to_env())
    message = refused(_held_out(config))
    assert "rung us-central1-c spot is not on its ladder" in message


def test_round_rungs_survive_the_environment():
    round_ = RecoveryRound(True, frozenset({"demo-tpu"}), rungs={"demo-tpu": Rung(B, "on-demand")})
    assert RecoveryRound.from_env(round_.to_env()) == round_
    assert json.loads(round_.to_env())["rungs"] == {"demo-tpu": {"zone": B, "provisioning": "on-demand"}}


# --- Recovery rounds (`tpu-training recover`) on the held-out stack -----------------------------


class _Refusing(RecordingRunner):
    """`pulumi up` whose creates the Cloud TPU API refuses with ``error`` (None: they succeed)."""

    def __init__(self, tpu, error):
        super().__init__(deployed=("demo-tpu",))
        self.tpu, self.error = tpu, error

    def __call__(self, stack, targets=None, *, refresh=True, recovery_round=None):
        super().__call__(stack, targets, refresh=refresh, recovery_round=recovery_round)
        rung = recovery_round.rungs["demo-tpu"]
        for zone in (A, B):
            self.tpu.nodes[zone] = [n for n in self.tpu.nodes.get(zone, []) if n["name"] != "demo-tpu"]
        if self.error is not None and rung.zone == A:
            return UpResult(RoundOutcome.FAILED, f"urn:...V2Vm::demo-tpu-vm error: {self.error}", 0.1)
        self.tpu.add(rung.zone, "demo-tpu", "READY", labels={"recovery-generation": "9"}, health="HEALTHY")
        return UpResult(RoundOutcome.SUCCEEDED, "update succeeded", 0.1)


@pytest.fixture
def ladder_stack(tmp_path, monkeypatch, config):
    """The held-out stack in a project of its own, its VM preempted on its first rung."""
    shutil.copy(REPO / "Pulumi.yaml", tmp_path)
    (tmp_path / "infra").symlink_to(REPO / "infra")
    (tmp_path / "trainer").symlink_to(REPO / "trainer")
    (tmp_path / "Pulumi.ladder.yaml").write_text(yaml.safe_dump({"config": _held_out(config)}))
    with FakeTpuApi() as tpu:
        tpu.add(A, "demo-tpu", "PREEMPTED", labels={"recovery-generation": "3"})
        monkeypatch.setenv("TPU_API_ENDPOINT", tpu.endpoint)
        yield stack_probe.Target(project_files.load_project(tmp_path), "ladder", "ladder"), tpu


def _rounds(target, runner, count, records=None):
    said = []
    probe = stack_probe.Probe(read_progress=lambda folder: ProgressReading())
    recoverer = recovery_round.Recoverer(target, probe=probe, up=runner, say=said.append, records=records)
    return [recoverer.run_round() for _ in range(count)], said


STOCKOUT = 'Error code 8, message: There is no more capacity in the zone "us-central1-a"'


def test_recovery_moves_one_rung_after_two_stockouts_with_cause_stockout(ladder_stack):
    target, tpu = ladder_stack
    runner = _Refusing(tpu, STOCKOUT)
    reports, said = _rounds(target, runner, 4)
    declared = [r.rungs["demo-tpu"] for r in runner.rounds]
    assert declared == [Rung(A, "spot"), Rung(A, "spot"), Rung(B, "spot")]  # then READY on B
    assert [r.outcome for r in reports] == [RoundOutcome.FAILED] * 2 + [
        RoundOutcome.SUCCEEDED,
        RoundOutcome.NOT_RUN,
    ]
    # The second stockout makes the move: a watch starts the next round at its interval, no back-off.
    assert [r.ladder_moves for r in reports] == [(), ("demo-tpu",), (), ()]
    moved = reports[2].to_json()["decisions"][0]
    assert moved["cause"] == "stockout" and "declared on rung 1 (us-central1-b spot)" in moved["reason"]
    assert [r.stockouts for r in runner.rounds] == [frozenset(), frozenset(), frozenset({"demo-tpu"})]
    assert reports[0].recovery_records()[0]["createFailure"] == "stockout"
    assert reports[2].recovery_records()[0]["rung"] == {"zone": B, "provisioning": "spot"}
    assert reports[2].recovery_records()[0]["cause"] == "stockout"


QUOTA = "googleapi: Error 403: Quota 'TPUS_PER_PROJECT' exceeded, QUOTA_EXCEEDED"
PERMISSION = "googleapi: Error 403: Permission 'tpu.nodes.create' denied, PERMISSION_DENIED"


@pytest.mark.parametrize("error", [QUOTA, PERMISSION])
def test_recovery_never_moves_on_a_quota_or_permission_error(ladder_stack, error):
    target, tpu = ladder_stack
    runner = _Refusing(tpu, error)
    reports, said = _rounds(target, runner, 4)
    assert {r.rungs["demo-tpu"] for r in runner.rounds} == {Rung(A, "spot")}
    assert all(r.outcome is RoundOutcome.FAILED for r in reports)
    assert not any(d["cause"] == "stockout" for r in reports for d in r.to_json()["decisions"])
    assert any(
        "the ladder does not move" in line and ("quota" in line or "roles/tpu.admin" in line) for line in said
    )


def test_a_once_schedule_counts_stockouts_from_its_records(ladder_stack, tmp_path):
    target, tpu = ladder_stack
    records = tmp_path / "records.jsonl"
    runner = _Refusing(tpu, STOCKOUT)
    for _ in range(2):  # two runs of --once, each a process of its own as far as memory goes
        (report,), _ = _rounds(target, runner, 1, records=str(records))
        watch_loop.append_records(str(records), report.recovery_records(), print)
    (report,), _ = _rounds(target, runner, 1, records=str(records))
    assert runner.rounds[-1].rungs["demo-tpu"] == Rung(B, "spot")
    assert report.outcome is RoundOutcome.SUCCEEDED


# --- The plan: prices per rung, and which ladder edits restart training ----------------------------


def test_the_plan_shows_each_rungs_price_and_the_worst(config):
    ladder = run_stack(_held_out(config)).outputs["capacityLadders"]["demo-tpu"]
    prices = [row["usdPerHour"] for row in ladder["rungs"]]
    # v3-8 in us-central1 (domain/prices.py): Spot on both zones, then on-demand, the worst.
    assert prices[0] == prices[1] < prices[2] == prices[3] == ladder["worstUsdPerHour"]
    assert [(row["zone"], row["provisioning"]) for row in ladder["rungs"]] == [
        (A, "spot"),
        (B, "spot"),
        (A, "on-demand"),
        (B, "on-demand"),
    ]


def test_no_ladder_no_ladder_prices(config):
    assert "capacityLadders" not in run_stack(config).outputs


@pytest.fixture
def plan_project(tmp_path, config):
    shutil.copy(REPO / "Pulumi.yaml", tmp_path)
    (tmp_path / "infra").symlink_to(REPO / "infra")
    (tmp_path / "trainer").symlink_to(REPO / "trainer")
    (tmp_path / "deployed.json").write_text(json.dumps(_deployed_on(A, "spot")))

    def plan(name, edit, *args):
        stack = _held_out(json.loads(json.dumps(config)))
        edit(stack[VMS][0])
        (tmp_path / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": stack}))
        result = run_plan(
            "--stack", name, "--previous-outputs", str(tmp_path / "deployed.json"), *args, cwd=tmp_path
        )
        assert result.returncode == 0, result.stderr
        return result

    return tmp_path, plan


def _restarts(plan_project, edit):
    folder, plan = plan_project
    plan("ladder", lambda vm: None, "--json", str(folder / "base.json"))
    document = json.loads(
        plan("ladder", edit, "--compare-to", str(folder / "base.json"), "--json", "-").stdout
    )
    return document["changes"]["restartsTraining"]


def test_reordering_the_rungs_of_a_running_vm_restarts_nothing(plan_project):
    def reorder(vm):
        vm.update(zones=[B, A], provisioning=["on-demand", "spot"])

    assert _restarts(plan_project, reorder) == []


def test_removing_the_rung_a_vm_runs_on_restarts_it(plan_project):
    def drop_spot(vm):
        vm.update(provisioning=["on-demand"])

    assert _restarts(plan_project, drop_spot) == ["demo-tpu-vm"]
