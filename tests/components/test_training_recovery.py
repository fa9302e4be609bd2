"""Recovery that comes with the components: ``TrainingRecovery``, as an importer uses it (the
program of docs/using-the-components.md, run as written against loopback TPU and Kubernetes APIs)
and as the stack program does."""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pytest
from support.fakes.fake_kube_api import FakeKubernetesApi, job
from support.fakes.fake_tpu_api import FakeTpuApi
from support.harness.program import REPO, run_components, run_stack
from tpu_training_components import InvalidArgument, TrainingRecovery

from tpu_training import offline

VM = "gcp:tpu/v2Vm:V2Vm"
JOB = "kubernetes:batch/v1:Job"
RECOVERY = "tpu-training:recovery:TrainingRecovery"


IMPORTER_PAGE = "docs/using-the-components.md"


def importer_program() -> str:
    """The docs' complete importer program, the block that starts with its marker line."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / IMPORTER_PAGE).read_text(), flags=re.S)
    (program,) = [block for block in blocks if block.startswith("# importer example")]
    return program


def run_importer(previous_outputs: dict[str, Any]) -> offline.ProgramRun:
    program = compile(importer_program(), IMPORTER_PAGE, "exec")
    return offline.run(
        lambda: exec(program, {}), project="tpu-training", stack="prod", previous_outputs=previous_outputs
    )


@pytest.fixture
def live(monkeypatch, tmp_path):
    """Both APIs on loopback, and the components told to read them."""
    with FakeTpuApi() as tpu, FakeKubernetesApi() as kube:
        monkeypatch.delenv("TPU_TRAINING_OFFLINE", raising=False)
        monkeypatch.setenv("TPU_API_ENDPOINT", tpu.endpoint)
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path)))
        yield tpu, kube


def test_importer_program_recovers_a_preempted_vm_and_a_failed_job(live, decided_at):
    tpu, kube = live
    tpu.add("europe-west4-a", "demo-tpu", "PREEMPTED", labels={"recovery-generation": "2"})
    kube.add("default", job("train", generation=1, conditions=(("Failed", "True", "BackoffLimitExceeded"),)))

    run = run_importer({"recoveryGenerations": {"demo-tpu": 2}, "jobRecoveryGenerations": {"train": 1}})

    assert len(tpu.calls) == 1 and len(kube.calls) == 1  # one zone, one namespace
    assert run.one(VM, "demo-tpu-vm").options["replacementTrigger"] == decided_at
    assert run.one(JOB, "train-job").options["replacementTrigger"] == decided_at
    assert run.outputs == {
        "recoveryGenerations": {"demo-tpu": decided_at},
        "jobRecoveryGenerations": {"train": decided_at},
    }
    assert any(
        "demo-tpu: node is PREEMPTED -> will be replaced (a new recovery generation)" in m for m in run.infos
    )


def _mock_id(registration: offline.Registration) -> str:
    # The id PlanMocks.new_resource gives every resource it creates (tpu_training/offline.py).
    return f"{registration.name}-id"


def test_importer_program_trains_on_a_network_that_reaches_google_apis(live):
    """A TPU VM without an external IP reaches gs:// only through Private Google Access (and the
    internet through Cloud NAT): the example declares that network and puts the VM and the
    cluster on it, each in its own region's subnet."""
    run = run_importer({"recoveryGenerations": {"demo-tpu": 0}, "jobRecoveryGenerations": {"train": 0}})

    (vpc,) = run.by_type("gcp:compute/network:Network")
    subnets = {r.inputs["region"]: r for r in run.by_type("gcp:compute/subnetwork:Subnetwork")}
    nat_regions = {r.inputs["region"] for r in run.by_type("gcp:compute/routerNat:RouterNat")}
    vm = run.one(VM, "demo-tpu-vm").inputs
    cluster = run.one("gcp:container/cluster:Cluster", "tpu-cluster").inputs

    assert vm["networkConfig"]["enableExternalIps"] is False
    assert vm["networkConfig"]["network"] == _mock_id(vpc)
    assert vm["networkConfig"]["subnetwork"] == _mock_id(subnets["europe-west4"])
    assert (cluster["network"], cluster["subnetwork"]) == (_mock_id(vpc), _mock_id(subnets["us-east5"]))
    for region in ("europe-west4", "us-east5"):
        assert subnets[region].inputs["privateIpGoogleAccess"] is True
        assert region in nat_regions
    # Created only once the network, NAT included, exists: the first boot already reads gs://. (A
    # dependency on a component reaches the engine as its children's URNs.)
    nat = run.one("gcp:compute/routerNat:RouterNat", "net-nat-europe-west4")
    assert nat.urn in run.one("tpu-training:compute:PreemptibleTpuVm", "demo-tpu").options["dependsOn"]


def test_importer_program_keeps_what_is_working(live):
    tpu, kube = live
    tpu.add("europe-west4-a", "demo-tpu", "READY", labels={"recovery-generation": "2"})
    kube.add("default", job("train", generation=1, active=4, ready=4))

    run = run_importer({"recoveryGenerations": {"demo-tpu": 2}, "jobRecoveryGenerations": {"train": 1}})

    assert run.one(VM, "demo-tpu-vm").options["replacementTrigger"] == 2
    assert run.one(JOB, "train-job").options["replacementTrigger"] == 1


def test_unreadable_apis_keep_the_last_deployed_generations(live):
    tpu, kube = live
    tpu.fail_with = 503
    kube.fail_with = 503

    run = run_importer({"recoveryGenerations": {"demo-tpu": 5}, "jobRecoveryGenerations": {"train": 4}})

    assert run.one(VM, "demo-tpu-vm").options["replacementTrigger"] == 5
    assert run.one(JOB, "train-job").options["replacementTrigger"] == 4
    assert any("nothing is replaced" in warning for warning in run.warnings)


@pytest.mark.parametrize("api_down", [False, True], ids=["api-up", "api-down"])
def test_a_stack_that_never_exported_the_generations_is_warned_about_on_every_run(live, api_down):
    """Warned while the API answers too: on the run whose API is down the damage is done (the
    VM, its last generation unknown, is declared at 0)."""
    tpu, _ = live
    tpu.add("europe-west4-a", "demo-tpu", "READY", labels={"recovery-generation": "1"})
    tpu.fail_with = 503 if api_down else None

    run = run_importer({"someOtherOutput": "x"})

    assert any("no 'recoveryGenerations'" in warning and "export" in warning for warning in run.warnings)
    assert run.one(VM, "demo-tpu-vm").options["replacementTrigger"] == (0 if api_down else 1)


def test_the_stack_program_declares_its_generations_through_the_component(config):
    run = run_stack(config, previous_outputs={"recoveryGenerations": {"demo-tpu": 6}})
    (recovery,) = run.by_type(RECOVERY)
    assert recovery.name == "recovery"
    assert run.one(VM, "demo-tpu-vm").options["replacementTrigger"] == 6  # offline: last deployed kept
    assert run.outputs["recoveryGenerations"] == {"demo-tpu": 6}
    assert run.outputs["jobRecoveryGenerations"] == {"train-v6e": 0}


def test_not_reading_live_state_makes_no_call(live):
    tpu, kube = live

    def body() -> None:
        TrainingRecovery(
            "r",
            {
                "project": "p",
                "tpu_vms": [{"name": "a", "zone": "europe-west4-a"}, {"name": "b", "zone": "us-east5-a"}],
                "cluster": {"project": "p", "location": "us-east5", "name": "c"},
                "jobs": [{"name": "j"}],
                "read_live_state": False,
            },
        )

    run = run_components(body)
    assert not tpu.calls and not kube.calls
    assert sum("live state not read" in message for message in run.infos) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"project": "p", "tpu_vm": []},
            r"unknown argument 'tpu_vm' \(did you mean 'tpu_vms'\?\); allowed: cluster, jobs",
        ),
        (
            {"project": "p", "tpu_vms": [{"name": "a", "zone": "europe-west4-a", "zonee": "x"}]},
            r"tpu_vms\[0\]: unknown argument 'zonee'",
        ),
        (
            {"project": "p", "tpu_vms": [{"name": "a", "zone": "europe-west4-a"}] * 2},
            r"tpu_vms\[1\].name: repeats the name 'a'",
        ),
        (
            {"project": "p", "jobs": [{"name": "j"}]},
            "cluster: required with jobs: give the cluster they run on",
        ),
        ({"project": "p", "maintenance_grace_minutes": -1}, "maintenance_grace_minutes: -1 is out of range"),
        (
            {"project": "p", "maintenance_grace_minutes": True},
            "maintenance_grace_minutes = True: Input should be a valid integer",
        ),
    ],
)
def test_bad_arguments_are_refused_naming_the_key(args, message):
    with pytest.raises(InvalidArgument, match=message):
        run_components(lambda: TrainingRecovery("r", args))


def test_a_generation_for_a_vm_not_under_recovery_is_refused():
    def body() -> None:
        recovery = TrainingRecovery(
            "r",
            {"project": "p", "tpu_vms": [{"name": "a", "zone": "europe-west4-a"}], "read_live_state": False},
        )
        recovery.vm_generation("b")

    with pytest.raises(pulumi.RunError, match="'b' is not in its tpu_vms; add it there"):
        run_components(body)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("garbage", "is not a map of name -> recovery generation"),
        ({"demo-tpu": "3"}, "recoveryGenerations.demo-tpu"),
        ({"demo-tpu": -1}, "is no recovery generation"),
        ({"demo-tpu": 2.5}, "is no recovery generation"),
    ],
)
def test_last_deployed_generations_that_are_no_generations_are_refused_not_guessed(value, fragment):
    from tpu_training_components.resources.reconcile import read_generations

    with pytest.raises(InvalidArgument, match=fragment):
        read_generations("recoveryGenerations", value)
    assert read_generations("recoveryGenerations", {"demo-tpu": 3.0, "b": 20261123120000}) == {
        "demo-tpu": 3,
        "b": 20261123120000,
    }
