"""What a policy sees, read safely: the resource types the pack governs, where each keeps
its Pod spec, and the helpers that read props (read-only proxies of wire values) and report
violations."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from tpu_training_components.domain import catalogue
from tpu_training_components.domain.naming import STACK_LABEL_KEYS
from tpu_training_components.domain.startup_script import CHECKPOINT_VARIABLE
from tpu_training_components.domain.wire_values import is_list, plain

BUCKET = "gcp:storage/bucket:Bucket"
TPU_VM = "gcp:tpu/v2Vm:V2Vm"
CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
JOB = "kubernetes:batch/v1:Job"
POD = "kubernetes:core/v1:Pod"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"

POD_SPECS: Mapping[str, tuple[Union[str, int], ...]] = {
    # TpuTrainingJob declares a batch/v1 Job; a bare Pod would carry the same risks.
    JOB: ("spec", "template", "spec"),
    POD: ("spec",),
    # TpuTrainingJobSet declares one replicated job, whose child Jobs carry the Pods.
    JOBSET: ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec"),
}
"""Resources that carry Pods, and where each keeps its Pod spec."""

MANAGED_LABELS = STACK_LABEL_KEYS

DEFAULT_COMPUTE_ACCOUNT = re.compile(r"^[0-9]+-compute@developer\.gserviceaccount\.com$")
WHOLE_NUMBER = re.compile(r"^[0-9]+$")
CHECKPOINT_EXPORT = re.compile(rf"^\s*export {CHECKPOINT_VARIABLE}=(.+)$", re.MULTILINE)
GCS_URI = re.compile(r"^gs://([^/]+)")
TPU_MACHINE = re.compile(r"^(ct[0-9]|tpu[0-9])")


def items(value: Any) -> list[Any]:
    return list(value) if is_list(value) else []


def at(value: Any, *path: Union[str, int]) -> Any:
    """The value at ``path``, or None where a step is missing or not a map or list."""
    for key in path:
        if isinstance(key, int):
            if not is_list(value) or not 0 <= key < len(value):
                return None
            value = value[key]
        elif isinstance(value, Mapping):
            value = value.get(key)
        else:
            return None
    return value


def number(value: Any) -> Optional[float]:
    """A count or a Kubernetes quantity of whole units (``4``, ``4.0``, ``"4"``), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def show(value: Any) -> str:
    return "not set" if value is None else json.dumps(plain(value), sort_keys=True)


def region(location: Any) -> Optional[str]:
    """The region of a region or zone name, in lower case (buckets report theirs in upper case)."""
    if not isinstance(location, str):
        return None
    location = location.lower()
    if catalogue.is_region(location):
        return location
    try:
        return catalogue.region_of_zone(location)
    except catalogue.CatalogueError:
        return None


def is_default_account(email: Any) -> bool:
    """No account, GKE's ``default``, or the project's default compute account (an Editor of the
    whole project)."""
    return not email or email == "default" or bool(DEFAULT_COMPUTE_ACCOUNT.match(str(email)))


@dataclass(frozen=True)
class Resource:
    type: str
    name: str
    urn: str
    props: Mapping[str, Any]

    def __str__(self) -> str:
        return f"{self.type} {self.name!r}"

    def at(self, *path: Union[str, int]) -> Any:
        return at(self.props, *path)


class Violations:
    """Reports what one resource has at a property and what is required there."""

    def __init__(self, resource: Resource, report: ReportViolation) -> None:
        self._resource = resource
        self._report = report

    def __call__(self, prop: str, found: Any, required: str) -> None:
        self._report(f"{self._resource}: {prop} is {show(found)}; required: {required}", self._resource.urn)


Check = Callable[[Resource, Violations], None]
StackCheck = Callable[[list[Resource], ReportViolation], None]


def resource_policy(
    name: str, description: str, types: tuple[str, ...], check: Check, enforcement: EnforcementLevel
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if args.resource_type in types:
            resource = Resource(args.resource_type, args.name, args.urn, args.props)
            check(resource, Violations(resource, report_violation))

    return ResourceValidationPolicy(
        name=name, description=description, validate=validate, enforcement_level=enforcement
    )


def stack_policy(
    name: str, description: str, check: StackCheck, enforcement: EnforcementLevel
) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        check([from_stack(resource) for resource in args.resources], report_violation)

    return StackValidationPolicy(
        name=name, description=description, validate=validate, enforcement_level=enforcement
    )


def from_stack(resource: PolicyResource) -> Resource:
    return Resource(resource.resource_type, resource.name, resource.urn, resource.props)


MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY
