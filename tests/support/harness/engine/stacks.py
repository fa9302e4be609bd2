"""The stacks the engine tier and the engine benchmark deploy: small, and each one the dev
stack's own shape (Pulumi.dev.yaml), so what they pin holds for it."""

from __future__ import annotations

from typing import Any

PROJECT = "engine-test"
ZONE = "europe-west4-a"
VM = "demo-tpu"
JOB = "train-v6e"
POOL = "v6e-4x4"

# A TPU VM stack: one preemptible v3-8 (the dev stack's), the default network, APIs and buckets.
TPU_VM_CONFIG: dict[str, Any] = {
    "gcp:project": PROJECT,
    "tpu-training:tpuVms": [
        {
            "name": VM,
            "zone": ZONE,
            "acceleratorType": "v3-8",
            "runtimeVersion": "tpu-vm-tf-2.16.1-pjrt",
            "provisioning": "preemptible",
            "trainCommand": "python3 /opt/trainer/train.py",
        }
    ],
    "tpu-training:trainerCode": {
        "folder": "trainer",
        "files": [
            "train.py",
            "checkpoints.py",
            "hosts.py",
            "model.py",
            "notices.py",
            "outcomes.py",
            "progress.py",
            "save_requests.py",
            "settings.py",
            "storage.py",
            "requirements.txt",
        ],
    },
}


# A TPU VM stack whose one VM is a flex-start v6e: requested from the Cloud TPU queue.
FLEX_START_VM = "flex-tpu"
FLEX_START_ZONE = "us-east5-a"
FLEX_START_CONFIG: dict[str, Any] = {
    **TPU_VM_CONFIG,
    "tpu-training:tpuVms": [
        {
            "name": FLEX_START_VM,
            "zone": FLEX_START_ZONE,
            "acceleratorType": "v6e-8",
            "runtimeVersion": "v2-alpha-tpuv6e",
            "provisioning": "flex-start",
            "maxRunDuration": "72h",
            "trainCommand": "python3 /opt/trainer/train.py",
        }
    ],
}
QUEUED_URN = (
    "urn:pulumi:engine::tpu-training::tpu-training:compute:PreemptibleTpuVm$pulumi-python:dynamic:Resource"
    f"::{FLEX_START_VM}-queued"
)
"""Its queued resource in a stack named ``engine``."""


# A GKE stack: the dev stack's flex-start v6e 4x4 pool and its training Job.
GKE_CONFIG: dict[str, Any] = {
    "gcp:project": PROJECT,
    "tpu-training:cluster": {"name": "tpu-engine", "location": "us-east5"},
    "tpu-training:nodePools": [
        {
            "name": POOL,
            "machineType": "ct6e-standard-4t",
            "topology": "4x4",
            "nodeLocations": ["us-east5-a"],
        }
    ],
    "tpu-training:jobs": [
        {
            "name": JOB,
            "nodePool": POOL,
            "image": "us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:latest",
            "command": ["python3", "/tmp/trainer/train.py"],
        }
    ],
    "tpu-training:trainerCode": TPU_VM_CONFIG["tpu-training:trainerCode"],
}


def gke_stack(namespace: str, **keys: Any) -> dict[str, Any]:
    """GKE_CONFIG with its Jobs in ``namespace`` (the stack declares it) and ``keys`` (config keys
    without the project prefix) set: each test of the engine tier's shared control plane has a
    namespace of its own."""
    config = {**GKE_CONFIG, **{f"tpu-training:{key}": value for key, value in keys.items()}}
    config["tpu-training:jobs"] = [dict(job, namespace=namespace) for job in config["tpu-training:jobs"]]
    return config
