"""Stack policies, on what the resources mean together: each Pod selects a pool the stack
declares and asks for its chips, and each checkpoint bucket is in its TPUs' region."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from pulumi_policy import (
    ReportViolation,
)
from tpu_training_components.domain import catalogue
from tpu_training_components.domain.job_manifests import (
    TPU_RESOURCE,
)
from tpu_training_components.domain.node_pool_plan import (
    ACCELERATOR_NODE_LABEL,
    FLEX_START_NODE_LABEL,
    NODE_POOL_LABEL,
    POOL_NODE_LABEL,
    SPOT_NODE_LABEL,
    TOPOLOGY_NODE_LABEL,
)
from tpu_training_components.domain.startup_script import CHECKPOINT_VARIABLE

from .node_pools import (
    flex_start,
    tpu_machine_type,
)
from .pods import (
    Pods,
    pods_of,
)
from .resources import (
    BUCKET,
    CHECKPOINT_EXPORT,
    CLUSTER,
    GCS_URI,
    NODE_POOL,
    TPU_VM,
    Resource,
    Violations,
    at,
    items,
    region,
)


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


def tpu_pods(resources: list[Resource], pools: dict[str, Pool]) -> Iterator[Pods]:
    for resource in resources:
        pods = pods_of(resource)
        if pods is not None and pods.on_tpus(pools):
            yield pods


def pools_of(pods: Pods, pools: dict[str, Pool]) -> list[Pool]:
    """The declared pools the Pods may run on: those they name, or else every pool whose nodes
    carry the labels they select."""
    names = pods.pool_names(pools)
    if names is not None:
        return [pools[name] for name in sorted(names) if name in pools]
    return [
        pool
        for pool in pools.values()
        if all(pool.has_label(key, value) is not False for key, value in pods.node_selector.items())
    ]


def selects_declared_pool(resources: list[Resource], report: ReportViolation) -> None:
    pools = tpu_pools(resources)
    declared = ", ".join(sorted(pools)) or "none"
    for pods in tpu_pods(resources, pools):
        violation = Violations(pods.resource, report)
        prop = (
            f"{pods.where} node pools (nodeSelector and required node affinity on {POOL_NODE_LABEL} "
            f"or {NODE_POOL_LABEL})"
        )
        names = pods.pool_names(pools)
        if names is None:
            violation(prop, None, f"node pools this stack declares ({declared})")
            continue
        if not names or names - set(pools):
            found = sorted(names) if names else pods.pool_selection() or sorted(names)
            violation(prop, found, f"node pools this stack declares ({declared})")
        for name in sorted(names & set(pools)):
            for key, value in pods.node_selector.items():
                if pools[name].has_label(key, value) is False:
                    violation(
                        f"{pods.where}.nodeSelector.{key}",
                        value,
                        f"{pools[name].label(key)}, as the nodes of node pool {name!r} carry",
                    )


def tpu_request(resources: list[Resource], report: ReportViolation) -> None:
    pools = tpu_pools(resources)
    for pods in tpu_pods(resources, pools):
        machines = {pool.machine.name: pool for pool in pools_of(pods, pools) if pool.machine is not None}
        if not machines:
            continue  # no declared pool to compare with: training-pod-selects-declared-pool says so
        violation = Violations(pods.resource, report)
        prop = f"{pods.where}.containers[*].resources.requests[{TPU_RESOURCE}] (summed)"
        chips = pods.tpu_chips()
        if len(machines) > 1:
            violation(
                prop,
                chips,
                f"pools of one machine type: the Pods may land on {', '.join(sorted(machines))}",
            )
            continue
        ((machine, pool),) = machines.items()
        required = catalogue.machine_type(machine).chips_per_vm
        if chips != required:
            violation(prop, chips, f"{required}, the chips of one {machine} VM of node pool {pool.name!r}")


def checkpoint_bucket(resource: Resource) -> Optional[str]:
    """The bucket a TPU VM's startup script or a Pod's environment names in CHECKPOINT_DIR."""
    uris: list[Any] = []
    if resource.type == TPU_VM:
        script = resource.at("metadata", "startup-script")
        match = CHECKPOINT_EXPORT.search(script) if isinstance(script, str) else None
        try:
            uris = shlex.split(match.group(1), comments=True)[:1] if match else []
        except ValueError:  # not a line the component renders: no bucket to hold it to
            uris = []
    else:
        pods = pods_of(resource)
        for _, container in pods.containers() if pods else ():
            for variable in items(at(container, "env")):
                if at(variable, "name") == CHECKPOINT_VARIABLE:
                    uris.append(at(variable, "value"))
    for uri in uris:
        match = GCS_URI.match(uri) if isinstance(uri, str) else None
        if match:
            return match.group(1)
    return None


@dataclass(frozen=True)
class Checkpointer:
    """A TPU VM or training Pods, where they run, and the bucket their CHECKPOINT_DIR names."""

    who: str
    region: str
    bucket: str


def tpus(resources: list[Resource]) -> tuple[set[str], list[Checkpointer]]:
    """The regions of the stack's TPU VMs, clusters and TPU node pools, and the TPUs whose
    checkpoint bucket and region are known."""
    pools = tpu_pools(resources)
    regions: set[str] = set()
    checkpointers: list[Checkpointer] = []
    for resource in resources:
        if resource.type == TPU_VM:
            zone_region, bucket = region(resource.at("zone")), checkpoint_bucket(resource)
            if zone_region:
                regions.add(zone_region)
            if zone_region and bucket:
                checkpointers.append(Checkpointer(str(resource), zone_region, bucket))
        elif resource.type == CLUSTER or (resource.type == NODE_POOL and resource.at("name") in pools):
            location_region = region(resource.at("location"))
            if location_region:
                regions.add(location_region)
    for pods in tpu_pods(resources, pools):
        bucket = checkpoint_bucket(pods.resource)
        pool_regions = {pool.region for pool in pools_of(pods, pools) if pool.region}
        if bucket and len(pool_regions) == 1:
            checkpointers.append(Checkpointer(str(pods.resource), pool_regions.pop(), bucket))
    return regions, checkpointers


def bucket_in_tpu_region(resources: list[Resource], report: ReportViolation) -> None:
    tpu_regions, checkpointers = tpus(resources)
    for bucket in resources:
        if bucket.type != BUCKET:
            continue
        violation = Violations(bucket, report)
        location = bucket.at("location")
        users = [user for user in checkpointers if user.bucket == bucket.at("name")]
        for user in users:
            if user.region != region(location):
                violation(
                    "location",
                    location,
                    f"{user.region.upper()}, the region of {user.who}, which checkpoints to it",
                )
        if not users and region(location) not in tpu_regions:
            regions = ", ".join(sorted(r.upper() for r in tpu_regions)) or "none: the stack declares no TPUs"
            violation("location", location, f"the region of the TPUs that use it ({regions})")
