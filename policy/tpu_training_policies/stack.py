"""Stack policies, on what the resources mean together: each Pod selects a pool the stack
declares and asks for its chips, and each checkpoint bucket is in its TPUs' region."""

from __future__ import annotations

import shlex
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
    NODE_POOL_LABEL,
    POOL_NODE_LABEL,
)
from tpu_training_components.domain.startup_script import CHECKPOINT_VARIABLE

from .pods import (
    Pods,
    pods_of,
)
from .pools import Pool, tpu_pools
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
