"""Pulumi components for training on Google Cloud TPUs that survive preemption and maintenance.

Import as ``tpu_training_components``; this package reads no stack config, so it can be used from
any Pulumi program::

    from tpu_training_components import CheckpointBucket

The folders are the architecture: ``domain/`` plans and decides (pure Python, no Pulumi, no cloud
SDK), ``live/`` reads the live TPU and Kubernetes APIs, ``resources/`` declares the Pulumi
components. Modules that stood at the top of the package before keep their old names as aliases
(``tpu_training_components.recovery`` is ``tpu_training_components.domain.recovery``).
"""

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Optional, Sequence

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


_MOVED = {
    **{
        name: "domain"
        for name in (
            "catalogue",
            "change_impact",
            "gcp_locations",
            "goodput",
            "job_manifests",
            "job_recovery",
            "maintenance_window",
            "naming",
            "network_plan",
            "node_pool_plan",
            "recovery",
            "recovery_rounds",
            "scaling",
            "stack_identity",
            "startup_script",
            "tpu_availability",
        )
    },
    **{name: "live" for name in ("deadline", "http_answers", "kube_api", "tpu_api")},
    **{
        name: "resources"
        for name in (
            "checkpoint_bucket",
            "gke_cluster",
            "identity",
            "network",
            "reconcile",
            "tpu_node_pool",
            "tpu_vm",
            "training_job",
            "training_recovery",
        )
    },
}
"""Old module name -> the folder it moved to: programs that import a module by its old path keep
working, and get the very same module object."""


class _MovedModule(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self._target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self._target)

    def exec_module(self, module: ModuleType) -> None:
        pass  # already executed under its own name


class _MovedModules(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in _MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedModule(f"{__name__}.{_MOVED[name]}.{name}"))


sys.meta_path.append(_MovedModules())
