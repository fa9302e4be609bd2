"""TPU node pools: the flex-start rules of ``node_pool_plan`` and the placement a slice needs."""

from __future__ import annotations

from typing import Optional

from tpu_training_components.domain import catalogue
from tpu_training_components.domain.node_pool_plan import (
    WORKLOAD_POLICY_GENERATIONS,
)

from .resources import (
    TPU_MACHINE,
    TPU_VM,
    Check,
    Resource,
    Violations,
    at,
    items,
    number,
)


def tpu_machine_type(pool: Resource) -> Optional[str]:
    machine = pool.at("nodeConfig", "machineType")
    if isinstance(machine, str) and (machine in catalogue.MACHINE_TYPES or TPU_MACHINE.match(machine)):
        return machine
    return None


def flex_start(pool: Resource) -> bool:
    return pool.at("nodeConfig", "flexStart") is True


def slice_shape(pool: Resource) -> Optional[catalogue.SliceShape]:
    """The slice of a pool with a placement topology, if the catalogue knows it."""
    machine, topology = tpu_machine_type(pool), pool.at("placementPolicy", "tpuTopology")
    if machine is None or not isinstance(topology, str):
        return None
    try:
        return catalogue.slice_shape(machine, topology)
    except catalogue.CatalogueError:
        return None


def multi_host(pool: Resource) -> bool:
    shape = slice_shape(pool)
    return shape is not None and shape.multi_host


def tpu_pool_check(check: Check) -> Check:
    """``check`` on node pools with a TPU machine type only."""

    def on_tpu_pools(pool: Resource, violation: Violations) -> None:
        if tpu_machine_type(pool) is not None:
            check(pool, violation)

    return on_tpu_pools


def flex_start_without_reservation(pool: Resource, violation: Violations) -> None:
    if not flex_start(pool):
        return
    affinity = pool.at("nodeConfig", "reservationAffinity", "consumeReservationType")
    if affinity != "NO_RESERVATION":
        violation("nodeConfig.reservationAffinity.consumeReservationType", affinity, '"NO_RESERVATION"')
    for key in ("spot", "preemptible"):
        if pool.at("nodeConfig", key) is True:
            violation(f"nodeConfig.{key}", True, "not set: flex-start is a provisioning model of its own")


def scales_from_zero(pool: Resource, violation: Violations) -> None:
    if not flex_start(pool):
        return
    autoscaling = pool.at("autoscaling")
    if autoscaling is None:
        violation("autoscaling", None, "autoscaling with a minimum of 0 nodes")
    for key in ("minNodeCount", "totalMinNodeCount"):
        if (number(at(autoscaling, key)) or 0) != 0:
            violation(f"autoscaling.{key}", at(autoscaling, key), "0 or not set")
    if pool.at("nodeCount") is not None:
        violation("nodeCount", pool.at("nodeCount"), "not set: the autoscaler decides the size")
    if (number(pool.at("initialNodeCount")) or 0) != 0:
        violation("initialNodeCount", pool.at("initialNodeCount"), "0 or not set")


def slice_placement(pool: Resource, violation: Violations) -> None:
    machine = tpu_machine_type(pool)
    assert machine is not None
    if machine not in catalogue.MACHINE_TYPES:
        violation("nodeConfig.machineType", machine, f"one of {', '.join(catalogue.MACHINE_TYPES)}")
        return
    topology = pool.at("placementPolicy", "tpuTopology")
    if topology is None:
        return  # a single-host pool: one VM per slice, no placement
    try:
        shape = catalogue.slice_shape(machine, str(topology))
    except catalogue.CatalogueError as exc:
        violation("placementPolicy.tpuTopology", topology, f"a slice shape of {machine}: {exc}")
        return
    if not shape.multi_host:
        violation(
            "placementPolicy.tpuTopology",
            topology,
            f"not set: a {topology} slice of {machine} is one VM, and GKE refuses a topology on a "
            f"single-host pool",
        )
        return
    generation = shape.machine_type.generation.name
    if generation in WORKLOAD_POLICY_GENERATIONS:
        violation(
            "placementPolicy.tpuTopology",
            topology,
            f"a single-host topology: multi-host {generation} slices are placed by a workload policy",
        )
    if pool.at("placementPolicy", "type") != "COMPACT":
        violation("placementPolicy.type", pool.at("placementPolicy", "type"), '"COMPACT"')
    zones = items(pool.at("nodeLocations"))
    if len(zones) != 1:
        violation("nodeLocations", pool.at("nodeLocations"), "exactly one zone: the VMs of a slice share it")
    for key in ("maxNodeCount", "totalMaxNodeCount"):
        found = pool.at("autoscaling", key)
        if found is not None and number(found) != shape.vms:
            violation(
                f"autoscaling.{key}",
                found,
                f"{shape.vms}, the VMs of one {topology} slice: a multi-host pool holds one slice",
            )


def auto_repair_off(pool: Resource, violation: Violations) -> None:
    if not (flex_start(pool) or multi_host(pool)):
        return
    if pool.at("management", "autoRepair") is not False:
        why = "flex-start capacity may not come back" if flex_start(pool) else "it re-creates the slice"
        violation("management.autoRepair", pool.at("management", "autoRepair"), f"false: {why}")


def interruptible_capacity(resource: Resource, violation: Violations) -> None:
    if resource.type == TPU_VM:
        scheduling = resource.at("schedulingConfig")
        if not any(at(scheduling, key) is True for key in ("spot", "preemptible", "reserved")):
            violation("schedulingConfig", scheduling, "spot, preemptible or reserved")
        return
    if tpu_machine_type(resource) is None:
        return
    node_config = resource.at("nodeConfig")
    specific = at(node_config, "reservationAffinity", "consumeReservationType") == "SPECIFIC_RESERVATION"
    if not (specific or any(at(node_config, key) is True for key in ("flexStart", "spot", "preemptible"))):
        violation("nodeConfig.flexStart", at(node_config, "flexStart"), "flex-start, spot or a reservation")
