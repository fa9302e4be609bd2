"""A queued TPU VM (resources/queued_tpu_vm.py) under the real engine: the real CLI runs its dynamic
provider through the ``pulumi-resource-pulumi-python`` plugin .ci/engine installs from the SDK
module, which talks to the Cloud TPU fake through google-api-python-client. A program of a few
lines declares one flex-start request; the test deploys it, edits its startup script (the nodes
are patched, the request stands: a tuning edit restarts nothing), has the service suspend it at
the end of its run and bumps its generation as recovery does (the engine deletes the request,
then requests it anew, and nothing else), and destroys it (its nodes deleted with it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest
from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.engine.engine import EngineProject, endpoints
from support.harness.engine.fakes import CloudTpuApi
from support.harness.engine.stacks import FLEX_START_CONFIG, FLEX_START_VM, QUEUED_URN

STACK = "queued"
ZONE = "us-east5-a"
PROGRAM = """
import pulumi
from tpu_training_components.domain.queued_resources import QueuedRequest, queued_resource_body
from tpu_training_components.resources.queued_tpu_vm import QueuedTpuVm

config = pulumi.Config()
generation = config.get_int("generation") or 1
request = QueuedRequest("flex-start", max_run_seconds=72 * 3600)
node = {
    "acceleratorType": "v6e-8",
    "runtimeVersion": "v2-alpha-tpuv6e",
    "labels": {"recovery-generation": str(generation)},
    "metadata": {"startup-script": config.get("script") or "train --steps 100"},
}
body = queued_resource_body(
    request, project="engine-project", zone="us-east5-a", node_id="trainer", node=node
)
vm = QueuedTpuVm(
    "trainer",
    project="engine-project",
    zone="us-east5-a",
    queued_resource_id="trainer",
    api_version=request.api_version,
    body=body,
    generation=generation,
)
pulumi.export("state", vm.state)
pulumi.export("nodeIds", vm.node_ids)
"""


@pytest.fixture
def cloud() -> Iterator[tuple[CloudTpuApi, LoopbackGcs]]:
    with CloudTpuApi() as tpu, LoopbackGcs() as storage:
        yield tpu, storage


def _steps(project: EngineProject) -> list[tuple[str, str]]:
    preview = json.loads(project.pulumi("preview", "--json", "--stack", STACK).stdout)
    return project.steps(preview)


def test_a_queued_vm_is_requested_patched_requested_anew_and_deleted_by_the_real_engine(
    programs: str, cloud: tuple[CloudTpuApi, LoopbackGcs], tmp_path: Path
) -> None:
    tpu, storage = cloud
    project = EngineProject(tmp_path, endpoints(tpu, storage), programs)
    (project.root / "infra" / "__main__.py").write_text(PROGRAM)
    project.pulumi("stack", "init", STACK)

    project.deploy(STACK)
    request = tpu.queued_resource(ZONE, "trainer")
    assert request is not None and request["provisioningModel"] == "FLEX_START"
    assert request["state"]["state"] == "WAITING_FOR_RESOURCES"
    outputs = project.json("stack", "output", "--stack", STACK)
    assert outputs == {"state": "WAITING_FOR_RESOURCES", "nodeIds": ["trainer"]}
    assert _steps(project) == [], "a request still waiting is left alone"

    tpu.grant(ZONE, "trainer")
    project.pulumi("config", "set", "script", "train --steps 200", "--stack", STACK)
    assert [op for op, _ in _steps(project)] == ["update"], "a new startup script is patched in place"
    project.deploy(STACK)
    (node,) = tpu.nodes[ZONE]
    assert node["metadata"]["startup-script"] == "train --steps 200"
    assert tpu.queued_resource(ZONE, "trainer")["state"]["state"] == "ACTIVE", "the request stands"

    tpu.suspend(ZONE, "trainer")  # the flex-start run ended: its VMs deleted
    project.pulumi("config", "set", "generation", "2", "--stack", STACK)
    steps = _steps(project)
    assert [op for op, _ in steps] == ["replace"], steps
    project.deploy(STACK)
    request = tpu.queued_resource(ZONE, "trainer")
    assert request["state"]["state"] == "WAITING_FOR_RESOURCES", "requested anew"
    assert request["tpu"]["nodeSpec"][0]["node"]["labels"] == {"recovery-generation": "2"}

    tpu.grant(ZONE, "trainer")
    project.pulumi("destroy", "--yes", "--stack", STACK)
    assert not tpu.queued[ZONE] and not tpu.nodes[ZONE]


def test_a_stacks_waiting_request_is_left_alone_and_a_suspended_one_is_requested_anew_alone(
    programs: str, cloud: tuple[CloudTpuApi, LoopbackGcs], tmp_path: Path
) -> None:
    tpu, storage = cloud
    project = EngineProject(tmp_path, endpoints(tpu, storage), programs)
    project.init("engine", FLEX_START_CONFIG)
    project.deploy("engine")
    request = tpu.queued_resource(ZONE, FLEX_START_VM)
    assert request is not None and request["state"]["state"] == "WAITING_FOR_RESOURCES"
    assert tpu.node(ZONE, FLEX_START_VM) is None, "nothing made before capacity comes"

    # Waiting, it has no node: a round reads its request and keeps it (no update is run).
    for _ in range(2):
        waiting = project.recover_round("engine")
        (decision,) = waiting["decisions"]
        assert decision["action"] == "keep" and "WAITING_FOR_RESOURCES" in decision["reason"], waiting
        assert waiting["up"]["status"] == "not-run", waiting
    assert len(project.json("stack", "history", "--stack", "engine")) == 1

    tpu.grant(ZONE, FLEX_START_VM)
    before = project.resources("engine")
    generation = int(tpu.node(ZONE, FLEX_START_VM)["labels"]["recovery-generation"])  # type: ignore[index]
    assert project.recover_round("engine")["up"]["status"] == "not-run", "ACTIVE and READY: kept"

    tpu.suspend(ZONE, FLEX_START_VM)  # the run reached its maxRunDuration: the service deleted its VM
    recovered = project.recover_round("engine")
    assert recovered["up"]["status"] == "succeeded", recovered
    request = tpu.queued_resource(ZONE, FLEX_START_VM)
    assert request is not None and request["state"]["state"] == "WAITING_FOR_RESOURCES", "requested anew"
    labels = request["tpu"]["nodeSpec"][0]["node"]["labels"]
    assert int(labels["recovery-generation"]) > generation
    assert labels["recovery-cause"] == "flex-start-expired"
    after = project.resources("engine")
    changed = sorted(
        urn
        for urn, resource in after.items()
        if resource.get("custom")
        and not resource["type"].startswith("pulumi:providers:")
        and {k: resource.get(k) for k in ("id", "inputs")}
        != {k: before.get(urn, {}).get(k) for k in ("id", "inputs")}
    )
    assert changed == [QUEUED_URN], "the request alone was re-created"
