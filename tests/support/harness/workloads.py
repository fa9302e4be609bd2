"""Arguments of a training workload component (``TpuTrainingJob``, ``TpuTrainingJobSet``) for
tests: a known-good set that a test changes one key of; and the JobSet such a component declares."""

from __future__ import annotations

from typing import Any

import pulumi_kubernetes as k8s
from tpu_training_components import FlexStartTpuNodePool, TpuTrainingJobSet

from support.harness.crds import JOBSET_TYPE
from support.harness.program import run_components

PROJECT = "tpu-training-dev"


def workload_args(selection: Any, **extra: Any) -> Any:
    """Valid arguments on the pool ``selection`` (``FlexStartTpuNodePool.selection``), with
    ``extra`` on top."""
    return {
        "provider": k8s.Provider("cluster", kubeconfig="{}"),
        "node_pool": selection,
        "image": "trainer:1",
        "command": ["python3", "train.py"],
        "checkpoint_dir": "gs://bucket/checkpoints/train",
        "google_service_account": "t@p.iam.gserviceaccount.com",
        "google_service_account_id": "projects/p/serviceAccounts/t",
        "workload_pool": "p.svc.id.goog",
        **extra,
    }


def tpu_pool(name: str = "np", **changes: Any) -> Any:
    """A ``FlexStartTpuNodePool`` of two v6e 4x4 slices in europe-west4-a, with ``changes``."""
    args: dict[str, Any] = {
        "cluster": "c",
        "cluster_region": "europe-west4",
        "machine_type": "ct6e-standard-4t",
        "topology": "4x4",
        "node_locations": ["europe-west4-a"],
        "slices": 2,
        "service_account_email": "n@p.iam.gserviceaccount.com",
        **changes,
    }
    return FlexStartTpuNodePool(name, args)  # type: ignore[arg-type]


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
