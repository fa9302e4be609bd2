"""``tpu-training:cluster``, ``nodePools`` and ``jobs``: the GKE cluster, its TPU slice pools and
the training workloads on them, and the checks that span them."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Annotated, Literal, Optional

from pydantic import (
    AfterValidator,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)
from tpu_training_components.domain import catalogue, naming
from tpu_training_components.domain.gcp_locations import region_problem, zone_problem
from tpu_training_components.domain.job_manifests import image_problem, job_name_problem, namespace_problem
from tpu_training_components.domain.jobset_manifests import MAX_RESTARTS_LIMIT, jobset_name_problem
from tpu_training_components.domain.maintenance_window import (
    DEFAULT_UPGRADE_EXCLUSION_START,
    MaintenanceWindowError,
    exclusion_start_problem,
    recurring_window,
)
from tpu_training_components.domain.node_pool_plan import (
    MAX_NODES_PER_CLUSTER,
    QUEUED_PROVISIONING_MIN_GKE_VERSION,
    TpuNodePoolPlan,
    gke_version_problem,
    parse_duration,
    plan_from,
)
from tpu_training_components.errors import suggestion

from .fields import (
    PROJECT,
    EnvName,
    Model,
    dns_label,
    no_problem,
    repeated,
)
from .network import network_problems

if TYPE_CHECKING:
    from .stack import StackConfig


class MaintenanceWindowConfig(Model):
    """``tpu-training:cluster.maintenanceWindow``: when GKE may upgrade the cluster (UTC)."""

    start_time: StrictStr = "02:00"
    end_time: StrictStr = "08:00"
    recurrence: StrictStr = "FREQ=WEEKLY;BYDAY=SA,SU"

    @model_validator(mode="after")
    def _accepted_by_gke(self) -> MaintenanceWindowConfig:
        try:
            recurring_window(self.start_time, self.end_time, self.recurrence)
        except MaintenanceWindowError as exc:
            raise ValueError(str(exc)) from None
        return self


class ClusterConfig(Model):
    """``tpu-training:cluster``: the GKE Standard cluster that runs flex-start TPU pools."""

    name: Annotated[StrictStr, AfterValidator(dns_label("cluster name", 40))]
    location: StrictStr
    release_channel: Literal["RAPID", "REGULAR", "STABLE"] = "REGULAR"
    min_version: Optional[StrictStr] = None
    maintenance_window: MaintenanceWindowConfig = MaintenanceWindowConfig()
    system_machine_type: Annotated[
        StrictStr, AfterValidator(no_problem(naming.system_machine_type_problem))
    ] = "e2-standard-4"
    system_max_nodes: StrictInt = Field(default=3, ge=1)
    network: Optional[Annotated[StrictStr, AfterValidator(no_problem(naming.network_problem))]] = None
    subnetwork: Optional[Annotated[StrictStr, AfterValidator(no_problem(naming.subnetwork_problem))]] = None
    master_ipv4_cidr_block: Optional[StrictStr] = None
    deletion_protection: StrictBool = True
    upgrade_exclusion_scope: Literal["NO_MINOR_OR_NODE_UPGRADES", "NO_MINOR_UPGRADES", "NONE"] = (
        "NO_MINOR_OR_NODE_UPGRADES"
    )
    upgrade_exclusion_start: StrictStr = DEFAULT_UPGRADE_EXCLUSION_START

    _exclusion_start = field_validator("upgrade_exclusion_start")(no_problem(exclusion_start_problem))

    @field_validator("master_ipv4_cidr_block")
    @classmethod
    def _control_plane_range(cls, value: Optional[str]) -> Optional[str]:
        # GKE: the control plane's range of a private cluster is a private /28.
        if value is None:
            return value
        try:
            network = ipaddress.IPv4Network(value, strict=False)
        except ValueError:
            network = None
        if network is None or network.prefixlen != 28 or not network.is_private:
            raise ValueError("must be a private IPv4 /28 range such as '172.16.0.32/28'")
        if str(network) != value:
            if network.network_address != ipaddress.IPv4Address(value.split("/")[0]):
                raise ValueError(
                    f"is not the start of its /28 (host bits are set); did you mean {str(network)!r}?"
                )
            raise ValueError(f"write it as {str(network)!r}")
        return value

    @field_validator("location")
    @classmethod
    def _is_region(cls, location: str) -> str:
        if not catalogue.is_region(location):
            raise ValueError(
                "must be a region such as 'europe-west4', not a zone: a regional control plane "
                "stays up while a zone is in maintenance"
            )
        problem = region_problem(location)
        if problem:
            raise ValueError(problem)
        return location

    _flex_start_version = field_validator("min_version")(
        no_problem(lambda version: naming.min_version_problem(version, gke_version_problem))
    )

    @model_validator(mode="after")
    def _subnetwork_in_the_clusters_region(self) -> ClusterConfig:
        problem = self.subnetwork and naming.subnetwork_problem(self.subnetwork, self.location)
        if problem:
            raise ValueError(f"subnetwork: {problem}")
        return self


class NodePoolConfig(Model):
    """One entry of ``tpu-training:nodePools``: a TPU slice node pool, flex-start by default."""

    name: Annotated[StrictStr, AfterValidator(dns_label("node pool name", 40))]
    machine_type: StrictStr
    topology: StrictStr
    node_locations: tuple[StrictStr, ...] = Field(min_length=1)
    # At most 100: each multi-host slice is a node pool of its own, and more is a fleet, not a
    # pool (it also keeps every plan quick).
    slices: StrictInt = Field(default=1, ge=1, le=100)
    max_run_duration: Optional[StrictStr] = None
    flex_start: StrictBool = True
    spot: StrictBool = False
    reservation: Optional[StrictStr] = None
    # Nodes only through Kueue and GKE's ProvisioningRequests: a whole slice at once, or a wait.
    queued_provisioning: StrictBool = False
    # Workloads admitted whole, in turn, through a Kueue queue of the pool's chips (no
    # ProvisioningRequests): a multislice JobSet starts only when all its slices are free.
    kueue_queue: StrictBool = False

    @property
    def queued(self) -> bool:
        """The pool's workloads go through its Kueue queue (queued provisioning or kueueQueue)."""
        return self.queued_provisioning or self.kueue_queue

    @field_validator("machine_type")
    @classmethod
    def _known_machine_type(cls, value: str) -> str:
        catalogue.machine_type(value)
        return value

    # Checked per field as well as in the pool's plan, so each error names its own key.
    @field_validator("topology")
    @classmethod
    def _topology_form(cls, value: str) -> str:
        catalogue.topology_dimensions(value)
        return value

    @field_validator("node_locations")
    @classmethod
    def _zones_exist(cls, zones: tuple[str, ...]) -> tuple[str, ...]:
        for zone in zones:
            problem = zone_problem(zone)
            if problem:
                raise ValueError(problem)
        return zones

    @field_validator("max_run_duration")
    @classmethod
    def _a_duration(cls, value: Optional[str]) -> Optional[str]:
        if value is not None:
            parse_duration(value)
        return value

    def plan(self, cluster_region: str) -> TpuNodePoolPlan:
        # The fields are named as the planner's arguments (domain.node_pool_plan.PLAN_OPTIONAL).
        return plan_from(self.name, {**self.model_dump(), "cluster_region": cluster_region})


class JobConfig(Model):
    """One entry of ``tpu-training:jobs``: a training Job on one slice of a node pool."""

    name: StrictStr
    node_pool: StrictStr
    image: StrictStr
    command: tuple[StrictStr, ...] = Field(min_length=1)
    env: dict[EnvName, StrictStr] = Field(default_factory=dict)
    namespace: StrictStr = "default"
    privileged: StrictBool = False
    # --- JobSet workloads (issue 20) ---
    slices: StrictInt = Field(default=1, ge=1, le=100)
    workload: Optional[Literal["job", "jobset"]] = None
    """None: a plain Job for one slice, a JobSet for several."""
    max_restarts: Optional[StrictInt] = Field(default=None, ge=0, le=MAX_RESTARTS_LIMIT)

    @property
    def kind(self) -> Literal["Job", "JobSet"]:
        """The Kubernetes kind the run is declared as."""
        jobset = self.workload == "jobset" or (self.workload is None and self.slices > 1)
        return "JobSet" if jobset else "Job"

    # --- end JobSet workloads ---

    _job_name = field_validator("name")(no_problem(job_name_problem))
    _image = field_validator("image")(no_problem(image_problem))
    _namespace = field_validator("namespace")(no_problem(namespace_problem))

    @field_validator("command")
    @classmethod
    def _runs_a_program(cls, command: tuple[str, ...]) -> tuple[str, ...]:
        if not command[0].strip():
            raise ValueError("the first word is the program to run, and it is blank")
        return command


def _jobset_problems(index: int, job: JobConfig, plan: TpuNodePoolPlan) -> list[str]:
    """What a Job's slices, workload and maxRestarts may be on its pool (issue 20)."""
    key = f"{PROJECT}:jobs[{index}]"
    if job.workload == "job" and job.slices > 1:
        return [
            f"{key}.workload = 'job' with slices = {job.slices}: a plain Job runs on one slice; "
            f"several slices need a JobSet (workload: jobset, or leave workload out)"
        ]
    if plan.queued_provisioning and job.slices > 1:
        return [
            f"{key}.slices = {job.slices} on node pool {plan.name!r}, which has queuedProvisioning: "
            f"a queued workload spans one slice (allowed: 1); run one job per slice, or span "
            f"slices on a pool without queuedProvisioning"
        ]
    if job.kind == "Job":
        if job.max_restarts is not None:
            return [
                f"{key}.maxRestarts = {job.max_restarts}: only a JobSet restarts itself; set "
                f"workload: jobset, or leave maxRestarts out"
            ]
        return []
    problems = []
    if not plan.multi_host:
        problems.append(
            f"{key}: a JobSet ({'slices = ' + str(job.slices) if job.slices > 1 else 'workload: jobset'}) "
            f"needs multi-host slices, and node pool {plan.name!r} has single-host ones "
            f"({plan.shape.machine_type.name} {plan.shape.topology}, 1 VM each): GKE's Multislice "
            f"takes only multi-host TPU slice node pools; use a multi-host topology or one slice "
            f"with a plain Job"
        )
    if job.slices > plan.slices:
        problems.append(
            f"{key}.slices = {job.slices}: node pool {plan.name!r} holds {plan.slices} slice(s); "
            f"raise its slices to at least {job.slices}, or ask for fewer"
        )
    if plan.multi_host:
        problem = jobset_name_problem(job.name, job.slices, plan.shape.vms)
        if problem:
            problems.append(f"{key}.name: {problem}")
    return problems


SYSTEM_POOL = "system"
"""The cluster's own CPU pool (``GkeTpuCluster``)."""


def gke_problems(config: StackConfig, planned: list[TpuNodePoolPlan | catalogue.CatalogueError]) -> list[str]:
    """Every problem of the cluster, node pools and jobs together, each naming its key."""
    problems: list[str] = network_problems(config)
    pool_names = [pool.name for pool in config.node_pools]
    for name in repeated(pool_names):
        problems.append(f"{PROJECT}:nodePools: node pool names must be unique; repeated: {name}")
    for name in repeated([job.name for job in config.jobs]):
        problems.append(f"{PROJECT}:jobs: job names must be unique; repeated: {name}")
    for name in sorted({job.name for job in config.jobs} & {vm.name for vm in config.tpu_vms}):
        problems.append(
            f"{PROJECT}:jobs: {name!r} also names a TPU VM; each training run needs a name "
            f"of its own, because the name picks its checkpoint directory"
        )
    if config.cluster is None:
        if config.node_pools or config.jobs:
            problems.append(
                f"{PROJECT}:nodePools and {PROJECT}:jobs need {PROJECT}:cluster "
                f"(at least {{name, location}}) to run on"
            )
        return problems
    # GKE pool name -> (the nodePools entry it comes from, how to name that in a message).
    gke_pools: dict[str, tuple[Optional[str], str]] = {
        SYSTEM_POOL: (None, f"{PROJECT}:cluster's CPU system pool")
    }
    for index, (pool, plan) in enumerate(zip(config.node_pools, planned, strict=True)):
        key = f"{PROJECT}:nodePools[{index}]"
        if isinstance(plan, catalogue.CatalogueError):
            problems.append(f"{key} ({pool.name}): {plan}")
            continue
        for gke_name in plan.pool_names:
            here = (pool.name, f"a pool of {key} ({pool.name})")
            owner, described = gke_pools.setdefault(gke_name, here)
            # Two entries of one name are reported above, as repeated names.
            if owner != pool.name:
                problems.append(
                    f"{key}.name = {pool.name!r}: its GKE node pool {gke_name!r} is also the "
                    f"name of {described}; rename the pool"
                )
    problems.extend(_cluster_size_problems(config, planned))
    problems.extend(_queued_version_problems(config, planned))
    for index, job in enumerate(config.jobs):
        if job.node_pool not in pool_names:
            problems.append(
                f"{PROJECT}:jobs[{index}].nodePool = {job.node_pool!r}: no such node pool"
                f"{suggestion(job.node_pool, pool_names)}; declared: {', '.join(pool_names) or 'none'}"
            )
            continue
        pool_index = pool_names.index(job.node_pool)
        plan = planned[pool_index]
        if isinstance(plan, TpuNodePoolPlan):
            problems.extend(_jobset_problems(index, job, plan))
    problems.extend(_oversubscription_problems(config, planned))
    return problems


def _oversubscription_problems(
    config: StackConfig, planned: list[TpuNodePoolPlan | catalogue.CatalogueError]
) -> list[str]:
    """A pool without a queue holds at once no more slices than its jobs ask for together. Without
    a queue nothing admits a workload whole: two 2-slice JobSets on a 2-slice pool each start on
    what is free, and with one slice each (JobSet's exclusive placement) both wait forever; two
    multi-host Jobs on one slice split its nodes the same way. A queued pool's Kueue admits one
    workload at a time within the pool's chips, so its jobs may ask for more: they wait their turn."""
    problems = []
    for index, (pool, plan) in enumerate(zip(config.node_pools, planned, strict=True)):
        if not isinstance(plan, TpuNodePoolPlan) or plan.queue_name is not None:
            continue
        runs = [(job.name, job.slices) for job in config.jobs if job.node_pool == pool.name]
        asked = sum(slices for _, slices in runs)
        if len(runs) > 1 and asked > plan.slices:
            shown = ", ".join(f"{name} ({slices})" for name, slices in runs)
            problems.append(
                f"{PROJECT}:nodePools[{index}] ({pool.name}): its jobs ask for {asked} slices together "
                f"({shown}) and it holds {plan.slices}; without a queue nothing admits a run whole, so "
                f"they would split its slices and nodes and wait for each other: raise its slices to "
                f"{asked}, move a job to another pool, or give it kueueQueue: true (Kueue then "
                f"admits each whole, in turn)"
            )
    return problems


def _cluster_size_problems(
    config: StackConfig, planned: list[TpuNodePoolPlan | catalogue.CatalogueError]
) -> list[str]:
    assert config.cluster is not None
    # A pool without a plan is reported by its own key.
    sizes = [
        (pool.name, plan.max_nodes)
        for pool, plan in zip(config.node_pools, planned, strict=True)
        if isinstance(plan, TpuNodePoolPlan)
    ]
    total = sum(size for _, size in sizes) + config.cluster.system_max_nodes
    if total <= MAX_NODES_PER_CLUSTER:
        return []
    if config.cluster.system_max_nodes > MAX_NODES_PER_CLUSTER:
        return [
            f"{PROJECT}:cluster.systemMaxNodes = {config.cluster.system_max_nodes}: above GKE's limit of "
            f"{MAX_NODES_PER_CLUSTER} nodes per cluster"
        ]
    largest = ", ".join(f"{name}: {size}" for name, size in sorted(sizes, key=lambda s: -s[1])[:3])
    return [
        f"{PROJECT}:nodePools: the pools reach {total} nodes together (the system pool's "
        f"{config.cluster.system_max_nodes} included; largest {largest}), above GKE's limit of "
        f"{MAX_NODES_PER_CLUSTER} nodes per cluster; use fewer slices or another cluster"
    ]


def _queued_version_problems(
    config: StackConfig, planned: list[TpuNodePoolPlan | catalogue.CatalogueError]
) -> list[str]:
    """A queued pool needs a newer cluster than flex-start does; checked when the stack pins one
    (unpinned, the release channel's version is far past it)."""
    assert config.cluster is not None
    version = config.cluster.min_version
    queued = [
        f"{PROJECT}:nodePools[{index}] ({pool.name})"
        for index, (pool, plan) in enumerate(zip(config.node_pools, planned, strict=True))
        if isinstance(plan, TpuNodePoolPlan) and plan.queued_provisioning
    ]
    if not queued or version is None or version == "latest":
        return []
    problem = gke_version_problem(version, QUEUED_PROVISIONING_MIN_GKE_VERSION, "TPU queued provisioning")
    if problem is None:
        return []
    return [f"{PROJECT}:cluster.minVersion = {version!r}: {problem}, which {', '.join(queued)} uses"]
