"""The stack's labels on everything billed."""

from __future__ import annotations

from collections.abc import Mapping

from .resources import (
    BUCKET,
    CLUSTER,
    MANAGED_LABELS,
    NODE_POOL,
    TPU_VM,
    Resource,
    Violations,
    at,
)

LABELS: Mapping[str, tuple[str, ...]] = {
    BUCKET: ("labels",),
    TPU_VM: ("labels",),
    CLUSTER: ("resourceLabels",),
    NODE_POOL: ("nodeConfig", "resourceLabels"),
}


def managed_labels(resource: Resource, violation: Violations) -> None:
    path = LABELS[resource.type]
    labels = resource.at(*path)
    missing = [key for key in MANAGED_LABELS if not isinstance(at(labels, key), str)]
    if missing:
        violation(".".join(path), labels, f"the labels {', '.join(missing)} as well")
