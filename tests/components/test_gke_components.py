"""The GKE components against seed 002: the node pool flag by flag, the Job manifests field by
field, every manifest valid against the Kubernetes OpenAPI schemas (kubernetes-validate)."""

from __future__ import annotations

import re
import shlex
from typing import Any

import kubernetes_validate
import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml
from support.harness import seed_002
from support.harness.crds import KUBERNETES_VERSION
from support.harness.program import REPO, run_components
from tpu_training_components import (
    FlexStartTpuNodePool,
    GkeTpuCluster,
    InvalidArgument,
    TpuTrainingJob,
)
from tpu_training_components.domain.job_manifests import TrainingJobSpec, manifests

POOL = "gcp:container/nodePool:NodePool"

# --- the node pool, flag by flag ------------------------------------------------------------


def _seed_flags(command: str, substitutions: dict[str, str]) -> dict[str, Any]:
    for placeholder, value in substitutions.items():
        command = command.replace(placeholder, value)
    words = shlex.split(command.replace("\\\n", " "))
    assert words[:4] == ["gcloud", "container", "node-pools", "create"]
    flags: dict[str, Any] = {"NAME": words[4]}
    rest = words[5:]
    while rest:
        word = rest.pop(0)
        key, has_value, value = word.partition("=")
        if not has_value and rest and not rest[0].startswith("--"):
            value, has_value = rest.pop(0), "="
        flags[key] = value if has_value else True
    return flags


def _declared(flag: str, inputs: dict[str, Any]) -> Any:
    """What the declared NodePool says for one gcloud flag."""
    node = inputs["nodeConfig"]
    readers = {
        "NAME": lambda: inputs["name"],
        "--cluster": lambda: inputs["cluster"],
        "--location": lambda: inputs["location"],
        "--node-locations": lambda: ",".join(inputs["nodeLocations"]),
        "--machine-type": lambda: node["machineType"],
        "--reservation-affinity": lambda: {"NO_RESERVATION": "none"}[
            node["reservationAffinity"]["consumeReservationType"]
        ],
        "--enable-autoscaling": lambda: "autoscaling" in inputs,
        "--flex-start": lambda: node.get("flexStart", False),
        "--num-nodes": lambda: str(inputs["initialNodeCount"]),
        "--min-nodes": lambda: str(inputs["autoscaling"]["minNodeCount"]),
        "--max-nodes": lambda: str(inputs["autoscaling"]["maxNodeCount"]),
        "--tpu-topology": lambda: inputs["placementPolicy"]["tpuTopology"],
        "--no-enable-autorepair": lambda: inputs["management"]["autoRepair"] is False,
    }
    return readers[flag]()


def _pool(topology: str, machine_type: str = "ct6e-standard-4t", **extra: Any) -> dict[str, Any]:
    def body() -> None:
        FlexStartTpuNodePool(
            "flex-pool",
            {
                "cluster": "tpu-dev",
                "cluster_region": "europe-west4",
                "machine_type": machine_type,
                "topology": topology,
                "node_locations": ["europe-west4-a"],
                "service_account_email": "nodes@p.iam.gserviceaccount.com",
                **extra,  # type: ignore[typeddict-item]
            },
        )

    return run_components(body).one(POOL, "flex-pool-pool").inputs


SUBSTITUTIONS = {
    "NODE_POOL_NAME": "flex-pool",
    "CLUSTER_NAME": "tpu-dev",
    "LOCATION_NAME": "europe-west4",
    "NODE_ZONES": "europe-west4-a",
    "MACHINE_TYPE": "ct6e-standard-4t",
}


@pytest.mark.parametrize(
    ("command", "topology"),
    [
        # 2x2 on ct6e-standard-4t is one VM: the seed's single-host --max-nodes=1.
        (seed_002.SINGLE_HOST_NODE_POOL, "2x2"),
        # 2x4 is 8 chips, two 4-chip VMs: the seed's multi-host --max-nodes=2.
        (seed_002.MULTI_HOST_NODE_POOL, "2x4"),
    ],
)
def test_node_pool_matches_seed_002_flag_by_flag(command, topology):
    inputs = _pool(topology)
    flags = _seed_flags(command, {**SUBSTITUTIONS, "TPU_TOPOLOGY": topology})
    mismatches = {
        flag: (seed, _declared(flag, inputs))
        for flag, seed in flags.items()
        if _declared(flag, inputs) != seed
    }
    assert mismatches == {}


def test_single_host_pool_has_no_topology():
    assert "placementPolicy" not in _pool("2x2")


def test_auto_repair_is_off_on_every_flex_start_pool_and_every_multi_host_pool():
    """xpk 1.16.0 turns it off on every flex-start pool (capacity.py:141), Cluster Toolkit
    refuses flex-start with it on; seed 002 turns it off for multi-host slices."""
    assert _pool("2x2")["management"] == {"autoRepair": False, "autoUpgrade": True}
    assert _pool("4x4")["management"]["autoRepair"] is False
    assert _pool("4x4", flex_start=False, spot=True)["management"]["autoRepair"] is False
    # A single-host Spot pool: one VM per slice, nothing else to tear down; repairs help.
    assert _pool("2x2", flex_start=False, spot=True)["management"]["autoRepair"] is True


def test_multi_host_pool_is_compact():
    assert _pool("2x4")["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "2x4"}


@pytest.mark.parametrize(
    ("machine_type", "topology", "max_nodes"),
    [
        ("ct6e-standard-4t", "4x4", 4),  # seed 002's worked example: 16 chips / 4 per VM
        ("ct6e-standard-4t", "16x16", 64),
        ("ct6e-standard-8t", "2x4", 1),
        ("ct5lp-hightpu-4t", "8x8", 16),
        ("ct5p-hightpu-4t", "2x2x4", 4),
        ("tpu7x-standard-4t", "2x2x1", 1),
    ],
)
def test_max_nodes_is_vms_per_slice(machine_type, topology, max_nodes):
    inputs = _pool(topology, machine_type)
    assert inputs["autoscaling"] == {"locationPolicy": "ANY", "maxNodeCount": max_nodes, "minNodeCount": 0}
    assert inputs["initialNodeCount"] == 0
    assert inputs["nodeConfig"]["flexStart"] is True


def test_multi_host_tpu7x_is_refused_rather_than_placed_wrongly():
    with pytest.raises(InvalidArgument, match="placed by a workload policy, not COMPACT placement"):
        _pool("4x4x4", "tpu7x-standard-4t")


def test_bad_pool_is_refused_before_anything_is_declared():
    def body() -> None:
        FlexStartTpuNodePool(
            "bad",
            {
                "cluster": "c",
                "cluster_region": "europe-west4",
                "machine_type": "ct6e-standard-4t",
                "topology": "3x3",
                "node_locations": ["europe-west4-a"],
                "service_account_email": "x",
            },
        )

    with pytest.raises(InvalidArgument, match="FlexStartTpuNodePool 'bad': topology '3x3' is not offered"):
        run_components(body)


# --- the Job manifests, field by field ----------------------------------------------------------


def _seed_objects(text: str, topology: str) -> list[dict[str, Any]]:
    text = text.replace("ACCELERATOR_TYPE", "tpu-v6e-slice").replace("TPU_TOPOLOGY", topology)
    return list(yaml.safe_load_all(text.replace("NUM_CHIPS", "4")))


def _leaves(value: Any, path: tuple = ()) -> dict[tuple, Any]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _leaves(item, (*path, key)).items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in _leaves(item, (*path, i)).items()}
    return {path: value}


def _at(document: Any, path: tuple) -> Any:
    for part in path:
        try:
            document = document[part]
        except (KeyError, IndexError, TypeError):
            return "<absent>"
    return document


def _node_selector(topology: str) -> dict[str, str]:
    return {
        "cloud.google.com/gke-flex-start": "true",
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": topology,
    }


def _spec(topology: str, vms: int, command: tuple[str, ...], image: str, **extra: Any) -> TrainingJobSpec:
    return TrainingJobSpec(
        name="job-1",
        namespace="default",
        image=image,
        command=command,
        node_selector=_node_selector(topology),
        chips_per_vm=4,
        vms=vms,
        service_account="job-1",
        **extra,
    )


CONTAINER = ("spec", "template", "spec", "containers", 0)
# Where this project departs from seed 002 on purpose, and why. Everything else must be equal.
SINGLE_HOST_DEPARTURES = {
    ("spec", "template", "spec", "restartPolicy"): "Never: a pod failure policy requires it",
    (*CONTAINER, "name"): "every training container is called 'trainer'",
    (*CONTAINER, "args", 0): "the trainer's words are its command, not args to an image entrypoint",
}
MULTI_HOST_DEPARTURES = {
    ("metadata", "name"): "the headless Service is named after its Job",
    ("spec", "template", "spec", "subdomain"): "the subdomain is that Service",
    (*CONTAINER, "name"): "every training container is called 'trainer'",
    (*CONTAINER, "securityContext", "privileged"): "off unless the Job opts in (privileged: true)",
}


def _departures(seed: dict[str, Any], ours: dict[str, Any]) -> dict[tuple, tuple[Any, Any]]:
    return {
        path: (value, _at(ours, path)) for path, value in _leaves(seed).items() if _at(ours, path) != value
    }


def test_single_host_job_matches_seed_002_field_by_field():
    (seed_job,) = _seed_objects(seed_002.SINGLE_HOST_JOB, "2x2")
    spec = _spec("2x2", 1, ("/sleep", "3600s"), "gcr.io/k8s-staging-perf-tests/sleep:latest")
    account, run_parameters, job = manifests(spec, "trainer@p.iam.gserviceaccount.com")
    assert set(_departures(seed_job, job)) == set(SINGLE_HOST_DEPARTURES)
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["/sleep", "3600s"]


def test_multi_host_job_matches_seed_002_field_by_field():
    seed_service, seed_job = _seed_objects(seed_002.MULTI_HOST_JOB, "2x4")
    command = tuple(seed_job["spec"]["template"]["spec"]["containers"][0]["command"])
    spec = _spec("2x4", 2, command, seed_job["spec"]["template"]["spec"]["containers"][0]["image"])
    account, run_parameters, service, job = manifests(spec, "trainer@p.iam.gserviceaccount.com")
    assert set(_departures(seed_service, service)) == {("metadata", "name")}
    assert set(_departures(seed_job, job)) == set(MULTI_HOST_DEPARTURES) - {("metadata", "name")}
    assert job["spec"]["template"]["spec"]["subdomain"] == service["metadata"]["name"]


def test_privileged_is_an_explicit_opt_in():
    seed_service, seed_job = _seed_objects(seed_002.MULTI_HOST_JOB, "2x4")
    spec = _spec("2x4", 2, ("python3",), "img", privileged=True)
    job = manifests(spec, "x")[-1]
    assert _at(job, (*CONTAINER, "securityContext", "privileged")) is True


def test_both_jobs_tolerate_disruption_and_do_not_block_pulumi_up():
    for spec in (_spec("2x2", 1, ("a",), "i"), _spec("4x4", 4, ("a",), "i")):
        job = manifests(spec, "x")[-1]
        # No wait for days of training; deleted in the background, so a replacement of the same
        # name never meets the old Job still being deleted (skipAwait skips that wait too).
        assert job["metadata"]["annotations"] == {
            "pulumi.com/skipAwait": "true",
            "pulumi.com/deletionPropagationPolicy": "background",
        }
        assert "pulumi.com/replaceUnready" not in str(job)
        assert job["spec"]["podFailurePolicy"]["rules"] == [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
        ]
        assert "ttlSecondsAfterFinished" not in job["spec"]  # a finished Job must stay visible


ALL_SHAPES = [
    _spec("2x2", 1, ("python3", "train.py"), "trainer:1", env={"A": "1"}, run_parameters={"B": "2"}),
    _spec("4x4", 4, ("python3", "train.py"), "trainer:1", env={"A": "1"}, node_pool="v6e"),
    _spec("2x4", 2, ("python3", "train.py"), "trainer:1", privileged=True, generation=3),
]


@pytest.mark.parametrize("spec", ALL_SHAPES, ids=["single-host", "multi-host", "privileged"])
def test_every_manifest_is_valid_kubernetes(spec):
    for manifest in manifests(spec, "trainer@p.iam.gserviceaccount.com"):
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def test_the_validator_does_reject_a_broken_manifest():
    job = manifests(ALL_SHAPES[1], "x")[-1]
    job["spec"]["completions"] = "four"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    job = manifests(ALL_SHAPES[1], "x")[-1]
    job["spec"]["template"]["spec"]["nodeSelectors"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


# --- the components -------------------------------------------------------------------------------


def _cluster_and_job(vms_topology: str = "4x4") -> Any:
    def body() -> None:
        cluster = GkeTpuCluster("tpu-dev", {"location": "europe-west4", "project": "proj"})
        TpuTrainingJob(
            "job-1",
            {
                "provider": cluster.provider,
                "node_pool": {
                    "node_pool_name": "v6e",
                    "machine_type": "ct6e-standard-4t",
                    "topology": vms_topology,
                    "node_locations": ["europe-west4-a"],
                    "cluster_region": "europe-west4",
                },
                "image": "trainer:1",
                "command": ["python3", "train.py"],
                "checkpoint_dir": "gs://bucket/checkpoints/job-1",
                "google_service_account": "trainer@proj.iam.gserviceaccount.com",
                "google_service_account_id": "projects/proj/serviceAccounts/trainer",
                "workload_pool": cluster.workload_pool,
                "namespace": "research",
                "environment": {"CHECKPOINT_DIR": "gs://bucket/checkpoints/job-1", "TRAIN_STEPS": "10"},
                "recovery_generation": 2,
            },
        )

    return run_components(body)


def test_job_component_declares_exactly_the_pure_manifests():
    run = _cluster_and_job()
    spec = TrainingJobSpec(
        name="job-1",
        namespace="research",
        image="trainer:1",
        command=("python3", "train.py"),
        node_selector=_node_selector("4x4"),
        node_pool="v6e",
        chips_per_vm=4,
        vms=4,
        service_account="job-1",
        generation=2,
        env={"CHECKPOINT_DIR": "gs://bucket/checkpoints/job-1"},
        run_parameters={"TRAIN_STEPS": "10"},
    )
    expected = manifests(spec, "trainer@proj.iam.gserviceaccount.com")
    declared = {
        r.inputs["kind"]: r.inputs for r in run.registrations if r.type.startswith("kubernetes:") and r.custom
    }
    assert [declared[m["kind"]] for m in expected] == expected
    job = run.one("kubernetes:batch/v1:Job", "job-1-job")
    assert job.options["replacementTrigger"] == 2 and job.options["deleteBeforeReplace"] is True


def test_workload_identity_binds_only_this_jobs_service_account():
    binding = _cluster_and_job().one("gcp:serviceaccount/iAMMember:IAMMember", "job-1-workload-identity")
    assert binding.inputs["role"] == "roles/iam.workloadIdentityUser"
    assert binding.inputs["member"] == "serviceAccount:proj.svc.id.goog[research/job-1]"


def test_kubernetes_objects_go_through_the_clusters_provider():
    run = _cluster_and_job()
    provider = run.one("pulumi:providers:kubernetes", "tpu-dev-k8s")
    kubeconfig = yaml.safe_load(provider.inputs["kubeconfig"])
    assert kubeconfig["users"][0]["user"]["exec"]["command"] == "gke-gcloud-auth-plugin"
    assert kubeconfig["clusters"][0]["cluster"]["server"].startswith("https://")


def test_cluster_secure_defaults():
    cluster = _cluster_and_job().one("gcp:container/cluster:Cluster", "tpu-dev-cluster").inputs
    assert cluster["workloadIdentityConfig"] == {"workloadPool": "proj.svc.id.goog"}
    assert cluster["enableShieldedNodes"] is True
    assert cluster["privateClusterConfig"]["enablePrivateNodes"] is True
    assert cluster["enableLegacyAbac"] is False
    assert cluster["masterAuth"]["clientCertificateConfig"] == {"issueClientCertificate": False}
    assert cluster["releaseChannel"] == {"channel": "REGULAR"}
    assert cluster["maintenancePolicy"]["recurringWindow"]["recurrence"] == "FREQ=WEEKLY;BYDAY=SA,SU"
    assert cluster["removeDefaultNodePool"] is True
    assert cluster["deletionProtection"] is True


def test_system_pool_runs_as_the_dedicated_node_account():
    run = _cluster_and_job()
    system = run.one(POOL, "tpu-dev-system").inputs
    assert system["nodeConfig"]["serviceAccount"] == "tpu-dev-nodes@proj.iam.gserviceaccount.com"
    assert system["nodeConfig"]["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
    roles = sorted(r.inputs["role"] for r in run.by_type("gcp:projects/iAMMember:IAMMember"))
    assert roles == ["roles/artifactregistry.reader", "roles/container.defaultNodeServiceAccount"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"location": "europe-west4-a"}, "location: 'europe-west4-a' must be a region"),
        ({"release_channel": "FAST"}, "release_channel: 'FAST' is not one of RAPID, REGULAR, STABLE"),
        ({"min_version": "1.32"}, "older than 1.33.0-gke.1712000"),
        (
            {"maintenance_window": {"start_time": "25:00", "end_time": "04:00", "recurrence": "FREQ=DAILY"}},
            "startTime '25:00' must be HH:MM in UTC",
        ),
        (
            {"maintenance_window": {"start_time": "02:00", "end_time": "04:00", "recurrence": "FREQ=DAILY"}},
            "leaves 0 h of maintenance in some 32-day period",
        ),
        ({"upgrade_exclusion_scope": "NO_UPGRADES"}, "upgrade_exclusion_scope: 'NO_UPGRADES' is not one of"),
        ({"locaton": "x"}, "unknown argument 'locaton' (did you mean 'location'?)"),
    ],
)
def test_cluster_arguments_are_checked(args, message):
    def body() -> None:
        GkeTpuCluster("c1", {"location": "europe-west4", "project": "p", **args})  # type: ignore[typeddict-item]

    with pytest.raises(InvalidArgument, match=re.escape(message)):
        run_components(body)


def test_job_arguments_are_checked():
    def body() -> None:
        provider = k8s.Provider("p", kubeconfig="{}")
        TpuTrainingJob(
            "Job_1",
            {
                "provider": provider,
                "node_pool": {
                    "node_pool_name": "v6e",
                    "machine_type": "ct6e-standard-4t",
                    "topology": "2x2",
                    "node_locations": ["europe-west4-a"],
                    "cluster_region": "europe-west4",
                },
                "image": "i",
                "command": ["a"],
                "checkpoint_dir": "gs://b/c",
                "google_service_account": "x",
                "google_service_account_id": "y",
                "workload_pool": pulumi.Output.from_input("p.svc.id.goog"),
            },
        )

    with pytest.raises(InvalidArgument, match="job name 'Job_1' must be 1-52 lowercase letters"):
        run_components(body)


# --- the docs' Python examples run, so they cannot rot -----------------------------------------


def _readme_examples() -> list[str]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    blocks = (re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S) for page in pages)
    # The offline-preview examples run their own mocks, and are run by tests/components/test_preview.py.
    own_mocks = ("# preview example", "# bad arguments example")
    return [block for found in blocks for block in found if not block.startswith(own_mocks)]


@pytest.mark.parametrize("example", _readme_examples(), ids=lambda e: e.splitlines()[-1][:40])
def test_readme_example_runs(example):
    run = run_components(lambda: exec(compile(example, "docs", "exec"), {}))
    assert run.registrations


def test_the_planner_arguments_are_listed_once_and_completely():
    # The component, a Job's selection of a pool and the stack's nodePools entries all plan
    # through plan_from; a new planner argument missing from its lists would be dropped silently.
    import inspect

    from tpu_training_components.domain import node_pool_plan

    parameters = set(inspect.signature(node_pool_plan.plan_tpu_node_pool).parameters) - {"name"}
    assert set(node_pool_plan.PLAN_REQUIRED) | set(node_pool_plan.PLAN_OPTIONAL) == parameters
    with pytest.raises(KeyError, match="topology"):
        node_pool_plan.plan_from("p", {"machine_type": "ct6e-standard-4t"})
