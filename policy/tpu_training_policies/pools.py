"""The TPU node pools a stack declares, as the stack policies see them: each pool's name, machine
type, topology and region, and the labels GKE gives its nodes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from tpu_training_components.domain import catalogue
from tpu_training_components.domain.node_pool_plan import (
    ACCELERATOR_NODE_LABEL,
    FLEX_START_NODE_LABEL,
    NODE_POOL_LABEL,
    POOL_NODE_LABEL,
    SPOT_NODE_LABEL,
    TOPOLOGY_NODE_LABEL,
)

from .node_pools import flex_start, tpu_machine_type
from .resources import NODE_POOL, Resource, region


@dataclass(frozen=True)
class Pool:
    """A TPU node pool the stack declares, and the labels GKE gives its nodes."""

    resource: Resource
    name: str
    machine: Optional[catalogue.MachineType]
    topology: Optional[str]
    """The placement topology of a multi-host pool."""
    region: Optional[str]

    @property
    def node_labels(self) -> Mapping[str, Any]:
        """The Kubernetes labels the pool declares for its nodes (``nodeConfig.labels``)."""
        labels = self.resource.at("nodeConfig", "labels")
        return labels if isinstance(labels, Mapping) else {}

    def has_label(self, key: str, value: Any) -> Optional[bool]:
        """Whether the pool's nodes carry ``key=value``; None for a label this policy cannot tell."""
        if key == NODE_POOL_LABEL:
            return value == self.name
        if key in self.node_labels or key == POOL_NODE_LABEL:
            return self.node_labels.get(key) == value
        if key == FLEX_START_NODE_LABEL:
            return (value == "true") == flex_start(self.resource)
        if key == SPOT_NODE_LABEL:
            return (value == "true") == (self.resource.at("nodeConfig", "spot") is True)
        if self.machine is None:
            return None
        if key == ACCELERATOR_NODE_LABEL:
            return value == self.machine.generation.accelerator_label
        if key == TOPOLOGY_NODE_LABEL:
            if self.topology is not None:
                return value == self.topology
            try:  # a single-host pool: a topology of one VM of its machine type
                return not catalogue.slice_shape(self.machine.name, str(value)).multi_host
            except catalogue.CatalogueError:
                return False
        return None

    def label(self, key: str) -> str:
        """What the pool's nodes carry for a label, in words."""
        if key == ACCELERATOR_NODE_LABEL and self.machine is not None:
            return json.dumps(self.machine.generation.accelerator_label)
        if key == TOPOLOGY_NODE_LABEL:
            return json.dumps(self.topology) if self.topology else "a topology of one VM (a single-host pool)"
        if key == FLEX_START_NODE_LABEL:
            return '"true"' if flex_start(self.resource) else "no such label (not a flex-start pool)"
        if key == SPOT_NODE_LABEL:
            return '"true"' if self.resource.at("nodeConfig", "spot") is True else "no such label (not Spot)"
        if key in self.node_labels:
            return json.dumps(self.node_labels[key])
        if key == POOL_NODE_LABEL:
            return "no such label"
        return json.dumps(self.name)


def tpu_pools(resources: list[Resource]) -> dict[str, Pool]:
    pools: dict[str, Pool] = {}
    for resource in resources:
        machine = tpu_machine_type(resource) if resource.type == NODE_POOL else None
        name = resource.at("name")
        if machine is None or not isinstance(name, str):
            continue
        topology = resource.at("placementPolicy", "tpuTopology")
        pools[name] = Pool(
            resource,
            name,
            catalogue.MACHINE_TYPES.get(machine),
            topology if isinstance(topology, str) else None,
            region(resource.at("location")),
        )
    return pools
