"""The CrossGuard policy pack in policy/, served as the Pulumi CLI serves it, on the dev plan.

The pack runs in its own environment, policy/venv, which the ``policy_python`` fixture builds from
policy/requirements.txt as the CLI does (tests/support/harness/policy_env.py); this process never imports
pulumi_policy, whose protobuf~=5.29.5 pin conflicts with the stack's protobuf 6. It is started as
the CLI's Python language host starts a policy pack, ``python -u -m pulumi.policy ENGINE .`` in
policy/ (pulumi/pulumi ``sdk/python/cmd/pulumi-language-python/main.go`` L1611-1641 at
1b5949891b3c), and asked as the engine asks, over gRPC on loopback with the analyzer's protobuf
messages from the Pulumi SDK: ``Analyze`` with one resource's inputs, ``AnalyzeStack`` with every
resource's outputs. So every check below goes through pulumi_policy's own analyzer, which builds
the policies' arguments and turns their violations into diagnostics.

Every policy passes on the dev plan and fails on a copy with one mutation that breaks exactly its
rule.
"""

from __future__ import annotations

import ast
import copy
import selectors
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import grpc
import pytest
import yaml
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime import proto
from pulumi.runtime.proto import analyzer_pb2_grpc
from support.harness import policy_env
from support.harness.program import REPO, run_stack
from tpu_training_components.domain.job_manifests import PRIVILEGED_OPT_IN_ANNOTATION
from tpu_training_components.domain.node_pool_plan import POOL_NODE_LABEL

from tpu_training import offline, project_files

POLICY_DIR = REPO / "policy"
RPC_TIMEOUT = 30
"""Seconds for one analyzer call; each takes milliseconds."""


def _pack_constants() -> dict[str, str]:
    """The pack package's top-level string constants (its name, the resource types it governs),
    read from its modules' source: importing them needs pulumi_policy, which only policy/venv has."""
    constants: dict[str, str] = {}
    for module in sorted((POLICY_DIR / "tpu_training_policies").glob("*.py")):
        for node in ast.parse(module.read_text()).body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                assert node.targets[0].id not in constants, f"{node.targets[0].id} defined twice"
                constants[node.targets[0].id] = node.value.value
    return constants


PACK = _pack_constants()

# What issue 11 asks of the pack, by name: removing or weakening one of these fails a test.
MANDATORY = {
    "checkpoint-bucket-uniform-access",
    "checkpoint-bucket-public-access-prevention",
    "checkpoint-bucket-versioning",
    "checkpoint-bucket-in-tpu-region",
    "tpu-vm-no-external-ip",
    "tpu-vm-no-default-service-account",
    "tpu-vm-recovery-label",
    "gke-private-nodes",
    "gke-workload-identity",
    "gke-shielded-nodes",
    "gke-no-legacy-abac",
    "gke-no-default-node-service-account",
    "tpu-node-pool-flex-start-no-reservation",
    "tpu-node-pool-scales-from-zero",
    "tpu-node-pool-slice-placement",
    "tpu-node-pool-auto-repair-off",
    "training-pod-not-privileged",
    "training-pod-tpu-request",
    "training-pod-selects-declared-pool",
}
STACK_POLICIES = {
    "checkpoint-bucket-in-tpu-region",
    "training-pod-tpu-request",
    "training-pod-selects-declared-pool",
}


# ---------------------------------------------------------------------------------------------
# The pack, served as the CLI serves it
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def analyzer(policy_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The pack served by policy/venv's python as the CLI starts it; the port it prints first."""
    # Its log goes to a file, not a pipe nobody reads (a full pipe would stall the server).
    log_path = tmp_path_factory.mktemp("policy-pack") / "stderr.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            # The engine address is only passed along; the pack never dials it.
            [str(policy_python), "-u", "-m", "pulumi.policy", "127.0.0.1:0", "."],
            cwd=POLICY_DIR,
            env=policy_env.activated_env(),
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    try:
        assert server.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(server.stdout, selectors.EVENT_READ)
            ready = selector.select(timeout=60)
        port = server.stdout.readline().strip() if ready else ""
        if not port.isdigit():
            server.kill()
            server.wait()
            pytest.fail(
                f"the policy pack did not start with {policy_python}: it printed {port!r}\n"
                f"{log_path.read_text()}",
                pytrace=False,
            )
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield analyzer_pb2_grpc.AnalyzerStub(channel)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def served(analyzer: Any) -> dict[str, Any]:
    """Every policy the served pack declares (``PolicyInfo``), by name."""
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty(), timeout=RPC_TIMEOUT)
    names = [policy.name for policy in info.policies]
    assert len(names) == len(set(names)), names
    return {policy.name: policy for policy in info.policies}


# ---------------------------------------------------------------------------------------------
# The dev plan, as the engine hands it to the analyzer
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev_plan() -> list[offline.Registration]:
    """Every registration of the real dev stack program, run once for this module."""
    return offline.run_program(project_files.load_project(REPO), "dev").registrations


def _struct(props: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(props)
    return struct


def _options(registration: offline.Registration) -> proto.AnalyzerResourceOptions:
    options = registration.options
    return proto.AnalyzerResourceOptions(
        protect=options["protect"],
        ignoreChanges=options["ignoreChanges"],
        deleteBeforeReplace=options["deleteBeforeReplace"],
        deleteBeforeReplaceDefined=True,
        parent=registration.parent,
    )


def analyze_request(registration: offline.Registration) -> proto.AnalyzeRequest:
    """The engine's Analyze request for one resource: its inputs."""
    return proto.AnalyzeRequest(
        urn=registration.urn,
        type=registration.type,
        name=registration.name,
        properties=_struct(registration.inputs),
        options=_options(registration),
    )


def analyze_stack_request(registrations: list[offline.Registration]) -> proto.AnalyzeStackRequest:
    """The engine's AnalyzeStack request: every resource with its outputs ("AnalyzeStack is called on
    the final outputs of each resource", pulumi/pulumi pkg/resource/deploy/step_generator.go)."""
    return proto.AnalyzeStackRequest(
        resources=[
            proto.AnalyzerResource(
                urn=r.urn,
                type=r.type,
                name=r.name,
                properties=_struct(r.outputs),
                options=_options(r),
                parent=r.parent,
                dependencies=r.options["dependsOn"],
            )
            for r in registrations
        ]
    )


def analyze(analyzer: Any, registrations: list[offline.Registration]) -> list[Any]:
    """Every diagnostic (``AnalyzeDiagnostic``) the served pack gives these resources: each one's
    Analyze, then AnalyzeStack, as the engine calls them during an update."""
    found: list[Any] = []
    for registration in registrations:
        found.extend(analyzer.Analyze(analyze_request(registration), timeout=RPC_TIMEOUT).diagnostics)
    stack = analyzer.AnalyzeStack(analyze_stack_request(registrations), timeout=RPC_TIMEOUT)
    found.extend(stack.diagnostics)
    return found


Violation = tuple[str, Optional[str]]


def of_policy(name: str, diagnostics: Iterable[Any]) -> list[Violation]:
    """The (message, URN) of each diagnostic of the policy ``name``."""
    return [(d.message, d.urn or None) for d in diagnostics if d.policyName == name]


def violations(analyzer: Any, name: str, registrations: list[offline.Registration]) -> list[Violation]:
    """What the policy ``name`` reports for these resources, served."""
    return of_policy(name, analyze(analyzer, registrations))


def mutated(
    registrations: list[offline.Registration], name: str, change: Callable[[dict[str, Any]], None]
) -> list[offline.Registration]:
    """A copy of the plan in which the resource named ``name`` has ``change`` made to its inputs
    and its outputs alike."""
    (target,) = [r for r in registrations if r.name == name]
    copied = copy.deepcopy(target)
    change(copied.inputs)
    change(copied.outputs)
    return [copied if r is target else r for r in registrations]


# ---------------------------------------------------------------------------------------------
# The pack
# ---------------------------------------------------------------------------------------------


def _level(policy_info: Any) -> str:
    """A served policy's enforcement and kind as policy/README.md's table writes them."""
    level = {proto.MANDATORY: "mandatory", proto.ADVISORY: "advisory"}[policy_info.enforcementLevel]
    return level + (" (stack)" if policy_info.policy_type == proto.POLICY_TYPE_STACK else "")


def test_every_policy_has_a_unique_name_a_reason_and_its_enforcement(served):
    for name, policy in served.items():
        assert len(policy.description) > 60, f"{name}: say why"
        assert policy.policy_type in (proto.POLICY_TYPE_RESOURCE, proto.POLICY_TYPE_STACK), name
    assert {name for name, p in served.items() if p.enforcementLevel == proto.MANDATORY} == MANDATORY
    advisory = [name for name, p in served.items() if p.enforcementLevel == proto.ADVISORY]
    assert len(advisory) >= 3 and len(advisory) + len(MANDATORY) == len(served)
    assert {name for name, p in served.items() if p.policy_type == proto.POLICY_TYPE_STACK} == STACK_POLICIES


def test_main_serves_the_pack_under_its_name(analyzer, served):
    """policy/__main__.py is what `python -m pulumi.policy` ran: the pack it constructed is served."""
    assert analyzer.GetAnalyzerInfo(empty_pb2.Empty(), timeout=RPC_TIMEOUT).name == PACK["PACK_NAME"]
    assert MANDATORY <= set(served)


def test_the_readme_table_is_the_pack(served):
    """policy/README.md's table lists every policy once, with the pack's enforcement."""
    rows = [
        line.split("|")[1:3]
        for line in (POLICY_DIR / "README.md").read_text().splitlines()
        if line.startswith("| `")
    ]
    table = {name.strip().strip("`"): level.strip() for name, level in rows}
    assert len(rows) == len(table) == len(served)
    for name, policy in served.items():
        assert table[name] == _level(policy), name


def test_no_module_but_main_constructs_a_pack():
    for path in POLICY_DIR.glob("**/*.py"):
        if "venv" in path.relative_to(POLICY_DIR).parts:
            continue
        if path.name != "__main__.py":
            assert "PolicyPack(" not in path.read_text(), path


def test_the_cli_runs_the_pack_as_python_with_its_own_virtualenv(analyzer):
    document = yaml.safe_load((POLICY_DIR / "PulumiPolicy.yaml").read_text())
    assert document["runtime"] == {"name": "python", "options": {"virtualenv": "venv"}}
    assert policy_env.VENV == POLICY_DIR / document["runtime"]["options"]["virtualenv"]
    assert "/policy/venv/" in (REPO / ".gitignore").read_text().splitlines()
    requirements = (POLICY_DIR / "requirements.txt").read_text().splitlines()
    # The tests run the pack with the pulumi-policy it pins: the served plugin says its version.
    plugin = analyzer.GetPluginInfo(empty_pb2.Empty(), timeout=RPC_TIMEOUT)
    assert f"pulumi-policy=={plugin.version}" in requirements and "-e .." in requirements
    pins = [line for line in requirements if line and not line.startswith(("#", "-e"))]
    assert all("==" in line for line in pins), [line for line in pins if "==" not in line]


# ---------------------------------------------------------------------------------------------
# The dev plan passes; one mutation per rule fails exactly that rule
# ---------------------------------------------------------------------------------------------


def test_the_dev_plan_has_what_the_policies_look_at(dev_plan):
    types = {r.type for r in dev_plan}
    for constant in ("BUCKET", "TPU_VM", "CLUSTER", "NODE_POOL", "JOB"):
        assert PACK[constant] in types, constant


@pytest.fixture(scope="module")
def dev_plan_diagnostics(analyzer, dev_plan) -> list[Any]:
    """What the served pack says about the dev plan, asked once for this module."""
    return analyze(analyzer, dev_plan)


def _set(*path: str | int, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(props: dict[str, Any]) -> None:
        target: Any = props
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def _delete(*path: str | int) -> Callable[[dict[str, Any]], None]:
    def change(props: dict[str, Any]) -> None:
        target: Any = props
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return change


POD = ("spec", "template", "spec")
TRAINER = (*POD, "containers", 0)
POOL_SELECTOR = (*POD, "nodeSelector", POOL_NODE_LABEL)
BUCKET_EU, BUCKET_US = "checkpoints-europe-west4-bucket", "checkpoints-us-east5-bucket"
VM, CLUSTER, TPU_POOL, SYSTEM_POOL, JOB = (
    "demo-tpu-vm",
    "tpu-dev-cluster",
    "v6e-4x4-pool",
    "tpu-dev-system",
    "train-v6e-job",
)


@dataclass(frozen=True)
class Mutation:
    policy: str
    resource: str
    change: Callable[[dict[str, Any]], None]
    prop: str
    """The property the violation must name."""
    found: str
    """How the violation must show the value found."""

    def __str__(self) -> str:
        return f"{self.policy}: {self.prop}={self.found}"


def _both_tpu_requests(chips: Any) -> Callable[[dict[str, Any]], None]:
    def change(props: dict[str, Any]) -> None:
        for kind in ("requests", "limits"):
            _set(*TRAINER, "resources", kind, "google.com/tpu", value=chips)(props)

    return change


MUTATIONS = [
    Mutation(
        "checkpoint-bucket-uniform-access",
        BUCKET_EU,
        _set("uniformBucketLevelAccess", value=False),
        "uniformBucketLevelAccess",
        "false",
    ),
    Mutation(
        "checkpoint-bucket-uniform-access",
        BUCKET_US,
        _delete("uniformBucketLevelAccess"),
        "uniformBucketLevelAccess",
        "not set",
    ),
    Mutation(
        "checkpoint-bucket-public-access-prevention",
        BUCKET_EU,
        _set("publicAccessPrevention", value="inherited"),
        "publicAccessPrevention",
        '"inherited"',
    ),
    Mutation(
        "checkpoint-bucket-versioning",
        BUCKET_EU,
        _set("versioning", "enabled", value=False),
        "versioning.enabled",
        "false",
    ),
    # The VM checkpoints to the europe-west4 bucket; the Job to the us-east5 one through its pool.
    Mutation(
        "checkpoint-bucket-in-tpu-region",
        BUCKET_EU,
        _set("location", value="US-EAST5"),
        "location",
        '"US-EAST5"',
    ),
    Mutation(
        "checkpoint-bucket-in-tpu-region",
        BUCKET_US,
        _set("location", value="EUROPE-WEST4"),
        "location",
        '"EUROPE-WEST4"',
    ),
    # A bucket no TPU checkpoints to: any region with TPUs will do, a multi-region will not.
    Mutation(
        "checkpoint-bucket-in-tpu-region",
        BUCKET_US,
        lambda p: p.update(name="spare-bucket", location="US"),
        "location",
        '"US"',
    ),
    Mutation(
        "tpu-vm-no-external-ip",
        VM,
        _set("networkConfig", "enableExternalIps", value=True),
        "networkConfig.enableExternalIps",
        "true",
    ),
    Mutation(
        "tpu-vm-no-external-ip",
        VM,
        _set("networkConfigs", value=[{"enableExternalIps": True}]),
        "networkConfigs[0].enableExternalIps",
        "true",
    ),
    Mutation(
        "tpu-vm-no-default-service-account",
        VM,
        _set("serviceAccount", "email", value="123456789012-compute@developer.gserviceaccount.com"),
        "serviceAccount.email",
        '"123456789012-compute@developer.gserviceaccount.com"',
    ),
    Mutation(
        "tpu-vm-no-default-service-account", VM, _delete("serviceAccount"), "serviceAccount.email", "not set"
    ),
    Mutation(
        "tpu-vm-recovery-label",
        VM,
        _delete("labels", "recovery-generation"),
        "labels.recovery-generation",
        "not set",
    ),
    Mutation(
        "tpu-vm-recovery-label",
        VM,
        _set("labels", "recovery-generation", value="next"),
        "labels.recovery-generation",
        '"next"',
    ),
    Mutation(
        "gke-private-nodes",
        CLUSTER,
        _set("privateClusterConfig", "enablePrivateNodes", value=False),
        "privateClusterConfig.enablePrivateNodes",
        "false",
    ),
    Mutation(
        "gke-private-nodes",
        TPU_POOL,
        _set("networkConfig", value={"enablePrivateNodes": False}),
        "networkConfig.enablePrivateNodes",
        "false",
    ),
    Mutation(
        "gke-workload-identity",
        CLUSTER,
        _delete("workloadIdentityConfig"),
        "workloadIdentityConfig.workloadPool",
        "not set",
    ),
    Mutation(
        "gke-workload-identity",
        TPU_POOL,
        _set("nodeConfig", "workloadMetadataConfig", "mode", value="GCE_METADATA"),
        "nodeConfig.workloadMetadataConfig.mode",
        '"GCE_METADATA"',
    ),
    Mutation(
        "gke-shielded-nodes",
        CLUSTER,
        _set("enableShieldedNodes", value=False),
        "enableShieldedNodes",
        "false",
    ),
    Mutation("gke-no-legacy-abac", CLUSTER, _set("enableLegacyAbac", value=True), "enableLegacyAbac", "true"),
    Mutation(
        "gke-no-default-node-service-account",
        SYSTEM_POOL,
        _set("nodeConfig", "serviceAccount", value="default"),
        "nodeConfig.serviceAccount",
        '"default"',
    ),
    Mutation(
        "gke-no-default-node-service-account",
        TPU_POOL,
        _delete("nodeConfig", "serviceAccount"),
        "nodeConfig.serviceAccount",
        "not set",
    ),
    Mutation(
        "gke-no-default-node-service-account",
        CLUSTER,
        _delete("nodeConfig"),
        "nodeConfig.serviceAccount",
        "not set",
    ),
    Mutation(
        "gke-no-default-node-service-account",
        CLUSTER,
        _set("clusterAutoscaling", value={"enabled": True, "autoProvisioningDefaults": {}}),
        "clusterAutoscaling.autoProvisioningDefaults.serviceAccount",
        "not set",
    ),
    Mutation(
        "gke-no-default-node-service-account",
        CLUSTER,
        _set("nodePools", value=[{"name": "extra", "nodeConfig": {"serviceAccount": "default"}}]),
        "nodePools[0].nodeConfig.serviceAccount",
        '"default"',
    ),
    Mutation(
        "tpu-node-pool-flex-start-no-reservation",
        TPU_POOL,
        _set("nodeConfig", "reservationAffinity", "consumeReservationType", value="ANY_RESERVATION"),
        "nodeConfig.reservationAffinity.consumeReservationType",
        '"ANY_RESERVATION"',
    ),
    Mutation(
        "tpu-node-pool-flex-start-no-reservation",
        TPU_POOL,
        _set("nodeConfig", "spot", value=True),
        "nodeConfig.spot",
        "true",
    ),
    Mutation(
        "tpu-node-pool-scales-from-zero",
        TPU_POOL,
        _set("autoscaling", "minNodeCount", value=4),
        "autoscaling.minNodeCount",
        "4",
    ),
    Mutation(
        "tpu-node-pool-scales-from-zero", TPU_POOL, _set("initialNodeCount", value=4), "initialNodeCount", "4"
    ),
    Mutation("tpu-node-pool-scales-from-zero", TPU_POOL, _delete("autoscaling"), "autoscaling", "not set"),
    Mutation(
        "tpu-node-pool-slice-placement",
        TPU_POOL,
        _set("placementPolicy", "type", value="ANY"),
        "placementPolicy.type",
        '"ANY"',
    ),
    Mutation(
        "tpu-node-pool-slice-placement",
        TPU_POOL,
        _set("nodeLocations", value=["us-east5-a", "us-east5-b"]),
        "nodeLocations",
        '["us-east5-a", "us-east5-b"]',
    ),
    Mutation(
        "tpu-node-pool-slice-placement",
        TPU_POOL,
        _set("autoscaling", "maxNodeCount", value=8),
        "autoscaling.maxNodeCount",
        "8",
    ),
    Mutation(
        "tpu-node-pool-auto-repair-off",
        TPU_POOL,
        _set("management", "autoRepair", value=True),
        "management.autoRepair",
        "true",
    ),
    Mutation(
        "training-pod-not-privileged",
        JOB,
        _set(*TRAINER, "securityContext", value={"privileged": True}),
        "spec.template.spec.containers[0].securityContext.privileged",
        "true",
    ),
    Mutation(
        "training-pod-tpu-request", JOB, _both_tpu_requests(8), "resources.requests[google.com/tpu]", "8"
    ),
    Mutation(
        "training-pod-tpu-request",
        JOB,
        _delete(*TRAINER, "resources"),
        "resources.requests[google.com/tpu]",
        "not set",
    ),
    Mutation(
        "training-pod-selects-declared-pool",
        JOB,
        _set(*POOL_SELECTOR, value="v6e-4x4-other"),
        "node pools",
        f'{{"{POOL_NODE_LABEL}": "v6e-4x4-other"}}',
    ),
    Mutation("training-pod-selects-declared-pool", JOB, _delete(*POOL_SELECTOR), "node pools", "not set"),
    Mutation(
        "training-pod-selects-declared-pool",
        JOB,
        _set(*POD, "nodeSelector", "cloud.google.com/gke-tpu-topology", value="2x4"),
        "nodeSelector.cloud.google.com/gke-tpu-topology",
        '"2x4"',
    ),
    Mutation(
        "training-pod-selects-declared-pool",
        JOB,
        _set(*POD, "nodeSelector", "cloud.google.com/gke-tpu-accelerator", value="tpu-v5-lite-podslice"),
        "nodeSelector.cloud.google.com/gke-tpu-accelerator",
        '"tpu-v5-lite-podslice"',
    ),
    Mutation(
        "checkpoint-bucket-noncurrent-versions-expire",
        BUCKET_EU,
        _set("lifecycleRules", value=[]),
        "lifecycleRules",
        "[]",
    ),
    Mutation(
        "checkpoint-bucket-no-force-destroy",
        BUCKET_EU,
        _set("forceDestroy", value=True),
        "forceDestroy",
        "true",
    ),
    Mutation("tpu-interruptible-capacity", VM, _delete("schedulingConfig"), "schedulingConfig", "not set"),
    Mutation(
        "gke-release-channel",
        CLUSTER,
        _set("releaseChannel", "channel", value="RAPID"),
        "releaseChannel.channel",
        '"RAPID"',
    ),
    Mutation(
        "managed-labels",
        BUCKET_EU,
        _delete("labels", "pulumi-stack"),
        "labels",
        '{"managed-by": "pulumi", "pulumi-project": "tpu-training", "team": "ml-platform"}',
    ),
    Mutation(
        "managed-labels",
        TPU_POOL,
        _delete("nodeConfig", "resourceLabels"),
        "nodeConfig.resourceLabels",
        "not set",
    ),
    Mutation(
        "training-job-skip-await",
        JOB,
        _delete("metadata", "annotations", "pulumi.com/skipAwait"),
        "metadata.annotations.pulumi.com/skipAwait",
        "not set",
    ),
]

# Where the provider's or GKE's default is the unsafe value, leaving the property out breaks the rule.
MUTATIONS += [
    Mutation(policy, resource, _delete(*path), prop, "not set")
    for policy, resource, path, prop in (
        (
            "checkpoint-bucket-public-access-prevention",
            BUCKET_EU,
            ("publicAccessPrevention",),
            "publicAccessPrevention",
        ),
        ("checkpoint-bucket-versioning", BUCKET_EU, ("versioning",), "versioning.enabled"),
        ("gke-private-nodes", CLUSTER, ("privateClusterConfig",), "privateClusterConfig.enablePrivateNodes"),
        (
            "tpu-node-pool-flex-start-no-reservation",
            TPU_POOL,
            ("nodeConfig", "reservationAffinity"),
            "nodeConfig.reservationAffinity.consumeReservationType",
        ),
        ("tpu-node-pool-auto-repair-off", TPU_POOL, ("management",), "management.autoRepair"),
        ("gke-release-channel", CLUSTER, ("releaseChannel",), "releaseChannel.channel"),
    )
]


POLICY_NAMES = sorted({m.policy for m in MUTATIONS})


def test_every_policy_has_a_mutation_that_breaks_it(served):
    assert set(POLICY_NAMES) == set(served)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_the_dev_plan_passes(served, dev_plan_diagnostics, name):
    assert name in served
    assert of_policy(name, dev_plan_diagnostics) == []


@pytest.mark.parametrize("mutation", MUTATIONS, ids=str)
def test_a_mutation_breaks_exactly_its_policy(analyzer, served, dev_plan, mutation):
    plan = mutated(dev_plan, mutation.resource, mutation.change)
    diagnostics = analyze(analyzer, plan)
    broken = {d.policyName for d in diagnostics}
    assert broken == {mutation.policy}, [(d.policyName, d.message) for d in diagnostics]
    (target,) = [r for r in plan if r.name == mutation.resource]
    for diagnostic in diagnostics:
        assert diagnostic.urn == target.urn
        assert diagnostic.enforcementLevel == served[mutation.policy].enforcementLevel
        # The resource, the property, the value found, and what is required.
        message = diagnostic.message
        assert f"{target.type} {target.name!r}: " in message, message
        assert mutation.prop in message and f" is {mutation.found}" in message, message
        assert "; required: " in message, message


# ---------------------------------------------------------------------------------------------
# Edges of the rules
# ---------------------------------------------------------------------------------------------


def test_a_job_may_run_privileged_when_it_opts_in(analyzer, dev_plan):
    def privileged_and_opted_in(props: dict[str, Any]) -> None:
        _set(*TRAINER, "securityContext", value={"privileged": True})(props)
        _set("metadata", "annotations", PRIVILEGED_OPT_IN_ANNOTATION, value="true")(props)

    plan = mutated(dev_plan, JOB, privileged_and_opted_in)
    assert violations(analyzer, "training-pod-not-privileged", plan) == []


def test_an_init_container_may_not_run_privileged_either(analyzer, dev_plan):
    init = {"name": "setup", "image": "busybox", "securityContext": {"privileged": True}}
    plan = mutated(dev_plan, JOB, _set(*POD, "initContainers", value=[init]))
    ((message, _),) = violations(analyzer, "training-pod-not-privileged", plan)
    assert "spec.template.spec.initContainers[0].securityContext.privileged is true" in message


def test_the_live_job_reports_chips_as_a_quantity_string(analyzer, dev_plan):
    # The Kubernetes API returns quantities as strings: a stack policy reads the Job's outputs.
    plan = mutated(dev_plan, JOB, _both_tpu_requests("4"))
    assert violations(analyzer, "training-pod-tpu-request", plan) == []


def test_a_job_that_selects_no_pool_by_name_is_held_to_the_pool_its_labels_match(analyzer, dev_plan):
    def unnamed_and_greedy(props: dict[str, Any]) -> None:
        _delete(*POOL_SELECTOR)(props)
        _both_tpu_requests(8)(props)

    plan = mutated(dev_plan, JOB, unnamed_and_greedy)
    ((message, _),) = violations(analyzer, "training-pod-tpu-request", plan)
    assert "is 8; required: 4, the chips of one ct6e-standard-4t VM of node pool 'v6e-4x4'" in message


def test_a_job_selecting_its_pool_by_a_label_the_pool_does_not_give_selects_no_declared_pool(
    analyzer, dev_plan
):
    plan = mutated(dev_plan, TPU_POOL, _delete("nodeConfig", "labels"))
    ((message, urn),) = violations(analyzer, "training-pod-selects-declared-pool", plan)
    assert urn is not None and urn.endswith("::train-v6e-job")
    assert f'is {{"{POOL_NODE_LABEL}": "v6e-4x4"}}; required: node pools this stack declares' in message


def test_a_single_host_pool_takes_no_topology(analyzer, dev_plan):
    def single_host(props: dict[str, Any]) -> None:
        props["nodeConfig"]["machineType"] = "ct6e-standard-8t"
        props["placementPolicy"]["tpuTopology"] = "2x4"

    ((message, _),) = violations(
        analyzer, "tpu-node-pool-slice-placement", mutated(dev_plan, TPU_POOL, single_host)
    )
    assert (
        'placementPolicy.tpuTopology is "2x4"; required: not set: a 2x4 slice of ct6e-standard-8t is one VM'
        in message
    )


def test_tpu_pools_on_demand_are_advised_against_and_reservations_are_not(analyzer, dev_plan):
    # (Not among the mutations: the Job selects flex-start nodes, so an on-demand pool breaks its
    # selection too.)
    capacity = "tpu-interruptible-capacity"
    on_demand = mutated(dev_plan, TPU_POOL, _delete("nodeConfig", "flexStart"))
    ((message, _),) = violations(analyzer, capacity, on_demand)
    assert "nodeConfig.flexStart is not set; required: flex-start, spot or a reservation" in message

    def reserved(props: dict[str, Any]) -> None:
        del props["nodeConfig"]["flexStart"]
        props["nodeConfig"]["reservationAffinity"] = {"consumeReservationType": "SPECIFIC_RESERVATION"}

    assert violations(analyzer, capacity, mutated(dev_plan, TPU_POOL, reserved)) == []


def test_policies_leave_what_they_do_not_govern_alone(analyzer, dev_plan):
    # The CPU system pool is no TPU pool: flex-start, placement and repair rules do not reach it.
    plan = mutated(dev_plan, SYSTEM_POOL, lambda p: p.update(initialNodeCount=3, nodeCount=3))
    diagnostics = analyze(analyzer, plan)
    for name in (
        "tpu-node-pool-scales-from-zero",
        "tpu-node-pool-slice-placement",
        "tpu-node-pool-auto-repair-off",
    ):
        assert of_policy(name, diagnostics) == []


def test_an_unknown_value_stops_the_policy_as_the_analyzer_expects(analyzer, dev_plan):
    """During preview a value computed by another resource is unknown: reading it raises, and the
    analyzer reports that the policy could not run, as an advisory note, instead of the policy
    passing or guessing."""
    # How the engine sends an unknown string (pulumi_policy.proxy.UNKNOWN_STRING_VALUE).
    unknown_string = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
    plan = mutated(dev_plan, VM, _set("serviceAccount", "email", value=unknown_string))
    name = "tpu-vm-no-default-service-account"
    (diagnostic,) = [d for d in analyze(analyzer, plan) if d.policyName == name]
    assert diagnostic.enforcementLevel == proto.ADVISORY
    assert f"can't run policy '{name}' from policy pack '{PACK['PACK_NAME']}" in diagnostic.message
    assert "during preview" in diagnostic.message


# ---------------------------------------------------------------------------------------------
# The engine's view: what it lists and what it is told
# ---------------------------------------------------------------------------------------------


def test_the_served_pack_lists_every_policy_with_its_enforcement(served):
    for name, policy in served.items():
        level = proto.MANDATORY if name in MANDATORY else proto.ADVISORY
        assert policy.enforcementLevel == level, name


def test_the_served_pack_passes_the_dev_plan(dev_plan_diagnostics):
    assert [(d.policyName, d.urn, d.message) for d in dev_plan_diagnostics] == []


def test_the_served_pack_refuses_a_broken_bucket_and_a_misplaced_one(analyzer, dev_plan):
    plan = mutated(
        dev_plan, BUCKET_EU, lambda p: p.update(versioning={"enabled": False}, location="US-EAST5")
    )
    (bucket,) = [r for r in plan if r.name == BUCKET_EU]
    (diagnostic,) = analyzer.Analyze(analyze_request(bucket), timeout=RPC_TIMEOUT).diagnostics
    assert (diagnostic.policyName, diagnostic.enforcementLevel) == (
        "checkpoint-bucket-versioning",
        proto.MANDATORY,
    )
    assert "versioning.enabled is false; required: true" in diagnostic.message
    (diagnostic,) = analyzer.AnalyzeStack(analyze_stack_request(plan), timeout=RPC_TIMEOUT).diagnostics
    assert (diagnostic.policyName, diagnostic.urn) == ("checkpoint-bucket-in-tpu-region", bucket.urn)
    assert (
        "location is \"US-EAST5\"; required: EUROPE-WEST4, the region of gcp:tpu/v2Vm:V2Vm 'demo-tpu-vm', "
        "which checkpoints to it" in diagnostic.message
    )


def test_a_stack_job_with_privileged_true_opts_in_through_the_component(analyzer, config):
    """`jobs[].privileged: true` is a declared choice: TpuTrainingJob writes the opt-in
    annotation, so the mandatory policy lets exactly that Job through."""
    config["tpu-training:jobs"][0]["privileged"] = True
    registrations = run_stack(config).registrations
    (job,) = [r for r in registrations if r.name == JOB]
    assert job.inputs["metadata"]["annotations"][PRIVILEGED_OPT_IN_ANNOTATION] == "true"
    assert violations(analyzer, "training-pod-not-privileged", registrations) == []


# --- JobSets ---------------------------------------------------------------------------------


def _multislice_plan(config: dict[str, Any]) -> list[offline.Registration]:
    config = copy.deepcopy(config)
    config["tpu-training:nodePools"][0]["slices"] = 2
    config["tpu-training:jobs"][0]["slices"] = 2
    return run_stack(config).registrations


def test_a_multislice_stack_passes_every_policy(analyzer, served, config):
    plan = _multislice_plan(config)
    assert any(r.type == PACK["JOBSET"] for r in plan)
    found = analyze(analyzer, plan)
    assert {name: of_policy(name, found) for name in served if of_policy(name, found)} == {}


def test_a_jobset_may_not_run_privileged_without_opting_in(analyzer, config):
    plan = _multislice_plan(config)
    (jobset,) = [r for r in plan if r.type == PACK["JOBSET"]]

    def privileged(inputs: dict[str, Any]) -> None:
        pod = inputs["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        pod["containers"][0]["securityContext"] = {"privileged": True}

    found = violations(analyzer, "training-pod-not-privileged", mutated(plan, jobset.name, privileged))
    assert len(found) == 1 and "replicatedJobs.0" in found[0][0]


def test_a_jobset_is_held_to_its_pools_tpus(analyzer, config):
    plan = _multislice_plan(config)
    (jobset,) = [r for r in plan if r.type == PACK["JOBSET"]]

    def fewer_chips(inputs: dict[str, Any]) -> None:
        pod = inputs["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        one_chip = {"google.com/tpu": 1}
        pod["containers"][0]["resources"] = {"limits": one_chip, "requests": dict(one_chip)}

    found = analyze(analyzer, mutated(plan, jobset.name, fewer_chips))
    assert found, "a JobSet asking for fewer chips than its pool's VMs have went unnoticed"


# --- Queued provisioning -----------------------------------------------------------------------


def test_a_queued_pool_stack_passes_every_policy(analyzer, served, config):
    # A queued pool is a flex-start pool that asks GKE through ProvisioningRequests: every
    # flex-start rule still holds, with no node lifetime of its own (test_queued_stack.py).
    config = copy.deepcopy(config)
    config["tpu-training:nodePools"][0]["provisioning"] = "flex-start-queued"
    plan = run_stack(config).registrations
    (pool,) = [r for r in plan if r.type == PACK["NODE_POOL"] and "v6e" in r.name]
    assert pool.inputs["queuedProvisioning"] == {"enabled": True}
    found = analyze(analyzer, plan)
    assert {name: of_policy(name, found) for name in served if of_policy(name, found)} == {}


# --- Capacity ladders --------------------------------------------------------------------------


def test_a_ladder_pool_stack_passes_every_policy(analyzer, served, config):
    # Each rung's pools are set up as a pool of that one capacity (a flex-start rung keeps every
    # flex-start rule), and the Job selects them by the class and the pool's label their nodes carry.
    config = copy.deepcopy(config)
    config["tpu-training:nodePools"][0]["provisioning"] = ["spot", "flex-start"]
    plan = run_stack(config).registrations
    rungs = sorted(r.inputs["name"] for r in plan if r.type == PACK["NODE_POOL"] and "v6e" in r.name)
    assert rungs == ["v6e-4x4-flex", "v6e-4x4-spot"]
    found = analyze(analyzer, plan)
    assert {name: of_policy(name, found) for name in served if of_policy(name, found)} == {}
