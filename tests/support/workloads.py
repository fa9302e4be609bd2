"""Arguments of a training workload component (``TpuTrainingJob``, ``TpuTrainingJobSet``) for
tests: a known-good set that a test changes one key of."""

from __future__ import annotations

from typing import Any

import pulumi_kubernetes as k8s


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
    from tpu_training_components import FlexStartTpuNodePool

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
