"""The stack's configuration: read once from Pulumi config into frozen, validated objects.

A package split by concern, imported as ``tpu_training.stack_config`` by the stack program
(``infra/__main__.py``) and the commands alike; ``load`` is told the project's folder, whose
files the config names (``trainerCode``):

- ``fields``: the model base and the field types and validators every part shares;
- ``tpu_vms``, ``storage``, ``training``, ``network``, ``gke``: one part of the config each, with
  the checks that belong to it;
- ``keys``: ``StackKeys``, every key, each valid on its own;
- ``derived``: what the stack makes of them: names, regions, pool plans, each run's checkpoint
  directory, checkpoint plan and environment (plain functions);
- ``checks`` and ``gke_checks``: the checks that span keys, and the warnings;
- ``stack``: ``StackConfig``, the keys validated as a whole: what the program reads;
- ``loading``: ``load()``, the only reader of ``pulumi.Config``, and how problems are reported.
"""

from . import derived
from .fields import PROJECT, Provisioning
from .gke import SYSTEM_POOL, ClusterConfig, JobConfig, MaintenanceWindowConfig, NodePoolConfig
from .loading import (
    OFFLINE_SECRET,
    PROJECT_KEYS,
    ConfigError,
    gcp_provider_keys,
    is_config_secret,
    load,
)
from .monitoring import MonitoringConfig
from .network import NetworkConfig
from .stack import StackConfig
from .storage import PROJECT_ROOT_CONTEXT, TRAINER_CODE_VARIABLE, BucketConfig, TrainerCodeConfig
from .tpu_vms import TpuVmConfig
from .training import CheckpointingConfig, RecoveryConfig, RestartBudgetConfig, TrainingConfig

__all__ = [
    "OFFLINE_SECRET",
    "PROJECT",
    "PROJECT_KEYS",
    "PROJECT_ROOT_CONTEXT",
    "SYSTEM_POOL",
    "TRAINER_CODE_VARIABLE",
    "BucketConfig",
    "CheckpointingConfig",
    "ClusterConfig",
    "ConfigError",
    "JobConfig",
    "MaintenanceWindowConfig",
    "NetworkConfig",
    "NodePoolConfig",
    "Provisioning",
    "MonitoringConfig",
    "RecoveryConfig",
    "RestartBudgetConfig",
    "StackConfig",
    "TpuVmConfig",
    "TrainerCodeConfig",
    "TrainingConfig",
    "derived",
    "gcp_provider_keys",
    "is_config_secret",
    "load",
]
