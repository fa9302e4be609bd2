"""The stack's advisory warnings, judged from declared resources: what a program that uses the
components directly (``preview``) gets instead of the stack config's checks. Pure: the same
domain rules the stack's ``checks.warnings`` applies (``tpu_availability.zone_warning``,
``termination_grace``), read from the inputs the engine receives."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

from . import catalogue
from .cost_estimate import Declared
from .queued_resources import flex_start_zone_warning, is_queued_tpu_vm, queued_as_vm
from .termination_grace import PREEMPTIBLE_TPU_VM, SPOT_GKE_POOL, grace_fit_problem, save_fit_problem
from .tpu_availability import zone_warning

TPU_VM = "gcp:tpu/v2Vm:V2Vm"
NODE_POOL = "gcp:container/nodePool:NodePool"
JOB = "kubernetes:batch/v1:Job"


def declared_warnings(
    declared: Iterable[Declared],
    checkpoint_cost_seconds: Optional[float] = None,
    acknowledged_zones: Iterable[str] = (),
) -> list[str]:
    """Each TPU VM's and TPU node pool's zone when our tables do not list it for the generation
    (or its flex-start capacity), unless it is one of ``acknowledged_zones`` (checked against
    Google's list by the caller); with ``checkpoint_cost_seconds`` (what one save takes to be
    committed), each preemptible or Spot VM and Spot pool whose stop notice the save does not
    fit, and each Job whose Pods' grace does not cover it. Each warning starts with the
    resource's name."""
    found: list[str] = []
    acknowledged = frozenset(acknowledged_zones)
    for r in declared:
        inputs = r.inputs
        if r.type == TPU_VM:
            found += _vm_warnings(r.name, inputs, checkpoint_cost_seconds, acknowledged)
        elif is_queued_tpu_vm(r.type, inputs):
            found += _queued_vm_warnings(r.name, inputs, acknowledged)
        elif r.type == NODE_POOL:
            found += _pool_warnings(r.name, inputs, checkpoint_cost_seconds, acknowledged)
        elif r.type == JOB and checkpoint_cost_seconds is not None:
            pod = ((inputs.get("spec") or {}).get("template") or {}).get("spec") or {}
            # Kubernetes' default grace when the Pods ask for none.
            problem = grace_fit_problem(
                checkpoint_cost_seconds, int(pod.get("terminationGracePeriodSeconds", 30))
            )
            if problem:
                found.append(f"{r.name}: {problem}")
    return found


def _vm_warnings(
    name: str, inputs: Mapping[str, Any], cost_seconds: Optional[float], acknowledged: frozenset[str]
) -> list[str]:
    try:
        accelerator = catalogue.accelerator_type(str(inputs.get("acceleratorType")))
    except catalogue.CatalogueError:
        return []  # the component refuses it before anything is declared
    found = []
    zone = str(inputs.get("zone"))
    unlisted = None if zone in acknowledged else zone_warning(accelerator.generation, zone)
    if unlisted:
        found.append(f"{name}: {unlisted}")
    scheduling = inputs.get("schedulingConfig") or {}
    if cost_seconds is not None and (scheduling.get("preemptible") or scheduling.get("spot")):
        problem = save_fit_problem(cost_seconds, PREEMPTIBLE_TPU_VM, None)
        if problem:
            found.append(f"{name}: {problem}")
    return found


def _queued_vm_warnings(name: str, inputs: Mapping[str, Any], acknowledged: frozenset[str]) -> list[str]:
    """A queued VM's zone, for its generation and, when it is flex-start, for flex-start TPU VMs."""
    vm = queued_as_vm(inputs)
    try:
        accelerator = catalogue.accelerator_type(str(vm.get("acceleratorType")))
    except catalogue.CatalogueError:
        return []  # the component refuses it before anything is declared
    zone = str(vm.get("zone"))
    if zone in acknowledged:
        return []
    found = [
        zone_warning(accelerator.generation, zone),
        flex_start_zone_warning(accelerator.generation, zone) if vm.get("flexStart") else None,
    ]
    return [f"{name}: {warning}" for warning in found if warning]


def _pool_warnings(
    name: str, inputs: Mapping[str, Any], cost_seconds: Optional[float], acknowledged: frozenset[str]
) -> list[str]:
    node_config = inputs.get("nodeConfig") or {}
    machine = catalogue.MACHINE_TYPES.get(str(node_config.get("machineType")))
    if machine is None:
        return []  # the cluster's system pool, or a type the component refuses
    flex_start = bool(node_config.get("flexStart"))
    found = []
    for zone in [z for z in inputs.get("nodeLocations") or [] if z not in acknowledged]:
        warning = zone_warning(machine.generation.name, str(zone), flex_start=flex_start)
        if warning:
            found.append(f"{name}: {warning}")
    if cost_seconds is not None and node_config.get("spot"):
        problem = save_fit_problem(cost_seconds, SPOT_GKE_POOL, None)
        if problem:
            found.append(f"{name}: {problem}")
    return found
