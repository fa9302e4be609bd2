"""Pulumi components for training on Google Cloud TPUs that survive preemption and maintenance.

Import as ``tpu_training_components``; this package reads no stack config, so it can be used from
any Pulumi program::

    from tpu_training_components import CheckpointBucket

The folders are the architecture: ``domain/`` plans and decides (pure Python, no Pulumi, no cloud
SDK), ``live/`` reads the live TPU and Kubernetes APIs, ``resources/`` declares the Pulumi
components.
"""

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

__all__ = [
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
    "TpuComputeClass",
    "TpuComputeClassArgs",
    "QueuedProvisioningArgs",
    "SliceShape",
    "TpuNodePoolPlan",
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
