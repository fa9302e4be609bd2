"""Every everyday edit of a running stack, planned before and after: the comparison says what
`pulumi up` replaces (naming it, and that training restarts from its checkpoint) and what it
updates in place, and for a TPU VM's metadata, that it waits for the next boot unless the VM's
restartGeneration is bumped. Plus the rules themselves, one mutation each."""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

import pytest
from support.harness.program import dev_config, run_stack
from tpu_training_components.domain import change_impact
from tpu_training_components.domain.change_impact import (
    NEXT_BOOT,
    TRAINING_RESTARTS,
    ResourceChange,
    classify,
)

from tpu_training import plan_compare, plan_output

VM, JOB, POOL = "demo-tpu-vm", "train-v6e-job", "v6e-4x4-pool"
RUN_PARAMETERS = "train-v6e-run-parameters"
Edit = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    """The dev stack's plan as deployed: the known-good baseline every edit is compared with."""
    return plan_output.plan_document(run_stack(dev_config()))


def after(base: dict[str, Any], edit: Edit) -> tuple[dict[str, ResourceChange], str]:
    config = copy.deepcopy(dev_config())
    edit(config)
    document = plan_output.plan_document(run_stack(config))
    changes = plan_compare.compare(base, document)
    return {c.name: c for c in changes if c.action != "same"}, plan_compare.render(
        "base.json", changes, document
    )


def vm(**values: Any) -> Edit:
    return lambda config: config["tpu-training:tpuVms"][0].update(values)


def job(**values: Any) -> Edit:
    return lambda config: config["tpu-training:jobs"][0].update(values)


def pool(**values: Any) -> Edit:
    return lambda config: config["tpu-training:nodePools"][0].update(values)


def config_key(key: str, **values: Any) -> Edit:
    return lambda config: config.setdefault(f"tpu-training:{key}", {}).update(values)


def test_an_unchanged_stack_changes_nothing(base):
    changed, text = after(base, lambda config: None)
    assert changed == {}
    assert "0 to create, 0 to update in place, 0 to replace, 0 to delete" in text


@pytest.mark.parametrize(
    ("edit", "replaced", "cause"),
    [
        (job(image="us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:v2"), {JOB}, "containers[0].image"),
        (job(command=["python3", "/tmp/other.py"]), {JOB}, "containers[0].command"),
        (vm(runtimeVersion="tpu-vm-tf-2.17.0-pjrt"), {VM}, "runtimeVersion changed"),
        (vm(acceleratorType="v3-32"), {VM}, "acceleratorType changed"),
        (vm(provisioning="spot"), {VM}, "schedulingConfig"),
        # The pool's nodes live at most this long: ForceNew; the Jobs' checkpoint interval follows.
        # The Jobs' checkpoint interval follows, in their run-parameters ConfigMap (in place).
        (pool(maxRunDuration="72h"), {POOL}, "nodeConfig.maxRunDuration changed"),
        (vm(restartGeneration=1), {VM}, 'replacement trigger 0 -> "recovery 0, restart 1"'),
    ],
    ids=[
        "image",
        "command",
        "runtimeVersion",
        "acceleratorType",
        "provisioning",
        "maxRunDuration",
        "restart",
    ],
)
def test_edits_that_replace_are_announced_with_the_training_restart(base, edit, replaced, cause):
    changed, text = after(base, edit)

    assert {name for name, c in changed.items() if c.action == "replace"} == replaced
    for name in replaced:
        assert changed[name].restarts_training
        assert f"{name}: replaced — " in text
    assert any(cause in reason for c in changed.values() for reason in c.because)
    assert TRAINING_RESTARTS in text
    assert (
        f"training restarts from its checkpoint on: {', '.join(sorted(replaced, key=list(changed).index))}"
        in text
    )


@pytest.mark.parametrize(
    "edit",
    [
        vm(trainCommand="python3 /opt/train.py --resume"),
        vm(setupCommand="pip install -r /opt/requirements.txt"),
        vm(env={"EXTRA": "1"}),
    ],
    ids=["trainCommand", "setupCommand", "env"],
)
def test_tpu_vm_metadata_edits_wait_for_the_next_boot_and_name_the_restart_knob(base, edit):
    changed, text = after(base, edit)

    assert set(changed) == {VM}
    assert changed[VM].action == "update"
    assert changed[VM].changed == ("metadata.startup-script",)
    assert NEXT_BOOT in changed[VM].effects
    assert "takes effect at the node's next boot" in text
    assert "bump restartGeneration of the tpuVms entry 'demo-tpu'" in text
    assert "tpu-training:tpuVms[].restartGeneration" in text
    assert "REPLACE" not in text


def test_a_scale_value_patches_the_vm_and_the_jobs_run_parameters_in_place(base):
    # A VM's environment lives in its startup script (next boot); a Job's in its run-parameters
    # ConfigMap, which the Kubernetes provider updates in place (enableConfigMapMutable).
    changed, text = after(base, config_key("training", perCoreBatchSize=64))

    assert changed[VM].action == "update" and NEXT_BOOT in changed[VM].effects
    assert changed[RUN_PARAMETERS].action == "update"
    assert JOB not in changed
    assert {c.action for c in changed.values()} == {"update"}
    assert "bump restartGeneration of the tpuVms entry 'demo-tpu'" in text


def test_a_jobs_env_updates_its_run_parameters_in_place(base):
    changed, text = after(base, job(env={"EXTRA": "1"}))
    assert set(changed) == {RUN_PARAMETERS} and changed[RUN_PARAMETERS].action == "update"
    assert "REPLACE" not in text


def test_labels_update_everything_in_place(base):
    changed, text = after(base, lambda config: config["tpu-training:labels"].update(team="research"))

    assert changed, "labels reach the VM, the buckets, the cluster and the pools"
    assert {c.action for c in changed.values()} == {"update"}
    assert {c.type for c in changed.values()} >= {
        "gcp:tpu/v2Vm:V2Vm",
        "gcp:storage/bucket:Bucket",
        "gcp:container/cluster:Cluster",
        "gcp:container/nodePool:NodePool",
    }
    # A label is not metadata: nothing waits for a boot.
    assert NEXT_BOOT not in changed[VM].effects
    assert "REPLACE" not in text and "restarts" not in text


def test_a_bucket_lifecycle_edit_is_in_place(base):
    changed, _ = after(base, config_key("bucket", noncurrentVersionRetentionDays=14))

    assert {c.type for c in changed.values()} == {"gcp:storage/bucket:Bucket"}
    assert {c.action for c in changed.values()} == {"update"}
    assert all(
        c.changed == ("lifecycleRules[0].condition.daysSinceNoncurrentTime",) for c in changed.values()
    )


def test_restart_generation_replaces_only_its_vm_and_a_deployed_vm_keeps_its_trigger(base):
    # 0 (or absent) keeps the trigger VMs were deployed with: upgrading never replaces them.
    unchanged, _ = after(base, vm(restartGeneration=0))
    assert unchanged == {}
    restarted, text = after(base, vm(restartGeneration=3))
    assert set(restarted) == {VM} and restarted[VM].action == "replace"
    assert f"{VM}: replaced — {TRAINING_RESTARTS}" in text


def test_a_metadata_edit_together_with_a_restart_is_a_replacement_not_a_next_boot(base):
    changed, text = after(base, vm(trainCommand="python3 /opt/train.py --resume", restartGeneration=1))
    assert changed[VM].action == "replace" and changed[VM].effects == ()
    assert "next boot" not in text


def test_json_holds_the_classification(base):
    config = copy.deepcopy(dev_config())
    job(image="us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:v2")(config)
    changes = plan_compare.compare(base, plan_output.plan_document(run_stack(config)))
    document = json.loads(json.dumps(plan_compare.to_json("base.json", changes)))

    assert document["summary"]["replace"] == 1
    assert document["restartsTraining"] == [JOB]
    [entry] = document["resources"]
    assert entry["action"] == "replace" and entry["name"] == JOB and entry["restartsTraining"] is True


# --- The rules, one mutation each ------------------------------------------------------------


def resource(inputs: dict[str, Any], trigger: Any = None) -> dict[str, Any]:
    return {"inputs": inputs, "options": {"replacementTrigger": trigger}}


def action(type_: str, old: dict[str, Any], new: dict[str, Any], **context: Any) -> str:
    return classify("urn", type_, "r", old, new, context=context).action


def _trainer_objects(document: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [
        r
        for r in document["resources"]
        if r["type"] == "gcp:storage/bucketObject:BucketObject" and r["inputs"]["name"] == name
    ]


def test_an_edit_of_the_trainers_code_replaces_its_uploads_and_nothing_else(base):
    """The plan holds each uploaded file's SHA-256 (the engine compares an asset by it): a deployed
    stack whose trainer/model.py had other contents gets that file's objects replaced, one per
    bucket, and no VM, Job or pool is touched; the VMs and Pods take the new code when they next
    start. Before the hash, the plan compared the path alone and said nothing would change."""
    deployed = copy.deepcopy(base)
    objects = _trainer_objects(deployed, "code/model.py")
    assert len(objects) == 2 and all(len(o["inputs"]["source"]["sha256"]) == 64 for o in objects)
    for each in objects:
        each["inputs"]["source"]["sha256"] = "0" * 64  # what the stack uploaded before the edit
    changes = {c.name: c for c in plan_compare.compare(deployed, base) if c.action != "same"}
    assert sorted(changes) == [
        "checkpoints-europe-west4-code-model.py",
        "checkpoints-us-east5-code-model.py",
    ]
    assert {(c.action, c.changed, c.restarts_training) for c in changes.values()} == {
        ("replace", ("source.sha256",), False)
    }


def test_a_base_plan_without_file_hashes_compares_uploads_by_path():
    old = {"inputs": {"source": {"fileAsset": "trainer/model.py"}}}
    new = {"inputs": {"source": {"fileAsset": "trainer/model.py", "sha256": "a" * 64}}}
    moved = {"inputs": {"source": {"fileAsset": "trainer/other.py", "sha256": "a" * 64}}}
    assert change_impact.changed_paths(old["inputs"], new["inputs"]) == []
    assert change_impact.changed_paths(old["inputs"], moved["inputs"]) == ["source.fileAsset"]


def test_a_trigger_that_appears_does_not_replace_but_one_that_changes_does():
    vm_type = "gcp:tpu/v2Vm:V2Vm"
    assert action(vm_type, resource({}, None), resource({}, 0)) == "same"
    assert action(vm_type, resource({}, 0), resource({}, 1)) == "replace"
    assert action(vm_type, resource({}, 1), resource({}, 1.0)) == "same"


def test_node_pool_blocks_replace_when_added_not_when_an_in_place_field_inside_changes():
    pool_type = "gcp:container/nodePool:NodePool"
    labels = {"nodeConfig": {"resourceLabels": {"a": "1"}}}
    assert (
        action(pool_type, resource(labels), resource({"nodeConfig": {"resourceLabels": {"a": "2"}}}))
        == "update"
    )
    assert action(pool_type, resource({}), resource({"placementPolicy": {"type": "COMPACT"}})) == "replace"
    assert (
        action(pool_type, resource(labels), resource({**labels, "nodeConfig": {"spot": True}})) == "replace"
    )
    topology = classify(
        "urn",
        pool_type,
        "p",
        resource({"placementPolicy": {"type": "COMPACT", "tpuTopology": "4x4"}}),
        resource({"placementPolicy": {"type": "COMPACT", "tpuTopology": "4x8"}}),
    )
    assert topology.action == "update" and any(
        "does not change an existing pool" in n for n in topology.notes
    )


def test_iam_members_have_no_update():
    iam = "gcp:storage/bucketIAMMember:BucketIAMMember"
    assert action(iam, resource({"role": "roles/a"}), resource({"role": "roles/b"})) == "replace"


def test_a_bucket_replaces_only_on_name_location_project_or_a_locked_retention():
    bucket = "gcp:storage/bucket:Bucket"
    assert (
        action(bucket, resource({"location": "US-EAST5"}), resource({"location": "EUROPE-WEST4"}))
        == "replace"
    )
    assert (
        action(bucket, resource({"versioning": {"enabled": True}}), resource({"versioning": {}})) == "update"
    )
    locked = resource({"retentionPolicy": {"isLocked": True, "retentionPeriod": "1"}})
    assert action(bucket, resource({"retentionPolicy": {"retentionPeriod": "1"}}), locked) == "replace"


def kube(kind: str, api: str = "v1", **body: Any) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "x", "namespace": "default"}, **body}


def test_kubernetes_objects_replace_on_a_new_name_or_namespace_and_by_kind():
    service = "kubernetes:core/v1:Service"
    renamed = kube("Service", spec={})
    renamed["metadata"] = {"name": "y", "namespace": "default"}
    assert action(service, resource(kube("Service", spec={})), resource(renamed)) == "replace"
    assert action(
        service, resource(kube("Service", spec={"clusterIP": "None"})), resource(kube("Service", spec={}))
    ) == ("replace")
    relabelled = kube("Service", spec={})
    relabelled["metadata"] = dict(relabelled["metadata"], labels={"a": "b"})
    assert action(service, resource(kube("Service", spec={})), resource(relabelled)) == "update"
    job_type = "kubernetes:batch/v1:Job"
    assert (
        action(
            job_type,
            resource(kube("Job", "batch/v1", spec={"backoffLimit": 0})),
            resource(kube("Job", "batch/v1", spec={"backoffLimit": 1})),
        )
        == "update"
    )


def test_config_map_data_replaces_unless_every_kubernetes_provider_makes_it_mutable():
    config_map = "kubernetes:core/v1:ConfigMap"
    old, new = resource(kube("ConfigMap", data={"A": "1"})), resource(kube("ConfigMap", data={"A": "2"}))
    assert action(config_map, old, new) == "replace"
    assert action(config_map, old, new, configMapMutable=True) == "update"
    immutable = resource(kube("ConfigMap", data={"A": "2"}, immutable=True))
    assert action(config_map, old, immutable, configMapMutable=True) == "replace"
    # Whatever happens to the map, running Pods keep what they read when they started.
    change = classify("u", config_map, "c", old, new)
    assert "keep the values they read" in change.replaced_means and not change.restarts_training


def kubeconfig(server: str) -> str:
    return json.dumps(
        {
            "current-context": "c",
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            "clusters": [{"name": "k", "cluster": {"server": server, "certificate-authority-data": "Q0E="}}],
        }
    )


def provider(server: str, **more: Any) -> dict[str, Any]:
    return {
        "urn": "urn:provider",
        "type": change_impact.KUBERNETES_PROVIDER,
        "name": "k8s",
        "custom": True,
        "inputs": {"kubeconfig": kubeconfig(server), **more},
        "options": {},
    }


def test_a_provider_on_another_cluster_replaces_every_kubernetes_object_with_it():
    job_object = {
        "urn": "urn:job",
        "type": "kubernetes:batch/v1:Job",
        "name": "j",
        "inputs": kube("Job", "batch/v1"),
        "options": {},
    }
    moved = {
        c.name: c
        for c in change_impact.compare_plans(
            [provider("https://a"), job_object], [provider("https://b"), job_object]
        )
    }
    assert moved["k8s"].action == "replace" and moved["j"].action == "replace"
    assert any("provider is replaced" in reason for reason in moved["j"].because)

    # The same active cluster, other text (a new user entry): the provider updates in place.
    reordered = provider("https://a")
    reordered["inputs"]["kubeconfig"] = json.dumps(json.loads(kubeconfig("https://a")), indent=1)
    same = {
        c.name: c
        for c in change_impact.compare_plans([provider("https://a"), job_object], [reordered, job_object])
    }
    assert same["k8s"].action == "update" and same["j"].action == "same"

    # An unchanged clusterIdentifier: DiffConfig replaces nothing.
    pinned = {
        c.name: c
        for c in change_impact.compare_plans(
            [provider("https://a", clusterIdentifier="tpu-dev"), job_object],
            [provider("https://b", clusterIdentifier="tpu-dev"), job_object],
        )
    }
    assert pinned["k8s"].action == "update" and pinned["j"].action == "same"


def test_a_new_parent_is_a_delete_and_a_create_and_says_why():
    old = {"urn": "urn:a::V2Vm::vm", "type": "gcp:tpu/v2Vm:V2Vm", "name": "vm", "inputs": {}, "options": {}}
    new = dict(old, urn="urn:b::V2Vm::vm")
    changes = change_impact.compare_plans([old], [new])
    assert [c.action for c in changes] == ["create", "delete"]
    assert all("without `aliases`" in c.notes[0] for c in changes)


def test_a_type_without_rules_is_an_update_that_points_to_pulumi_preview():
    change = classify("u", "gcp:dns/recordSet:RecordSet", "r", resource({"ttl": 1}), resource({"ttl": 2}))
    assert change.action == "update" and "pulumi preview" in change.notes[0]


def test_changed_paths_go_item_by_item_and_treat_one_and_one_point_zero_alike():
    assert change_impact.changed_paths({"a": [1, {"b": 2}]}, {"a": [1.0, {"b": 3}]}) == ["a[1].b"]
    assert change_impact.changed_paths({"a": [1]}, {"a": [1, 2]}) == ["a"]
    assert change_impact.changed_paths({"a": True}, {"a": 1}) == ["a"]


def test_moving_a_pools_zone_is_an_update_that_says_its_slice_goes(base):
    # node_locations is not ForceNew (Terraform provider), but a zone taken away takes its nodes.
    changed, text = after(base, pool(nodeLocations=["us-east5-b"]))
    assert changed[POOL].action == "update"
    assert any("nodes in a zone taken away are deleted" in note for note in changed[POOL].notes)
