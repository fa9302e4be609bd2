"""The queued TPU VM's dynamic provider (resources/queued_tpu_vm.py) against the Cloud TPU fake,
through the real client it uses (live/queued_api.py, google-api-python-client): create, read,
what a change replaces and what it patches in place, update, delete with force. The fake checks
every body and answer against the TPU discovery documents."""

from __future__ import annotations

import copy
from typing import Any, Iterator

import pytest
from support.harness.engine.fakes import CloudTpuApi
from tpu_training_components.domain.queued_resources import QueuedRequest, queued_resource_body
from tpu_training_components.domain.recovery import Cause
from tpu_training_components.live.endpoints import TPU_ENDPOINT_VARIABLE
from tpu_training_components.resources.queued_tpu_vm import QueuedTpuVmProvider, queued_diff

ZONE = "us-east5-a"
NODE = {
    "acceleratorType": "v6e-8",
    "runtimeVersion": "v2-alpha-tpuv6e",
    "labels": {"recovery-generation": "1"},
    "metadata": {"startup-script": "#!/bin/bash\ntrain --steps 100"},
}


@pytest.fixture
def tpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[CloudTpuApi]:
    with CloudTpuApi() as api:
        monkeypatch.setenv(TPU_ENDPOINT_VARIABLE, api.endpoint)
        yield api


def _props(request: QueuedRequest, node: dict[str, Any] = NODE, generation: int = 1) -> dict[str, Any]:
    body = queued_resource_body(request, project="p", zone=ZONE, node_id="trainer", node=node)
    return {
        "project": "p",
        "zone": ZONE,
        "queuedResourceId": "trainer",
        "apiVersion": request.api_version,
        "body": body,
        "generation": generation,
    }


def _edited(**node_fields: Any) -> dict[str, Any]:
    return {**copy.deepcopy(NODE), **node_fields}


def test_a_changed_startup_script_or_label_is_patched_in_place_and_anything_else_replaces() -> None:
    spot = _props(QueuedRequest("spot"))
    assert queued_diff(spot, spot) == ([], False)
    script = _props(
        QueuedRequest("spot"), _edited(metadata={"startup-script": "#!/bin/bash\ntrain --steps 200"})
    )
    assert queued_diff(spot, script) == ([], True), "a tuning edit never restarts training"
    assert queued_diff(spot, _props(QueuedRequest("spot"), _edited(labels={"team": "a"}))) == ([], True)
    assert queued_diff(spot, _props(QueuedRequest("spot"), generation=2)) == (["generation"], True)
    assert queued_diff(spot, _props(QueuedRequest("spot"), _edited(acceleratorType="v6e-16"))) == (
        ["body"],
        True,
    )
    assert queued_diff(spot, _props(QueuedRequest("spot", slices=2))) == (["body"], True)
    flex = _props(QueuedRequest("flex-start", max_run_seconds=3600))
    assert queued_diff(spot, flex) == (["apiVersion", "body"], True)


def test_a_preview_that_cannot_see_the_request_says_changes_are_unknown_not_replace() -> None:
    from tpu_training_components.domain.wire_values import UNKNOWN

    spot = _props(QueuedRequest("spot"))
    whole = {**spot, "body": UNKNOWN}
    assert queued_diff(spot, whole) == ([], None)
    account = copy.deepcopy(spot)
    account["body"]["tpu"]["nodeSpec"][0]["node"]["serviceAccount"] = {"email": UNKNOWN}
    assert queued_diff(spot, account) == ([], None)
    # Unknown only where a change patches in place: an update, as with a known value.
    script = copy.deepcopy(spot)
    script["body"]["tpu"]["nodeSpec"][0]["node"]["metadata"] = UNKNOWN
    assert queued_diff(spot, script) == ([], True)
    # What is known to replace still replaces.
    assert queued_diff(spot, {**whole, "generation": 2}) == (["generation"], True)


def test_create_read_update_and_delete_against_the_fake(tpu: CloudTpuApi) -> None:
    provider = QueuedTpuVmProvider()
    props = _props(QueuedRequest("flex-start", max_run_seconds=72 * 3600))
    created = provider.create(props)
    assert created.id == f"projects/p/locations/{ZONE}/queuedResources/trainer"
    assert created.outs["state"] == "WAITING_FOR_RESOURCES" and created.outs["node_ids"] == ["trainer"]
    assert tpu.queued_resource(ZONE, "trainer")["provisioningModel"] == "FLEX_START"

    tpu.grant(ZONE, "trainer")
    read = provider.read(created.id, created.outs)
    assert read.id == created.id and read.outs["state"] == "ACTIVE"

    news = _props(
        QueuedRequest("flex-start", max_run_seconds=72 * 3600),
        _edited(metadata={"startup-script": "#!/bin/bash\ntrain --steps 200"}),
    )
    diff = provider.diff(created.id, created.outs, news)
    assert (diff.changes, diff.replaces) == (True, [])
    provider.update(created.id, created.outs, news)
    (node,) = tpu.nodes[ZONE]
    assert node["metadata"]["startup-script"].endswith("--steps 200"), "patched on the node it made"
    assert tpu.queued_resource(ZONE, "trainer")["state"]["state"] == "ACTIVE", "the request stands"

    provider.delete(created.id, created.outs)
    assert not tpu.nodes[ZONE] and not tpu.queued[ZONE], "force deleted its node, then the request"
    assert provider.read(created.id, created.outs).id == ""
    provider.delete(created.id, created.outs)  # already gone: deleted


def test_an_edit_while_the_request_waits_keeps_the_old_request_in_the_state(tpu: CloudTpuApi) -> None:
    provider = QueuedTpuVmProvider()
    created = provider.create(_props(QueuedRequest("spot")))
    news = _props(
        QueuedRequest("spot"), _edited(metadata={"startup-script": "#!/bin/bash\ntrain --steps 200"})
    )
    updated = provider.update(created.id, created.outs, news)
    assert updated.outs["body"] == created.outs["body"], "no node to change: the old request stands"
    assert updated.outs["state"] == "WAITING_FOR_RESOURCES"
    assert provider.diff(created.id, updated.outs, news).changes, "the next update tries again"
    tpu.grant(ZONE, "trainer")
    assert tpu.nodes[ZONE][0]["metadata"]["startup-script"].endswith("--steps 100")
    after = provider.update(created.id, updated.outs, news)
    assert after.outs["body"] == news["body"] and after.outs["state"] == "ACTIVE"
    assert tpu.nodes[ZONE][0]["metadata"]["startup-script"].endswith("--steps 200")


def test_a_create_that_meets_its_own_request_adopts_it_and_refuses_anything_else(tpu: CloudTpuApi) -> None:
    from tpu_training_components.live.queued_api import AlreadyExists

    provider = QueuedTpuVmProvider()
    props = _props(QueuedRequest("spot"))
    first = provider.create(props)
    # The update that made it died before the engine recorded it: the next one asks again.
    again = provider.create(props)
    assert (again.id, again.outs["state"]) == (first.id, "WAITING_FOR_RESOURCES")
    assert len(tpu.queued[ZONE]) == 1, "adopted, not requested twice"
    other = _props(QueuedRequest("spot"), generation=2)
    other["body"]["tpu"]["nodeSpec"][0]["node"]["labels"] = {"recovery-generation": "2"}
    with pytest.raises(
        AlreadyExists, match=r"not this request \(tpu.nodeSpec\[0\].node.labels.recovery-generation"
    ):
        provider.create(other)


def test_a_multislice_request_patches_every_node_it_made(tpu: CloudTpuApi) -> None:
    provider = QueuedTpuVmProvider()
    tpu.capacity[ZONE] = True
    created = provider.create(_props(QueuedRequest("spot", slices=2)))
    assert created.outs["state"] == "ACTIVE" and created.outs["node_ids"] == ["trainer-0", "trainer-1"]
    news = _props(QueuedRequest("spot", slices=2), _edited(labels={"recovery-generation": "1", "team": "a"}))
    provider.update(created.id, created.outs, news)
    assert [n["labels"].get("team") for n in tpu.nodes[ZONE]] == ["a", "a"]


def test_an_operation_is_polled_until_done_and_one_that_never_ends_trips_its_deadline(
    tpu: CloudTpuApi,
) -> None:
    from tpu_training_components.live.deadline import Deadline, DeadlineExceeded
    from tpu_training_components.live.queued_api import QueuedResourcesApi

    api = QueuedResourcesApi()
    body = _props(QueuedRequest("spot"))["body"]
    parent = f"projects/p/locations/{ZONE}"
    tpu.unfinished_polls = 2
    found = api.create(parent, "trainer", body, "v2", Deadline(60, "requesting trainer"))
    assert found["state"]["state"] == "WAITING_FOR_RESOURCES"
    assert not tpu.pending, "polled until done"

    tpu.unfinished_polls = None  # never done
    with pytest.raises(DeadlineExceeded, match="deleting trainer took longer than 2 s"):
        api.delete(f"{parent}/queuedResources/trainer", "v2", Deadline(2, "deleting trainer"))


def test_recovery_reads_the_requests_then_their_nodes_and_decides_each_keeping_what_it_cannot_read(
    tpu: CloudTpuApi,
) -> None:
    from tpu_training_components.live.endpoints import tpu_nodes_client
    from tpu_training_components.resources.reconcile import QueuedVm, reconcile_queued_vms

    provider = QueuedTpuVmProvider()
    for name in ("waiting", "running", "ended"):
        provider.create({**_props(QueuedRequest("spot")), "queuedResourceId": name})
    tpu.grant(ZONE, "running")
    tpu.grant(ZONE, "ended")
    tpu.suspend(ZONE, "ended")
    vms = [QueuedVm(name, ZONE, "v2") for name in ("waiting", "running", "ended", "never")]
    vms.append(QueuedVm("elsewhere", "us-west4-a", "v2"))
    tpu.unavailable_zones.add("us-west4-a")

    decisions = reconcile_queued_vms("p", vms, client=tpu_nodes_client(tpu.endpoint))
    assert [(d.name, d.action, d.cause) for d in decisions] == [
        ("waiting", "keep", None),
        ("running", "keep", None),
        ("ended", "replace", Cause.PREEMPTED),
        ("never", "create", Cause.MISSING),
        ("elsewhere", "keep", None),
    ]
    assert decisions[-1].unavailable and "UNAVAILABLE" in decisions[-1].reason.upper()
    assert decisions[2].generation == 2


# --- The component: PreemptibleTpuVm requested from the queue --------------------------------


def _vm_args(**overrides: Any) -> dict[str, Any]:
    return {
        "zone": ZONE,
        "accelerator_type": "v6e-8",
        "runtime_version": "v2-alpha-tpuv6e",
        "train_command": "python3 train.py",
        "checkpoint_dir": "gs://bucket/checkpoints/vm",
        "service_account_email": "trainer@proj.iam.gserviceaccount.com",
        "project": "proj",
        "recovery_generation": 3,
        **overrides,
    }


def _declare(**overrides: Any) -> Any:
    from support.harness.program import run_components
    from tpu_training_components import PreemptibleTpuVm

    return run_components(lambda: PreemptibleTpuVm("trainer", _vm_args(**overrides)))  # type: ignore[arg-type]


def test_a_flex_start_vm_is_a_queued_resource_whose_request_conforms_to_v2alpha1() -> None:
    from support.harness.discovery import schema_errors

    run = _declare(provisioning="flex-start", max_run_duration="72h")
    assert not run.by_type("gcp:tpu/v2Vm:V2Vm"), "not created directly"
    (queued,) = run.by_type("pulumi-python:dynamic:Resource")
    inputs = queued.inputs
    assert (inputs["apiVersion"], inputs["queuedResourceId"], inputs["generation"]) == (
        "v2alpha1",
        "trainer",
        3,
    )
    body = inputs["body"]
    assert schema_errors("tpu", "v2alpha1", "QueuedResource", body) == []
    assert body["provisioningModel"] == "FLEX_START" and body["runDuration"] == {"maxRunDuration": "259200s"}
    node = body["tpu"]["nodeSpec"][0]["node"]
    assert node["labels"]["recovery-generation"] == "3"
    assert node["metadata"]["startup-script"].startswith("#!")
    assert node["serviceAccount"]["email"] == "trainer@proj.iam.gserviceaccount.com"
    assert node["shieldedInstanceConfig"] == {"enableSecureBoot": True}


def test_a_spot_vm_that_waits_six_hours_in_two_slices_is_one_v2_request_priced_as_both() -> None:
    from support.harness.discovery import schema_errors
    from tpu_training_components.domain.cost_estimate import estimate

    run = _declare(provisioning="spot", queued={"valid_for": "6h"}, slices=2)
    (queued,) = run.by_type("pulumi-python:dynamic:Resource")
    body = queued.inputs["body"]
    assert schema_errors("tpu", "v2", "QueuedResource", body) == []
    assert body["spot"] == {} and body["queueingPolicy"] == {"validUntilDuration": "21600s"}
    assert body["tpu"]["nodeSpec"][0]["multisliceParams"] == {"nodeCount": 2, "nodeIdPrefix": "trainer"}
    # The plan's price (from what is registered): both slices, at the Spot price of one each.
    one = estimate(_declare(provisioning="spot").registrations).total("training")[0]
    planned = estimate(run.registrations)
    assert one > 0 and planned.total("training")[0] == pytest.approx(2 * one)
    (line,) = [line for line in planned.lines if line.type == "pulumi-python:dynamic:Resource"]
    assert line.what.startswith("2 x TPU v6e-8, spot")


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        ({"provisioning": "flex-start", "max_run_duration": "8d"}, "max_run_duration", "limit of 7 days"),
        ({"provisioning": "flex-start"}, "max_run_duration", "flex-start needs one"),
        (
            {"provisioning": "flex-start", "max_run_duration": "1h", "accelerator_type": "v4-8"},
            "provisioning",
            "v5e, v6e only, not v4",
        ),
        ({"queued": {"valid_for": "6 hours"}}, "queued.valid_for", "is not a duration"),
        ({"provisioning": "preemptible", "queued": {}}, "provisioning", "cannot be queued"),
        ({"max_run_duration": "1h"}, "max_run_duration", "flex-start only"),
    ],
)
def test_a_request_google_would_refuse_is_refused_naming_its_key(
    overrides: dict[str, Any], key: str, words: str
) -> None:
    from tpu_training_components.errors import InvalidArgument

    with pytest.raises(InvalidArgument) as refused:
        _declare(**overrides)
    assert f"{key}" in str(refused.value) and words in str(refused.value), str(refused.value)


def test_training_recovery_judges_a_queued_vm_by_its_request_and_a_direct_one_by_its_node(
    tpu: CloudTpuApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    from support.harness.program import run_components
    from tpu_training_components import TrainingRecovery

    monkeypatch.delenv("TPU_TRAINING_OFFLINE", raising=False)
    provider = QueuedTpuVmProvider()
    for name in ("waiting", "ended"):
        provider.create({**_props(QueuedRequest("spot", slices=2)), "queuedResourceId": name})
    provider.create({**_props(QueuedRequest("flex-start", max_run_seconds=3600)), "queuedResourceId": "flex"})
    tpu.grant(ZONE, "ended")
    tpu.suspend(ZONE, "ended")
    tpu.add(ZONE, "direct", "READY", health="HEALTHY", labels={"recovery-generation": "1"})
    decided: dict[str, Any] = {}

    def body() -> None:
        recovery = TrainingRecovery(
            "r",
            {
                "project": "p",
                "tpu_vms": [
                    {"name": "waiting", "zone": ZONE, "queued": True},
                    {"name": "direct", "zone": ZONE},
                    {"name": "ended", "zone": ZONE, "queued": True},
                    {"name": "flex", "zone": ZONE, "provisioning": "flex-start"},
                ],
                "previous_outputs": {},
            },
        )
        decided.update({n: recovery.vm_decision(n) for n in ("waiting", "direct", "ended", "flex")})

    run_components(body)
    assert {name: (d.action, d.cause) for name, d in decided.items()} == {
        # Still in the queue: kept, though no node of its name exists (re-requesting loses its place).
        "waiting": ("keep", None),
        "direct": ("keep", None),
        "ended": ("replace", Cause.PREEMPTED),
        "flex": ("keep", None),
    }
    assert "WAITING_FOR_RESOURCES" in decided["waiting"].reason


def test_training_recovery_refuses_a_provisioning_no_vm_has() -> None:
    from support.harness.program import run_components
    from tpu_training_components import InvalidArgument, TrainingRecovery

    vms = [{"name": "a", "zone": ZONE, "provisioning": "flexstart"}]
    with pytest.raises(
        InvalidArgument, match=r"tpu_vms\[0\].provisioning: 'flexstart' is not one; allowed: "
    ):
        run_components(lambda: TrainingRecovery("r", {"project": "p", "tpu_vms": vms}))
