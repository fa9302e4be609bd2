"""Everyday edits to a running stack: a tuning edit must not replace a running Job or TPU VM.

pulumi-kubernetes replaces a ``batch/v1`` Job when ``.spec.completions``, ``.spec.parallelism``,
``.spec.selector`` or ``.spec.template`` changes (pulumi/pulumi-kubernetes
provider/pkg/provider/diff.go, ``var job``, at 94977969d64112b04e19945818a7d5d5f38f631d). So each
test plans the dev stack before and after one edit and compares exactly those fields, byte for
byte: the run parameters move through the ConfigMap ``{job}-run-parameters`` instead, whose data
pulumi-kubernetes updates in place when the provider has ``enableConfigMapMutable`` (diff.go
``forceNewProperties``: without it, ``.data`` of a ConfigMap is force-new).

The TPU VM is held to the fields the provider replaces it for (docs/REFERENCE: zone, name,
project, runtime_version, accelerator_type, accelerator_config, cidr_block, network_config(s),
service_account, scheduling_config, shielded_instance_config) and to its replacement trigger.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

import pytest
from support.harness.program import dev_config, run_components, run_stack
from tpu_training_components import GkeTpuCluster
from tpu_training_components import preview as library_preview
from tpu_training_components.domain import provider_rules
from tpu_training_components.domain.gke_cluster_plan import GKE_DEFAULT_NODE_ZONES, system_pool_zones
from tpu_training_components.domain.stack_identity import DEPLOYED_AS_OUTPUT, rename_problem

from tpu_training import offline

JOB = "kubernetes:batch/v1:Job"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
VM = "gcp:tpu/v2Vm:V2Vm"
POOL = "gcp:container/nodePool:NodePool"
PROVIDER = "pulumi:providers:kubernetes"
# The replace-on-change fields, from the same table --compare-to announces replacements by (each
# with its provider source in change_impact): one list, so the two cannot drift apart.
JOB_FORCE_NEW = tuple(
    field.removeprefix("spec.")
    for field in provider_rules.KUBERNETES_RULES["batch/v1/Job"].replace
    if field.startswith("spec.")
)
VM_FORCE_NEW = provider_rules.TPU_VM.replace

Edit = Callable[[dict[str, Any]], None]


def _training(key: str, value: Any) -> Edit:
    def edit(config: dict[str, Any]) -> None:
        config["tpu-training:training"][key] = value

    return edit


def _checkpoint_cost(seconds: int) -> Edit:
    def edit(config: dict[str, Any]) -> None:
        config["tpu-training:checkpointing"]["costSeconds"] = seconds

    return edit


def _checkpointing(key: str, value: Any) -> Edit:
    def edit(config: dict[str, Any]) -> None:
        config["tpu-training:checkpointing"][key] = value

    return edit


def _pool(key: str, value: Any) -> Edit:
    def edit(config: dict[str, Any]) -> None:
        config["tpu-training:nodePools"][0][key] = value

    return edit


def _job(key: str, value: Any) -> Edit:
    def edit(config: dict[str, Any]) -> None:
        config["tpu-training:jobs"][0][key] = value

    return edit


def _plan(*edits: Edit) -> offline.ProgramRun:
    config = copy.deepcopy(dev_config())
    for edit in edits:
        edit(config)
    return run_stack(config)


def _job_force_new(run: offline.ProgramRun) -> str:
    (job,) = run.by_type(JOB)
    return json.dumps({key: job.inputs["spec"].get(key) for key in JOB_FORCE_NEW}, sort_keys=True)


def _vm_force_new(run: offline.ProgramRun) -> str:
    (vm,) = run.by_type(VM)
    return json.dumps(
        {
            "inputs": {key: vm.inputs.get(key) for key in VM_FORCE_NEW},
            "trigger": vm.options["replacementTrigger"],
        },
        sort_keys=True,
    )


def _run_parameters(run: offline.ProgramRun) -> dict[str, str]:
    (config_map,) = run.by_type(CONFIG_MAP)
    return config_map.inputs["data"]


@pytest.fixture(scope="module")
def baseline() -> offline.ProgramRun:
    return _plan()


TUNING_EDITS = {
    # Re-measured, lower and higher: the Pods' grace is its own key (docs/trainer.md).
    "checkpointing.costSeconds 20 -> 17": (_checkpoint_cost(17),),
    "checkpointing.costSeconds 20 -> 120": (_checkpoint_cost(120),),
    "training.perCoreBatchSize 128 -> 64": (_training("perCoreBatchSize", 64),),
    "training.totalExamples 100000 -> 250000": (_training("totalExamples", 250_000),),
    "training.baseLearningRate 0.1 -> 0.05": (_training("baseLearningRate", 0.05),),
    "nodePools[0].maxRunDuration none -> 72h": (_pool("maxRunDuration", "72h"),),
    "jobs[0].env added": (_job("env", {"DATA_DIR": "gs://data/shard-2"}),),
}


@pytest.mark.parametrize("edits", TUNING_EDITS.values(), ids=TUNING_EDITS.keys())
def test_a_tuning_edit_changes_the_run_parameters_and_never_the_jobs_template(baseline, edits):
    edited = _plan(*edits)
    assert _job_force_new(edited) == _job_force_new(baseline)
    assert _run_parameters(edited) != _run_parameters(baseline)
    (job,) = edited.by_type(JOB)
    assert job.options == baseline.by_type(JOB)[0].options  # same trigger, same generation
    assert _vm_force_new(edited) == _vm_force_new(baseline)
    # The provider the Job lives on is not touched either.
    assert edited.by_type(PROVIDER)[0].inputs == baseline.by_type(PROVIDER)[0].inputs


def test_the_run_parameters_are_what_the_edit_says(baseline):
    before, after = _run_parameters(baseline), _run_parameters(_plan(_training("baseLearningRate", 0.05)))
    assert (before["LEARNING_RATE"], after["LEARNING_RATE"]) == ("0.2", "0.1")
    assert {k: v for k, v in before.items() if k != "LEARNING_RATE"} == {
        k: v for k, v in after.items() if k != "LEARNING_RATE"
    }


def test_a_second_maxrunduration_changes_only_the_interval(baseline):
    shorter, longer = _plan(_pool("maxRunDuration", "24h")), _plan(_pool("maxRunDuration", "72h"))
    assert _job_force_new(shorter) == _job_force_new(longer) == _job_force_new(baseline)
    assert (
        _run_parameters(shorter)["CHECKPOINT_INTERVAL_SECONDS"]
        != _run_parameters(longer)["CHECKPOINT_INTERVAL_SECONDS"]
    )


@pytest.mark.parametrize(("before", "after"), [(1, 2), (2, 1), (2, 3)])
def test_adding_or_removing_a_slice_leaves_the_job_and_the_running_slice_alone(before, after):
    one, two = _plan(_pool("slices", before)), _plan(_pool("slices", after))
    assert _job_force_new(one) == _job_force_new(two)
    assert _run_parameters(one) == _run_parameters(two)
    # The first slice's node pool, which the running Job is on, is declared exactly as before.
    first = [p for p in one.by_type(POOL) if p.name == "v6e-4x4-pool"]
    assert first == [p for p in two.by_type(POOL) if p.name == "v6e-4x4-pool"]
    pools = {len(run.by_type(POOL)) for run in (one, two)}
    assert pools == {before + 1, after + 1}  # the TPU slices and the system pool


def test_a_checkpoint_cost_past_the_pods_grace_warns_and_leaves_the_template(baseline):
    """The Pods' grace no longer follows costSeconds (termination_grace, DEFAULT_POD_GRACE_SECONDS):
    a save re-measured at 120 s keeps the template byte for byte, and the plan says the save no
    longer fits and what to set (tests/domain/test_termination_grace.py)."""
    edited = _plan(_checkpoint_cost(120))
    assert _job_force_new(edited) == _job_force_new(baseline)
    assert json.loads(_job_force_new(edited))["template"]["spec"]["terminationGracePeriodSeconds"] == 120
    assert [w for w in edited.warnings if "podGraceSeconds" in w]
    assert not [w for w in baseline.warnings if "podGraceSeconds" in w]


def test_setting_the_pods_grace_is_the_edit_that_changes_the_template(baseline):
    """The other side: the grace itself is in the Pod template, so setting it replaces the Job."""
    edited = _plan(_checkpoint_cost(120), _checkpointing("podGraceSeconds", 300))
    before, after = (json.loads(_job_force_new(run)) for run in (baseline, edited))
    grace = "terminationGracePeriodSeconds"
    assert (before["template"]["spec"].pop(grace), after["template"]["spec"].pop(grace)) == (120, 300)
    assert before == after
    assert not [w for w in edited.warnings if "podGraceSeconds" in w]


@pytest.mark.parametrize(
    "edit",
    [
        _job("image", "us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:v2"),
        _job("command", ["python3", "/tmp/other.py"]),
    ],
    ids=["image", "command"],
)
def test_an_edit_of_what_runs_does_change_the_template(baseline, edit):
    """The other side: an image or a command is the run itself, and does replace the Job (which
    the plan announces)."""
    edited = _plan(edit)
    assert _job_force_new(edited) != _job_force_new(baseline)
    assert _run_parameters(edited) == _run_parameters(baseline)


def test_the_pods_read_the_config_map_by_its_fixed_name_from_a_provider_that_updates_it(baseline):
    (job,) = baseline.by_type(JOB)
    (config_map,) = baseline.by_type(CONFIG_MAP)
    (container,) = job.inputs["spec"]["template"]["spec"]["containers"]
    # A fixed metadata.name: pulumi-kubernetes auto-names only when no name is given, and an
    # auto-name would change on every replacement, and with it the template.
    assert config_map.inputs["metadata"]["name"] == "train-v6e-run-parameters"
    assert container["envFrom"] == [{"configMapRef": {"name": "train-v6e-run-parameters"}}]
    assert container["env"] == [
        {"name": "CHECKPOINT_DIR", "value": "gs://tpu-training-dev-dev-ckpt-us-east5/checkpoints/train-v6e"}
    ]
    assert "CHECKPOINT_DIR" not in config_map.inputs["data"]
    (provider,) = baseline.by_type(PROVIDER)
    assert provider.inputs["enableConfigMapMutable"] == "true"  # provider inputs travel as strings
    # The Job waits for its ConfigMap but takes no input from it: a replaced ConfigMap would not
    # drag the Job along (the engine replaces only dependents with a property dependency).
    assert config_map.urn in job.options["dependsOn"]
    assert config_map.urn not in json.dumps(job.inputs)


# --- the Kubernetes provider across a CA rotation -------------------------------------------------


def _provider_with_endpoint(monkeypatch: pytest.MonkeyPatch, endpoint: str, ca: str) -> dict[str, Any]:
    monkeypatch.setattr(library_preview, "OFFLINE_CLUSTER_ENDPOINT", endpoint)
    monkeypatch.setattr(library_preview, "OFFLINE_CA_CERTIFICATE", ca)
    run = run_components(lambda: GkeTpuCluster("tpu-dev", {"location": "us-east5", "project": "proj"}))
    (provider,) = run.by_type(PROVIDER)
    return provider.inputs


def test_a_ca_rotation_changes_the_kubeconfig_but_not_the_cluster_identifier(monkeypatch):
    """pulumi-kubernetes DiffConfig (provider/pkg/provider/provider.go): with clusterIdentifier
    set and unchanged, no change of the kubeconfig replaces the provider; without it, a new server
    or CA does, and with it every Namespace, Service and Job."""
    before = _provider_with_endpoint(monkeypatch, "192.0.2.1", "Y2EtMQ==")
    after = _provider_with_endpoint(monkeypatch, "192.0.2.7", "Y2EtMg==")
    assert before["kubeconfig"] != after["kubeconfig"]
    assert before["clusterIdentifier"] == after["clusterIdentifier"]
    # The cluster's id (under the mocks, "<resource name>-id"; in GCP projects/P/locations/L/clusters/N).
    assert before["clusterIdentifier"] == "tpu-dev-cluster-id"


def test_the_cluster_identifier_is_an_input_taken_from_the_cluster(baseline):
    """Taken from the cluster's output, not rebuilt from its name: when the cluster itself is
    re-created, the engine sees the provider's input depend on it and replaces the provider and
    everything on it (pkg/resource/deploy/step_generator.go calculateDependentReplacements)."""
    (provider,) = baseline.by_type(PROVIDER)
    (cluster,) = baseline.by_type("gcp:container/cluster:Cluster")
    assert provider.inputs["clusterIdentifier"] == f"{cluster.name}-id"


# --- the cluster's own choices --------------------------------------------------------------------


def test_the_cluster_says_vpc_native_and_its_default_pool_runs_as_the_node_account(baseline):
    cluster = baseline.one("gcp:container/cluster:Cluster", "tpu-dev-cluster")
    assert cluster.inputs["networkingMode"] == "VPC_NATIVE"
    assert cluster.inputs["removeDefaultNodePool"] is True
    assert (
        cluster.inputs["nodeConfig"]["serviceAccount"]
        == "gke-nodes-dev@tpu-training-dev.iam.gserviceaccount.com"
    )
    # node_config is ForceNew on a cluster: a cluster made before it was said is left alone.
    assert cluster.options["ignoreChanges"] == ["nodeConfig"]


@pytest.mark.parametrize(
    ("region", "max_nodes", "zones"),
    [
        ("us-east5", 1, ("us-east5-a",)),
        ("us-east5", 2, ("us-east5-a", "us-east5-b")),
        ("us-east5", 3, None),
        ("us-central1", 3, None),  # four zones, of which GKE's default takes three
        ("us-central1", 5, None),
    ],
)
def test_the_system_pool_is_pinned_to_as_many_zones_as_its_maximum_fits(region, max_nodes, zones):
    assert system_pool_zones(region, max_nodes) == zones


def test_the_system_pools_initial_size_fits_its_maximum_in_every_region():
    from tpu_training_components.domain.gcp_locations import REGION_ZONES

    for region, letters in REGION_ZONES.items():
        for max_nodes in range(1, 6):
            zones = system_pool_zones(region, max_nodes)
            # One node in each zone the pool starts in: GKE's default three, or those it is pinned to.
            count = len(zones) if zones else min(GKE_DEFAULT_NODE_ZONES, len(letters))
            assert 1 <= count <= max_nodes, (region, max_nodes, zones)


def test_a_small_system_pool_in_the_stack_is_pinned(config):
    config["tpu-training:cluster"]["systemMaxNodes"] = 1
    system = run_stack(config).one(POOL, "tpu-dev-system").inputs
    assert system["nodeLocations"] == ["us-east5-a"]
    assert (
        system["initialNodeCount"] * len(system["nodeLocations"])
        <= system["autoscaling"]["totalMaxNodeCount"]
    )


# --- a renamed stack --------------------------------------------------------------------------------


def test_a_renamed_stack_is_refused_before_it_re_names_everything(config):
    with pytest.raises(
        Exception, match=r"last deployed as 'prod' and is now 'dev'.*pulumi stack rename prod"
    ):
        run_stack(config, previous_outputs={DEPLOYED_AS_OUTPUT: {"project": "tpu-training", "stack": "prod"}})


@pytest.mark.parametrize(
    "previous",
    [{}, {"recoveryGenerations": {}}, {DEPLOYED_AS_OUTPUT: {"project": "tpu-training", "stack": "dev"}}],
    ids=["new stack", "deployed before the output existed", "same stack"],
)
def test_a_stack_under_its_own_name_runs(config, previous):
    run = run_stack(config, previous_outputs=previous)
    assert run.outputs[DEPLOYED_AS_OUTPUT] == {"project": "tpu-training", "stack": "dev"}


def test_a_project_rename_is_refused_too():
    problem = rename_problem({DEPLOYED_AS_OUTPUT: {"project": "old", "stack": "dev"}}, "tpu-training", "dev")
    assert problem is not None and "'old/dev' and is now 'tpu-training/dev'" in problem
