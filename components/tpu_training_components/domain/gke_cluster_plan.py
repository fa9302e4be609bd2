"""What the GKE cluster itself needs, pure Python with no Pulumi import: a version new enough for
the features its pools use (flex-start, queued provisioning), and the zones its system pool is
pinned to so that it fits its size."""

from __future__ import annotations

import re
from typing import Optional

from .gcp_locations import REGION_ZONES
from .node_pool_plan import FLEX_START_MIN_GKE_VERSION

GKE_DEFAULT_NODE_ZONES = 3
"""A regional cluster's node pool without node locations is "replicated across three zones of the
control plane's region" (GKE docs, how-to/creating-a-regional-cluster), and its
``initial_node_count`` counts per zone (Terraform provider: "In regional or multi-zonal clusters,
this is the number of nodes per zone")."""


def system_pool_zones(region: str, max_nodes: int, nodes_per_zone: int = 1) -> Optional[tuple[str, ...]]:
    """The zones the system pool must be pinned to so that its initial size (``nodes_per_zone`` in
    every zone) fits ``max_nodes``; None when GKE's default zones already fit, so a pool declared
    before keeps its zones."""
    letters = REGION_ZONES.get(region)
    default_zones = min(GKE_DEFAULT_NODE_ZONES, len(letters)) if letters else GKE_DEFAULT_NODE_ZONES
    if letters is None or default_zones * nodes_per_zone <= max_nodes:
        return None
    fits = max(1, max_nodes // nodes_per_zone)
    return tuple(f"{region}-{letter}" for letter in letters[:fits])


_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+)(?:-gke\.(\d+))?)?$")


def _version_key(version: str) -> Optional[tuple[int, ...]]:
    match = _VERSION.fullmatch(version)
    return tuple(int(part) for part in match.groups() if part is not None) if match else None


def gke_version_problem(
    version: str, minimum: str = FLEX_START_MIN_GKE_VERSION, feature: str = "TPU flex-start"
) -> Optional[str]:
    """Why a cluster version cannot run ``feature`` (TPU flex-start pools unless told otherwise;
    ``QUEUED_PROVISIONING_MIN_GKE_VERSION`` for queued pools), or None when it can. A prefix such
    as ``1.34`` is compared on the parts it gives."""
    key = _version_key(version)
    if key is None:
        return (
            f"{version!r} is not a GKE version; write MAJOR.MINOR, MAJOR.MINOR.PATCH or "
            f"MAJOR.MINOR.PATCH-gke.N (e.g. 1.34 or {FLEX_START_MIN_GKE_VERSION})"
        )
    least = _version_key(minimum)
    assert least is not None
    if key < least[: len(key)]:
        return f"GKE {version} is older than {minimum}, the first with {feature}"
    return None
