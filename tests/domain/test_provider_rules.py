"""The replace rules `--compare-to` uses (domain/provider_rules.py) against the providers' own
tables at the pinned versions, and a table of edits: for each resource type the stack declares and
each kind of edit, what the comparison predicts equals what the engine and the provider do.

- pulumi-kubernetes: provider/pkg/provider/diff.go at 94977969, vendored in
  tests/fixtures/pulumi-kubernetes-94977969/ and parsed here;
- pulumi-gcp (the Terraform provider bridged): each resource's top-level ForceNew fields, read from
  terraform-provider-google e03b7622a2 / -beta 049a8b9e by tests/support/harness/terraform_schema.py into
  tests/fixtures/terraform-force-new.json;
- the engine: pulumi/pulumi v3.259.0 (0ac56e876614aedf12771d73ef7e80959b8a6fd4)
  pkg/resource/deploy/step_generator.go: generateStepsFromDiff (replacement triggers, protect),
  applyReplaceOnChanges, processIgnoreChanges, continueStepsFromDiff (deleteBeforeReplace: the
  program's option overrides the provider's answer).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Callable

import pytest
from support.harness import terraform_schema
from support.harness.program import REPO, dev_config, run_stack
from tpu_training_components.domain import provider_rules
from tpu_training_components.domain.change_impact import NEXT_BOOT, ResourceChange, compare_plans

from tpu_training import plan_output

FIXTURES = REPO / "tests" / "fixtures"
DIFF_GO = (FIXTURES / "pulumi-kubernetes-94977969" / "diff.go").read_text()
FORCE_NEW = json.loads(terraform_schema.FIXTURE.read_text())

K8S_DIFF = "pulumi-kubernetes provider/pkg/provider/diff.go forceNew"
K8S_DBR = "pulumi-kubernetes provider/pkg/provider/provider.go Diff: deleteBeforeReplace for a named object"
HELM = "pulumi-kubernetes provider/pkg/provider/helm_release.go Diff: forceNewFields .name .namespace"
TRIGGER = "pulumi step_generator.go generateStepsFromDiff: a changed replacement trigger"
ROC = "pulumi step_generator.go applyReplaceOnChanges"
IGNORE = "pulumi step_generator.go processIgnoreChanges"
TF = "terraform-provider-google (e03b7622a2) ForceNew"


def camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


# pulumi-terraform-bridge names a list field with no MaxItems 1 in the plural.
BRIDGE_NAMES = {"node_pool": "nodePools", "guest_accelerator": "guestAccelerators"}


def top_level(rules: provider_rules.TypeRules) -> set[str]:
    return {p for p in (*rules.replace, *rules.replace_if_added_or_removed) if "." not in p}


# --- the rule tables against the providers' own ------------------------------------------------


@pytest.mark.parametrize("type_", sorted(t for t in provider_rules.GCP_RULES if "IAMMember" not in t))
def test_gcp_top_level_replace_fields_are_the_terraform_schemas_force_new_ones(type_):
    table = FORCE_NEW[type_]
    force_new = {BRIDGE_NAMES.get(f, camel(f)) for f in table["force_new"]}
    # Fields whose schema a function returns are not read by the extractor (node_config: below).
    elsewhere = {camel(f) for f in table["elsewhere"]}
    if type_ == "gcp:container/nodePool:NodePool":
        # The resource's own fields (project, cluster, location) come with schemaNodePool's.
        force_new |= {camel(f) for f in FORCE_NEW[f"{type_}#resource"]["force_new"]}
    assert top_level(provider_rules.GCP_RULES[type_]) - elsewhere == force_new, table["source"]


def test_node_config_replace_fields_are_schema_node_configs_force_new_ones():
    rules = provider_rules.NODE_POOL
    ours = {p.removeprefix("nodeConfig.") for p in rules.replace if p.startswith("nodeConfig.")}
    theirs = FORCE_NEW["gcp:container/nodePool:NodePool#nodeConfig"]["force_new"]
    assert ours == {BRIDGE_NAMES.get(f, camel(f)) for f in theirs}
    # node_config itself is a ForceNew block (a function returns its schema: read by hand).
    assert "nodeConfig" in rules.replace_if_added_or_removed


def test_iam_members_have_no_update_in_terraform_either():
    base = FORCE_NEW["gcp:iam/member#base"]
    assert base["updatable"] == ["etag"]  # computed only: nothing a program sets updates in place
    for type_, rules in provider_rules.GCP_RULES.items():
        if "IAMMember" in type_:
            assert rules.replace_any, type_


def _go_properties(name: str) -> set[str]:
    """A `var NAME = append(properties{...}, ...)` or `properties{...}` list of diff.go, without
    the label-selector sub-fields (under `.spec.selector`, which is in the list itself)."""
    body = re.search(
        rf"(?:var |\n\t\t\"){name}(?:\"\: | = )(?:append\(\s*)?properties\{{([^}}]*)\}}", DIFF_GO
    )
    assert body, name
    return {field.strip().strip('",').lstrip(".") for field in body.group(1).split("\n") if field.strip()}


def test_kubernetes_tables_are_diff_gos():
    metadata = {f.lstrip(".") for f in re.findall(r'prefix \+ "(\.[a-z]+)"', DIFF_GO)[:2]}
    assert {f"metadata.{f}" for f in metadata} == set(provider_rules.KUBERNETES_METADATA)
    rules = provider_rules.KUBERNETES_RULES
    assert set(rules["batch/v1/Job"].replace) == {*provider_rules.KUBERNETES_METADATA, *_go_properties("job")}
    assert set(rules["v1/Service"].replace) == {
        *provider_rules.KUBERNETES_METADATA,
        *_go_properties("Service"),
    }
    assert set(rules["v1/Secret"].replace) == {*provider_rules.KUBERNETES_METADATA, *_go_properties("Secret")}
    # ConfigMap data is force-new only without enableConfigMapMutable (or when immutable).
    assert "clients.IsConfigMap(obj) && (!k.enableConfigMapMutable || clients.IsImmutable(obj))" in DIFF_GO
    assert set(rules["v1/ConfigMap"].replace) == set(provider_rules.KUBERNETES_METADATA)
    # A custom resource's group is in no table: metadata only.
    assert '"jobset.x-k8s.io"' not in DIFF_GO and '"kueue.x-k8s.io"' not in DIFF_GO
    assert set(rules["jobset.x-k8s.io/v1alpha2/JobSet"].replace) == set(provider_rules.KUBERNETES_METADATA)


def test_the_extractor_reads_a_schema_as_terraform_declares_it():
    source = """
func ResourceX() *schema.Resource {
	return &schema.Resource{
		Identity: &schema.ResourceIdentity{SchemaFunc: func() map[string]*schema.Schema {
			return map[string]*schema.Schema{"id_only": {Type: schema.TypeString}}
		}},
		Schema: map[string]*schema.Schema{
			"name": {
				Type:     schema.TypeString,
				ForceNew: true,
				Description: `a "quoted" {brace}`,
			},
			"block": {
				Type: schema.TypeList,
				Elem: &schema.Resource{Schema: map[string]*schema.Schema{"inner": {ForceNew: true}}},
			},
			"shared": schemaShared(),
		},
	}
}"""
    fields = terraform_schema.force_new(source, "func ResourceX(")
    assert fields == terraform_schema.Fields(["name"], ["block"], ["shared"])


# --- the table: each type the stack declares, each kind of edit --------------------------------


def _multislice() -> dict[str, Any]:
    config = copy.deepcopy(dev_config())
    config["tpu-training:nodePools"][0]["slices"] = 2
    config["tpu-training:jobs"][0]["slices"] = 2
    return config


def _queued() -> dict[str, Any]:
    config = copy.deepcopy(dev_config())
    config["tpu-training:nodePools"][0]["provisioning"] = "flex-start-queued"
    config["tpu-training:jobs"][0]["namespace"] = "ml"  # a namespace the stack declares
    return config


@pytest.fixture(scope="module")
def plans() -> dict[str, dict[str, Any]]:
    return {
        "dev": plan_output.plan_document(run_stack(dev_config())),
        "multislice": plan_output.plan_document(run_stack(_multislice())),
        "queued": plan_output.plan_document(run_stack(_queued())),
    }


Edit = Callable[[dict[str, Any]], None]


def at(path: str, value: Any) -> Edit:
    """Set ``inputs.PATH`` (dots; ``[n]`` for a list item), or with ``options.`` an option."""

    def edit(resource: dict[str, Any]) -> None:
        parts = re.findall(r"[^.\[\]]+|\[\d+\]", path)
        target = resource["options"] if parts[0] == "options" else resource["inputs"]
        parts = parts[1:] if parts[0] == "options" else parts
        for part in parts[:-1]:
            target = target[int(part[1:-1])] if part.startswith("[") else target.setdefault(part, {})
        last = parts[-1]
        if value is DELETE:
            del target[last]
        else:
            target[last] = value

    return edit


DELETE = object()
POD = "spec.template.spec.containers[0]"
JOBSET_POD = "spec.replicatedJobs[0].template.spec.template.spec.containers[0]"

VM, POOL, CLUSTER = "gcp:tpu/v2Vm:V2Vm", "gcp:container/nodePool:NodePool", "gcp:container/cluster:Cluster"
BUCKET, OBJECT = "gcp:storage/bucket:Bucket", "gcp:storage/bucketObject:BucketObject"
JOB, JOBSET = "kubernetes:batch/v1:Job", "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"

# (plan, type, name or None for the first of its type) -> [(edit, what it is, expected action,
# expected delete-first, source)]. The VM and the Job have deleteBeforeReplace from their
# components (fixed names): the old one goes first.
TABLE: dict[tuple[str, str, Any], list[tuple[Edit, str, str, Any, str]]] = {
    ("dev", VM, "demo-tpu-vm"): [
        (at("labels.team", "x"), "labels", "update", None, TF),
        (at("metadata.startup-script", "x"), "metadata", "update", None, TF),
        (at("runtimeVersion", "v2-alpha"), "ForceNew", "replace", True, TF),
        (at("options.replacementTrigger", 7), "trigger", "replace", True, TRIGGER),
    ],
    ("dev", POOL, "v6e-4x4-pool"): [
        (at("nodeConfig.resourceLabels.team", "x"), "labels", "update", None, TF),
        (at("autoscaling.maxNodeCount", 8), "autoscaling", "update", None, TF),
        (at("nodeConfig.maxRunDuration", "3600s"), "ForceNew", "replace", None, TF),
        (at("placementPolicy", DELETE), "ForceNew block", "replace", None, TF),
    ],
    ("dev", CLUSTER, "tpu-dev-cluster"): [
        (at("nodeConfig.machineType", "e2-standard-8"), "ignored", "same", None, IGNORE),
        (at("resourceLabels.team", "x"), "labels", "update", None, TF),
        (at("network", "other"), "ForceNew", "replace", None, TF),
    ],
    ("dev", BUCKET, "checkpoints-us-east5-bucket"): [
        (at("labels.team", "x"), "labels", "update", None, TF),
        (at("location", "EU"), "ForceNew", "replace", None, TF),
    ],
    ("dev", "gcp:projects/service:Service", "apis-compute"): [
        (at("disableOnDestroy", True), "updatable", "update", None, TF),
        (at("service", "tpu.googleapis.com"), "ForceNew", "replace", None, TF),
    ],
    ("dev", OBJECT, "checkpoints-us-east5-code-train.py"): [
        (at("name", "code/x.py"), "ForceNew", "replace", None, TF),
    ],
    ("dev", "gcp:storage/bucketIAMMember:BucketIAMMember", "trainer-us-east5-objects"): [
        (at("role", "roles/storage.admin"), "any", "replace", None, TF),
    ],
    ("dev", "gcp:projects/iAMMember:IAMMember", "tpu-dev-nodes-image-reader"): [
        (at("role", "roles/viewer"), "any", "replace", None, TF),
    ],
    ("dev", "gcp:serviceaccount/iAMMember:IAMMember", "train-v6e-workload-identity"): [
        (at("member", "x"), "any", "replace", None, TF),
    ],
    ("dev", "gcp:serviceaccount/account:Account", "trainer-account"): [
        (at("displayName", "x"), "in place", "update", None, TF),
        (at("accountId", "other-trainer"), "ForceNew", "replace", None, TF),
    ],
    ("dev", "gcp:compute/network:Network", "network-vpc"): [
        (at("description", "x"), "ForceNew", "replace", None, TF),
    ],
    ("dev", "gcp:compute/subnetwork:Subnetwork", "network-subnet-us-east5"): [
        (at("ipCidrRange", "10.9.0.0/20"), "in place", "update", None, TF),
        (at("region", "us-west1"), "ForceNew", "replace", None, TF),
    ],
    ("dev", "gcp:compute/firewall:Firewall", "network-internal"): [
        (at("sourceRanges", ["10.0.0.0/8"]), "in place", "update", None, TF),
        (at("direction", "EGRESS"), "ForceNew", "replace", None, TF),
    ],
    ("dev", "gcp:compute/router:Router", "network-router-us-east5"): [
        (at("description", "x"), "in place", "update", None, TF),
        (at("network", "other"), "ForceNew", "replace", None, TF),
    ],
    ("dev", "gcp:compute/routerNat:RouterNat", "network-nat-us-east5"): [
        (at("natIpAllocateOption", "MANUAL_ONLY"), "in place", "update", None, TF),
        (at("router", "other"), "ForceNew", "replace", None, TF),
    ],
    ("dev", "gcp:logging/metric:Metric", "monitoring-metric-steps"): [
        (at("filter", 'textPayload=~"x"'), "in place", "update", None, TF),
        (at("project", "other"), "ForceNew", "replace", None, TF),
    ],
    ("dev", "gcp:monitoring/dashboard:Dashboard", "monitoring-dashboard"): [
        (at("dashboardJson", "{}"), "in place", "update", None, TF),
        (at("project", "other"), "ForceNew", "replace", None, TF),
    ],
    ("dev", "gcp:monitoring/alertPolicy:AlertPolicy", "monitoring-alert-a-run-hung"): [
        (at("displayName", "x"), "in place", "update", None, TF),
        (at("project", "other"), "ForceNew", "replace", None, TF),
    ],
    ("dev", JOB, "train-v6e-job"): [
        (at(f"{POD}.image", "trainer:2"), "Pod template", "replace", True, f"{K8S_DIFF}; {K8S_DBR}"),
        (at("metadata.labels.team", "x"), "labels", "update", None, K8S_DIFF),
        (at("spec.backoffLimit", 3), "in place", "update", None, K8S_DIFF),
        (at("options.replacementTrigger", 9), "trigger", "replace", True, TRIGGER),
    ],
    ("dev", "kubernetes:core/v1:ConfigMap", "train-v6e-run-parameters"): [
        (at("data.LEARNING_RATE", "0.5"), "data, mutable", "update", None, K8S_DIFF),
        (at("metadata.name", "x"), "name", "replace", True, K8S_DIFF),
    ],
    ("dev", "kubernetes:core/v1:Service", "train-v6e-hosts"): [
        (at("spec.selector.job-name", "x"), "selector", "update", None, K8S_DIFF),
        (at("spec.clusterIP", "10.0.0.9"), "clusterIP", "replace", True, K8S_DIFF),
    ],
    ("dev", "kubernetes:core/v1:ServiceAccount", "train-v6e-ksa"): [
        (at("metadata.annotations.x", "y"), "annotations", "update", None, K8S_DIFF),
    ],
    ("multislice", JOBSET, "train-v6e-jobset"): [
        (at(f"{JOBSET_POD}.image", "trainer:2"), "spec", "replace", True, ROC),
        (at("spec.replicatedJobs[0].replicas", 1), "slices", "replace", True, ROC),
        (at("spec.failurePolicy.maxRestarts", 9), "maxRestarts", "replace", True, ROC),
        (at("metadata.labels.team", "x"), "labels", "update", None, K8S_DIFF),
        (at("options.replacementTrigger", 9), "trigger", "replace", True, TRIGGER),
    ],
    ("multislice", "kubernetes:helm.sh/v3:Release", "engines-jobset"): [
        (at("version", "0.12.1"), "chart version", "update", None, HELM),
        (at("namespace", "other"), "namespace", "replace", False, HELM),
    ],
    ("queued", "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue", "v6e-4x4-queue-cluster-queue"): [
        (at("spec.queueingStrategy", "StrictFIFO"), "spec", "update", None, K8S_DIFF),
    ],
    ("queued", "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue", "v6e-4x4-queue-queue-ml"): [
        (at("metadata.name", "x"), "name", "replace", True, K8S_DIFF),
    ],
    ("queued", "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor", None): [
        (at("spec.nodeLabels.x", "y"), "spec", "update", None, K8S_DIFF),
    ],
    ("queued", "kubernetes:kueue.x-k8s.io/v1beta2:AdmissionCheck", None): [
        (at("spec.controllerName", "x"), "spec", "update", None, K8S_DIFF),
    ],
    ("queued", "kubernetes:kueue.x-k8s.io/v1beta2:ProvisioningRequestConfig", None): [
        (at("metadata.namespace", "x"), "namespace", "replace", True, K8S_DIFF),
    ],
    ("queued", "kubernetes:core/v1:Namespace", None): [
        (at("metadata.labels.team", "x"), "labels", "update", None, K8S_DIFF),
    ],
}
ROWS = [(*where, *row) for where, rows in TABLE.items() for row in rows]


def _predict(plans: dict[str, dict[str, Any]], row: tuple[Any, ...]) -> ResourceChange:
    which, type_, name, edit = row[:4]
    base = plans[which]
    matches = [r for r in base["resources"] if r["type"] == type_ and (name is None or r["name"] == name)]
    assert matches, (type_, name)
    new = copy.deepcopy(base)
    resource = next(r for r in new["resources"] if r["urn"] == matches[0]["urn"])
    edit(resource)
    changes = {c.urn: c for c in compare_plans(base["resources"], new["resources"])}
    return changes[resource["urn"]]


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[1].split(':')[-1]}-{r[4]}" for r in ROWS])
def test_each_edit_of_each_type_is_predicted_as_the_engine_and_provider_do(plans, row):
    *_, what, action, delete_first, source = row
    change = _predict(plans, row)
    assert (change.action, change.delete_first) == (action, delete_first), (what, source, change)


def test_the_table_covers_every_type_the_stacks_declare(plans):
    declared = {r["type"] for p in plans.values() for r in p["resources"] if r["custom"]}
    covered = {row[1] for row in ROWS}
    # The provider's own replacement is its own test (test_change_impact, DiffConfig).
    assert declared - covered == {"pulumi:providers:kubernetes"}


def test_a_metadata_edit_of_a_tpu_vm_waits_for_its_next_boot(plans):
    change = _predict(plans, ROWS[1])
    assert change.effects == (NEXT_BOOT,)


def test_a_protected_bucket_is_never_replaced_the_update_fails(plans):
    change = _predict(
        plans, ("dev", "gcp:storage/bucket:Bucket", "checkpoints-us-east5-bucket", at("location", "EU"))
    )
    assert change.action == "replace" and "protected" in change.blocked
