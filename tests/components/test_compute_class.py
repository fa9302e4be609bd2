"""A capacity ladder on a GKE pool (`nodePools[].provisioning: [spot, flex-start]`): one custom
ComputeClass per pool whose priorities follow the ladder, one set of node pools per rung joined to
it, and Jobs that select it; what editing a ladder does to a running stack (--compare-to).

Facts recorded here, read 2026-11-28:

- GKE "About custom ComputeClasses"
  (https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes): custom
  ComputeClasses exist "in version 1.30.3-gke.1451000 and later"; Pods select one with the node
  selector ``cloud.google.com/compute-class``.
- GKE "Control autoscaled node attributes with custom ComputeClasses"
  (https://cloud.google.com/kubernetes-engine/docs/how-to/node-attributes-compute-classes),
  Limitations: "The name of a ComputeClass can't start with gke or autopilot".
- The ComputeClass CRD reference (https://cloud.google.com/kubernetes-engine/docs/reference/crds/
  computeclass) and the CRD's OpenAPI schema as GKE 1.33 serves it, in datreeio/CRDs-catalog
  ``cloud.google.com/computeclass_v1.json`` at 7b1e26ef9deea49293714d204c1a2270aab1178f (last
  changed by commit 77e49833da1a723ff2f1ec34251c5eafc8c75daa, 2026-08-02). That file is not
  committed here (material fetched for reading stays out of this repository): ``CRD_SUBSET``
  below transcribes, by hand, the part of it our manifest uses, with its CEL rules as
  predicates. Our manifests were also validated against the whole file once (24 ladders, every
  pair of rungs, single- and multi-host: no error), which this suite cannot repeat.
"""

from __future__ import annotations

import copy
import itertools
import re
from typing import Any, Callable

import jsonschema
import pytest
from support.harness.program import REPO, dev_config, multislice, refused, run_components, run_stack
from tpu_training_components.domain import compute_class
from tpu_training_components.domain.compute_class import (
    COMPUTE_CLASS_MIN_GKE_VERSION,
    compute_class_manifest,
)
from tpu_training_components.domain.gke_cluster_plan import gke_version_problem
from tpu_training_components.domain.kueue_manifests import queued_provisioning_spec, resource_flavor_manifest
from tpu_training_components.domain.node_pool_plan import (
    COMPUTE_CLASS_LABEL,
    FLEX_START_MIN_GKE_VERSION,
    LADDER_RUNGS,
    POOL_NODE_LABEL,
    NodePoolError,
    plan_tpu_node_pool,
)

from tpu_training import plan_compare, plan_output

POOLS = "tpu-training:nodePools"
JOBS = "tpu-training:jobs"
NODE_POOL = "gcp:container/nodePool:NodePool"
COMPUTE_CLASS = "kubernetes:cloud.google.com/v1:ComputeClass"
JOB = "kubernetes:batch/v1:Job"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"

# --- The CRD, as far as our manifest goes ---------------------------------------------------------

_TPU = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "topology": {"type": "string"},
        "type": {"type": "string"},
    },
    "additionalProperties": False,
}
_RESERVATIONS = {
    "type": "object",
    "required": ["affinity"],
    "properties": {
        "affinity": {"enum": ["Specific", "AnyBestEffort", "None"], "type": "string"},
        "specific": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string"},
                    "project": {"type": "string"},
                    "zones": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                },
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
}
_PRIORITY = {
    "type": "object",
    "minProperties": 1,
    "properties": {
        "tpu": _TPU,
        "spot": {"type": "boolean"},
        "flexStart": {
            "type": "object",
            "required": ["enabled"],
            "properties": {"enabled": {"type": "boolean"}},
            "additionalProperties": False,
        },
        "reservations": _RESERVATIONS,
        "location": {
            "type": "object",
            "properties": {"zones": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
            "additionalProperties": False,
        },
        "maxRunDurationSeconds": {"type": "integer"},
        "nodepools": {"type": "array", "items": {"type": "string"}},
    },
    "additionalProperties": False,
}
CRD_SUBSET = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "cloud.google.com/v1"},
        "kind": {"const": "ComputeClass"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["whenUnsatisfiable"],
            "properties": {
                "priorities": {"type": "array", "items": _PRIORITY, "maxItems": 1000},
                "whenUnsatisfiable": {"enum": ["ScaleUpAnyway", "DoNotScaleUp"], "type": "string"},
                "nodePoolAutoCreation": {
                    "type": "object",
                    "required": ["enabled"],
                    "properties": {"enabled": {"type": "boolean"}},
                    "additionalProperties": False,
                },
                "activeMigration": {
                    "type": "object",
                    "required": ["optimizeRulePriority"],
                    "properties": {
                        "optimizeRulePriority": {"type": "boolean"},
                        "ensureAllDaemonSetPodsRunning": {"type": "boolean"},
                    },
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}

# The CRD's x-kubernetes-validations on a priority rule and its reservations, as Python.
CEL_RULES: dict[str, Callable[[dict[str, Any]], bool]] = {
    "Nodepool field cannot be set along with other fields": lambda rule: (
        "nodepools" not in rule or len(rule) == 1
    ),
    "Flex Start provisioning model is incompatible with Spot": lambda rule: (
        not (rule.get("spot") is True and rule.get("flexStart", {}).get("enabled") is True)
    ),
    "Unable to set specific reservations for non specific affinity": lambda rule: (
        not rule.get("reservations", {}).get("specific") or rule["reservations"]["affinity"] == "Specific"
    ),
    "At least 1 specific reservation required for specific affinity": lambda rule: (
        rule.get("reservations", {}).get("affinity") != "Specific"
        or bool(rule["reservations"].get("specific"))
    ),
}


def crd_errors(manifest: dict[str, Any]) -> list[str]:
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft7Validator(CRD_SUBSET).iter_errors(manifest)
    ]
    for index, rule in enumerate(manifest.get("spec", {}).get("priorities", [])):
        errors.extend(
            f"spec/priorities/{index}: {message}" for message, holds in CEL_RULES.items() if not holds(rule)
        )
    return sorted(errors)


def ladder_plan(ladder: tuple[str, ...] = ("spot", "flex-start"), **pool: Any):
    values: dict[str, Any] = {
        "name": "v6e",
        "machine_type": "ct6e-standard-4t",
        "topology": "4x4",
        "node_locations": ["us-east5-a"],
        "cluster_region": "us-east5",
        "flex_start": False,
        "reservation": "res-1" if "reserved" in ladder else None,
        "ladder": ladder,
        **pool,
    }
    return plan_tpu_node_pool(**values)


# --- The ComputeClass ---------------------------------------------------------------------------


def test_the_recorded_versions_hold_for_every_stack():
    # A stack's cluster is held to flex-start's version, which is past the ComputeClass's.
    assert gke_version_problem(FLEX_START_MIN_GKE_VERSION, COMPUTE_CLASS_MIN_GKE_VERSION, "x") is None
    assert gke_version_problem("1.30.2", COMPUTE_CLASS_MIN_GKE_VERSION, "custom ComputeClasses")


def test_the_priorities_follow_the_ladder_with_the_pools_tpu_and_zones():
    manifest = compute_class_manifest(ladder_plan(("spot", "flex-start"), max_run_duration="72h"))
    assert manifest["metadata"]["name"] == "v6e"
    assert "namespace" not in manifest["metadata"]  # cluster-scoped
    first, second = manifest["spec"]["priorities"]
    tpu = {"type": "tpu-v6e-slice", "count": 4, "topology": "4x4"}  # count: chips per node (VM)
    assert first == {
        "tpu": tpu,
        "location": {"zones": ["us-east5-a"]},
        "spot": True,
        "reservations": {"affinity": "None"},
        "maxRunDurationSeconds": 72 * 3600,
    }
    assert second["flexStart"] == {"enabled": True} and second["spot"] is False and second["tpu"] == tpu
    assert manifest["spec"]["whenUnsatisfiable"] == "DoNotScaleUp"
    assert manifest["spec"]["nodePoolAutoCreation"] == {"enabled": False}
    assert manifest["spec"]["activeMigration"] == {"optimizeRulePriority": False}


@pytest.mark.parametrize(
    "ladder",
    [ladder for size in (2, 4) for ladder in itertools.permutations(LADDER_RUNGS, size)],
    ids="-".join,
)
def test_every_ladder_is_a_class_the_crd_takes(ladder):
    manifest = compute_class_manifest(ladder_plan(ladder))
    assert crd_errors(manifest) == []
    assert [
        "flex-start"
        if rule.get("flexStart")
        else "spot"
        if rule["spot"]
        else "reserved"
        if rule["reservations"]["affinity"] == "Specific"
        else "on-demand"
        for rule in manifest["spec"]["priorities"]
    ] == list(ladder)


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (lambda m: m["spec"].pop("whenUnsatisfiable"), "'whenUnsatisfiable' is a required property"),
        (lambda m: m["spec"]["priorities"][0].update(spot=True, flexStart={"enabled": True}), "Spot"),
        (lambda m: m["spec"]["priorities"][0].update(nodepools=["v6e-spot"]), "Nodepool field"),
        (lambda m: m["spec"]["priorities"][0].update(reservations={"affinity": "Specific"}), "At least 1"),
        (lambda m: m["spec"]["priorities"][0]["tpu"].update(chips=4), "'chips' was unexpected"),
        (lambda m: m["spec"].update(activeMigration={}), "'optimizeRulePriority' is a required property"),
    ],
    ids=[
        "no-when-unsatisfiable",
        "spot-and-flex",
        "nodepools-with-more",
        "specific-without-one",
        "tpu-typo",
        "migration-empty",
    ],
)
def test_the_crd_check_notices_what_gke_refuses(mutate, error):
    manifest = compute_class_manifest(ladder_plan())
    mutate(manifest)
    assert any(error in found for found in crd_errors(manifest))


def test_a_pool_without_a_ladder_has_no_class():
    plan = plan_tpu_node_pool(
        name="v6e",
        machine_type="ct6e-standard-4t",
        topology="4x4",
        node_locations=["us-east5-a"],
        cluster_region="us-east5",
    )
    assert plan.compute_class is None and plan.rungs == ()
    with pytest.raises(ValueError, match="has no ladder"):
        compute_class_manifest(plan)


def test_the_documented_settings_are_the_declared_ones():
    # docs/gke.md says why each is so; a change here must change the docs too.
    assert (compute_class.WHEN_UNSATISFIABLE, compute_class.OPTIMIZE_RULE_PRIORITY) == ("DoNotScaleUp", False)
    assert compute_class.NODE_POOL_AUTO_CREATION is False


# --- The rungs' node pools and the Pods' selection -------------------------------------------------


def test_each_rung_has_the_pools_of_its_capacity_named_after_it():
    plan = ladder_plan(("reserved", "spot", "flex-start"), slices=2)
    assert plan.pool_names == (
        "v6e-reserved",
        "v6e-reserved-1",
        "v6e-spot",
        "v6e-spot-1",
        "v6e-flex",
        "v6e-flex-1",
    )
    reserved, spot, flex = plan.rungs
    assert (reserved.reservation_affinity, spot.spot, flex.flex_start) == ("SPECIFIC_RESERVATION", True, True)
    assert not flex.auto_repair and flex.placement_topology == "4x4"  # as a flex-start pool of its own
    for rung in plan.rungs:
        assert rung.node_labels == {POOL_NODE_LABEL: "v6e", COMPUTE_CLASS_LABEL: "v6e"}
        assert rung.node_taints == ({"key": COMPUTE_CLASS_LABEL, "value": "v6e", "effect": "NO_SCHEDULE"},)
    # The autoscaler's ceiling is every rung's pools; the cluster's node limit counts them all.
    assert plan.max_nodes == 3 * 2 * 4


def test_the_pods_select_the_class_whatever_the_order():
    selectors = {
        tuple(ladder): (ladder_plan(ladder).node_selector, ladder_plan(ladder).tolerations)
        for ladder in itertools.permutations(("spot", "flex-start", "on-demand"))
    }
    (selector, tolerations), *_ = selectors.values()
    assert all(found == (selector, tolerations) for found in selectors.values())
    # No capacity label: it would pin one rung (and contradict the class).
    assert selector == {
        COMPUTE_CLASS_LABEL: "v6e",
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
    }
    assert tolerations == (
        {"key": COMPUTE_CLASS_LABEL, "operator": "Equal", "value": "v6e", "effect": "NoSchedule"},
    )


def test_a_queue_on_a_ladder_has_one_flavor_the_pods_own_selector():
    # Kueue writes a flavor's nodeLabels into every Pod template it admits; a flavor per rung would
    # pin each workload to the rung Kueue picked by quota (Kueue cannot see GKE's capacity), which
    # is the choice the ComputeClass is there to make. So one flavor, of the class.
    plan = ladder_plan(kueue_queue=True, slices=2)
    flavor = resource_flavor_manifest(queued_provisioning_spec(plan))
    assert flavor["spec"]["nodeLabels"] == {**plan.node_selector, POOL_NODE_LABEL: "v6e"}
    assert queued_provisioning_spec(plan).tpu_chips == 2 * 16  # one rung's slices: what runs at once


@pytest.mark.parametrize(
    ("pool", "says"),
    [
        ({"ladder": ("spot", "flex-start-queued")}, "'flex-start-queued' cannot be a rung"),
        ({"ladder": ("spot", "spot")}, "repeats spot"),
        ({"ladder": ("spot",)}, "two capacities or more"),
        ({"ladder": ("spot", "preemptible")}, "'preemptible' is not a capacity"),
        ({"name": "gke-v6e"}, "starts with 'gke' or 'autopilot'"),
        ({"ladder": ("reserved", "spot"), "reservation": None}, "no reservation to consume"),
        ({"reservation": "res-1"}, "has none"),
        ({"machine_type": "ct4p-hightpu-4t", "topology": "2x2x4"}, "flex"),
        ({"max_run_duration": "8d"}, "flex-start's limit of 7 days"),
        ({"flex_start": True}, "give flex_start, spot and queued_provisioning False"),
        ({"name": "a-very-long-pool-name-of-thirty-four"}, "node pool name"),
    ],
)
def test_what_gke_refuses_in_a_ladder_is_refused_with_why(pool, says):
    with pytest.raises(NodePoolError, match=says.replace("(", r"\(").replace(")", r"\)")):
        ladder_plan(**pool)


# --- The stack ------------------------------------------------------------------------------------


def laddered(config: dict[str, Any], ladder: list[str], **pool: Any) -> dict[str, Any]:
    config = copy.deepcopy(config)
    config[POOLS][0].update({"provisioning": ladder, **pool})
    return config


@pytest.fixture(scope="module")
def documents() -> dict[str, dict[str, Any]]:
    """The dev stack's plan, and with its pool on ladders: planned once for the module."""
    base = dev_config()
    configs = {
        "single": base,
        "spot-flex": laddered(base, ["spot", "flex-start"]),
        "flex-spot": laddered(base, ["flex-start", "spot"]),
        "spot-flex-ondemand": laddered(base, ["spot", "flex-start", "on-demand"]),
    }
    return {name: plan_output.plan_document(run_stack(config)) for name, config in configs.items()}


def by_type(document: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    return [r for r in document["resources"] if r["type"] == type_]


def test_a_ladder_plans_its_class_in_order_its_rungs_pools_and_jobs_that_select_it(documents):
    document = documents["spot-flex"]
    (declared,) = by_type(document, COMPUTE_CLASS)
    assert crd_errors({k: declared["inputs"][k] for k in ("apiVersion", "kind", "metadata", "spec")}) == []
    rules = declared["inputs"]["spec"]["priorities"]
    assert [("spot" if rule["spot"] else "flex-start") for rule in rules] == ["spot", "flex-start"]
    pools = {r["inputs"]["name"]: r["inputs"]["nodeConfig"] for r in by_type(document, NODE_POOL)}
    assert pools["v6e-4x4-spot"]["spot"] is True and pools["v6e-4x4-flex"]["flexStart"] is True
    assert "v6e-4x4" not in pools  # the single pool gives way to the rungs'
    for name in ("v6e-4x4-spot", "v6e-4x4-flex"):
        assert pools[name]["labels"][COMPUTE_CLASS_LABEL] == "v6e-4x4"
        assert pools[name]["taints"] == [
            {"effect": "NO_SCHEDULE", "key": COMPUTE_CLASS_LABEL, "value": "v6e-4x4"}
        ]
    (job,) = by_type(document, JOB)
    pod = job["inputs"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"][COMPUTE_CLASS_LABEL] == "v6e-4x4"
    assert not {"cloud.google.com/gke-spot", "cloud.google.com/gke-flex-start"} & set(pod["nodeSelector"])
    assert pod["tolerations"] == [
        {"effect": "NoSchedule", "key": COMPUTE_CLASS_LABEL, "operator": "Equal", "value": "v6e-4x4"}
    ]
    # The Job waits for its class (a dependency on a component is one on each of its resources).
    (workload,) = [r for r in document["resources"] if r["type"] == "tpu-training:gke:TpuTrainingJob"]
    assert declared["urn"] in workload["options"]["dependsOn"]


def changes(documents: dict[str, dict[str, Any]], before: str, after: str):
    return plan_compare.compare(documents[before], documents[after])


def test_reordering_a_ladder_updates_the_class_in_place_and_restarts_nothing(documents):
    found = [c for c in changes(documents, "spot-flex", "flex-spot") if c.action != "same"]
    assert [(c.type, c.action) for c in found] == [(COMPUTE_CLASS, "update")]
    assert not any(c.restarts_training for c in found)
    text = plan_compare.render("before", found, documents["flex-spot"])
    assert "GKE applies the new rungs and their order at its next scale-up" in text


def test_adding_a_rung_adds_its_pool_and_leaves_the_job_alone(documents):
    found = {(c.type, c.name): c.action for c in changes(documents, "spot-flex", "spot-flex-ondemand")}
    assert found[(NODE_POOL, "v6e-4x4-pool-ondemand")] == "create"
    assert found[(COMPUTE_CLASS, "v6e-4x4-ladder-class")] == "update"
    assert found[(JOB, "train-v6e-job")] == "same"


def test_removing_a_rung_deletes_its_pool_and_says_what_that_stops(documents):
    found = changes(documents, "spot-flex-ondemand", "spot-flex")
    assert {(c.type, c.name): c.action for c in found}[(NODE_POOL, "v6e-4x4-pool-ondemand")] == "delete"
    assert not any(c.restarts_training for c in found)  # the Job's template is the same
    text = plan_compare.render("before", found, documents["spot-flex"])
    assert "v6e-4x4-pool-ondemand: deleted with its nodes — a training running on them stops" in text


def test_a_single_value_turned_into_a_ladder_replaces_the_pool_and_restarts_the_job(documents):
    found = {(c.type, c.name): c for c in changes(documents, "single", "spot-flex")}
    assert found[(JOB, "train-v6e-job")].restarts_training
    assert found[(NODE_POOL, "v6e-4x4-pool")].action == "delete"
    assert found[(COMPUTE_CLASS, "v6e-4x4-ladder-class")].action == "create"


def test_a_jobset_on_a_ladder_selects_the_class_too(config):
    run = run_stack(multislice(laddered(config, ["flex-start", "spot"], slices=2)))
    (jobset,) = [r for r in run.registrations if r.type == JOBSET]
    pod = jobset.inputs["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"][COMPUTE_CLASS_LABEL] == "v6e-4x4"
    pools = sorted(
        r.inputs["name"] for r in run.registrations if r.type == NODE_POOL and "v6e" in r.inputs["name"]
    )
    assert pools == ["v6e-4x4-flex", "v6e-4x4-flex-1", "v6e-4x4-spot", "v6e-4x4-spot-1"]


def test_a_queued_ladder_pool_gets_one_flavor_of_the_class(config):
    run = run_stack(laddered(config, ["spot", "flex-start"], kueueQueue=True))
    flavors = [r for r in run.registrations if r.inputs.get("kind") == "ResourceFlavor"]
    (flavor,) = flavors
    assert flavor.inputs["spec"]["nodeLabels"][COMPUTE_CLASS_LABEL] == "v6e-4x4"


@pytest.mark.parametrize(
    ("ladder", "pool", "says"),
    [
        (["spot", "flex-start-queued"], {}, "'flex-start-queued' cannot be a rung of a ladder"),
        (["spot", "spot"], {}, "repeats spot"),
        (["spot", "bogus"], {}, "rung 1 ('bogus') is not a capacity"),
        ([], {}, "the list is empty"),
        (["reserved", "spot"], {}, "the 'reserved' rung needs the name of the reservation"),
        (["spot", "on-demand"], {"reservation": "res-1"}, "is consumed only by a 'reserved' rung"),
        (
            ["spot", "flex-start"],
            {"machineType": "ct4p-hightpu-4t", "topology": "2x2x4"},
            "drop the 'flex-start' rung",
        ),
        (["spot", "flex-start"], {"name": "gke-v6e"}, "starts with 'gke' or 'autopilot'"),
    ],
)
def test_a_bad_ladder_is_refused_at_its_key(config, ladder, pool, says):
    if "name" in pool:
        config = copy.deepcopy(config)
        config[JOBS][0]["nodePool"] = pool["name"]
    message = refused(laddered(config, ladder, **pool))
    assert "tpu-training:nodePools[0]" in message and says in message, message


def test_a_list_of_one_is_that_value(documents, config):
    assert plan_output.plan_document(run_stack(laddered(config, ["flex-start"]))) == documents["single"]


def test_a_rungs_pool_name_taken_by_another_pool_is_refused(config):
    config = laddered(config, ["spot", "flex-start"])
    other = {**copy.deepcopy(config[POOLS][0]), "name": "v6e-4x4-spot", "provisioning": "on-demand"}
    config[POOLS].append(other)
    message = refused(config)
    assert "its GKE node pool 'v6e-4x4-spot' is also the name of" in message, message


def test_the_docs_example_declares_a_class_its_pools_and_a_job_that_selects_it():
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs/gke.md").read_text(), flags=re.S)
    (example,) = [block for block in blocks if block.startswith("# ladder example")]
    run = run_components(lambda: exec(compile(example, "docs/gke.md", "exec"), {}))
    (declared,) = [r for r in run.registrations if r.type == COMPUTE_CLASS]
    assert crd_errors({k: declared.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}) == []
    assert [rule["spot"] for rule in declared.inputs["spec"]["priorities"]] == [True, False]
    pools = sorted(
        r.inputs["name"] for r in run.registrations if r.type == NODE_POOL and "v6e" in r.inputs["name"]
    )
    assert pools == ["v6e-4x4-flex", "v6e-4x4-spot"]
    (job,) = [r for r in run.registrations if r.type == JOB]
    assert job.inputs["spec"]["template"]["spec"]["nodeSelector"][COMPUTE_CLASS_LABEL] == "v6e-4x4"
