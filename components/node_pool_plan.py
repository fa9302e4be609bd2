"""How a GKE TPU node pool must be set up: seed 002's flex-start rules as data and arithmetic.

Pure Python with no Pulumi import. ``plan_tpu_node_pool`` turns a machine type, a topology and the
pool's zones into every setting the node pool needs (autoscaling bounds, placement, repair,
reservation affinity) or raises ``NodePoolError`` saying which combination is invalid and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Optional, Sequence

from .catalogue import CatalogueError, SliceShape, region_of_zone, slice_shape

FLEX_START_MIN_GKE_VERSION = "1.33.0-gke.1712000"
"""The first GKE version with flex-start for TPU node pools."""

FLEX_START_MAX_RUN_SECONDS = 7 * 24 * 3600
"""Flex-start nodes live at most seven days (seed 002)."""


# Generations whose multi-host slices GKE places with a workload policy, not COMPACT placement.
WORKLOAD_POLICY_GENERATIONS = frozenset({"tpu7x"})


class NodePoolError(CatalogueError):
    """An invalid node pool combination; the message says what was given and what is allowed."""


@dataclass(frozen=True)
class TpuNodePoolPlan:
    """Every setting of one TPU node pool, derived from its slice shape and provisioning."""

    shape: SliceShape
    slices: int
    node_locations: tuple[str, ...]
    flex_start: bool
    spot: bool
    reservation: Optional[str]
    max_run_seconds: Optional[int]

    # Flex-start starts empty and lets the autoscaler bring up exactly what a workload asks for.
    initial_node_count: int = 0
    min_nodes: int = 0
    # ANY scales up in whichever of the pool's zones has capacity, which is what flex-start is
    # for; BALANCED would hold back to keep zones even.
    location_policy: Literal["ANY"] = "ANY"

    @property
    def max_nodes(self) -> int:
        """VMs per slice times slices (seed 002: ``ct6e-standard-4t`` + ``4x4`` -> 4)."""
        return self.shape.vms * self.slices

    @property
    def multi_host(self) -> bool:
        return self.shape.multi_host

    @property
    def placement_topology(self) -> Optional[str]:
        """COMPACT placement with the topology, for multi-host slices only: a single-host pool
        with a topology in its placement policy is rejected by GKE."""
        return self.shape.topology if self.multi_host else None

    @property
    def auto_repair(self) -> bool:
        """Off for multi-host pools (seed 002's ``--no-enable-autorepair``): repairing one node
        re-creates the whole slice under a running job."""
        return not self.multi_host

    @property
    def reservation_affinity(self) -> str:
        if self.reservation:
            return "SPECIFIC_RESERVATION"
        # Flex-start neither uses nor needs reservations (seed 002's --reservation-affinity=none).
        return "NO_RESERVATION"

    @property
    def max_run_duration(self) -> Optional[str]:
        """``max_run_seconds`` as the API's duration string, e.g. ``"259200s"``."""
        return None if self.max_run_seconds is None else f"{self.max_run_seconds}s"


_DURATION = re.compile(r"^([1-9][0-9]*)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str) -> int:
    """``"72h"`` -> 259200. Units: s, m, h, d."""
    match = _DURATION.match(value)
    if match is None:
        raise NodePoolError(
            f"maxRunDuration {value!r} is not a duration; write a whole number and a unit "
            f"(s, m, h or d), e.g. '72h' or '7d'"
        )
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def plan_tpu_node_pool(
    *,
    machine_type: str,
    topology: str,
    node_locations: Sequence[str],
    cluster_region: str,
    slices: int = 1,
    flex_start: bool = True,
    spot: bool = False,
    reservation: Optional[str] = None,
    max_run_duration: Optional[str] = None,
) -> TpuNodePoolPlan:
    """Validate a TPU node pool and derive its settings, or raise ``NodePoolError``."""
    shape = slice_shape(machine_type, topology)
    if slices < 1:
        raise NodePoolError(f"slices {slices} must be at least 1")
    zones = tuple(node_locations)
    if not zones:
        raise NodePoolError("nodeLocations is empty; give the zone (or zones) the TPU nodes run in")
    for zone in zones:
        if region_of_zone(zone) != cluster_region:
            raise NodePoolError(
                f"node location {zone!r} is outside the cluster's region {cluster_region!r}; "
                f"use zones of {cluster_region} (e.g. {cluster_region}-a)"
            )
    if len(set(zones)) != len(zones):
        raise NodePoolError(f"nodeLocations {list(zones)} repeats a zone")
    if shape.multi_host and shape.machine_type.generation.name in WORKLOAD_POLICY_GENERATIONS:
        raise NodePoolError(
            f"a multi-host {shape.machine_type.generation.name} slice ({topology}) is placed by a "
            f"workload policy, not COMPACT placement, which this version does not declare yet; "
            f"use a single-host topology ({shape.machine_type.name} takes 2x2x1)"
        )
    if shape.multi_host and len(zones) > 1:
        raise NodePoolError(
            f"a {topology} slice of {machine_type} spans {shape.vms} VMs, which must sit in one "
            f"zone to share the slice's interconnect; give one node location, not {list(zones)}"
        )
    if flex_start and spot:
        raise NodePoolError("flexStart and spot exclude each other: flex-start is its own provisioning model")
    if flex_start and reservation:
        raise NodePoolError(
            f"flexStart cannot consume reservation {reservation!r}: flex-start neither uses nor "
            f"needs reservations; set flexStart: false to use the reservation"
        )
    if spot and reservation:
        raise NodePoolError(f"spot nodes cannot consume reservation {reservation!r}")
    seconds = None
    if max_run_duration is not None:
        seconds = parse_duration(max_run_duration)
        if flex_start and seconds > FLEX_START_MAX_RUN_SECONDS:
            raise NodePoolError(
                f"maxRunDuration {max_run_duration!r} is longer than flex-start's limit of 7 days "
                f"({FLEX_START_MAX_RUN_SECONDS}s)"
            )
    return TpuNodePoolPlan(
        shape=shape,
        slices=slices,
        node_locations=zones,
        flex_start=flex_start,
        spot=spot,
        reservation=reservation,
        max_run_seconds=seconds,
    )


# --------------------------------------------------------------------------------------------
# GKE versions
# --------------------------------------------------------------------------------------------

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+)(?:-gke\.(\d+))?)?$")


def _version_key(version: str) -> Optional[tuple[int, ...]]:
    match = _VERSION.match(version)
    return tuple(int(part) for part in match.groups() if part is not None) if match else None


def gke_version_problem(version: str) -> Optional[str]:
    """Why a cluster version cannot run TPU flex-start pools, or None when it can.
    A prefix such as ``1.34`` is compared on the parts it gives."""
    key = _version_key(version)
    if key is None:
        return (
            f"{version!r} is not a GKE version; write MAJOR.MINOR, MAJOR.MINOR.PATCH or "
            f"MAJOR.MINOR.PATCH-gke.N (e.g. 1.34 or {FLEX_START_MIN_GKE_VERSION})"
        )
    minimum = _version_key(FLEX_START_MIN_GKE_VERSION)
    assert minimum is not None
    if key < minimum[: len(key)]:
        return f"GKE {version} is older than {FLEX_START_MIN_GKE_VERSION}, the first with TPU flex-start"
    return None
