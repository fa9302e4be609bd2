"""Pulumi components for training on Google Cloud TPUs that survive preemption and maintenance.

Import as ``tpu_training_components``; this package reads no stack config, so it can be used from
any Pulumi program::

    from tpu_training_components import CheckpointBucket
"""

from .catalogue import (
    AcceleratorType,
    CatalogueError,
    MachineType,
    SliceShape,
    accelerator_type,
    machine_type,
    region_of_zone,
    slice_shape,
    topology_chips,
)
from .checkpoint_bucket import CheckpointBucket, CheckpointBucketArgs
from .errors import InvalidArgument
from .identity import TrainingServiceAccount, TrainingServiceAccountArgs
from .scaling import TrainingPlan, plan_training
from .tpu_vm import PreemptibleTpuVm, PreemptibleTpuVmArgs

__all__ = [
    "AcceleratorType",
    "CatalogueError",
    "CheckpointBucket",
    "CheckpointBucketArgs",
    "InvalidArgument",
    "MachineType",
    "PreemptibleTpuVm",
    "PreemptibleTpuVmArgs",
    "TrainingServiceAccount",
    "TrainingServiceAccountArgs",
    "SliceShape",
    "TrainingPlan",
    "accelerator_type",
    "machine_type",
    "plan_training",
    "region_of_zone",
    "slice_shape",
    "topology_chips",
]
