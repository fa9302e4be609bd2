"""Queued TPU VMs (domain/queued_resources.py): the request body each kind sends, checked against
the TPU API's published schema, the rules that refuse a request Google would, and the decision
table recovery applies to a live request.

The schemas are the discovery documents google-api-python-client bundles (``tpu.v2.json``,
``tpu.v2alpha1.json``, revision 20261001): flex-start's ``provisioningModel`` and ``runDuration``
exist only in v2alpha1, whose multislice field is ``multiNodeParams`` (v2: ``multisliceParams``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from support.harness.discovery import discovery_document, schema_errors
from tpu_training_components.domain.queued_resources import (
    FLEX_START_MAX_RUN_SECONDS,
    QueuedRequest,
    decide_queued,
    flex_start_zone_warning,
    node_ids,
    queued_resource_body,
    read_queued_resource,
    request_problems,
)
from tpu_training_components.domain.recovery import Cause, LiveNode

NOW = datetime(2026, 12, 2, 14, 0, tzinfo=timezone.utc)
NODE = {
    "acceleratorType": "v6e-8",
    "runtimeVersion": "v2-alpha-tpuv6e",
    "metadata": {"startup-script": "#!/bin/bash\ntrain"},
    "labels": {"recovery-generation": "3"},
    "networkConfig": {"enableExternalIps": False},
    "serviceAccount": {
        "email": "trainer@p.iam.gserviceaccount.com",
        "scope": ["https://www.googleapis.com/auth/cloud-platform"],
    },
    "schedulingConfig": {"spot": True},
}


def _body(request: QueuedRequest) -> dict[str, Any]:
    return queued_resource_body(request, project="p", zone="us-east5-a", node_id="trainer", node=NODE)


def test_the_bundled_documents_are_the_revision_these_facts_were_read_from() -> None:
    for version in ("v2", "v2alpha1"):
        assert discovery_document("tpu", version)["revision"] >= "20261001"
    v2 = discovery_document("tpu", "v2")["schemas"]["QueuedResource"]["properties"]
    alpha = discovery_document("tpu", "v2alpha1")["schemas"]["QueuedResource"]["properties"]
    assert "provisioningModel" not in v2 and "runDuration" not in v2
    assert "FLEX_START" in alpha["provisioningModel"]["enum"]


def test_a_flex_start_request_is_v2alpha1_and_conforms_to_its_schema() -> None:
    request = QueuedRequest("flex-start", max_run_seconds=72 * 3600)
    body = _body(request)
    assert request.api_version == "v2alpha1"
    assert schema_errors("tpu", "v2alpha1", "QueuedResource", body) == []
    assert body["provisioningModel"] == "FLEX_START"
    assert body["runDuration"] == {"maxRunDuration": "259200s"}
    (spec,) = body["tpu"]["nodeSpec"]
    assert spec["parent"] == "projects/p/locations/us-east5-a" and spec["nodeId"] == "trainer"
    assert "schedulingConfig" not in spec["node"], "the capacity kind is the request's, said once"
    assert spec["node"]["metadata"]["startup-script"].startswith("#!/bin/bash")
    assert "provisioningModel" in schema_errors("tpu", "v2", "QueuedResource", body)[0], (
        "v2 has no flex-start"
    )


def test_a_spot_request_that_may_wait_six_hours_is_v2_with_a_queueing_policy() -> None:
    request = QueuedRequest("spot", valid_for_seconds=6 * 3600, valid_after_seconds=600)
    body = _body(request)
    assert request.api_version == "v2"
    assert schema_errors("tpu", "v2", "QueuedResource", body) == []
    assert body["spot"] == {}
    assert body["queueingPolicy"] == {"validUntilDuration": "21600s", "validAfterDuration": "600s"}
    assert "schedulingConfig" not in body["tpu"]["nodeSpec"][0]["node"]


@pytest.mark.parametrize(
    "request_, version, group",
    [
        (QueuedRequest("spot", slices=2), "v2", "multisliceParams"),
        (QueuedRequest("on-demand", slices=3), "v2", "multisliceParams"),
        (QueuedRequest("flex-start", slices=2, max_run_seconds=3600), "v2alpha1", "multiNodeParams"),
    ],
)
def test_a_multislice_request_names_its_nodes_by_prefix_in_its_versions_field(
    request_: QueuedRequest, version: str, group: str
) -> None:
    body = _body(request_)
    assert schema_errors("tpu", version, "QueuedResource", body) == []
    (spec,) = body["tpu"]["nodeSpec"]
    assert spec[group] == {"nodeCount": request_.slices, "nodeIdPrefix": "trainer"}
    assert "nodeId" not in spec, "nodeId is for a single node only"
    other = "v2alpha1" if version == "v2" else "v2"
    assert schema_errors("tpu", other, "QueuedResource", body), f"{group} is off {other}'s schema"
    assert node_ids("trainer", request_.slices) == tuple(f"trainer-{i}" for i in range(request_.slices))


def test_on_demand_and_reserved_requests_carry_no_tier() -> None:
    on_demand, reserved = _body(QueuedRequest("on-demand")), _body(QueuedRequest("reserved"))
    for body in (on_demand, reserved):
        assert schema_errors("tpu", "v2", "QueuedResource", body) == []
        assert not {"spot", "guaranteed", "provisioningModel"} & body.keys()
    assert "schedulingConfig" not in on_demand["tpu"]["nodeSpec"][0]["node"]
    assert reserved["tpu"]["nodeSpec"][0]["node"]["schedulingConfig"] == {"reserved": True}


def test_flex_start_is_refused_past_seven_days_on_other_generations_and_without_a_duration() -> None:
    eight_days = QueuedRequest("flex-start", max_run_seconds=8 * 24 * 3600)
    assert request_problems(eight_days, "v6e", "us-east5-a") == [
        (
            "max_run_duration",
            f"{8 * 24 * 3600}s is longer than flex-start's limit of 7 days ({FLEX_START_MAX_RUN_SECONDS}s)",
        )
    ]
    ((key, problem),) = request_problems(
        QueuedRequest("flex-start", max_run_seconds=3600), "v4", "us-central2-b"
    )
    assert key == "provisioning" and "v5e, v6e only, not v4" in problem
    ((key, problem),) = request_problems(QueuedRequest("flex-start"), "v6e", "us-east5-a")
    assert key == "max_run_duration" and "7d" in problem
    ((key, problem),) = request_problems(QueuedRequest("spot", max_run_seconds=3600), "v6e", "us-east5-a")
    assert key == "max_run_duration" and "flex-start only" in problem
    assert (
        request_problems(QueuedRequest("flex-start", max_run_seconds=7 * 24 * 3600), "v6e", "us-east5-a")
        == []
    )
    ((key, problem),) = request_problems(QueuedRequest("preemptible"), "v6e", "us-east5-a")
    assert key == "provisioning" and "flex-start, spot, on-demand, reserved" in problem


def test_flex_start_zones_are_warned_about_not_refused() -> None:
    assert flex_start_zone_warning("v6e", "us-east5-a") is None
    assert flex_start_zone_warning("v5e", "us-west4-a") is None
    warning = flex_start_zone_warning("v6e", "europe-west4-a")
    assert warning is not None and "asia-northeast1-b, us-east5-a" in warning


def _live(state: str, **fields: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "name": "projects/p/locations/us-east5-a/queuedResources/trainer",
        "createTime": "2026-12-02T13:02:00Z",
        "state": {"state": state, **fields.pop("state_fields", {})},
        "tpu": {
            "nodeSpec": [{"parent": "projects/p/locations/us-east5-a", "nodeId": "trainer", "node": NODE}]
        },
    }
    item.update(fields)
    assert (
        schema_errors("tpu", "v2alpha1" if "provisioningModel" in item else "v2", "QueuedResource", item)
        == []
    )
    return item


def _decide(item: dict[str, Any], *nodes: LiveNode) -> Any:
    return decide_queued("trainer", read_queued_resource(item), nodes, now=NOW)


@pytest.mark.parametrize("state", ["CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING"])
def test_a_request_in_the_queue_is_kept_whatever_its_age(state: str) -> None:
    decision = _decide(_live(state, createTime="2026-11-25T13:02:00Z"))
    assert (decision.action, decision.generation, decision.warn) == ("keep", 3, False)
    if state != "PROVISIONING":
        assert "waiting for capacity since 2026-11-25 13:02 UTC" in decision.reason


def test_an_active_request_with_working_nodes_is_kept_and_one_with_a_preempted_node_is_replaced() -> None:
    ready = LiveNode("trainer", "us-east5-a", "READY", labels={"recovery-generation": "3"})
    assert _decide(_live("ACTIVE", spot={}), ready).action == "keep"
    preempted = LiveNode("trainer-1", "us-east5-a", "PREEMPTED")
    decision = _decide(_live("ACTIVE", spot={}), ready, preempted)
    assert (decision.action, decision.generation, decision.cause) == ("replace", 4, Cause.PREEMPTED)
    assert "trainer-1" in decision.reason
    unlisted = _decide(_live("ACTIVE"))
    assert (unlisted.action, unlisted.warn) == ("keep", True)


def _multislice(state: str) -> dict[str, Any]:
    item = _live(state, spot={})
    spec = item["tpu"]["nodeSpec"][0]
    del spec["nodeId"]
    spec["multisliceParams"] = {"nodeCount": 2, "nodeIdPrefix": "trainer"}
    return item


def test_an_active_multislice_request_with_a_slice_unlisted_is_kept_and_said_not_called_working() -> None:
    item = _multislice("ACTIVE")
    assert read_queued_resource(item).node_ids == ("trainer-0", "trainer-1")
    first = LiveNode("trainer-0", "us-east5-a", "READY", labels={"recovery-generation": "3"})
    decision = _decide(item, first)
    assert (decision.action, decision.warn) == ("keep", True)
    assert "trainer-1" in decision.reason and "working" not in decision.reason
    second = LiveNode("trainer-1", "us-east5-a", "READY", labels={"recovery-generation": "3"})
    both = _decide(item, first, second)
    assert (both.action, both.warn) == ("keep", False)
    # A lost slice loses the request, even while its sibling is not listed.
    lost = _decide(item, LiveNode("trainer-0", "us-east5-a", "PREEMPTED"))
    assert (lost.action, lost.cause) == ("replace", Cause.PREEMPTED)


@pytest.mark.parametrize(
    "fields, cause",
    [
        ({"spot": {}}, Cause.PREEMPTED),
        (
            {"provisioningModel": "FLEX_START", "runDuration": {"maxRunDuration": "3600s"}},
            Cause.FLEX_START_EXPIRED,
        ),
        ({}, Cause.TERMINATED),
    ],
)
def test_a_request_the_service_suspended_is_requested_again(fields: dict[str, Any], cause: Cause) -> None:
    decision = _decide(_live("SUSPENDED", state_fields={"stateInitiator": "SERVICE"}, **fields))
    assert (decision.action, decision.generation, decision.cause) == ("replace", 4, cause)


def test_a_request_a_person_suspended_is_kept_and_said_and_suspending_waits() -> None:
    by_hand = _decide(_live("SUSPENDED", state_fields={"stateInitiator": "USER"}, spot={}))
    assert (by_hand.action, by_hand.warn) == ("keep", True) and "--replace" in by_hand.reason
    assert _decide(_live("SUSPENDING", spot={})).action == "keep"
    # Without SERVICE as its initiator, nothing says the service took it: never replaced on unknown.
    for fields in ({}, {"stateInitiator": "STATE_INITIATOR_UNSPECIFIED"}):
        unknown = _decide(_live("SUSPENDED", state_fields=fields, spot={}))
        assert (unknown.action, unknown.warn) == ("keep", True) and "does not say by whom" in unknown.reason
    assert _decide(_live("DELETING")).action == "keep"


def test_a_request_that_failed_for_capacity_moves_down_the_ladder_and_an_invalid_one_is_kept() -> None:
    expired = _live(
        "FAILED", queueingPolicy={"validUntilDuration": "3600s"}, createTime="2026-12-02T12:00:00Z"
    )
    decision = _decide(expired)
    assert (decision.action, decision.cause) == ("replace", Cause.STOCKOUT)
    exhausted = _live("FAILED", state_fields={"failedData": {"error": {"code": 8, "message": "no capacity"}}})
    assert _decide(exhausted).cause == Cause.STOCKOUT
    invalid = _live("FAILED", state_fields={"failedData": {"error": {"code": 3, "message": "bad runtime"}}})
    kept = _decide(invalid)
    assert (kept.action, kept.warn) == ("keep", True) and "bad runtime" in kept.reason
    # Refused, not starved: its validFor having passed since does not make it a stockout.
    refused_long_ago = _live(
        "FAILED",
        queueingPolicy={"validUntilDuration": "3600s"},
        createTime="2026-12-01T12:00:00Z",
        state_fields={"failedData": {"error": {"code": 3, "message": "bad runtime"}}},
    )
    assert _decide(refused_long_ago).action == "keep"


def test_a_request_with_no_state_or_a_new_one_is_kept_with_a_warning() -> None:
    for state in ("", "STATE_UNSPECIFIED"):
        decision = _decide(_live(state) if state else {"name": "trainer"})
        assert (decision.action, decision.warn) == ("keep", True)
    assert decide_queued("trainer", None, (), now=NOW).action == "create"


def test_a_generation_label_that_is_not_a_number_keeps_the_last_deployed_one() -> None:
    item = _live("SUSPENDED", state_fields={"stateInitiator": "SERVICE"}, spot={})
    item["tpu"]["nodeSpec"][0]["node"] = dict(NODE, labels={"recovery-generation": "three"})
    decision = _decide(item)
    assert (decision.action, decision.generation, decision.after_last_deployed) == ("replace", None, True)


def test_what_is_read_from_a_request_of_the_wrong_shape_is_absent_not_guessed() -> None:
    live = read_queued_resource({"name": 7, "state": "ACTIVE", "tpu": {"nodeSpec": "x"}, "createTime": "now"})
    assert (live.state, live.generation, live.create_time) == ("", None, None)
    assert _decide({"name": "x", "state": {"state": "NEW_STATE"}}).warn
    assert timedelta(seconds=FLEX_START_MAX_RUN_SECONDS) == timedelta(days=7)
