"""What the program's parts hand on to the parts declared after them: the foundation (APIs and
network), the TPU VMs, the GKE cluster and its pools, the training workloads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

import pulumi
from tpu_training_components import (
    FlexStartTpuNodePool,
    GkeTpuCluster,
    PreemptibleTpuVm,
    ProjectApis,
    TpuTrainingJob,
    TpuTrainingJobSet,
    TrainingNetwork,
)
from tpu_training_components.domain.capacity_ladder import (
    Rung,
)

from tpu_training.stack_config import ClusterConfig

TrainingWorkload = Union[TpuTrainingJob, TpuTrainingJobSet]


Environments = dict[str, dict[str, str]]
"""A training run's name (a TPU VM's or a Job's) -> the environment its processes receive."""


@dataclass(frozen=True)
class Foundation:
    """What everything else waits for or runs in: the APIs the stack enables, and its network."""

    apis: Optional[ProjectApis]
    network: Optional[TrainingNetwork]

    @property
    def after_apis(self) -> list[pulumi.Resource]:
        """``depends_on`` of whatever calls an API the stack enables."""
        return [self.apis] if self.apis is not None else []

    @property
    def after_network(self) -> list[pulumi.Resource]:
        """``depends_on`` of whatever needs the network's routes (NAT) from its first boot."""
        return [self.network] if self.network is not None else []

    def network_in(
        self, region: str, own: tuple[Optional[str], Optional[str]]
    ) -> tuple[Optional[pulumi.Input[str]], Optional[pulumi.Input[str]]]:
        """The (network, subnetwork) a VM or the cluster in ``region`` uses: the stack's, or its
        own config's (``network.create: false``)."""
        if self.network is None:
            return own
        return self.network.network_id, self.network.subnets[region].id


@dataclass(frozen=True)
class TpuVms:
    """The stack's TPU VMs by name, and the environment each one's training receives."""

    vms: dict[str, PreemptibleTpuVm] = field(default_factory=dict)
    environments: Environments = field(default_factory=dict)
    rungs: dict[str, tuple[int, Rung]] = field(default_factory=dict)
    """Each VM's rung of its capacity ladder, and its place there (0: the preferred)."""


@dataclass(frozen=True)
class Gke:
    """The GKE cluster, as configured and as declared, and its TPU node pools by name."""

    config: ClusterConfig
    cluster: GkeTpuCluster
    pools: dict[str, FlexStartTpuNodePool]


@dataclass(frozen=True)
class Workloads:
    """The training Jobs and JobSets by name, and the environment of each one's Pods."""

    jobs: dict[str, TrainingWorkload] = field(default_factory=dict)
    environments: Environments = field(default_factory=dict)
