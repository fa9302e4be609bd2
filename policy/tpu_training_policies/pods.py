"""Training Pods, in a Job, a JobSet or bare: not privileged unless opted in, and not awaited."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from tpu_training_components.domain.job_manifests import (
    PRIVILEGED_OPT_IN_ANNOTATION,
    SKIP_AWAIT_ANNOTATION,
    TPU_RESOURCE,
)
from tpu_training_components.domain.node_pool_plan import (
    ACCELERATOR_NODE_LABEL,
    NODE_POOL_LABEL,
    POOL_NODE_LABEL,
)

from .pools import Pool
from .resources import (
    POD_SPECS,
    Resource,
    Violations,
    at,
    items,
    number,
)


@dataclass(frozen=True)
class Pods:
    """The Pods one resource declares: the resource, and where and what its Pod spec is."""

    resource: Resource
    where: str
    """Path of the Pod spec in the resource's props, e.g. ``spec.template.spec``."""
    spec: Mapping[str, Any]

    def containers(self, groups: tuple[str, ...] = ("containers",)) -> Iterator[tuple[str, Any]]:
        for group in groups:
            for index, container in enumerate(items(self.spec.get(group))):
                yield f"{self.where}.{group}[{index}]", container

    def tpu_chips(self) -> Any:
        """The chips the Pods ask for, summed over the containers (each container's request, or its
        limit, which the request defaults to); None if no container asks, and the values as given
        if one is no whole number."""
        asked = []
        for _, container in self.containers():
            request = at(container, "resources", "requests", TPU_RESOURCE)
            asked.append(
                request if request is not None else at(container, "resources", "limits", TPU_RESOURCE)
            )
        given = [value for value in asked if value is not None]
        numbers = [number(value) for value in given]
        if not given:
            return None
        return sum(n for n in numbers if n is not None) if None not in numbers else given

    @property
    def node_selector(self) -> Mapping[str, Any]:
        selector = self.spec.get("nodeSelector")
        return selector if isinstance(selector, Mapping) else {}

    def pool_names(self, pools: Mapping[str, Pool]) -> Optional[set[str]]:
        """The GKE node pools the Pods may run on, by ``cloud.google.com/gke-nodepool`` (a pool's
        GKE name) or ``tpu-training/node-pool`` (the label every slice of one of our pools gives
        its nodes) in the nodeSelector and the required node affinity; None when they allow any
        pool. A label value no declared pool carries selects no declared pool."""

        def by(key: Any, values: set[str]) -> Optional[set[str]]:
            if key == NODE_POOL_LABEL:
                return values
            if key == POOL_NODE_LABEL:
                return {
                    name for name, pool in pools.items() if pool.node_labels.get(POOL_NODE_LABEL) in values
                }
            return None

        allowed: Optional[set[str]] = None
        for key, selected in self.node_selector.items():
            named = by(key, {selected}) if isinstance(selected, str) else None
            if named is not None:
                allowed = named if allowed is None else allowed & named
        required = at(self.spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
        terms = items(at(required, "nodeSelectorTerms"))
        by_affinity: set[str] = set()
        for term in terms:
            in_term: Optional[set[str]] = None
            for expression in items(at(term, "matchExpressions")):
                if at(expression, "operator") != "In":
                    continue
                values = {v for v in items(at(expression, "values")) if isinstance(v, str)}
                named = by(at(expression, "key"), values)
                if named is not None:
                    in_term = named if in_term is None else in_term & named
            if in_term is None:
                return allowed  # the terms are ORed: this one lets the Pods onto any pool
            by_affinity |= in_term
        if terms:
            allowed = by_affinity if allowed is None else allowed & by_affinity
        return allowed

    def pool_selection(self) -> dict[str, Any]:
        """How the Pods name their pool, as given: for a message."""
        return {
            key: value
            for key, value in self.node_selector.items()
            if key in (NODE_POOL_LABEL, POOL_NODE_LABEL)
        }

    def on_tpus(self, pools: Mapping[str, Pool]) -> bool:
        """Whether these are TPU Pods: they ask for chips, select TPU nodes, or a TPU pool."""
        return (
            self.tpu_chips() is not None
            or ACCELERATOR_NODE_LABEL in self.node_selector
            or bool((self.pool_names(pools) or set()) & set(pools))
        )


def pods_of(resource: Resource) -> Optional[Pods]:
    path = POD_SPECS.get(resource.type)
    spec = resource.at(*path) if path else None
    if path is None or not isinstance(spec, Mapping):
        return None
    return Pods(resource, ".".join(map(str, path)), spec)


def not_privileged(resource: Resource, violation: Violations) -> None:
    pods = pods_of(resource)
    if pods is None or resource.at("metadata", "annotations", PRIVILEGED_OPT_IN_ANNOTATION) == "true":
        return
    for where, container in pods.containers(("initContainers", "containers", "ephemeralContainers")):
        if at(container, "securityContext", "privileged") is True:
            violation(
                f"{where}.securityContext.privileged",
                True,
                f"false, unless the {resource.type.rsplit(':', 1)[-1]} opts in with the annotation "
                f'{PRIVILEGED_OPT_IN_ANNOTATION}: "true"',
            )


def skip_await(job: Resource, violation: Violations) -> None:
    annotations = job.at("metadata", "annotations")
    if at(annotations, SKIP_AWAIT_ANNOTATION) != "true":
        found = at(annotations, SKIP_AWAIT_ANNOTATION)
        violation(f"metadata.annotations.{SKIP_AWAIT_ANNOTATION}", found, '"true"')
    if at(annotations, "pulumi.com/replaceUnready") == "true":
        violation(
            "metadata.annotations.pulumi.com/replaceUnready",
            "true",
            "not set: it replaces a Job that is still training",
        )
