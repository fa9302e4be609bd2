"""Every key of the stack's config, each validated on its own: ``StackKeys``. ``StackConfig``
(``stack``) checks them together; ``derived`` computes names, environments and checkpoint plans
from them."""

from __future__ import annotations

from typing import Annotated, Optional

from pydantic import (
    AfterValidator,
    Field,
    StrictBool,
    StrictStr,
)
from tpu_training_components.domain import naming

from .fields import LabelKey, LabelValue, Model, no_problem
from .gke import ClusterConfig, JobConfig, NodePoolConfig
from .monitoring import MonitoringConfig
from .network import NetworkConfig
from .storage import BucketConfig, TrainerCodeConfig
from .tpu_vms import TpuVmConfig
from .training import CheckpointingConfig, RecoveryConfig, TrainingConfig


class StackKeys(Model):
    """The stack's keys, each one valid on its own; ``StackConfig`` is what the program reads."""

    stack: StrictStr
    gcp_project: Annotated[StrictStr, AfterValidator(no_problem(naming.project_id_problem))]
    # On by default: a new project has most APIs off, and the first `pulumi up` would fail on each.
    enable_apis: StrictBool = True
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    network: NetworkConfig = NetworkConfig()
    tpu_vms: tuple[TpuVmConfig, ...] = ()
    bucket: BucketConfig = BucketConfig()
    training: Optional[TrainingConfig] = None
    checkpointing: Optional[CheckpointingConfig] = None
    recovery: RecoveryConfig = RecoveryConfig()
    cluster: Optional[ClusterConfig] = None
    node_pools: tuple[NodePoolConfig, ...] = ()
    jobs: tuple[JobConfig, ...] = ()
    trainer_code: Optional[TrainerCodeConfig] = None
    monitoring: MonitoringConfig = MonitoringConfig()
