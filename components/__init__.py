"""Pulumi components for training on Google Cloud TPUs that survive preemption and maintenance.

Import as ``tpu_training_components``; this package reads no stack config, so it can be used from
any Pulumi program::

    from tpu_training_components import CheckpointBucket
"""

from .catalogue import AcceleratorType, CatalogueError, MachineType, SliceShape
from .checkpoint_bucket import CheckpointBucket, CheckpointBucketArgs
from .engines import WorkloadEngines, WorkloadEnginesArgs
from .errors import InvalidArgument
from .gke_cluster import GkeTpuCluster, GkeTpuClusterArgs
from .identity import TrainingServiceAccount, TrainingServiceAccountArgs
from .network import TrainingNetwork, TrainingNetworkArgs
from .node_pool_plan import TpuNodePoolPlan
from .public import (  # the domain's functions, with their arguments checked (InvalidArgument)
    accelerator_type,
    machine_type,
    plan_tpu_node_pool,
    plan_training,
    region_of_zone,
    slice_shape,
    topology_chips,
)
from .scaling import TrainingPlan
from .tpu_node_pool import FlexStartTpuNodePool, FlexStartTpuNodePoolArgs, TpuNodePoolSelection
from .tpu_vm import PreemptibleTpuVm, PreemptibleTpuVmArgs
from .training_job import TpuTrainingJob, TpuTrainingJobArgs
from .training_jobset import TpuTrainingJobSet, TpuTrainingJobSetArgs
from .training_recovery import (
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
