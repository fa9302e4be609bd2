"""Address plan for a training VPC: one subnet per region, plus GKE's pod and service ranges.

Pure Python. The plan is a function of the region names alone, so it needs no state and a
region's subnet stays where it is when other regions come and go: moving a subnet's primary range
means replacing the subnet, and every TPU VM and GKE node in it.
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass
from itertools import combinations
from typing import Optional, Sequence

from .catalogue import is_region

SUBNET_BLOCK = ipaddress.IPv4Network("10.0.0.0/9")
"""Every region's primary range is carved out of this block."""
SUBNET_PREFIX = 20
"""A /20 (4,096 addresses) per region: room for hundreds of TPU hosts or GKE nodes."""
SLOTS = 2 ** (SUBNET_PREFIX - SUBNET_BLOCK.prefixlen)
"""How many /20s fit in the block (2,048)."""

# One GKE cluster per stack, so its secondary ranges can be fixed. They sit outside SUBNET_BLOCK,
# so they can never overlap a region's primary range, whatever regions are added later.
PODS_RANGE_NAME = "gke-pods"
PODS_CIDR = "10.128.0.0/14"
"""A /14 gives GKE's default /24 per node to 1,024 nodes."""
SERVICES_RANGE_NAME = "gke-services"
SERVICES_CIDR = "10.132.0.0/20"


class NetworkPlanError(ValueError):
    """The regions cannot be planned; the message names the argument and the value."""


@dataclass(frozen=True)
class SubnetPlan:
    """One region's subnet."""

    region: str
    cidr: str
    """Primary range, a /20 inside ``10.0.0.0/9``."""


@dataclass(frozen=True)
class NetworkPlan:
    """Subnets (sorted by region) and, when there is a GKE cluster, its secondary ranges, which
    live on the subnet of ``gke_region``."""

    subnets: tuple[SubnetPlan, ...]
    gke_region: Optional[str] = None
    pods_range_name: Optional[str] = None
    pods_cidr: Optional[str] = None
    services_range_name: Optional[str] = None
    services_cidr: Optional[str] = None

    def __post_init__(self) -> None:
        # Checked on every plan, not only in tests: overlapping ranges would be refused by the
        # API half-way through an update, or worse, be accepted across peered networks.
        for (name_a, a), (name_b, b) in combinations(self.named_ranges().items(), 2):
            if a.overlaps(b):
                raise NetworkPlanError(f"{name_a} range {a} overlaps {name_b} range {b}")

    def named_ranges(self) -> dict[str, ipaddress.IPv4Network]:
        """Every range the network holds: each region's subnet, and GKE's pods and services."""
        ranges = {s.region: ipaddress.IPv4Network(s.cidr) for s in self.subnets}
        if self.pods_cidr is not None:
            ranges[PODS_RANGE_NAME] = ipaddress.IPv4Network(self.pods_cidr)
        if self.services_cidr is not None:
            ranges[SERVICES_RANGE_NAME] = ipaddress.IPv4Network(self.services_cidr)
        return ranges

    @property
    def regions(self) -> tuple[str, ...]:
        return tuple(s.region for s in self.subnets)

    @property
    def cidrs(self) -> dict[str, str]:
        """Region -> primary range."""
        return {s.region: s.cidr for s in self.subnets}

    def secondary_ranges(self, region: str) -> tuple[tuple[str, str], ...]:
        """(range name, CIDR) of the secondary ranges on ``region``'s subnet: GKE's pods and
        services on the GKE region's, none elsewhere."""
        if region != self.gke_region:
            return ()
        ranges = ((self.pods_range_name, self.pods_cidr), (self.services_range_name, self.services_cidr))
        return tuple((name, cidr) for name, cidr in ranges if name is not None and cidr is not None)

    @property
    def internal_ranges(self) -> tuple[str, ...]:
        """Every range a VM, node or pod of this network sends from: what the internal firewall
        rule admits. GKE's service range is left out: service IPs are translated on the node and
        never appear as a source."""
        primaries = tuple(s.cidr for s in self.subnets)
        return primaries + ((self.pods_cidr,) if self.pods_cidr is not None else ())


def home_slot(region: str) -> int:
    """The /20 slot a region asks for: a stable hash of its name (sha256, not Python's ``hash``,
    which changes between processes)."""
    digest = hashlib.sha256(region.encode()).digest()
    return int.from_bytes(digest, "big") % SLOTS


def slot_cidr(slot: int) -> str:
    """The /20 at ``slot`` inside ``10.0.0.0/9``."""
    size = 2 ** (32 - SUBNET_PREFIX)
    return str(ipaddress.IPv4Network((int(SUBNET_BLOCK.network_address) + slot * size, SUBNET_PREFIX)))


def _assign_slots(regions: Sequence[str]) -> dict[str, int]:
    """Home slots first, then the losers of a shared home slot probe upwards.

    In sorted-region order, each region takes its home slot if no earlier region has. Only then
    do the regions left over, again in sorted order, take the next free slot above their home slot
    (wrapping at the top). Probing after every home slot is taken means a probing region never
    lands on another region's home slot, so a region whose home slot no other region shares
    always gets it, whatever else is in the plan. A region that shares its home slot can move
    when the set of regions changes: the first in sorted order keeps the slot.
    """
    taken: dict[int, str] = {}
    slots: dict[str, int] = {}
    for region in regions:
        home = home_slot(region)
        if home not in taken:
            taken[home] = region
            slots[region] = home
    for region in regions:
        if region in slots:
            continue
        slot = (home_slot(region) + 1) % SLOTS
        while slot in taken:
            slot = (slot + 1) % SLOTS
        taken[slot] = region
        slots[region] = slot
    return slots


def _check_region(argument: str, value: object) -> str:
    if not isinstance(value, str) or not is_region(value):
        raise NetworkPlanError(
            f"{argument}: {value!r} is not a region name such as 'europe-west4' "
            f"(a zone such as 'europe-west4-a' is not accepted here)"
        )
    return value


def plan_network(regions: Sequence[str], gke_region: Optional[str] = None) -> NetworkPlan:
    """Plan one subnet per region (``gke_region`` included), and GKE's ranges when ``gke_region``
    is given. Duplicate regions are planned once."""
    if isinstance(regions, str):
        # A lone string is a Sequence[str] too, of one-letter "regions".
        raise NetworkPlanError(f"regions: expected a list of region names, got the string {regions!r}")
    wanted = {_check_region("regions", region) for region in regions}
    if gke_region is not None:
        wanted.add(_check_region("gke_region", gke_region))
    if not wanted:
        raise NetworkPlanError("regions: at least one region is needed (or a gke_region), got none")
    if len(wanted) > SLOTS:
        raise NetworkPlanError(f"regions: at most {SLOTS} regions fit in {SUBNET_BLOCK}, got {len(wanted)}")
    ordered = sorted(wanted)
    slots = _assign_slots(ordered)
    subnets = tuple(SubnetPlan(region, slot_cidr(slots[region])) for region in ordered)
    if gke_region is None:
        return NetworkPlan(subnets)
    return NetworkPlan(
        subnets,
        gke_region=gke_region,
        pods_range_name=PODS_RANGE_NAME,
        pods_cidr=PODS_CIDR,
        services_range_name=SERVICES_RANGE_NAME,
        services_cidr=SERVICES_CIDR,
    )
