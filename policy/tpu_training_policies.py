"""CrossGuard policies for what this project promises.

Private, versioned checkpoint buckets in the TPUs' own region; TPU VMs and GKE clusters with the
secure defaults the components set; TPU node pools that follow the flex-start rules of
``node_pool_plan``; training Pods that ask for their node's chips on a node pool the stack declares.

``__main__.py`` serves these to the Pulumi CLI; the tests call each policy's ``validate`` with the
arguments the analyzer builds. Constructing ``PolicyPack`` starts a server, so only ``__main__.py``
does it.

What a policy sees (pulumi_policy's analyzer): a resource policy gets the resource's inputs, a stack
policy every resource's outputs; keys are camelCase, numbers arrive as floats, and maps and lists are
read-only ``Mapping``/``Sequence`` proxies that raise ``UnknownValueError`` on a value not known
during preview (the analyzer then reports that the policy could not run, instead of guessing).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Union

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from tpu_training_components.domain import catalogue
from tpu_training_components.domain.job_manifests import (
    PRIVILEGED_OPT_IN_ANNOTATION,
    SKIP_AWAIT_ANNOTATION,
    TPU_RESOURCE,
)
from tpu_training_components.domain.naming import STACK_LABEL_KEYS
from tpu_training_components.domain.node_pool_plan import (
    ACCELERATOR_NODE_LABEL,
    FLEX_START_NODE_LABEL,
    NODE_POOL_LABEL,
    POOL_NODE_LABEL,
    SPOT_NODE_LABEL,
    TOPOLOGY_NODE_LABEL,
    WORKLOAD_POLICY_GENERATIONS,
)
from tpu_training_components.domain.recovery import GENERATION_LABEL
from tpu_training_components.errors import CHECKPOINT_VARIABLE

PACK_NAME = "tpu-training"

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

_DEFAULT_COMPUTE_ACCOUNT = re.compile(r"^[0-9]+-compute@developer\.gserviceaccount\.com$")
_WHOLE_NUMBER = re.compile(r"^[0-9]+$")
_CHECKPOINT_EXPORT = re.compile(rf"^\s*export {CHECKPOINT_VARIABLE}=(.+)$", re.MULTILINE)
_GCS_URI = re.compile(r"^gs://([^/]+)")
_TPU_MACHINE = re.compile(r"^(ct[0-9]|tpu[0-9])")

# -------------------------------------------------------------------------------------------------
# Reading props
# -------------------------------------------------------------------------------------------------


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _items(value: Any) -> list[Any]:
    return list(value) if _is_list(value) else []


def _at(value: Any, *path: Union[str, int]) -> Any:
    """The value at ``path``, or None where a step is missing or not a map or list."""
    for key in path:
        if isinstance(key, int):
            if not _is_list(value) or not 0 <= key < len(value):
                return None
            value = value[key]
        elif isinstance(value, Mapping):
            value = value.get(key)
        else:
            return None
    return value


def _number(value: Any) -> Optional[float]:
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


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if _is_list(value):
        return [_plain(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the wire carries every number as a double
    return value


def _show(value: Any) -> str:
    return "not set" if value is None else json.dumps(_plain(value), sort_keys=True)


def _region(location: Any) -> Optional[str]:
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


def _is_default_account(email: Any) -> bool:
    """No account, GKE's ``default``, or the project's default compute account (an Editor of the
    whole project)."""
    return not email or email == "default" or bool(_DEFAULT_COMPUTE_ACCOUNT.match(str(email)))


@dataclass(frozen=True)
class _Resource:
    type: str
    name: str
    urn: str
    props: Mapping[str, Any]

    def __str__(self) -> str:
        return f"{self.type} {self.name!r}"

    def at(self, *path: Union[str, int]) -> Any:
        return _at(self.props, *path)


class _Violations:
    """Reports what one resource has at a property and what is required there."""

    def __init__(self, resource: _Resource, report: ReportViolation) -> None:
        self._resource = resource
        self._report = report

    def __call__(self, prop: str, found: Any, required: str) -> None:
        self._report(f"{self._resource}: {prop} is {_show(found)}; required: {required}", self._resource.urn)


Check = Callable[[_Resource, _Violations], None]
StackCheck = Callable[[list[_Resource], ReportViolation], None]


def _resource_policy(
    name: str, description: str, types: tuple[str, ...], check: Check, enforcement: EnforcementLevel
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if args.resource_type in types:
            resource = _Resource(args.resource_type, args.name, args.urn, args.props)
            check(resource, _Violations(resource, report_violation))

    return ResourceValidationPolicy(
        name=name, description=description, validate=validate, enforcement_level=enforcement
    )


def _stack_policy(
    name: str, description: str, check: StackCheck, enforcement: EnforcementLevel
) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        check([_from_stack(resource) for resource in args.resources], report_violation)

    return StackValidationPolicy(
        name=name, description=description, validate=validate, enforcement_level=enforcement
    )


def _from_stack(resource: PolicyResource) -> _Resource:
    return _Resource(resource.resource_type, resource.name, resource.urn, resource.props)


MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY

# -------------------------------------------------------------------------------------------------
# Checkpoint buckets
# -------------------------------------------------------------------------------------------------


def _uniform_access(bucket: _Resource, violation: _Violations) -> None:
    if bucket.at("uniformBucketLevelAccess") is not True:
        violation("uniformBucketLevelAccess", bucket.at("uniformBucketLevelAccess"), "true")


def _public_access_prevention(bucket: _Resource, violation: _Violations) -> None:
    if bucket.at("publicAccessPrevention") != "enforced":
        violation("publicAccessPrevention", bucket.at("publicAccessPrevention"), '"enforced"')


def _versioning(bucket: _Resource, violation: _Violations) -> None:
    if bucket.at("versioning", "enabled") is not True:
        violation("versioning.enabled", bucket.at("versioning", "enabled"), "true")


def _noncurrent_versions_expire(bucket: _Resource, violation: _Violations) -> None:
    if bucket.at("versioning", "enabled") is not True:
        return
    deletes = [
        rule for rule in _items(bucket.at("lifecycleRules")) if _at(rule, "action", "type") == "Delete"
    ]
    for rule in deletes:
        for key in ("daysSinceNoncurrentTime", "numNewerVersions"):
            if (_number(_at(rule, "condition", key)) or 0) > 0:
                return
    violation(
        "lifecycleRules (Delete conditions)",
        [_at(rule, "condition") for rule in deletes],
        "a Delete rule on noncurrent versions (daysSinceNoncurrentTime or numNewerVersions above 0)",
    )


def _no_force_destroy(bucket: _Resource, violation: _Violations) -> None:
    if bucket.at("forceDestroy") is True:
        violation("forceDestroy", True, "false: destroying the stack must not delete the checkpoints in it")


# -------------------------------------------------------------------------------------------------
# TPU VMs
# -------------------------------------------------------------------------------------------------


def _no_external_ip(vm: _Resource, violation: _Violations) -> None:
    configs = [("networkConfig", vm.at("networkConfig"))]
    configs += [(f"networkConfigs[{i}]", c) for i, c in enumerate(_items(vm.at("networkConfigs")))]
    for where, config in configs:
        if _at(config, "enableExternalIps") is True:
            violation(f"{where}.enableExternalIps", True, "false (reach the internet through Cloud NAT)")


def _vm_service_account(vm: _Resource, violation: _Violations) -> None:
    email = vm.at("serviceAccount", "email")
    if _is_default_account(email):
        violation("serviceAccount.email", email, "a dedicated service account, not the default compute one")


def _recovery_label(vm: _Resource, violation: _Violations) -> None:
    generation = vm.at("labels", GENERATION_LABEL)
    if not (isinstance(generation, str) and _WHOLE_NUMBER.match(generation)):
        violation(f"labels.{GENERATION_LABEL}", generation, "a whole number, the VM's recovery generation")


# -------------------------------------------------------------------------------------------------
# GKE clusters and node pools
# -------------------------------------------------------------------------------------------------


def _private_nodes(resource: _Resource, violation: _Violations) -> None:
    if resource.type == CLUSTER:
        if resource.at("privateClusterConfig", "enablePrivateNodes") is not True:
            found = resource.at("privateClusterConfig", "enablePrivateNodes")
            violation("privateClusterConfig.enablePrivateNodes", found, "true")
    elif resource.at("networkConfig", "enablePrivateNodes") is False:
        # Unset, a pool takes the cluster's setting; false gives its nodes public addresses.
        violation("networkConfig.enablePrivateNodes", False, "true or not set (the cluster's private nodes)")


def _workload_identity(resource: _Resource, violation: _Violations) -> None:
    if resource.type == CLUSTER:
        pool = resource.at("workloadIdentityConfig", "workloadPool")
        if not (isinstance(pool, str) and pool.endswith(".svc.id.goog")):
            violation("workloadIdentityConfig.workloadPool", pool, '"PROJECT.svc.id.goog"')
        return
    mode = resource.at("nodeConfig", "workloadMetadataConfig", "mode")
    if mode is not None and mode != "GKE_METADATA":
        violation(
            "nodeConfig.workloadMetadataConfig.mode", mode, '"GKE_METADATA" or not set (the cluster\'s)'
        )


def _shielded_nodes(cluster: _Resource, violation: _Violations) -> None:
    # Unset is the provider's default, true.
    if cluster.at("enableShieldedNodes") is False:
        violation("enableShieldedNodes", False, "true or not set (the provider's default, true)")


def _no_legacy_abac(cluster: _Resource, violation: _Violations) -> None:
    if cluster.at("enableLegacyAbac") is True:
        violation("enableLegacyAbac", True, "false or not set")


def _node_service_account(resource: _Resource, violation: _Violations) -> None:
    required = "a dedicated service account, not the default compute one"
    if resource.type == NODE_POOL:
        accounts = [("nodeConfig.serviceAccount", resource.at("nodeConfig", "serviceAccount"))]
    else:
        accounts = [
            (f"nodePools[{i}].nodeConfig.serviceAccount", _at(pool, "nodeConfig", "serviceAccount"))
            for i, pool in enumerate(_items(resource.at("nodePools")))
        ]
        if not _items(resource.at("nodePools")):
            # The default pool is made from nodeConfig, even with removeDefaultNodePool: it runs
            # while the cluster is created, and a node that ever ran as Editor of the project
            # may have left that credential's tokens behind.
            accounts.append(("nodeConfig.serviceAccount", resource.at("nodeConfig", "serviceAccount")))
        if resource.at("clusterAutoscaling", "enabled") is True:
            defaults = resource.at("clusterAutoscaling", "autoProvisioningDefaults", "serviceAccount")
            accounts.append(("clusterAutoscaling.autoProvisioningDefaults.serviceAccount", defaults))
    for prop, email in accounts:
        if _is_default_account(email):
            violation(prop, email, required)


def _release_channel(cluster: _Resource, violation: _Violations) -> None:
    channel = cluster.at("releaseChannel", "channel")
    if channel not in ("REGULAR", "STABLE"):
        violation("releaseChannel.channel", channel, '"REGULAR" or "STABLE"')


# -------------------------------------------------------------------------------------------------
# TPU node pools
# -------------------------------------------------------------------------------------------------


def _tpu_machine_type(pool: _Resource) -> Optional[str]:
    machine = pool.at("nodeConfig", "machineType")
    if isinstance(machine, str) and (machine in catalogue.MACHINE_TYPES or _TPU_MACHINE.match(machine)):
        return machine
    return None


def _flex_start(pool: _Resource) -> bool:
    return pool.at("nodeConfig", "flexStart") is True


def _slice_shape(pool: _Resource) -> Optional[catalogue.SliceShape]:
    """The slice of a pool with a placement topology, if the catalogue knows it."""
    machine, topology = _tpu_machine_type(pool), pool.at("placementPolicy", "tpuTopology")
    if machine is None or not isinstance(topology, str):
        return None
    try:
        return catalogue.slice_shape(machine, topology)
    except catalogue.CatalogueError:
        return None


def _multi_host(pool: _Resource) -> bool:
    shape = _slice_shape(pool)
    return shape is not None and shape.multi_host


def _tpu_pool_check(check: Check) -> Check:
    """``check`` on node pools with a TPU machine type only."""

    def on_tpu_pools(pool: _Resource, violation: _Violations) -> None:
        if _tpu_machine_type(pool) is not None:
            check(pool, violation)

    return on_tpu_pools


def _flex_start_without_reservation(pool: _Resource, violation: _Violations) -> None:
    if not _flex_start(pool):
        return
    affinity = pool.at("nodeConfig", "reservationAffinity", "consumeReservationType")
    if affinity != "NO_RESERVATION":
        violation("nodeConfig.reservationAffinity.consumeReservationType", affinity, '"NO_RESERVATION"')
    for key in ("spot", "preemptible"):
        if pool.at("nodeConfig", key) is True:
            violation(f"nodeConfig.{key}", True, "not set: flex-start is a provisioning model of its own")


def _scales_from_zero(pool: _Resource, violation: _Violations) -> None:
    if not _flex_start(pool):
        return
    autoscaling = pool.at("autoscaling")
    if autoscaling is None:
        violation("autoscaling", None, "autoscaling with a minimum of 0 nodes")
    for key in ("minNodeCount", "totalMinNodeCount"):
        if (_number(_at(autoscaling, key)) or 0) != 0:
            violation(f"autoscaling.{key}", _at(autoscaling, key), "0 or not set")
    if pool.at("nodeCount") is not None:
        violation("nodeCount", pool.at("nodeCount"), "not set: the autoscaler decides the size")
    if (_number(pool.at("initialNodeCount")) or 0) != 0:
        violation("initialNodeCount", pool.at("initialNodeCount"), "0 or not set")


def _slice_placement(pool: _Resource, violation: _Violations) -> None:
    machine = _tpu_machine_type(pool)
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
    zones = _items(pool.at("nodeLocations"))
    if len(zones) != 1:
        violation("nodeLocations", pool.at("nodeLocations"), "exactly one zone: the VMs of a slice share it")
    for key in ("maxNodeCount", "totalMaxNodeCount"):
        found = pool.at("autoscaling", key)
        if found is not None and _number(found) != shape.vms:
            violation(
                f"autoscaling.{key}",
                found,
                f"{shape.vms}, the VMs of one {topology} slice: a multi-host pool holds one slice",
            )


def _auto_repair_off(pool: _Resource, violation: _Violations) -> None:
    if not (_flex_start(pool) or _multi_host(pool)):
        return
    if pool.at("management", "autoRepair") is not False:
        why = "flex-start capacity may not come back" if _flex_start(pool) else "it re-creates the slice"
        violation("management.autoRepair", pool.at("management", "autoRepair"), f"false: {why}")


def _interruptible_capacity(resource: _Resource, violation: _Violations) -> None:
    if resource.type == TPU_VM:
        scheduling = resource.at("schedulingConfig")
        if not any(_at(scheduling, key) is True for key in ("spot", "preemptible", "reserved")):
            violation("schedulingConfig", scheduling, "spot, preemptible or reserved")
        return
    if _tpu_machine_type(resource) is None:
        return
    node_config = resource.at("nodeConfig")
    specific = _at(node_config, "reservationAffinity", "consumeReservationType") == "SPECIFIC_RESERVATION"
    if not (specific or any(_at(node_config, key) is True for key in ("flexStart", "spot", "preemptible"))):
        violation("nodeConfig.flexStart", _at(node_config, "flexStart"), "flex-start, spot or a reservation")


# -------------------------------------------------------------------------------------------------
# Labels
# -------------------------------------------------------------------------------------------------

_LABELS: Mapping[str, tuple[str, ...]] = {
    BUCKET: ("labels",),
    TPU_VM: ("labels",),
    CLUSTER: ("resourceLabels",),
    NODE_POOL: ("nodeConfig", "resourceLabels"),
}


def _managed_labels(resource: _Resource, violation: _Violations) -> None:
    path = _LABELS[resource.type]
    labels = resource.at(*path)
    missing = [key for key in MANAGED_LABELS if not isinstance(_at(labels, key), str)]
    if missing:
        violation(".".join(path), labels, f"the labels {', '.join(missing)} as well")


# -------------------------------------------------------------------------------------------------
# Training Pods
# -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pods:
    """The Pods one resource declares: the resource, and where and what its Pod spec is."""

    resource: _Resource
    where: str
    """Path of the Pod spec in the resource's props, e.g. ``spec.template.spec``."""
    spec: Mapping[str, Any]

    def containers(self, groups: tuple[str, ...] = ("containers",)) -> Iterator[tuple[str, Any]]:
        for group in groups:
            for index, container in enumerate(_items(self.spec.get(group))):
                yield f"{self.where}.{group}[{index}]", container

    def tpu_chips(self) -> Any:
        """The chips the Pods ask for, summed over the containers (each container's request, or its
        limit, which the request defaults to); None if no container asks, and the values as given
        if one is no whole number."""
        asked = []
        for _, container in self.containers():
            request = _at(container, "resources", "requests", TPU_RESOURCE)
            asked.append(
                request if request is not None else _at(container, "resources", "limits", TPU_RESOURCE)
            )
        given = [value for value in asked if value is not None]
        numbers = [_number(value) for value in given]
        if not given:
            return None
        return sum(n for n in numbers if n is not None) if None not in numbers else given

    @property
    def node_selector(self) -> Mapping[str, Any]:
        selector = self.spec.get("nodeSelector")
        return selector if isinstance(selector, Mapping) else {}

    def pool_names(self, pools: Mapping[str, _Pool]) -> Optional[set[str]]:
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
        required = _at(
            self.spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"
        )
        terms = _items(_at(required, "nodeSelectorTerms"))
        by_affinity: set[str] = set()
        for term in terms:
            in_term: Optional[set[str]] = None
            for expression in _items(_at(term, "matchExpressions")):
                if _at(expression, "operator") != "In":
                    continue
                values = {v for v in _items(_at(expression, "values")) if isinstance(v, str)}
                named = by(_at(expression, "key"), values)
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

    def on_tpus(self, pools: Mapping[str, _Pool]) -> bool:
        """Whether these are TPU Pods: they ask for chips, select TPU nodes, or a TPU pool."""
        return (
            self.tpu_chips() is not None
            or ACCELERATOR_NODE_LABEL in self.node_selector
            or bool((self.pool_names(pools) or set()) & set(pools))
        )


def _pods_of(resource: _Resource) -> Optional[_Pods]:
    path = POD_SPECS.get(resource.type)
    spec = resource.at(*path) if path else None
    if path is None or not isinstance(spec, Mapping):
        return None
    return _Pods(resource, ".".join(map(str, path)), spec)


def _not_privileged(resource: _Resource, violation: _Violations) -> None:
    pods = _pods_of(resource)
    if pods is None or resource.at("metadata", "annotations", PRIVILEGED_OPT_IN_ANNOTATION) == "true":
        return
    for where, container in pods.containers(("initContainers", "containers", "ephemeralContainers")):
        if _at(container, "securityContext", "privileged") is True:
            violation(
                f"{where}.securityContext.privileged",
                True,
                f"false, unless the {resource.type.rsplit(':', 1)[-1]} opts in with the annotation "
                f'{PRIVILEGED_OPT_IN_ANNOTATION}: "true"',
            )


def _skip_await(job: _Resource, violation: _Violations) -> None:
    annotations = job.at("metadata", "annotations")
    if _at(annotations, SKIP_AWAIT_ANNOTATION) != "true":
        found = _at(annotations, SKIP_AWAIT_ANNOTATION)
        violation(f"metadata.annotations.{SKIP_AWAIT_ANNOTATION}", found, '"true"')
    if _at(annotations, "pulumi.com/replaceUnready") == "true":
        violation(
            "metadata.annotations.pulumi.com/replaceUnready",
            "true",
            "not set: it replaces a Job that is still training",
        )


# -------------------------------------------------------------------------------------------------
# Stack policies: what the resources mean together
# -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pool:
    """A TPU node pool the stack declares, and the labels GKE gives its nodes."""

    resource: _Resource
    name: str
    machine: Optional[catalogue.MachineType]
    topology: Optional[str]
    """The placement topology of a multi-host pool."""
    region: Optional[str]

    @property
    def node_labels(self) -> Mapping[str, Any]:
        """The Kubernetes labels the pool declares for its nodes (``nodeConfig.labels``)."""
        labels = self.resource.at("nodeConfig", "labels")
        return labels if isinstance(labels, Mapping) else {}

    def has_label(self, key: str, value: Any) -> Optional[bool]:
        """Whether the pool's nodes carry ``key=value``; None for a label this policy cannot tell."""
        if key == NODE_POOL_LABEL:
            return value == self.name
        if key in self.node_labels or key == POOL_NODE_LABEL:
            return self.node_labels.get(key) == value
        if key == FLEX_START_NODE_LABEL:
            return (value == "true") == _flex_start(self.resource)
        if key == SPOT_NODE_LABEL:
            return (value == "true") == (self.resource.at("nodeConfig", "spot") is True)
        if self.machine is None:
            return None
        if key == ACCELERATOR_NODE_LABEL:
            return value == self.machine.generation.accelerator_label
        if key == TOPOLOGY_NODE_LABEL:
            if self.topology is not None:
                return value == self.topology
            try:  # a single-host pool: a topology of one VM of its machine type
                return not catalogue.slice_shape(self.machine.name, str(value)).multi_host
            except catalogue.CatalogueError:
                return False
        return None

    def label(self, key: str) -> str:
        """What the pool's nodes carry for a label, in words."""
        if key == ACCELERATOR_NODE_LABEL and self.machine is not None:
            return json.dumps(self.machine.generation.accelerator_label)
        if key == TOPOLOGY_NODE_LABEL:
            return json.dumps(self.topology) if self.topology else "a topology of one VM (a single-host pool)"
        if key == FLEX_START_NODE_LABEL:
            return '"true"' if _flex_start(self.resource) else "no such label (not a flex-start pool)"
        if key == SPOT_NODE_LABEL:
            return '"true"' if self.resource.at("nodeConfig", "spot") is True else "no such label (not Spot)"
        if key in self.node_labels:
            return json.dumps(self.node_labels[key])
        if key == POOL_NODE_LABEL:
            return "no such label"
        return json.dumps(self.name)


def _tpu_pools(resources: list[_Resource]) -> dict[str, _Pool]:
    pools: dict[str, _Pool] = {}
    for resource in resources:
        machine = _tpu_machine_type(resource) if resource.type == NODE_POOL else None
        name = resource.at("name")
        if machine is None or not isinstance(name, str):
            continue
        topology = resource.at("placementPolicy", "tpuTopology")
        pools[name] = _Pool(
            resource,
            name,
            catalogue.MACHINE_TYPES.get(machine),
            topology if isinstance(topology, str) else None,
            _region(resource.at("location")),
        )
    return pools


def _tpu_pods(resources: list[_Resource], pools: dict[str, _Pool]) -> Iterator[_Pods]:
    for resource in resources:
        pods = _pods_of(resource)
        if pods is not None and pods.on_tpus(pools):
            yield pods


def _pools_of(pods: _Pods, pools: dict[str, _Pool]) -> list[_Pool]:
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


def _selects_declared_pool(resources: list[_Resource], report: ReportViolation) -> None:
    pools = _tpu_pools(resources)
    declared = ", ".join(sorted(pools)) or "none"
    for pods in _tpu_pods(resources, pools):
        violation = _Violations(pods.resource, report)
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


def _tpu_request(resources: list[_Resource], report: ReportViolation) -> None:
    pools = _tpu_pools(resources)
    for pods in _tpu_pods(resources, pools):
        machines = {pool.machine.name: pool for pool in _pools_of(pods, pools) if pool.machine is not None}
        if not machines:
            continue  # no declared pool to compare with: training-pod-selects-declared-pool says so
        violation = _Violations(pods.resource, report)
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


def _checkpoint_bucket(resource: _Resource) -> Optional[str]:
    """The bucket a TPU VM's startup script or a Pod's environment names in CHECKPOINT_DIR."""
    uris: list[Any] = []
    if resource.type == TPU_VM:
        script = resource.at("metadata", "startup-script")
        match = _CHECKPOINT_EXPORT.search(script) if isinstance(script, str) else None
        try:
            uris = shlex.split(match.group(1), comments=True)[:1] if match else []
        except ValueError:  # not a line the component renders: no bucket to hold it to
            uris = []
    else:
        pods = _pods_of(resource)
        for _, container in pods.containers() if pods else ():
            for variable in _items(_at(container, "env")):
                if _at(variable, "name") == CHECKPOINT_VARIABLE:
                    uris.append(_at(variable, "value"))
    for uri in uris:
        match = _GCS_URI.match(uri) if isinstance(uri, str) else None
        if match:
            return match.group(1)
    return None


@dataclass(frozen=True)
class _Checkpointer:
    """A TPU VM or training Pods, where they run, and the bucket their CHECKPOINT_DIR names."""

    who: str
    region: str
    bucket: str


def _tpus(resources: list[_Resource]) -> tuple[set[str], list[_Checkpointer]]:
    """The regions of the stack's TPU VMs, clusters and TPU node pools, and the TPUs whose
    checkpoint bucket and region are known."""
    pools = _tpu_pools(resources)
    regions: set[str] = set()
    checkpointers: list[_Checkpointer] = []
    for resource in resources:
        if resource.type == TPU_VM:
            zone_region, bucket = _region(resource.at("zone")), _checkpoint_bucket(resource)
            if zone_region:
                regions.add(zone_region)
            if zone_region and bucket:
                checkpointers.append(_Checkpointer(str(resource), zone_region, bucket))
        elif resource.type == CLUSTER or (resource.type == NODE_POOL and resource.at("name") in pools):
            location_region = _region(resource.at("location"))
            if location_region:
                regions.add(location_region)
    for pods in _tpu_pods(resources, pools):
        bucket = _checkpoint_bucket(pods.resource)
        pool_regions = {pool.region for pool in _pools_of(pods, pools) if pool.region}
        if bucket and len(pool_regions) == 1:
            checkpointers.append(_Checkpointer(str(pods.resource), pool_regions.pop(), bucket))
    return regions, checkpointers


def _bucket_in_tpu_region(resources: list[_Resource], report: ReportViolation) -> None:
    tpu_regions, checkpointers = _tpus(resources)
    for bucket in resources:
        if bucket.type != BUCKET:
            continue
        violation = _Violations(bucket, report)
        location = bucket.at("location")
        users = [user for user in checkpointers if user.bucket == bucket.at("name")]
        for user in users:
            if user.region != _region(location):
                violation(
                    "location",
                    location,
                    f"{user.region.upper()}, the region of {user.who}, which checkpoints to it",
                )
        if not users and _region(location) not in tpu_regions:
            regions = ", ".join(sorted(r.upper() for r in tpu_regions)) or "none: the stack declares no TPUs"
            violation("location", location, f"the region of the TPUs that use it ({regions})")


# -------------------------------------------------------------------------------------------------
# The pack
# -------------------------------------------------------------------------------------------------

POLICIES: list[Policy] = [
    _resource_policy(
        "checkpoint-bucket-uniform-access",
        "Checkpoint buckets use uniform bucket-level access: IAM alone decides who reads and writes "
        "checkpoints, with no object ACLs as a second, easily forgotten path.",
        (BUCKET,),
        _uniform_access,
        MANDATORY,
    ),
    _resource_policy(
        "checkpoint-bucket-public-access-prevention",
        "Checkpoint buckets enforce public access prevention: checkpoints and datasets are never "
        "public, whatever IAM binding a later change adds.",
        (BUCKET,),
        _public_access_prevention,
        MANDATORY,
    ),
    _resource_policy(
        "checkpoint-bucket-versioning",
        "Checkpoint buckets keep object versions: a checkpoint overwritten by a crashing or preempted "
        "run survives as a noncurrent version, so training can resume from it.",
        (BUCKET,),
        _versioning,
        MANDATORY,
    ),
    _stack_policy(
        "checkpoint-bucket-in-tpu-region",
        "Checkpoint buckets are in the region of the TPUs that use them (the bucket a TPU VM's or "
        "training Pod's CHECKPOINT_DIR names; any other bucket, the region of a TPU VM zone or GKE "
        "cluster of the stack): a cross-region checkpoint is slower to write and read, and costs "
        "egress on every save and restore.",
        _bucket_in_tpu_region,
        MANDATORY,
    ),
    _resource_policy(
        "tpu-vm-no-external-ip",
        "TPU VMs have no external IP addresses: training reads from and writes to Cloud Storage "
        "only, through Private Google Access and Cloud NAT, and a public address is an open door.",
        (TPU_VM,),
        _no_external_ip,
        MANDATORY,
    ),
    _resource_policy(
        "tpu-vm-no-default-service-account",
        "TPU VMs run as a dedicated service account, never the default compute service account "
        "(PROJECT_NUMBER-compute@developer.gserviceaccount.com, also used when none is given), "
        "which is an Editor of the whole project.",
        (TPU_VM,),
        _vm_service_account,
        MANDATORY,
    ),
    _resource_policy(
        "tpu-vm-recovery-label",
        f"TPU VMs carry the '{GENERATION_LABEL}' label: recovery re-creates a preempted VM by bumping "
        "it, and reads it back from the live node to know what was deployed.",
        (TPU_VM,),
        _recovery_label,
        MANDATORY,
    ),
    _resource_policy(
        "gke-private-nodes",
        "GKE nodes have no public IP addresses (private nodes on the cluster, and no node pool that "
        "turns them off): they reach images and Google APIs through Cloud NAT and Private Google "
        "Access.",
        (CLUSTER, NODE_POOL),
        _private_nodes,
        MANDATORY,
    ),
    _resource_policy(
        "gke-workload-identity",
        "GKE clusters enable Workload Identity, and no node pool exposes the node's metadata "
        "server: training Pods act as their own Google service account, never as the node's.",
        (CLUSTER, NODE_POOL),
        _workload_identity,
        MANDATORY,
    ),
    _resource_policy(
        "gke-shielded-nodes",
        "GKE clusters use shielded nodes: a node proves its identity with secure boot and a vTPM "
        "before it may join the cluster.",
        (CLUSTER,),
        _shielded_nodes,
        MANDATORY,
    ),
    _resource_policy(
        "gke-no-legacy-abac",
        "GKE clusters leave legacy ABAC off: access is decided by IAM and RBAC, never by the legacy "
        "attribute-based policy that grants broad rights.",
        (CLUSTER,),
        _no_legacy_abac,
        MANDATORY,
    ),
    _resource_policy(
        "gke-no-default-node-service-account",
        "GKE nodes run as a dedicated service account, never the default compute service account, "
        "which is an Editor of the whole project (node pools, inline pools, the default pool even when "
        "it is removed once the cluster is made, and node auto-provisioning).",
        (CLUSTER, NODE_POOL),
        _node_service_account,
        MANDATORY,
    ),
    _resource_policy(
        "tpu-node-pool-flex-start-no-reservation",
        "Flex-start TPU node pools consume no reservation (NO_RESERVATION) and are neither Spot nor "
        "preemptible: flex-start is a provisioning model of its own and GKE refuses the mix.",
        (NODE_POOL,),
        _tpu_pool_check(_flex_start_without_reservation),
        MANDATORY,
    ),
    _resource_policy(
        "tpu-node-pool-scales-from-zero",
        "Flex-start TPU node pools autoscale from zero, with no fixed or initial node count: "
        "flex-start brings up exactly what a waiting workload asks for, and an idle slice costs "
        "nothing.",
        (NODE_POOL,),
        _tpu_pool_check(_scales_from_zero),
        MANDATORY,
    ),
    _resource_policy(
        "tpu-node-pool-slice-placement",
        "TPU node pools have the placement their slice needs: a multi-host pool holds one slice "
        "with COMPACT placement of its tpuTopology in one zone, at most that slice's VMs (the hosts "
        "share an interconnect); a single-host pool gives no topology, which GKE refuses there.",
        (NODE_POOL,),
        _tpu_pool_check(_slice_placement),
        MANDATORY,
    ),
    _resource_policy(
        "tpu-node-pool-auto-repair-off",
        "Flex-start and multi-host TPU node pools turn auto-repair off: a repair re-creates nodes, "
        "flex-start capacity may not come back, and in a multi-host pool it re-creates the whole "
        "slice under a running job.",
        (NODE_POOL,),
        _tpu_pool_check(_auto_repair_off),
        MANDATORY,
    ),
    _resource_policy(
        "training-pod-not-privileged",
        "Training Pods run no privileged container unless their Job opts in with the annotation "
        f'{PRIVILEGED_OPT_IN_ANNOTATION}: "true": the TPU device plugin exposes the chips without '
        "it on current GKE, and a privileged container owns its node.",
        tuple(POD_SPECS),
        _not_privileged,
        MANDATORY,
    ),
    _stack_policy(
        "training-pod-tpu-request",
        f"Training Pods request {TPU_RESOURCE} equal to the chips of one VM of the node pool they "
        "run on: GKE schedules one Pod per TPU VM, and a Pod that asks for more never schedules "
        "while one that asks for fewer leaves chips idle.",
        _tpu_request,
        MANDATORY,
    ),
    _stack_policy(
        "training-pod-selects-declared-pool",
        f"Training Pods select, by {POOL_NODE_LABEL} (the label every slice of one pool gives its "
        f"nodes) or by {NODE_POOL_LABEL}, only node pools this stack declares, whose nodes carry the "
        "accelerator, topology and capacity labels the Pods select: another pool of the same shape "
        "(another stack's) is not this Job's capacity, and a mismatch never schedules.",
        _selects_declared_pool,
        MANDATORY,
    ),
    _resource_policy(
        "checkpoint-bucket-noncurrent-versions-expire",
        "Versioned checkpoint buckets delete noncurrent versions after a while: otherwise every "
        "overwritten checkpoint is kept, and billed, forever. Advisory: a team may keep versions on "
        "purpose (audits, a retention policy of its own).",
        (BUCKET,),
        _noncurrent_versions_expire,
        ADVISORY,
    ),
    _resource_policy(
        "checkpoint-bucket-no-force-destroy",
        "Checkpoint buckets are not force-destroyed: with forceDestroy, destroying the stack deletes "
        "every checkpoint in the bucket. Advisory: a scratch stack may want a clean teardown.",
        (BUCKET,),
        _no_force_destroy,
        ADVISORY,
    ),
    _resource_policy(
        "tpu-interruptible-capacity",
        "TPUs run on Spot, preemptible, flex-start or reserved capacity, which this project's "
        "recovery and checkpointing are built for, rather than on-demand at the highest price. "
        "Advisory: on-demand quota or a committed-use discount can make it the right choice.",
        (TPU_VM, NODE_POOL),
        _interruptible_capacity,
        ADVISORY,
    ),
    _resource_policy(
        "gke-release-channel",
        "GKE clusters follow the REGULAR or STABLE release channel: versions arrive tested, inside "
        "the maintenance window. Advisory: RAPID may be needed for the newest TPU features.",
        (CLUSTER,),
        _release_channel,
        ADVISORY,
    ),
    _resource_policy(
        "managed-labels",
        f"Buckets, TPU VMs, clusters and node pools carry the stack's labels ({', '.join(MANAGED_LABELS)}), "
        "so billing exports attribute TPU spend to a stack. Advisory: an organisation may label by "
        "a scheme of its own.",
        tuple(_LABELS),
        _managed_labels,
        ADVISORY,
    ),
    _resource_policy(
        "training-job-skip-await",
        f'Training Jobs are annotated {SKIP_AWAIT_ANNOTATION}: "true" and not '
        "pulumi.com/replaceUnready: otherwise `pulumi up` waits for a days-long Job to finish and "
        "fails after 10 minutes, or replaces a Job that is still training. Advisory: a short Job "
        "may be worth waiting for.",
        (JOB, JOBSET),
        _skip_await,
        ADVISORY,
    ),
]
"""Every policy of the pack, mandatory ones first."""
