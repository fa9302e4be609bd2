"""``tpu-training:network``: the VPC the TPU VMs and the cluster use, and its checks."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Annotated, Optional

from pydantic import (
    AfterValidator,
    StrictBool,
    StrictStr,
)
from tpu_training_components.domain.network_plan import NetworkPlanError, plan_network

from .fields import (
    PROJECT,
    Model,
    dns_label,
)

if TYPE_CHECKING:
    from .stack import StackConfig


class NetworkConfig(Model):
    """``tpu-training:network``: the VPC the TPU VMs and the cluster use."""

    create: StrictBool = True
    name: Optional[Annotated[StrictStr, AfterValidator(dns_label("network name", 63))]] = None
    iap_ssh: StrictBool = True


def network_problems(config: StackConfig) -> list[str]:
    """Per-resource networks only when the stack does not declare its own."""
    if not config.network.create:
        return []
    keys = [
        f"{PROJECT}:tpuVms[{index}].{key}"
        for index, vm in enumerate(config.tpu_vms)
        for key in ("network", "subnetwork")
        if getattr(vm, key) is not None
    ]
    if config.cluster is not None:
        cluster = config.cluster
        keys += [
            f"{PROJECT}:cluster.{key}"
            for key in ("network", "subnetwork")
            if getattr(cluster, key) is not None
        ]
    problems = [
        f"{key} is set, but {PROJECT}:network.create is true (the default), so the stack declares "
        f"the network itself; set {PROJECT}:network.create: false to bring your own"
        for key in keys
    ]
    if config.cluster is not None and config.cluster.master_ipv4_cidr_block is not None:
        problems.extend(_control_plane_overlaps(config, config.cluster.master_ipv4_cidr_block))
    return problems


def _control_plane_overlaps(config: StackConfig, block: str) -> list[str]:
    assert config.cluster is not None
    try:
        plan = plan_network(config.network_regions, config.cluster.location)
    except NetworkPlanError:
        return []  # the regions are reported by their own keys
    control_plane = ipaddress.IPv4Network(block)
    return [
        f"{PROJECT}:cluster.masterIpv4CidrBlock = {block!r} overlaps the network's {name} range "
        f"{cidr}; pick a /28 outside 10.0.0.0/8, e.g. '172.16.0.32/28'"
        for name, cidr in plan.named_ranges().items()
        if control_plane.overlaps(cidr)
    ]
