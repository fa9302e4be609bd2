"""Recovery is a reconcile: the decision table, the live probe, and the whole stack under it."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone

import pytest
from support.fakes.fake_tpu_api import FakeTpuApi
from support.harness.generations import DECIDED_AT, fresh_stamp_since
from support.harness.in_process import run_plan
from support.harness.program import changed_registrations, run_stack
from tpu_training_components.domain import recovery
from tpu_training_components.domain.recovery import LiveNode, decide
from tpu_training_components.live.tpu_api import list_live_nodes

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
ZONE = "europe-west4-a"
VM = "gcp:tpu/v2Vm:V2Vm"


def node(state="READY", health="", description="", generation="4"):
    return LiveNode("demo-tpu", ZONE, state, health, description, {"recovery-generation": generation})


def event(minutes_ago: int) -> str:
    at = (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%S.123456789Z")
    return f"The TPU had a maintenance event at {at}"


@pytest.mark.parametrize(
    ("live", "action", "generation", "warn"),
    [
        (None, "create", None, False),
        (node("READY"), "keep", 4, False),
        (node("READY", "HEALTHY"), "keep", 4, False),
        (node("CREATING"), "keep", 4, False),
        (node("STARTING"), "keep", 4, False),
        (node("RESTARTING"), "keep", 4, False),
        (node("REPAIRING"), "keep", 4, False),
        (node("REIMAGING"), "keep", 4, False),
        (node("PREEMPTED"), "replace", 5, False),
        (node("TERMINATED"), "replace", 5, False),
        (node("READY", "UNHEALTHY_MAINTENANCE", event(45)), "replace", 5, False),
        (node("READY", "TIMEOUT", event(31)), "replace", 5, False),
        (node("READY", "UNHEALTHY_MAINTENANCE", event(10)), "keep", 4, True),
        (node("READY", "UNHEALTHY_MAINTENANCE", "no time here"), "keep", 4, True),
        (node("STOPPED"), "keep", 4, True),
        (node("STOPPING"), "keep", 4, True),
        (node("HIDDEN"), "keep", 4, True),
    ],
)
def test_decision_table(live, action, generation, warn):
    decision = decide("demo-tpu", live, now=NOW, grace=timedelta(minutes=30))
    assert (decision.action, decision.generation, decision.warn) == (action, generation, warn)
    assert decision.message.startswith("demo-tpu: ")


def _unlabelled(state="READY", **labels):
    return LiveNode("demo-tpu", ZONE, state, labels=labels)


@pytest.mark.parametrize(
    ("live", "action"),
    [
        # Today's bug: a READY node without the label got generation 0 and was replaced.
        (_unlabelled(), "keep"),
        (_unlabelled(**{"recovery-generation": "²"}), "keep"),  # str.isdigit() says yes; int() no
        (_unlabelled(**{"recovery-generation": "-1"}), "keep"),
        (_unlabelled(**{"recovery-generation": " 4"}), "keep"),
        (_unlabelled(**{"recovery-generation": "9" * 40}), "keep"),
        (LiveNode("demo-tpu", ZONE, "", labels={"recovery-generation": "4"}), "keep"),  # no state
        (LiveNode("demo-tpu", ZONE, "STATE_UNSPECIFIED", labels={"recovery-generation": "4"}), "keep"),
        # Lost for sure, but from which generation nobody knows: the last deployed one + 1.
        (_unlabelled("PREEMPTED", **{"recovery-generation": "not-a-number"}), "replace"),
    ],
)
def test_unknown_generation_or_state_never_counts_as_zero(live, action):
    decision = decide("demo-tpu", live, now=NOW)
    assert (decision.action, decision.generation, decision.warn) == (action, None, True)
    assert decision.after_last_deployed is (action == "replace")
    expected = "a new recovery generation" if action == "replace" else "recovery generation last deployed"
    assert decision.message.endswith(f"({expected})")


@pytest.mark.parametrize(
    "description",
    [
        "The TPU had a maintenance event at 2026-02-30T03:44:36Z",  # no such day
        "The TPU had a maintenance event at 2026-11-21T03:44:36+25:00",  # no such offset
        "The TPU had a maintenance event at 2026-11-21T25:44:36Z",
    ],
)
def test_malformed_event_time_is_no_time_to_measure(description):
    decision = decide("demo-tpu", node("READY", "UNHEALTHY_MAINTENANCE", description), now=NOW)
    assert (decision.action, decision.generation, decision.warn) == ("keep", 4, True)
    assert "no event time to measure it by" in decision.reason


def test_unlabelled_ready_node_keeps_the_last_deployed_generation_in_the_stack(config, live_api):
    live_api.add(ZONE, "demo-tpu", "READY", labels={})
    run = run_stack(config, previous_outputs={"recoveryGenerations": {"demo-tpu": 5}})
    assert _vm(run, "demo-tpu").options["replacementTrigger"] == 5


def test_grace_period_is_configurable():
    live = node("READY", "UNHEALTHY_MAINTENANCE", event(10))
    assert decide("demo-tpu", live, now=NOW, grace=timedelta(minutes=5)).action == "replace"


def test_unreachable_keeps_the_last_generation():
    decision = recovery.unreachable("demo-tpu", "ConnectionError: refused")
    assert (decision.action, decision.generation, decision.warn) == ("keep", None, True)
    assert "nothing is replaced on unknown state" in decision.message


def test_seed_001_event_time_with_nanoseconds():
    at = recovery.maintenance_event_time(
        "health: HEALTHY healthDescription: The TPU had a maintenance event at 2022-01-26T03:44:36.265703305Z"
    )
    assert at == datetime(2022, 1, 26, 3, 44, 36, 265703, tzinfo=timezone.utc)


EARLY, LATE = "2026-11-21T10:00:00Z", "2026-11-21T11:50:00Z"  # 120 and 10 minutes before NOW


@pytest.mark.parametrize(
    "description",
    [
        f"The TPU had a maintenance event at {EARLY}. The TPU had a maintenance event at {LATE}",
        f"The TPU had a maintenance event at {LATE}. The TPU had a maintenance event at {EARLY}",
        # The same instants in other offsets and RFC 3339's lower-case spelling: the clock decides.
        f"event at 2026-11-21T15:30:00+05:30; event at {LATE.lower()}",
        f"event at 2026-11-21T06:50:00-05:00, after one at {EARLY}",
        f"events: {EARLY}, 2026-11-21T11:50:00.000000001Z, 2026-11-21T11:00:00.5Z",
    ],
)
def test_several_event_times_are_timed_from_the_latest(description):
    decision = decide("demo-tpu", node("READY", "UNHEALTHY_MAINTENANCE", description), now=NOW)
    # The first time found would be 120 minutes old, past the 30-minute grace: a replacement.
    assert (decision.action, decision.generation) == ("keep", 4)
    assert "within the 30 min grace period" in decision.reason
    assert recovery.maintenance_event_time(description) == datetime(2026, 11, 21, 11, 50, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "unreadable",
    ["2026-11-21T11:50:00", "2026-02-30T11:50:00Z", "2026-11-21T11:50:00+25:00", "2026-11-21 11:50"],
)
def test_a_time_that_cannot_be_read_beside_an_old_one_keeps_the_node(unreadable):
    """The unreadable one may be the current event: timing from the old one alone would replace."""
    description = f"maintenance event at {EARLY}; maintenance event at {unreadable}"
    decision = decide("demo-tpu", node("READY", "UNHEALTHY_MAINTENANCE", description), now=NOW)
    assert (decision.action, decision.generation, decision.warn) == ("keep", 4, True)
    assert "no event time to measure it by" in decision.reason


def test_an_event_after_now_keeps_the_node_and_says_a_clock_is_wrong():
    later = "The TPU had a maintenance event at 2026-11-21T13:00:00Z"
    decision = decide("demo-tpu", node("READY", "UNHEALTHY_MAINTENANCE", later), now=NOW)
    assert (decision.action, decision.generation, decision.warn) == ("keep", 4, True)
    assert "which is after now" in decision.reason


# --- the probe, through the real google-cloud-tpu client, against a loopback server ---------


def test_one_list_call_per_zone_whatever_the_number_of_vms():
    with FakeTpuApi() as api:
        for i in range(64):
            api.add(ZONE, f"vm-{i}", "READY")
        api.add("us-central2-b", "other", "PREEMPTED", labels={"recovery-generation": "2"})
        live = list_live_nodes("p", [ZONE, ZONE, "us-central2-b"], endpoint=api.endpoint)
    assert len(api.calls) == 2 and live.calls == 2
    assert len(live.nodes) == 65 and not live.failures
    assert live.nodes[("us-central2-b", "other")].generation == 2


def test_api_error_is_a_failure_per_zone():
    with FakeTpuApi() as api:
        api.fail_with = 500
        live = list_live_nodes("p", [ZONE], endpoint=api.endpoint)
    assert "InternalServerError" in live.failures[ZONE] and not live.nodes


def test_api_timeout_is_a_failure():
    with FakeTpuApi() as api:
        api.delay_seconds = 1.0
        live = list_live_nodes("p", [ZONE], endpoint=api.endpoint, timeout=0.2)
    assert ZONE in live.failures


def test_connection_refused_is_a_failure():
    with FakeTpuApi() as api:
        endpoint = api.endpoint  # closed when the block ends: nothing listens there afterwards
    live = list_live_nodes("p", [ZONE], endpoint=endpoint)
    assert "ConnectionError" in live.failures[ZONE]


# --- the whole stack, reading live state --------------------------------------------------------


@pytest.fixture
def live_api(monkeypatch):
    with FakeTpuApi() as api:
        monkeypatch.delenv("TPU_TRAINING_OFFLINE", raising=False)
        monkeypatch.setenv("TPU_API_ENDPOINT", api.endpoint)
        yield api


def _vm(run, name):
    return run.one(VM, f"{name}-vm")


def test_preemption_bumps_one_vm_and_changes_nothing_else(config, live_api, decided_at):
    for name in ("vm-b", "vm-c"):
        config["tpu-training:tpuVms"].append(dict(config["tpu-training:tpuVms"][0], name=name))
    for name in ("demo-tpu", "vm-b", "vm-c"):
        live_api.add(
            ZONE, name, "PREEMPTED" if name == "vm-b" else "READY", labels={"recovery-generation": "3"}
        )
    previous = {"recoveryGenerations": {"demo-tpu": 3, "vm-b": 3, "vm-c": 3}}

    live = run_stack(copy.deepcopy(config), previous_outputs=previous)
    assert len(live_api.calls) == 1  # one zone, one call
    assert _vm(live, "vm-b").options["replacementTrigger"] == decided_at
    assert _vm(live, "vm-b").inputs["labels"]["recovery-generation"] == str(decided_at)
    assert _vm(live, "vm-b").options["deleteBeforeReplace"] is True
    assert any(
        "vm-b: node is PREEMPTED -> will be replaced (a new recovery generation)" in m for m in live.infos
    )

    # Against the same stack with every node READY, only vm-b's generation differs.
    live_api.nodes.clear()
    for name in ("demo-tpu", "vm-b", "vm-c"):
        live_api.add(ZONE, name, "READY", labels={"recovery-generation": "3"})
    steady = run_stack(copy.deepcopy(config), previous_outputs=previous)
    assert changed_registrations(live, steady) == ["vm-b-vm"]


def test_api_down_keeps_the_last_deployed_generation(config, live_api):
    live_api.fail_with = 503
    run = run_stack(config, previous_outputs={"recoveryGenerations": {"demo-tpu": 7}})
    assert _vm(run, "demo-tpu").options["replacementTrigger"] == 7
    assert any("TPU API unavailable" in w and "nothing is replaced" in w for w in run.warnings)


def test_node_gone_from_the_cloud_gets_a_new_generation(config, live_api, decided_at):
    """Deleted outside Pulumi (or by GCP): the node is still in the stack's state, where a plain
    `pulumi up` (no --refresh) sees no diff. A new trigger makes it replace: the provider's
    delete of an absent node succeeds (a 404 on delete counts as deleted), then it is created."""
    run = run_stack(config, previous_outputs={"recoveryGenerations": {"demo-tpu": 2}})
    assert _vm(run, "demo-tpu").options["replacementTrigger"] == decided_at
    assert _vm(run, "demo-tpu").inputs["labels"]["recovery-generation"] == str(decided_at)
    assert any(
        "no such node in its zone -> will be created (a new recovery generation)" in m for m in run.infos
    )


def test_a_new_generation_is_above_the_last_deployed_even_when_the_clock_is_behind(config, live_api):
    # A clock that is behind (another machine's) never makes a generation already used.
    run = run_stack(config, previous_outputs={"recoveryGenerations": {"demo-tpu": 30000101000000}})
    assert _vm(run, "demo-tpu").options["replacementTrigger"] == 30000101000001


def test_first_deployment_gets_a_new_generation_too(config, live_api, decided_at):
    # A first `up` that failed half-way may have left the VM in the state already: never 0 again.
    run = run_stack(config)
    assert _vm(run, "demo-tpu").inputs["labels"]["recovery-generation"] == str(decided_at)


def test_plan_live_shows_the_bump_and_nothing_else():
    started = datetime.now(timezone.utc)
    with FakeTpuApi() as api:
        api.add(ZONE, "demo-tpu", "PREEMPTED", labels={"recovery-generation": "0"})
        live = run_plan("--live", "--json", "-", env={"TPU_API_ENDPOINT": api.endpoint})
        tree = run_plan("--live", env={"TPU_API_ENDPOINT": api.endpoint})
    offline = json.loads(run_plan("--json", "-").stdout)
    assert live.returncode == 0, live.stderr
    document = json.loads(live.stdout)
    diff = [
        a["name"]
        for a, b in zip(document["resources"], offline["resources"], strict=True)
        if (a["inputs"], a["options"]) != (b["inputs"], b["options"])
    ]
    assert diff == ["demo-tpu-vm"]
    vm = next(r for r in document["resources"] if r["name"] == "demo-tpu-vm")
    assert fresh_stamp_since(started, vm["options"]["replacementTrigger"])
    assert vm["options"]["deleteBeforeReplace"] is True
    assert "info: demo-tpu: node is PREEMPTED -> will be replaced (a new recovery generation)" in tree.stdout


def test_the_last_recovery_and_its_cause_are_exported_and_kept_until_the_next(config, live_api, decided_at):
    live_api.add(ZONE, "demo-tpu", "PREEMPTED", labels={"recovery-generation": "3"})
    recovered = run_stack(copy.deepcopy(config), previous_outputs={"recoveryGenerations": {"demo-tpu": 3}})
    last = recovered.outputs["lastRecoveries"]
    assert last["tpuVms"] == {
        "demo-tpu": {
            "action": "replace",
            "cause": "preempted",
            "reason": "node is PREEMPTED",
            "generation": decided_at,
            "decidedAt": DECIDED_AT.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    }
    # The next run finds the node working: it keeps it, and keeps what the stack exported.
    live_api.nodes.clear()
    live_api.add(ZONE, "demo-tpu", "READY", labels={"recovery-generation": str(decided_at)})
    previous = {"recoveryGenerations": {"demo-tpu": decided_at}, "lastRecoveries": last}
    steady = run_stack(copy.deepcopy(config), previous_outputs=previous)
    assert steady.outputs["lastRecoveries"]["tpuVms"] == last["tpuVms"]
    # The re-created node carries its cause as a label, and keeps it while it is kept (no change).
    assert _vm(recovered, "demo-tpu").inputs["labels"]["recovery-cause"] == "preempted"
    assert _vm(steady, "demo-tpu").inputs["labels"] == _vm(recovered, "demo-tpu").inputs["labels"]
    # A record from before causes were words names no cause: no label, nothing to change.
    older = {
        **previous,
        "lastRecoveries": {
            "tpuVms": {"demo-tpu": {**last["tpuVms"]["demo-tpu"], "cause": "node is PREEMPTED"}}
        },
    }
    assert (
        "recovery-cause"
        not in _vm(run_stack(copy.deepcopy(config), previous_outputs=older), "demo-tpu").inputs["labels"]
    )
    # A VM the stack no longer declares drops out of it.
    config["tpu-training:tpuVms"][0]["name"] = "other-tpu"
    renamed = run_stack(copy.deepcopy(config), previous_outputs=previous)
    assert "demo-tpu" not in renamed.outputs["lastRecoveries"]["tpuVms"]
