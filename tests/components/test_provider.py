"""The components as a Pulumi package for other languages: the real provider process
(``provider/__main__.py``) called over its real gRPC API, as the engine calls it when a
TypeScript or YAML program declares a component.

- GetSchema: every component, every input and output, each with a description and a type; valid
  against Pulumi's package metaschema (pkg/codegen/schema/pulumi.json at pulumi v3.259.0, commit
  0ac56e876614aedf12771d73ef7e80959b8a6fd4, in tests/fixtures/pulumi-v3.259.0/).
- Construct: the provider declares the same children, with the same inputs and options, as the
  Python class does under mocks (tests/support/fakes/fake_engine.py stands in for the engine's monitor)."""

from __future__ import annotations

import inspect
import json
import os
import re
import selectors
import subprocess
import sys
import typing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import grpc
import pulumi
import pulumi_kubernetes as k8s
import pytest
from google.protobuf import struct_pb2
from google.rpc import status_pb2
from pulumi.runtime.proto import errors_pb2, provider_pb2, provider_pb2_grpc
from ruamel.yaml import YAML
from support.fakes.fake_engine import FakeEngine
from support.fakes.fake_tpu_api import FakeTpuApi
from support.harness.generations import fresh_stamp_since
from support.harness.program import REPO, run_components
from tpu_training_components import PreemptibleTpuVm, TpuTrainingJob, TrainingNetwork, TrainingRecovery
from tpu_training_components.provider import COMPONENTS, PACKAGE_NAME


def camel_case(name: str) -> str:
    """The schema's property name for a Python argument name (``node_pool`` -> ``nodePool``)."""
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


METASCHEMA = REPO / "tests" / "fixtures" / "pulumi-v3.259.0" / "pulumi.json"
PROJECT, STACK = "tpu-training", "test"
# How a resource reference travels in a protobuf Struct (the SDK's rpc._special_sig_key and
# _special_resource_sig).
RESOURCE_SIGNATURE = "4dabf18193072939515e22adb298388d"
RESOURCE_REFERENCE = "5cf8f73096256a8f31e491e813e4eb8e"
STACK_URN = f"urn:pulumi:{STACK}::{PROJECT}::pulumi:pulumi:Stack::{PROJECT}-{STACK}"


@pytest.fixture(scope="module")
def tpu_api():
    with FakeTpuApi() as api:
        yield api


@pytest.fixture(scope="module")
def provider(tpu_api):
    """The provider process as the language host starts it: ``python provider/ ENGINE``, with the
    TPU API it reads on loopback."""
    with FakeEngine(PROJECT, STACK) as engine:
        process = subprocess.Popen(
            [sys.executable, str(REPO / "provider"), engine.address],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ, PYTHONPATH=str(REPO), TPU_API_ENDPOINT=tpu_api.endpoint),
        )
        try:
            selector = selectors.DefaultSelector()
            assert process.stdout is not None
            selector.register(process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=60):
                pytest.fail("the provider printed no port within 60 s")
            port = int(process.stdout.readline())
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                yield provider_pb2_grpc.ResourceProviderStub(channel)
        finally:
            process.terminate()
            process.wait(timeout=30)


@pytest.fixture(scope="module")
def schema(provider) -> dict[str, Any]:
    return json.loads(provider.GetSchema(provider_pb2.GetSchemaRequest(version=0)).schema)


def token(component: type) -> str:
    return f"{PACKAGE_NAME}:index:{component.__name__}"


def args_type(component: type) -> Any:
    return typing.get_type_hints(component.__init__)["args"]


# --- GetSchema ---------------------------------------------------------------------------------


def test_schema_lists_every_component_with_every_input_and_output(schema):
    assert schema["name"] == PACKAGE_NAME
    assert sorted(schema["resources"]) == sorted(token(c) for c in COMPONENTS)
    for component in COMPONENTS:
        resource = schema["resources"][token(component)]
        assert resource["isComponent"] is True
        assert resource["description"], component.__name__
        inputs = {camel_case(key) for key in args_type(component).__annotations__}
        assert set(resource["inputProperties"]) == inputs, component.__name__
        # A component's outputs are its class annotations and its bases' (the analyzer walks the MRO).
        declared = [
            cls for cls in component.__mro__ if cls not in (object, pulumi.Resource, pulumi.ComponentResource)
        ]
        outputs = {
            camel_case(key)
            for cls in declared
            for key in inspect.get_annotations(cls)
            if not key.startswith("_")
        }
        assert set(resource["properties"]) == outputs, component.__name__


def _properties(schema: dict[str, Any]):
    for name, resource in schema["resources"].items():
        for kind in ("inputProperties", "properties"):
            for key, prop in resource.get(kind, {}).items():
                yield f"{name}.{kind}.{key}", prop
    for name, complex_type in schema["types"].items():
        for key, prop in complex_type.get("properties", {}).items():
            yield f"{name}.{key}", prop


def test_every_property_has_a_description_and_a_type(schema):
    missing = [
        where
        for where, prop in _properties(schema)
        if not prop.get("description") or not (prop.get("type") or prop.get("$ref"))
    ]
    assert missing == []


def test_required_inputs_are_the_required_keys(schema):
    for component in COMPONENTS:
        args = args_type(component)
        required = sorted(camel_case(key) for key in args.__required_keys__)
        assert sorted(schema["resources"][token(component)].get("requiredInputs", [])) == required


def check_against_metaschema(path: Path) -> subprocess.CompletedProcess[str]:
    # check-jsonschema evaluates the metaschema's patterns as ECMAScript regexes, as JSON Schema says.
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--schemafile", str(METASCHEMA), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_schema_is_valid_against_pulumis_package_metaschema(schema, tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    done = check_against_metaschema(path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_metaschema_check_notices_an_invalid_schema(schema, tmp_path):
    broken = dict(schema, resources={"not a token": next(iter(schema["resources"].values()))})
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(broken))
    assert check_against_metaschema(path).returncode != 0


# --- Construct ---------------------------------------------------------------------------------


def construct(
    provider,
    component: type,
    name: str,
    inputs: dict[str, Any],
    known: tuple = (),
    depends: dict[str, list[str]] | None = None,
    preview: bool = False,
):
    """Construct ``component`` through the provider; what it registered, and its outputs.
    ``known`` are (urn, id, state) of resources the deployment already has; ``depends`` the
    resources each input came from, as the SDK of the calling language reports them."""
    request_inputs = struct_pb2.Struct()
    request_inputs.update(inputs)
    with FakeEngine(PROJECT, STACK) as engine:
        for resource in known:
            engine.knows(*resource)
        response = provider.Construct(
            provider_pb2.ConstructRequest(
                project=PROJECT,
                stack=STACK,
                organization="organization",
                monitorEndpoint=engine.address,
                type=token(component),
                name=name,
                parent=STACK_URN,
                inputs=request_inputs,
                inputDependencies={
                    key: provider_pb2.ConstructRequest.PropertyDependencies(urns=urns)
                    for key, urns in (depends or {}).items()
                },
                dryRun=preview,
            ),
            timeout=60,
        )
        return engine.registrations, response


def python_run(body) -> list:
    return run_components(body, stack=STACK).registrations


def declared(registrations) -> list[tuple[str, str, str, Any, Any]]:
    return [(r.urn, r.type, r.parent, r.inputs, r.options) for r in registrations]


VM_ARGS: dict[str, Any] = {
    "zone": "europe-west4-a",
    "accelerator_type": "v3-8",
    "runtime_version": "tpu-vm-tf-2.16.1-pjrt",
    "train_command": "python3 train.py",
    "checkpoint_dir": "gs://ckpt-europe-west4/checkpoints/demo",
    "service_account_email": "trainer@p.iam.gserviceaccount.com",
    "provisioning": "preemptible",
    "environment": {"TRAIN_STEPS": "1000"},
    "recovery_generation": 2,
    "project": "p",
}


def camel(args: dict[str, Any]) -> dict[str, Any]:
    return {camel_case(key): value for key, value in args.items()}


def test_construct_declares_what_the_python_class_declares(provider):
    through_provider, response = construct(provider, PreemptibleTpuVm, "demo", camel(VM_ARGS))
    in_python = python_run(lambda: PreemptibleTpuVm("demo", dict(VM_ARGS)))  # type: ignore[arg-type]

    assert declared(through_provider) == declared(in_python)
    assert [r.type for r in through_provider] == [
        "tpu-training:compute:PreemptibleTpuVm",
        "gcp:tpu/v2Vm:V2Vm",
    ]
    state = dict(response.state)
    assert state["recoveryGeneration"] == 2 and state["zone"] == "europe-west4-a"


def test_construct_of_a_multi_host_job_declares_the_indexed_job_and_its_service(provider):
    selection = {
        "node_pool_name": "v6e",
        "machine_type": "ct6e-standard-4t",
        "topology": "4x4",
        "node_locations": ["us-east5-a"],
        "cluster_region": "us-east5",
    }
    args: dict[str, Any] = {
        "node_pool": selection,
        "image": "trainer:1",
        "command": ["python3", "train.py"],
        "checkpoint_dir": "gs://ckpt/checkpoints/train",
        "google_service_account": "pods@p.iam.gserviceaccount.com",
        "google_service_account_id": "projects/p/serviceAccounts/pods@p.iam.gserviceaccount.com",
        "workload_pool": "p.svc.id.goog",
    }
    # The cluster's Kubernetes provider arrives as a resource reference, as another language's
    # SDK sends it; in Python it is the object itself, registered first in the same stack.
    provider_urn = f"urn:pulumi:{STACK}::{PROJECT}::pulumi:pulumi:Stack$pulumi:providers:kubernetes::gke"
    reference = {RESOURCE_SIGNATURE: RESOURCE_REFERENCE, "urn": provider_urn, "id": "gke-id"}
    inputs = camel(args) | {"nodePool": camel(selection), "provider": reference}
    through_provider, _ = construct(
        provider, TpuTrainingJob, "train", inputs, known=[(provider_urn, "gke-id", {"kubeconfig": "{}"})]
    )

    def body() -> None:
        cluster = k8s.Provider("gke", kubeconfig="{}")
        TpuTrainingJob("train", dict(args, provider=cluster))  # type: ignore[arg-type]

    in_python = [r for r in python_run(body) if r.urn != provider_urn]

    assert declared(through_provider) == declared(in_python)
    assert {r.provider for r in through_provider if r.type.startswith("kubernetes:")} == {
        f"{provider_urn}::gke-id"
    }
    kinds = sorted(r.type for r in through_provider)
    assert "kubernetes:batch/v1:Job" in kinds and "kubernetes:core/v1:Service" in kinds
    (job,) = [r for r in through_provider if r.type == "kubernetes:batch/v1:Job"]
    assert job.inputs["spec"]["completionMode"] == "Indexed" and job.inputs["spec"]["parallelism"] == 4


def test_construct_of_recovery_reads_the_stack_and_returns_the_generations(provider):
    args: dict[str, Any] = {
        "project": "p",
        "tpu_vms": [{"name": "demo", "zone": "europe-west4-a"}],
        "read_live_state": False,
    }
    through_provider, response = construct(provider, TrainingRecovery, "recovery", camel(args))
    in_python = python_run(lambda: TrainingRecovery("recovery", dict(args)))  # type: ignore[arg-type]

    assert declared(through_provider) == declared(in_python)
    state = json.loads(json.dumps(dict(response.state), default=dict))
    assert state["vmGenerations"] == {"demo": 0}
    assert "live state not read" in state["vmDecisions"]["demo"]


def refusal(failure: grpc.RpcError) -> tuple[str, dict[str, str]]:
    """What a refused Construct sent: its message, and each bad property's path and reason from
    the InputPropertiesError (Pulumi's errors.proto) in the status details, where the engine
    reads them (pulumi/pulumi 1b5949891b3cefcb9974752b24a5ecef0acc86c8,
    pkg/resource/deploy/source_eval.go ``errorToMessage``)."""
    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    (details,) = [value for key, value in failure.trailing_metadata() if key == "grpc-status-details-bin"]
    problems: dict[str, str] = {}
    for detail in status_pb2.Status.FromString(details).details:
        errors = errors_pb2.InputPropertiesError()
        assert detail.Unpack(errors)
        problems.update({error.property_path: error.reason for error in errors.errors})
    return failure.details(), problems


def test_bad_input_through_the_provider_names_the_argument(provider):
    with pytest.raises(grpc.RpcError) as failure:
        construct(provider, PreemptibleTpuVm, "demo", camel(VM_ARGS) | {"provisioning": "cheap"})
    message, problems = refusal(failure.value)
    assert message == "PreemptibleTpuVm 'demo'"
    allowed = "preemptible, spot, on-demand, reserved, flex-start"
    assert problems == {"provisioning": f"'cheap' is not one of {allowed}"}


def test_a_queued_vm_is_refused_from_other_languages_by_name(provider):
    inputs = camel(VM_ARGS) | {"provisioning": "flex-start", "maxRunDuration": "72h"}
    with pytest.raises(grpc.RpcError) as failure:
        construct(provider, PreemptibleTpuVm, "demo", inputs)
    message, problems = refusal(failure.value)
    assert message == "PreemptibleTpuVm 'demo'"
    assert sorted(problems) == ["maxRunDuration", "provisioning"]
    assert "from Python programs only" in problems["provisioning"]


def test_every_bad_input_is_named_at_its_path_in_the_schemas_names(provider):
    inputs = camel(VM_ARGS) | {
        "runtimeVersion": "TPU VM",
        "environment": {"PATH": "/opt/bin", "TRAIN_STEPS": "1000"},
        "labels": {"Team": "ml", "ok": "yes"},
    }
    with pytest.raises(grpc.RpcError) as failure:
        construct(provider, PreemptibleTpuVm, "demo", inputs)
    _, problems = refusal(failure.value)
    assert sorted(problems) == ["environment.PATH", "labels.Team", "runtimeVersion"]
    assert problems["runtimeVersion"].startswith("runtime version 'TPU VM' must be one TPU software version")


def test_a_nested_input_of_the_wrong_type_is_named_by_its_path(provider):
    args = {"project": "p", "tpuVms": [{"name": "a", "zone": "europe-west4-a"}, {"name": "b", "zone": 5}]}
    with pytest.raises(grpc.RpcError) as failure:
        construct(provider, TrainingRecovery, "recovery", args | {"readLiveState": False})
    assert refusal(failure.value)[1] == {"tpuVms[1].zone": "Input should be a valid string"}


def test_a_refusal_of_the_arguments_together_is_in_the_message(provider):
    with pytest.raises(grpc.RpcError) as failure:
        construct(provider, TrainingNetwork, "net", {"networkName": "training", "regions": []})
    message, problems = refusal(failure.value)
    assert (
        message == "TrainingNetwork 'net'; regions: at least one region is needed (or a gke_region), got none"
    )
    assert problems == {}


def test_whole_numbers_from_the_wire_are_ints_and_fractions_are_refused(provider):
    # Every number crosses gRPC as a double: 3 arrives as 3.0 and must label the node "3".
    through_provider, _ = construct(
        provider, PreemptibleTpuVm, "demo", camel(VM_ARGS) | {"recoveryGeneration": 3}
    )
    (vm,) = [r for r in through_provider if r.type == "gcp:tpu/v2Vm:V2Vm"]
    assert vm.inputs["labels"]["recovery-generation"] == "3"
    with pytest.raises(grpc.RpcError) as failure:
        construct(provider, PreemptibleTpuVm, "demo", camel(VM_ARGS) | {"recoveryGeneration": 2.5})
    assert refusal(failure.value)[1] == {"recoveryGeneration": "Input should be a valid integer"}


def test_recovery_in_the_provider_reads_the_live_tpu_api(provider, tpu_api):
    """The provider process loads the TPU client beside the Pulumi provider server (their two
    copies of google.rpc.Status would clash without the shim in tpu_training_components.provider)."""
    tpu_api.add("europe-west4-a", "demo", "PREEMPTED", labels={"recovery-generation": "1"})
    args = {"project": "p", "tpu_vms": [{"name": "demo", "zone": "europe-west4-a"}]}
    started = datetime.now(timezone.utc)
    _, response = construct(provider, TrainingRecovery, "recovery", camel(args))
    state = json.loads(json.dumps(dict(response.state), default=dict))
    # A number crosses gRPC as a double; a 14-digit stamp is exact in one.
    (generation,) = state["vmGenerations"].values()
    assert fresh_stamp_since(started, int(generation)) and generation == int(generation)
    assert "node is PREEMPTED -> will be replaced" in state["vmDecisions"]["demo"]
    assert len(tpu_api.calls) == 1


# --- the docs' examples for other languages match the served schema ----------------------------

OTHER_LANGUAGES_PAGE = REPO / "docs" / "other-languages.md"


def _readme_block(language: str, marker: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", OTHER_LANGUAGES_PAGE.read_text(), flags=re.S)
    (block,) = [block for block in blocks if marker in block]
    return block


def test_readme_yaml_program_uses_the_schema_as_served(schema):
    program = YAML(typ="safe").load(_readme_block("yaml", "runtime: yaml"))
    ours = {name: r for name, r in program["resources"].items() if r["type"].startswith(f"{PACKAGE_NAME}:")}
    assert ours
    for name, resource in ours.items():
        package, component = resource["type"].split(":")
        definition = schema["resources"][f"{package}:index:{component}"]
        given = set(resource["properties"])
        assert given <= set(definition["inputProperties"]), name
        assert set(definition.get("requiredInputs", [])) <= given, name
    for name, prop in re.findall(r"\$\{([\w-]+)\.(\w+)", _readme_block("yaml", "runtime: yaml")):
        if name in ours:
            component = ours[name]["type"].split(":")[1]
            assert prop in schema["resources"][f"{PACKAGE_NAME}:index:{component}"]["properties"], (
                name,
                prop,
            )


def test_readme_yaml_vm_is_on_a_network_that_reaches_google_apis():
    """Without an external IP a TPU VM reaches gs:// only through Private Google Access: the YAML
    program puts it on the TrainingNetwork it declares, in a region that network covers."""
    program = YAML(typ="safe").load(_readme_block("yaml", "runtime: yaml"))
    resources = program["resources"]
    vms = [r for r in resources.values() if r["type"] == f"{PACKAGE_NAME}:PreemptibleTpuVm"]
    assert vms
    for vm in vms:
        properties = vm["properties"]
        assert not properties.get("externalIp", False)
        network = re.fullmatch(r"\$\{([\w-]+)\.networkId\}", properties["network"])
        subnetwork = re.fullmatch(r'\$\{([\w-]+)\.subnetworkIds\["([\w-]+)"\]\}', properties["subnetwork"])
        assert network and subnetwork and network.group(1) == subnetwork.group(1)
        declared = resources[network.group(1)]
        assert declared["type"] == f"{PACKAGE_NAME}:TrainingNetwork"
        region = properties["zone"].rsplit("-", 1)[0]
        assert subnetwork.group(2) == region and region in declared["properties"]["regions"]
        assert f"${{{network.group(1)}}}" in vm["options"]["dependsOn"]


def test_readme_typescript_vm_is_on_a_network_that_reaches_google_apis():
    program = _readme_block("typescript", "@pulumi/tpu-training")
    declared = r'const (\w+) = new tpu\.TrainingNetwork\("[\w-]+", \{[^}]*regions: \[([^\]]*)\]'
    ((variable, regions),) = re.findall(declared, program)
    vm = program[program.index("new tpu.PreemptibleTpuVm(") :]
    zone = re.search(r'zone: "([\w-]+)"', vm)
    assert zone
    region = zone.group(1).rsplit("-", 1)[0]
    assert f'"{region}"' in regions
    assert f"network: {variable}.networkId" in vm
    assert f'subnetwork: {variable}.subnetworkIds.apply(ids => ids["{region}"])' in vm
    assert re.search(rf"dependsOn: \[[^\]]*\b{variable}\b", vm)


def _object_keys(text: str) -> set[str]:
    """The top-level keys of the object literal ``text`` starts with (``{...}``): identifiers that
    open an entry (after ``{`` or ``,``), written ``key: value`` or as the shorthand ``key``."""
    without_strings = re.sub(r'"[^"]*"', '""', text)
    keys, depth, start = set(), 0, 0
    for index, char in enumerate(without_strings):
        if char in "{[(":
            depth += 1
            if depth == 1:
                start = index + 1
        elif char in "}])":
            if depth == 1:
                keys.update(_entry_key(without_strings[start:index]))
            depth -= 1
            if depth == 0:
                break
        elif char == "," and depth == 1:
            keys.update(_entry_key(without_strings[start:index]))
            start = index + 1
    return keys


def _entry_key(entry: str) -> list[str]:
    match = re.match(r"\s*(\w+)\s*(?::|$)", entry)
    return [match.group(1)] if match else []


def test_readme_typescript_program_uses_the_schema_as_served(schema):
    program = _readme_block("typescript", "@pulumi/tpu-training")
    variables = dict(re.findall(r"const (\w+) = new tpu\.(\w+)\(", program))
    constructions = list(re.finditer(r"new tpu\.(\w+)\(\"[\w-]+\", ", program))
    assert constructions
    for construction in constructions:
        definition = schema["resources"][f"{PACKAGE_NAME}:index:{construction.group(1)}"]
        keys = _object_keys(program[construction.end() :])
        assert keys <= set(definition["inputProperties"]), construction.group(1)
        assert set(definition.get("requiredInputs", [])) <= keys, construction.group(1)
    for variable, prop in re.findall(r"\b(\w+)\.(\w+)\b", program):
        if variable in variables:
            assert prop in schema["resources"][f"{PACKAGE_NAME}:index:{variables[variable]}"]["properties"]


# --- inputs as other languages send them: from other resources, unknown, of the wrong type -----

OTHER = f"urn:pulumi:{STACK}::{PROJECT}::tpu-training:recovery:TrainingRecovery::recovery"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # the SDK's rpc.UNKNOWN: a value not known in preview


def test_a_generation_from_another_resource_becomes_the_nodes_label(provider):
    """The README's TypeScript and YAML programs pass recovery.vmGenerations["demo-tpu"]: an input
    with a dependency, which the provider receives as an Output."""
    inputs = camel(VM_ARGS) | {"recoveryGeneration": 4}
    through_provider, _ = construct(
        provider, PreemptibleTpuVm, "demo", inputs, depends={"recoveryGeneration": [OTHER]}
    )
    (vm,) = [r for r in through_provider if r.type == "gcp:tpu/v2Vm:V2Vm"]
    assert vm.inputs["labels"]["recovery-generation"] == "4"
    assert vm.options["replacementTrigger"] == 4
    assert OTHER in vm.options["dependsOn"]


def test_a_plain_input_written_from_another_resource_is_used_by_value(provider):
    args: dict[str, Any] = {"project": "p", "tpu_vms": [{"name": "demo", "zone": "europe-west4-a"}]}
    inputs = camel(args) | {"readLiveState": False}
    _, response = construct(provider, TrainingRecovery, "recovery", inputs, depends={"tpuVms": [OTHER]})
    state = json.loads(json.dumps(dict(response.state), default=dict))
    assert state["vmGenerations"] == {"demo": 0}


def test_a_plain_input_unknown_in_preview_is_refused_by_name(provider):
    inputs = {"project": "p", "tpuVms": UNKNOWN, "readLiveState": False}
    with pytest.raises(grpc.RpcError) as failure:
        construct(provider, TrainingRecovery, "recovery", inputs, depends={"tpuVms": [OTHER]}, preview=True)
    assert "tpuVms of TrainingRecovery must be a value known when the component is declared" in str(
        failure.value.trailing_metadata()
    ) + str(failure.value)


def test_a_value_of_the_wrong_type_is_a_message_not_a_traceback(provider):
    with pytest.raises(grpc.RpcError) as failure:
        construct(provider, PreemptibleTpuVm, "demo", camel(VM_ARGS) | {"labels": ["a"]})
    # pydantic's type check names the argument and what is allowed; the engine prints the value
    # it sent beside them.
    assert refusal(failure.value)[1] == {"labels": "Input should be a valid dictionary"}
    message = str(failure.value)
    assert "Traceback" not in message and 'File "' not in message


def test_a_vm_and_a_job_of_one_name_each_keep_their_decision(provider):
    args: dict[str, Any] = {
        "project": "p",
        "tpu_vms": [{"name": "train", "zone": "europe-west4-a"}],
        "jobs": [{"name": "train"}],
        "cluster": {"project": "p", "location": "us-east5", "name": "c"},
        "read_live_state": False,
    }
    _, response = construct(provider, TrainingRecovery, "recovery", camel(args))
    state = json.loads(json.dumps(dict(response.state), default=dict))
    assert set(state["vmDecisions"]) == {"train"} and set(state["jobDecisions"]) == {"train"}
    assert state["vmGenerations"] == {"train": 0} and state["jobGenerations"] == {"train": 0}
