"""Bad input of the classes a held-out review found (issue 26 item 10), each refused with a message
that names the key and the value, never a traceback. (The --manifests classes are in
test_plan_cli.py.)"""

from __future__ import annotations

import copy
import json
import re
import runpy
import sys
from pathlib import Path
from typing import Any, Callable

import pulumi
import pulumi_kubernetes as k8s
import pytest
from support.harness.program import INFRA, dev_config, run_components
from support.harness.workloads import tpu_pool as pool
from support.harness.workloads import workload_args
from tpu_training_components import (
    InvalidArgument,
    QueuedProvisioning,
    TpuTrainingJob,
    TpuTrainingJobSet,
    TrainingRecovery,
    WorkloadEngines,
    plan_tpu_node_pool,
)

from tpu_training import command_line, offline, plan_compare, plan_output

GOLDEN = Path(__file__).parents[1] / "golden" / "dev.plan.json"
HUGE = 10**5000  # more digits than Python's int() <-> str conversion takes (4,300)


def refusal(body: Callable[[], Any]) -> str:
    with pytest.raises(InvalidArgument) as err:
        run_components(body)
    return str(err.value)


# --- integers too large to format or to allocate -------------------------------------------------


def _program_with(key: str, text: str) -> str:
    """The message the stack program stops with when config ``key`` reads ``text`` (as the CLI
    hands a structured value to the program: JSON text)."""
    encoded = {k: v if isinstance(v, str) else json.dumps(v) for k, v in dev_config().items()}
    encoded[key] = text
    if str(INFRA) not in sys.path:  # the program imports its config package as the host runs it
        sys.path.insert(0, str(INFRA))
    with pytest.raises(pulumi.RunError) as err:
        offline.run(
            lambda: runpy.run_path(str(INFRA / "__main__.py"), run_name="__main__"),
            project="tpu-training",
            stack="dev",
            config=encoded,
        )
    return str(err.value)


def test_a_number_of_thousands_of_digits_in_the_stack_config_is_refused_by_its_key():
    text = json.dumps(dev_config()["tpu-training:training"]).replace("128", "9" * 4400)
    says = _program_with("tpu-training:training", text)
    assert "tpu-training:training holds a number of 4400 digits" in says


@pytest.mark.parametrize("slices", [10**9, HUGE], ids=["a-billion", "5000-digits"])
def test_a_billion_slices_through_the_python_api_is_refused_at_once(slices):
    says = refusal(lambda: pool(slices=slices))
    assert "GKE's limit of 15000 nodes per cluster" in says and "at most 3750 slices" in says


def test_a_pool_beyond_gkes_cluster_limit_is_refused_by_the_python_api_as_by_the_stack_file():
    assert "15000 nodes" in refusal(lambda: pool(slices=3751))  # 3,751 slices of 4 VMs: 15,004 nodes
    with pytest.raises(InvalidArgument, match="15000 nodes"):
        plan_tpu_node_pool(
            name="np",
            machine_type="ct6e-standard-4t",
            topology="4x4",
            node_locations=["europe-west4-a"],
            cluster_region="europe-west4",
            slices=3751,
        )


def test_a_maintenance_grace_no_date_can_hold_is_refused():
    says = refusal(
        lambda: TrainingRecovery("recovery", {"project": "p", "maintenance_grace_minutes": 10**13})
    )
    assert "maintenance_grace_minutes: 10000000000000 is out of range; allowed: 0-10080" in says


def test_a_huge_count_is_named_not_a_traceback():
    says = refusal(lambda: TpuTrainingJobSet("train", workload_args(pool().selection, max_restarts=-HUGE)))
    assert (
        "max_restarts: a whole number of about 500" in says and "digits is out of range; allowed: 0-" in says
    )


# --- the Job path's recovery generation is a label value -----------------------------------------


@pytest.mark.parametrize("component", [TpuTrainingJob, TpuTrainingJobSet])
def test_a_recovery_generation_too_long_for_a_label_is_refused(component):
    says = refusal(lambda: component("train", workload_args(pool().selection, recovery_generation=10**15)))
    assert "recovery_generation: 1000000000000000 is above the largest recovery generation" in says


# --- Kubernetes label syntax on Job, JobSet and queue labels --------------------------------------


# Valid Google Cloud labels that the Kubernetes API server refuses.
GCP_VALID_NOT_KUBERNETES = [{"team": "ml-"}, {"équipe": "ml"}, {"team": "_x"}, {"a" * 63 + "-": "x"}]


@pytest.mark.parametrize("labels", GCP_VALID_NOT_KUBERNETES)
@pytest.mark.parametrize("component", [TpuTrainingJob, TpuTrainingJobSet])
def test_workload_labels_follow_kubernetes_syntax(component, labels):
    says = refusal(lambda: component("train", workload_args(pool().selection, labels=labels)))
    (key,) = labels
    assert re.search(rf'labels(\.{re.escape(key)}|\["{re.escape(key)}"\]): Kubernetes label', says), says


@pytest.mark.parametrize("labels", GCP_VALID_NOT_KUBERNETES)
def test_queue_labels_follow_kubernetes_syntax(labels):
    def body() -> None:
        queued = pool(queued_provisioning=True, slices=1)
        QueuedProvisioning(
            "q",
            {"provider": k8s.Provider("c", kubeconfig="{}"), "node_pool": queued.selection, "labels": labels},
        )

    assert "Kubernetes label" in refusal(body)


def test_kubernetes_valid_labels_are_taken_though_google_cloud_would_refuse_them():
    # Uppercase and a prefix: fine on a Kubernetes object, which is all these labels go on.
    labels = {"example.com/Team": "ML.Platform"}
    run = run_components(lambda: TpuTrainingJob("train", workload_args(pool().selection, labels=labels)))
    (job,) = run.by_type("kubernetes:batch/v1:Job")
    assert job.inputs["metadata"]["labels"]["example.com/Team"] == "ML.Platform"


# --- chart versions --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.1٢.0", "0.12.０", "０.12.0", "².1.0", "0.12.0\n"])
def test_a_chart_version_takes_ascii_digits_only(version):
    says = refusal(
        lambda: WorkloadEngines(
            "engines", {"provider": k8s.Provider("c", kubeconfig="{}"), "jobset_version": version}
        )
    )
    assert "is not a chart version" in says


# --- the command line's JSON files: lone surrogates, wrong shapes ---------------------------------


def test_a_lone_surrogate_in_previous_outputs_is_a_usage_error(tmp_path):
    path = tmp_path / "outputs.json"
    path.write_text('{"jobRecoveryGenerations": {"\\udcff": 1}}')
    with pytest.raises(command_line.UsageError, match="lone surrogate"):
        plan_output.read_previous_outputs(str(path))


def test_a_lone_surrogate_in_a_base_plan_is_refused(tmp_path):
    document = json.loads(GOLDEN.read_text())
    document["resources"][0]["name"] = "\udcff"
    path = tmp_path / "base.json"
    path.write_text(json.dumps(document))  # json escapes it as \udcff
    with pytest.raises(plan_compare.CompareError, match=r"resources\[0\].name holds a lone surrogate"):
        plan_compare.read_base(str(path))


def test_a_kubeconfig_of_the_wrong_shape_in_the_base_is_a_provider_that_cannot_be_compared():
    base = json.loads(GOLDEN.read_text())
    new = copy.deepcopy(base)
    provider = next(r for r in base["resources"] if r["type"] == "pulumi:providers:kubernetes")
    # A cluster entry that is a string, not an object: read as an unknown cluster, not a traceback.
    provider["inputs"]["kubeconfig"] = {
        "current-context": "a",
        "contexts": [{"name": "a", "context": {"cluster": "c"}}],
        "clusters": [{"name": "c", "cluster": "not an object"}],
    }
    # An unchanged clusterIdentifier settles it: DiffConfig drops every other reason (an update).
    changes = {c.name: c for c in plan_compare.compare(base, new)}
    assert changes[provider["name"]].action == "update"
    # Without one, the provider is replaced: the active cluster cannot be compared.
    for document in (base, new):
        next(r for r in document["resources"] if r["type"] == provider["type"])["inputs"].pop(
            "clusterIdentifier"
        )
    changes = {c.name: c for c in plan_compare.compare(base, new)}
    assert changes[provider["name"]].action == "replace"
    assert "cannot be compared" in " ".join(changes[provider["name"]].because)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("parent", 5),
        ("custom", "yes"),
        ("options.aliases", "x"),
        ("options.aliases", [{"spec": {"name": 5}}]),
        ("options.replaceOnChanges", "spec"),
        ("options.provider", 7),
    ],
)
def test_a_base_plan_whose_options_have_the_wrong_shape_is_refused(tmp_path, key, value):
    document = json.loads(GOLDEN.read_text())
    target = document["resources"][0]
    if key.startswith("options."):
        target["options"][key.split(".", 1)[1]] = value
    else:
        target[key] = value
    path = tmp_path / "base.json"
    path.write_text(json.dumps(document))
    with pytest.raises(plan_compare.CompareError, match=rf"resources\[0\]\.{key} = "):
        plan_compare.read_base(str(path))
