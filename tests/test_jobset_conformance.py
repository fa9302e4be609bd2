"""The JobSet we declare, checked against references nobody on this project wrote: JobSet's own
CRD schema at v0.12.0 (tests/fixtures/jobset-v0.12.0, how it was taken: the README there), and
what xpk 1.16.0 applies for the same shapes (tests/fixtures/xpk-1.16.0), field by field, every
difference either gone or listed below with its reason."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import pulumi_kubernetes as k8s
import pytest
import yaml
from conftest import run_components
from tpu_training_components import FlexStartTpuNodePool, TpuTrainingJobSet

FIXTURES = Path(__file__).parent / "fixtures"
JOBSET_CRD = FIXTURES / "jobset-v0.12.0" / "jobset.x-k8s.io_jobsets.yaml"
JOBSET_TYPE = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
PROJECT = "tpu-training-dev"


# --- the upstream CRD schemas -------------------------------------------------------------------


def _strict(schema: Any) -> Any:
    """The schema as the API server applies it with strict field validation: an unknown field is an
    error, not silently pruned (which would drop a misspelt field without a word)."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@functools.cache
def crd_validator(path: Path, version: str) -> jsonschema.Draft7Validator:
    """A validator for one served version of a CRD file, from its ``openAPIV3Schema``."""
    crd = yaml.safe_load(path.read_text())
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return jsonschema.Draft7Validator(_strict(served["schema"]["openAPIV3Schema"]))


def schema_errors(manifest: dict[str, Any], path: Path = JOBSET_CRD) -> list[str]:
    version = manifest["apiVersion"].split("/")[1]
    errors = crd_validator(path, version).iter_errors(manifest)
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)


# --- what we declare ----------------------------------------------------------------------------


def declared_jobset(
    machine_type: str = "ct6e-standard-4t",
    topology: str = "4x4",
    pool_slices: int = 2,
    slices: int = 2,
    **extra: Any,
) -> dict[str, Any]:
    """The JobSet TpuTrainingJobSet declares on a pool of the shape, under mocks, as applied."""
    pool_args = extra.pop("pool", {})

    def body() -> None:
        pool = FlexStartTpuNodePool(
            "tpu-dev-np",
            {
                "cluster": "tpu-dev",
                "cluster_region": "europe-west4",
                "machine_type": machine_type,
                "topology": topology,
                "node_locations": ["europe-west4-a"],
                "slices": pool_slices,
                "service_account_email": f"nodes@{PROJECT}.iam.gserviceaccount.com",
                "project": PROJECT,
                **pool_args,
            },
        )
        TpuTrainingJobSet(
            "train",
            {
                "provider": k8s.Provider("cluster", kubeconfig="{}"),
                "node_pool": pool.selection,
                "image": "trainer:1",
                "command": ["python3", "train.py"],
                "checkpoint_dir": "gs://bucket/checkpoints/train",
                "environment": {"LEARNING_RATE": "0.001"},
                "google_service_account": f"trainer@{PROJECT}.iam.gserviceaccount.com",
                "google_service_account_id": f"projects/{PROJECT}/serviceAccounts/trainer",
                "workload_pool": f"{PROJECT}.svc.id.goog",
                "slices": slices,
                **extra,
            },
        )

    inputs = run_components(body).one(JOBSET_TYPE, "train-jobset").inputs
    return {key: inputs[key] for key in ("apiVersion", "kind", "metadata", "spec")}


SHAPES = {
    "v6e 4x4, 2 slices": dict(machine_type="ct6e-standard-4t", topology="4x4", pool_slices=2, slices=2),
    "v5p 2x2x4, 4 slices": dict(machine_type="ct5p-hightpu-4t", topology="2x2x4", pool_slices=4, slices=4),
    "v5e 4x4 spot, 2 slices": dict(
        machine_type="ct5lp-hightpu-4t",
        topology="4x4",
        pool_slices=2,
        slices=2,
        pool={"flex_start": False, "spot": True},
    ),
    "v6e 2x4, 1 slice": dict(machine_type="ct6e-standard-4t", topology="2x4", pool_slices=1, slices=1),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_jobset_is_valid_against_jobsets_own_crd_schema(shape):
    assert schema_errors(declared_jobset(**SHAPES[shape])) == []


def test_jobset_with_every_option_is_valid_against_the_crd_schema():
    jobset = declared_jobset(max_restarts=0, queue_name="tpu-queue", privileged=True, labels={"team": "a"})
    assert schema_errors(jobset) == []


@pytest.mark.parametrize(
    ("mutate", "complaint"),
    [
        (lambda js: js["spec"].update(replicatedJob=js["spec"].pop("replicatedJobs")), "replicatedJob"),
        (lambda js: js["spec"]["failurePolicy"]["rules"][0].update(action="Restart"), "Restart"),
        (lambda js: js["spec"]["failurePolicy"]["rules"][0].pop("name"), "name"),
        (lambda js: js["spec"]["failurePolicy"].update(maxRestarts="3"), "3"),
        (lambda js: js["spec"]["replicatedJobs"][0].update(replicas=None), "None"),
    ],
)
def test_the_schema_check_refuses_what_the_api_server_would(mutate, complaint):
    """The validator is not a rubber stamp: one mutation of a valid JobSet, one error."""
    jobset = copy.deepcopy(declared_jobset())
    mutate(jobset)
    errors = schema_errors(jobset)
    assert errors and complaint in " ".join(errors)
