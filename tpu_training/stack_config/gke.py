"""``tpu-training:cluster``, ``nodePools`` and ``jobs``: the GKE cluster, its TPU slice pools and
the training workloads on them, each checked on its own (the checks that span them are
``gke_checks``)."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal, Optional, Union, get_args

from pydantic import (
    AfterValidator,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)
from tpu_training_components.domain import catalogue, naming
from tpu_training_components.domain.gcp_locations import region_problem, zone_problem
from tpu_training_components.domain.gke_cluster_plan import gke_version_problem
from tpu_training_components.domain.job_manifests import image_problem, job_name_problem, namespace_problem
from tpu_training_components.domain.jobset_manifests import MAX_RESTARTS_LIMIT
from tpu_training_components.domain.maintenance_window import (
    DEFAULT_UPGRADE_EXCLUSION_START,
    MaintenanceWindowError,
    exclusion_start_problem,
    recurring_window,
)
from tpu_training_components.domain.node_pool_plan import (
    LADDER_RUNGS,
    TpuNodePoolPlan,
    parse_duration,
    plan_from,
)
from tpu_training_components.domain.tpu_availability import FLEX_START_GENERATIONS
from tpu_training_components.errors import suggestion

from .fields import (
    EnvName,
    HangMinutes,
    Model,
    dns_label,
    no_problem,
    repeated,
)


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
    # False where the cluster already runs the engine (installed by xpk, a platform team or
    # another stack): a second Helm release of it would fail on the objects the first one owns.
    install_job_set: StrictBool = True
    install_kueue: StrictBool = True

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


PoolProvisioning = Literal["flex-start", "flex-start-queued", "spot", "reserved", "on-demand"]
"""How a node pool gets its nodes, GKE's consumption options: flex-start (Dynamic Workload
Scheduler), flex-start with queued provisioning (nodes only through Kueue's ProvisioningRequests,
a whole slice at once), Spot, a reservation, or on-demand."""
POOL_PROVISIONING: tuple[str, ...] = get_args(PoolProvisioning)
_FLEX_START = ("flex-start", "flex-start-queued")
_ONE_PROVISIONING: TypeAdapter[str] = TypeAdapter(PoolProvisioning)


def _one_or_ladder(value: Any) -> Union[str, tuple[str, ...]]:
    """One capacity, or a list of them (a ladder), each checked as one: a wrong value is refused
    with what is allowed, as for a single value (a union type's error would list both forms)."""
    if isinstance(value, (list, tuple)):
        rungs = []
        for index, rung in enumerate(value):
            # flex-start-queued passes here, to be refused as a rung with the reason (_offered).
            if rung not in POOL_PROVISIONING:
                raise ValueError(
                    f"rung {index} ({rung!r}) is not a capacity{suggestion(str(rung), LADDER_RUNGS)}; "
                    f"allowed in a list: {', '.join(LADDER_RUNGS)}"
                )
            rungs.append(rung)
        return tuple(rungs)
    return _ONE_PROVISIONING.validate_python(value)


def _replaced_by_provisioning(key: str, value: Any) -> str:
    """What to write instead of ``key: value``, a capacity key of pools before ``provisioning``."""
    instead = {
        ("flexStart", True): "provisioning: flex-start, the default (or just remove flexStart)",
        ("flexStart", False): "provisioning: spot, reserved (with reservation) or on-demand",
        ("spot", True): "provisioning: spot",
        ("queuedProvisioning", True): "provisioning: flex-start-queued",
    }.get((key, value), f"provisioning (or remove {key}: the default is flex-start)")
    return f"replaced by provisioning: write {instead}; allowed: {', '.join(POOL_PROVISIONING)}"


class NodePoolConfig(Model):
    """One entry of ``tpu-training:nodePools``: a TPU slice node pool, flex-start by default."""

    replaced_keys = {key: _replaced_by_provisioning for key in ("flexStart", "spot", "queuedProvisioning")}

    name: Annotated[StrictStr, AfterValidator(dns_label("node pool name", 40))]
    machine_type: StrictStr
    topology: StrictStr
    node_locations: tuple[StrictStr, ...] = Field(min_length=1)
    # The node locations checked against Google's list: our table's warning is not said.
    allow_unlisted_zone: StrictBool = False
    # At most 100: each multi-host slice is a node pool of its own, and more is a fleet, not a
    # pool (it also keeps every plan quick).
    slices: StrictInt = Field(default=1, ge=1, le=100)
    max_run_duration: Optional[StrictStr] = None
    reservation: Optional[StrictStr] = None
    # One value, as tpuVms' provisioning, or a ladder: a list of capacities GKE tries in order
    # through the pool's ComputeClass. Checked against the keys above it, so it comes after them.
    provisioning: Annotated[
        Union[PoolProvisioning, tuple[PoolProvisioning, ...]], PlainValidator(_one_or_ladder)
    ] = Field(default="flex-start", validate_default=True)
    # Workloads admitted whole, in turn, through a Kueue queue of the pool's chips (no
    # ProvisioningRequests): a multislice JobSet starts only when all its slices are free.
    kueue_queue: StrictBool = False

    @property
    def ladder(self) -> tuple[str, ...]:
        """The capacities GKE tries in order through the pool's ComputeClass; empty for one value
        (a list of one is that value)."""
        return self.provisioning if isinstance(self.provisioning, tuple) else ()

    @property
    def flex_start(self) -> bool:
        return self.provisioning in _FLEX_START

    @property
    def spot(self) -> bool:
        return self.provisioning == "spot"

    @property
    def queued_provisioning(self) -> bool:
        """Nodes only through Kueue and GKE's ProvisioningRequests: a whole slice at once, or a wait."""
        return self.provisioning == "flex-start-queued"

    @property
    def queued(self) -> bool:
        """The pool's workloads go through its Kueue queue (queued provisioning or kueueQueue)."""
        return self.queued_provisioning or self.kueue_queue

    @field_validator("provisioning")
    @classmethod
    def _offered(
        cls, value: Union[str, tuple[str, ...]], info: ValidationInfo
    ) -> Union[str, tuple[str, ...]]:
        # Here, not only in the pool's plan, so the error names this key and what it allows.
        if isinstance(value, tuple):
            return cls._ladder_offered(value, info)
        reservation = info.data.get("reservation")
        if value == "reserved" and reservation is None:
            raise ValueError("give the name of the reservation the pool consumes in reservation")
        if value != "reserved" and reservation is not None:
            raise ValueError(
                f"reservation {reservation!r} is consumed only with provisioning: reserved; set "
                f"provisioning: reserved, or remove reservation"
            )
        machine, topology = info.data.get("machine_type"), info.data.get("topology")
        if machine is None or topology is None:
            return value  # refused itself
        generation = catalogue.machine_type(machine).generation.name
        if value in _FLEX_START and generation not in FLEX_START_GENERATIONS:
            offered = ", ".join(sorted(FLEX_START_GENERATIONS))
            raise ValueError(
                f"flex-start does not provision {machine} (TPU {generation}; GKE offers it for "
                f"{offered}); allowed for it: spot, reserved or on-demand, or pick another machine type"
            )
        try:
            multi_host = catalogue.slice_shape(machine, topology).multi_host
        except catalogue.CatalogueError:
            return value  # the pool's plan says what is wrong with its shape
        if value == "flex-start-queued" and not multi_host:
            raise ValueError(
                f"queued provisioning is for multi-host slices, which must come up all at once; a "
                f"{topology} slice of {machine} is one VM, which GKE provisions with plain flex-start "
                f"(provisioning: flex-start); or use a multi-host topology"
            )
        return value

    @classmethod
    def _ladder_offered(cls, ladder: tuple[str, ...], info: ValidationInfo) -> Union[str, tuple[str, ...]]:
        """A list of capacities: one is that capacity (so its plan is the single value's); two or
        more are a ladder (``domain.compute_class``), whose rungs GKE's ComputeClass can describe."""
        if not ladder:
            raise ValueError(
                f"the list is empty; give one capacity or several in the order GKE is to try them "
                f"(e.g. [spot, flex-start]); allowed in a list: {', '.join(LADDER_RUNGS)}"
            )
        if len(ladder) == 1:
            return cls._offered(ladder[0], info)
        if "flex-start-queued" in ladder:
            raise ValueError(
                f"'flex-start-queued' cannot be a rung of a ladder: queued provisioning "
                f"brings nodes only through ProvisioningRequests, and a ComputeClass priority rule has no "
                f"field for it (GKE ComputeClass CRD reference, "
                f"cloud.google.com/kubernetes-engine/docs/reference/crds/computeclass); allowed in a "
                f"list: {', '.join(LADDER_RUNGS)}"
            )
        repeats = repeated(ladder)
        if repeats:
            raise ValueError(f"the list repeats {', '.join(repeats)}; each capacity is one rung")
        reservation = info.data.get("reservation")
        if "reserved" in ladder and reservation is None:
            raise ValueError(
                "the 'reserved' rung needs the name of the reservation it consumes in reservation"
            )
        if "reserved" not in ladder and reservation is not None:
            raise ValueError(
                f"reservation {reservation!r} is consumed only by a 'reserved' rung; add 'reserved' to "
                f"the list, or remove reservation"
            )
        machine = info.data.get("machine_type")
        if machine is not None and "flex-start" in ladder:
            generation = catalogue.machine_type(machine).generation.name
            if generation not in FLEX_START_GENERATIONS:
                offered = ", ".join(sorted(FLEX_START_GENERATIONS))
                raise ValueError(
                    f"flex-start does not provision {machine} (TPU {generation}; GKE "
                    f"offers it for {offered}); drop the 'flex-start' rung, or pick another machine type"
                )
        return ladder

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
        capacity = {
            "flex_start": self.flex_start,
            "spot": self.spot,
            "queued_provisioning": self.queued_provisioning,
            "ladder": self.ladder,
        }
        return plan_from(self.name, {**self.model_dump(), **capacity, "cluster_region": cluster_region})


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
    # Overrides recovery.hangMinutes for this Job or JobSet.
    hang_minutes: Optional[HangMinutes] = None

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


SYSTEM_POOL = "system"
"""The cluster's own CPU pool (``GkeTpuCluster``)."""
