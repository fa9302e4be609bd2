"""Pulumi components for training on Google Cloud TPUs that survive preemption and maintenance.

Import as ``tpu_training_components``; this package reads no stack config, so it can be used from
any Pulumi program::

    from tpu_training_components import CheckpointBucket

The folders are the architecture: ``domain/`` plans and decides (pure Python, no Pulumi, no cloud
SDK), ``live/`` reads the live TPU and Kubernetes APIs, ``resources/`` declares the Pulumi
components.
"""

import importlib
from typing import TYPE_CHECKING, Any

# Importing the package imports nothing else: each name below is imported when it is first used
# (PEP 562), so `import tpu_training_components.domain.x` (the commands that plan, recover and show
# status; the engine tier's provider doubles) does not pay for pulumi-gcp's resource modules.
_EXPORTS = {
    "StackMonitoring": "resources.monitoring",
    "StackMonitoringArgs": "resources.monitoring",
    "AcceleratorType": "domain.catalogue",
    "CatalogueError": "domain.catalogue",
    "MachineType": "domain.catalogue",
    "SliceShape": "domain.catalogue",
    "TpuNodePoolPlan": "domain.node_pool_plan",
    "TrainingPlan": "domain.scaling",
    "InvalidArgument": "errors",
    "accelerator_type": "public",
    "machine_type": "public",
    "plan_tpu_node_pool": "public",
    "plan_training": "public",
    "region_of_zone": "public",
    "slice_shape": "public",
    "topology_chips": "public",
    "CheckpointBucket": "resources.checkpoint_bucket",
    "CheckpointBucketArgs": "resources.checkpoint_bucket",
    "TpuComputeClass": "resources.compute_class",
    "TpuComputeClassArgs": "resources.compute_class",
    "WorkloadEngines": "resources.engines",
    "WorkloadEnginesArgs": "resources.engines",
    "GkeTpuCluster": "resources.gke_cluster",
    "GkeTpuClusterArgs": "resources.gke_cluster",
    "TrainingServiceAccount": "resources.identity",
    "TrainingServiceAccountArgs": "resources.identity",
    "TrainingNetwork": "resources.network",
    "TrainingNetworkArgs": "resources.network",
    "ProjectApis": "resources.project_apis",
    "ProjectApisArgs": "resources.project_apis",
    "QueuedProvisioning": "resources.queued_provisioning",
    "QueuedProvisioningArgs": "resources.queued_provisioning",
    "FlexStartTpuNodePool": "resources.tpu_node_pool",
    "FlexStartTpuNodePoolArgs": "resources.tpu_node_pool",
    "TpuNodePoolSelection": "resources.tpu_node_pool",
    "PreemptibleTpuVm": "resources.tpu_vm",
    "PreemptibleTpuVmArgs": "resources.tpu_vm",
    "TpuTrainingJob": "resources.training_job",
    "TpuTrainingJobArgs": "resources.training_job",
    "TpuTrainingJobSet": "resources.training_jobset",
    "TpuTrainingJobSetArgs": "resources.training_jobset",
    "RecoveredJob": "resources.training_recovery",
    "RecoveredTpuVm": "resources.training_recovery",
    "RecoveryCluster": "resources.training_recovery",
    "TrainingRecovery": "resources.training_recovery",
    "TrainingRecoveryArgs": "resources.training_recovery",
}

if TYPE_CHECKING:  # the same names, for type checkers and readers
    from .domain.catalogue import AcceleratorType, CatalogueError, MachineType, SliceShape
    from .domain.node_pool_plan import TpuNodePoolPlan
    from .domain.scaling import TrainingPlan
    from .errors import InvalidArgument
    from .public import (  # the domain's functions, with their arguments checked (InvalidArgument)
        accelerator_type,
        machine_type,
        plan_tpu_node_pool,
        plan_training,
        region_of_zone,
        slice_shape,
        topology_chips,
    )
    from .resources.checkpoint_bucket import CheckpointBucket, CheckpointBucketArgs
    from .resources.compute_class import TpuComputeClass, TpuComputeClassArgs
    from .resources.engines import WorkloadEngines, WorkloadEnginesArgs
    from .resources.gke_cluster import GkeTpuCluster, GkeTpuClusterArgs
    from .resources.identity import TrainingServiceAccount, TrainingServiceAccountArgs
    from .resources.network import TrainingNetwork, TrainingNetworkArgs
    from .resources.project_apis import ProjectApis, ProjectApisArgs
    from .resources.queued_provisioning import QueuedProvisioning, QueuedProvisioningArgs
    from .resources.tpu_node_pool import FlexStartTpuNodePool, FlexStartTpuNodePoolArgs, TpuNodePoolSelection
    from .resources.tpu_vm import PreemptibleTpuVm, PreemptibleTpuVmArgs
    from .resources.training_job import TpuTrainingJob, TpuTrainingJobArgs
    from .resources.training_jobset import TpuTrainingJobSet, TpuTrainingJobSetArgs
    from .resources.training_recovery import (
        RecoveredJob,
        RecoveredTpuVm,
        RecoveryCluster,
        TrainingRecovery,
        TrainingRecoveryArgs,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # once: later uses find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "StackMonitoring",
    "StackMonitoringArgs",
    "AcceleratorType",
    "CatalogueError",
    "CheckpointBucket",
    "CheckpointBucketArgs",
    "FlexStartTpuNodePool",
    "FlexStartTpuNodePoolArgs",
    "GkeTpuCluster",
    "GkeTpuClusterArgs",
    "InvalidArgument",
    "MachineType",
    "PreemptibleTpuVm",
    "PreemptibleTpuVmArgs",
    "ProjectApis",
    "ProjectApisArgs",
    "QueuedProvisioning",
    "QueuedProvisioningArgs",
    "SliceShape",
    "TpuNodePoolPlan",
    "TpuComputeClass",
    "TpuComputeClassArgs",
    "TpuNodePoolSelection",
    "TpuTrainingJob",
    "TpuTrainingJobArgs",
    "TpuTrainingJobSet",
    "TpuTrainingJobSetArgs",
    "RecoveredJob",
    "RecoveredTpuVm",
    "RecoveryCluster",
    "TrainingNetwork",
    "TrainingNetworkArgs",
    "TrainingPlan",
    "TrainingRecovery",
    "TrainingRecoveryArgs",
    "TrainingServiceAccount",
    "TrainingServiceAccountArgs",
    "WorkloadEngines",
    "WorkloadEnginesArgs",
    "accelerator_type",
    "machine_type",
    "plan_tpu_node_pool",
    "plan_training",
    "region_of_zone",
    "slice_shape",
    "topology_chips",
]
