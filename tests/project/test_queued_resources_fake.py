"""The Cloud TPU fake's queued resources (tests/support/harness/engine/fakes.py ``CloudTpuApi``),
driven by the real client library that will request them (google-api-python-client's discovery
client, from its bundled ``tpu.v2`` and ``tpu.v2alpha1`` documents): every request body and answer
is checked against those schemas by the fake (``CheckedAgainstDiscovery``), and what a request
goes through (queued, granted, suspended, failed, deleted with and without ``force``) reads back
into the decision recovery makes (domain/queued_resources.py)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterator

import httplib2
import pytest
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError
from support.harness.engine.fakes import CloudTpuApi
from tpu_training_components.domain.queued_resources import (
    QueuedRequest,
    decide_queued,
    queued_resource_body,
    read_queued_resource,
)
from tpu_training_components.domain.recovery import Cause, LiveNode

ZONE = "us-east5-a"
PARENT = f"projects/p/locations/{ZONE}"
NODE = {
    "acceleratorType": "v6e-8",
    "runtimeVersion": "v2-alpha-tpuv6e",
    "labels": {"recovery-generation": "1"},
    "metadata": {"startup-script": "#!/bin/bash\ntrain"},
}


@pytest.fixture
def tpu() -> Iterator[CloudTpuApi]:
    with CloudTpuApi() as api:
        yield api


def _client(api: CloudTpuApi, version: str) -> Any:
    return (
        build(
            "tpu",
            version,
            http=httplib2.Http(timeout=10),
            client_options={"api_endpoint": api.endpoint},
            static_discovery=True,
            cache_discovery=False,
        )
        .projects()
        .locations()
        .queuedResources()
    )


def _create(api: CloudTpuApi, request: QueuedRequest, name: str = "trainer") -> dict[str, Any]:
    body = queued_resource_body(request, project="p", zone=ZONE, node_id=name, node=NODE)
    return _client(api, request.api_version).create(parent=PARENT, queuedResourceId=name, body=body).execute()


def _decide(api: CloudTpuApi, version: str, name: str = "trainer") -> Any:
    item = _client(api, version).get(name=f"{PARENT}/queuedResources/{name}").execute()
    nodes = [
        LiveNode(n["name"], ZONE, n["state"], n.get("health", ""), labels=n.get("labels", {}))
        for n in api.nodes.get(ZONE, [])
    ]
    return decide_queued(name, read_queued_resource(item), nodes, now=datetime.now(timezone.utc))


def test_a_flex_start_request_waits_then_runs_then_is_requested_again_when_its_run_ends(
    tpu: CloudTpuApi,
) -> None:
    operation = _create(tpu, QueuedRequest("flex-start", max_run_seconds=72 * 3600))
    assert operation["done"] and operation["response"]["provisioningModel"] == "FLEX_START"
    waiting = _decide(tpu, "v2alpha1")
    assert (waiting.action, waiting.generation) == ("keep", 1) and "waiting for capacity" in waiting.reason

    tpu.grant(ZONE, "trainer")
    (node,) = tpu.nodes[ZONE]
    assert node["name"] == "trainer" and node["queuedResource"] == f"{PARENT}/queuedResources/trainer"
    assert _decide(tpu, "v2alpha1").action == "keep"

    tpu.suspend(ZONE, "trainer")  # "After the requested run duration, the TPU VMs are deleted"
    ended = _decide(tpu, "v2alpha1")
    assert (ended.action, ended.generation, ended.cause) == ("replace", 2, Cause.FLEX_START_EXPIRED)
    assert not tpu.nodes[ZONE]


def test_a_spot_multislice_request_makes_its_nodes_and_one_preempted_loses_the_request(
    tpu: CloudTpuApi,
) -> None:
    tpu.capacity[ZONE] = True
    _create(tpu, QueuedRequest("spot", slices=2, valid_for_seconds=6 * 3600))
    assert sorted(n["name"] for n in tpu.nodes[ZONE]) == ["trainer-0", "trainer-1"]
    assert _decide(tpu, "v2").action == "keep"
    tpu.set_state(ZONE, "trainer-1", "PREEMPTED")
    decision = _decide(tpu, "v2")
    assert (decision.action, decision.cause) == ("replace", Cause.PREEMPTED)


def test_delete_without_force_is_refused_while_nodes_live_and_force_deletes_them(tpu: CloudTpuApi) -> None:
    tpu.capacity[ZONE] = True
    _create(tpu, QueuedRequest("spot"))
    client = _client(tpu, "v2")
    with pytest.raises(HttpError) as refused:
        client.delete(name=f"{PARENT}/queuedResources/trainer").execute()
    assert refused.value.resp.status == 400
    assert client.delete(name=f"{PARENT}/queuedResources/trainer", force=True).execute()["done"]
    assert not tpu.nodes[ZONE] and not tpu.queued[ZONE]
    with pytest.raises(HttpError) as missing:
        client.get(name=f"{PARENT}/queuedResources/trainer").execute()
    assert missing.value.resp.status == 404


def test_a_request_that_failed_for_capacity_is_deleted_without_force_and_its_id_is_free_again(
    tpu: CloudTpuApi,
) -> None:
    _create(tpu, QueuedRequest("spot", valid_for_seconds=60))
    with pytest.raises(HttpError) as taken:
        _create(tpu, QueuedRequest("spot"))
    assert taken.value.resp.status == 409, "an id is one request's until it is deleted"
    tpu.fail_queued(ZONE, "trainer", 8, "There is no more capacity in the zone")
    assert _decide(tpu, "v2").cause == Cause.STOCKOUT
    _client(tpu, "v2").delete(name=f"{PARENT}/queuedResources/trainer").execute()
    assert _create(tpu, QueuedRequest("spot"))["done"]
    listed = _client(tpu, "v2").list(parent=PARENT).execute()["queuedResources"]
    assert [item["state"]["state"] for item in listed] == ["WAITING_FOR_RESOURCES"]


def test_a_body_off_the_schema_is_found_by_the_fake() -> None:
    api = CloudTpuApi()
    with pytest.raises(AssertionError, match="multisliceParams"):
        with api:
            body = queued_resource_body(
                QueuedRequest("spot", slices=2), project="p", zone=ZONE, node_id="trainer", node=NODE
            )
            # v2alpha1 calls the group multiNodeParams: v2's name is off its schema.
            _client(api, "v2alpha1").create(parent=PARENT, queuedResourceId="trainer", body=body).execute()
