"""The stack's configuration: read once from Pulumi config into frozen, validated objects.

This is the only module that reads ``pulumi.Config``. Every check runs before the program declares
a single resource, so bad input never leaves a half-applied change behind.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import ipaddress
import json
import re
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional

import pulumi
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from tpu_training_components.domain import catalogue, naming
from tpu_training_components.domain.gcp_locations import region_problem, zone_problem
from tpu_training_components.domain.goodput import (
    CheckpointPlan,
    GoodputError,
    InterruptionModel,
    mean_seconds_between_interruptions,
    plan_checkpoints,
)
from tpu_training_components.domain.job_manifests import image_problem, job_name_problem, namespace_problem
from tpu_training_components.domain.jobset_manifests import MAX_RESTARTS_LIMIT, jobset_name_problem
from tpu_training_components.domain.maintenance_window import (
    DEFAULT_UPGRADE_EXCLUSION_START,
    MaintenanceWindowError,
    exclusion_start_problem,
    recurring_window,
)
from tpu_training_components.domain.network_plan import NetworkPlanError, plan_network
from tpu_training_components.domain.node_pool_plan import (
    MAX_NODES_PER_CLUSTER,
    TpuNodePoolPlan,
    gke_version_problem,
    parse_duration,
    plan_tpu_node_pool,
)
from tpu_training_components.domain.recovery import GENERATION_LABEL
from tpu_training_components.domain.scaling import LearningRateScaling, TrainingPlan, plan_training
from tpu_training_components.domain.startup_script import metadata_problem, user_env_problem, vm_metadata
from tpu_training_components.domain.tpu_availability import zone_warning
from tpu_training_components.errors import suggestion

PROJECT = "tpu-training"
"""The Pulumi project name, and so the namespace of every project config key."""

# Keys of the project namespace this program reads.
_PROJECT_KEYS = (
    "labels",
    "network",
    "tpuVms",
    "bucket",
    "training",
    "checkpointing",
    "recovery",
    "cluster",
    "nodePools",
    "jobs",
    "trainerCode",
)
# Object keys whose declared default `{}` means "not set".
_EMPTY_MEANS_UNSET = ("training", "checkpointing", "cluster", "trainerCode")


_GS_BUCKET = re.compile(r"gs://([a-z0-9][a-z0-9._-]{1,220}[a-z0-9])")


class ConfigError(pulumi.RunError):
    """The stack configuration is invalid. A ``pulumi.RunError``, so the CLI shows the message
    without a traceback; ``python -m infra.plan`` exits with status 2."""


class _Model(BaseModel):
    # Frozen: config is read once and never changes. Unknown keys are refused (typos).
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


Provisioning = Literal["preemptible", "spot", "on-demand", "reserved"]


def _no_problem(problem_of: Callable[[str], Optional[str]]) -> Callable[[str], str]:
    """A field validator from a ``*_problem`` function of the library: the value, or its problem
    as the error."""

    def check(value: str) -> str:
        problem = problem_of(value)
        if problem:
            raise ValueError(problem)
        return value

    return check


def _dns_label(what: str, limit: int) -> Callable[[str], str]:
    """A validator stating Google Cloud's name rule in words (not as a regular expression)."""
    return _no_problem(lambda name: naming.dns_label_problem(what, name, limit))


def _not_blank(what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not value.strip():
            raise ValueError(f"{what} is blank")
        return value

    return check


def _no_reserved_label(key: str) -> str:
    if key == GENERATION_LABEL:
        raise ValueError(
            f"label key {key!r} is the stack's own: recovery writes each node's and Job's generation in it"
        )
    return key


def _int_is_a_float(value: Any) -> Any:
    """YAML reads `60` as an integer; 60 seconds is still a number of seconds."""
    if not isinstance(value, int) or isinstance(value, bool):
        return value
    try:
        return float(value)
    except OverflowError:  # an integer of hundreds of digits
        raise ValueError("is too large a number (above 1.8e308)") from None


# Types whose errors name the one label or variable at fault (`labels.Team`, `env.PATH`).
LabelKey = Annotated[
    StrictStr, AfterValidator(_no_problem(naming.label_key_problem)), AfterValidator(_no_reserved_label)
]
LabelValue = Annotated[StrictStr, AfterValidator(_no_problem(naming.label_value_problem))]
EnvName = Annotated[StrictStr, AfterValidator(_no_problem(user_env_problem))]


class TpuVmConfig(_Model):
    """One entry of ``tpu-training:tpuVms``: a TPU VM that trains and resumes from checkpoints."""

    name: Annotated[StrictStr, AfterValidator(_dns_label("TPU node name", 63))]
    zone: StrictStr
    accelerator_type: StrictStr
    runtime_version: Annotated[StrictStr, AfterValidator(_no_problem(naming.runtime_version_problem))]
    provisioning: Provisioning = "spot"
    # A blank command "succeeds" at once, and the script would mark training complete untrained.
    train_command: Annotated[StrictStr, AfterValidator(_not_blank("the training command"))]
    setup_command: Optional[StrictStr] = None
    env: dict[EnvName, StrictStr] = Field(default_factory=dict)
    external_ip: StrictBool = False
    network: Optional[Annotated[StrictStr, AfterValidator(_no_problem(naming.network_problem))]] = None
    subnetwork: Optional[Annotated[StrictStr, AfterValidator(_no_problem(naming.subnetwork_problem))]] = None
    # Bumped by the user to re-create this VM now (a fresh boot running the current startup
    # script); edits of the command, environment or scale otherwise wait for the next boot.
    restart_generation: StrictInt = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _subnetwork_in_the_vms_region(self) -> TpuVmConfig:
        problem = self.subnetwork and naming.subnetwork_problem(self.subnetwork, self.region)
        if problem:
            raise ValueError(f"subnetwork: {problem}")
        return self

    @field_validator("zone")
    @classmethod
    def _zone_is_a_zone(cls, zone: str) -> str:
        catalogue.region_of_zone(zone)
        problem = zone_problem(zone)
        if problem:
            raise ValueError(problem)
        return zone

    @field_validator("accelerator_type")
    @classmethod
    def _known_accelerator(cls, value: str) -> str:
        catalogue.accelerator_type(value)
        return value

    @property
    def region(self) -> str:
        return catalogue.region_of_zone(self.zone)

    @property
    def accelerator(self) -> catalogue.AcceleratorType:
        return catalogue.accelerator_type(self.accelerator_type)


class BucketConfig(_Model):
    """``tpu-training:bucket``: overrides for the checkpoint buckets (one per region in use)."""

    name: Optional[StrictStr] = None
    location: Optional[StrictStr] = None
    noncurrent_version_retention_days: StrictInt = Field(default=7, ge=1)
    noncurrent_versions_kept: StrictInt = Field(default=3, ge=1)
    protect: StrictBool = True
    retain_on_delete: StrictBool = True

    _valid_name = field_validator("name")(_no_problem(naming.bucket_name_problem))


PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The project folder (Pulumi.yaml's): ``trainerCode.folder`` is read from here."""
TRAINER_CODE_VARIABLE = "TRAINER_CODE"
"""Where the stack uploaded the trainer: ``gs://<the run's bucket>/code``."""


class TrainerCodeConfig(_Model):
    """``tpu-training:trainerCode``: files the stack uploads to ``code/`` in every checkpoint
    bucket, so a stack trains the same code in any project; each VM and Job finds them at
    ``$TRAINER_CODE``."""

    folder: StrictStr
    files: tuple[StrictStr, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _files_exist(self) -> TrainerCodeConfig:
        folder = Path(self.folder)
        if folder.is_absolute() or ".." in folder.parts:
            raise ValueError(f"folder {self.folder!r} must be a path inside the project, like 'trainer'")
        for name in self.files:
            if not name or "/" in name or "\\" in name or name in (".", ".."):
                raise ValueError(f"files: {name!r} must be a file name in the folder, like 'train.py'")
            if not (PROJECT_ROOT / folder / name).is_file():
                raise ValueError(
                    f"files: {self.folder}/{name} is not a file in the project ({PROJECT_ROOT}); "
                    f"the stack uploads it as it is"
                )
        if len(set(self.files)) != len(self.files):
            raise ValueError("files: each file once")
        return self

    def paths(self) -> dict[str, Path]:
        """Object name in the bucket -> the file to upload."""
        return {f"code/{name}": PROJECT_ROOT / self.folder / name for name in self.files}


class TrainingConfig(_Model):
    """``tpu-training:training``: seed 003's scaling rules for every workload of the stack."""

    per_core_batch_size: StrictInt = Field(ge=1)
    total_examples: Optional[StrictInt] = Field(default=None, ge=1)
    epochs: Optional[StrictInt] = Field(default=None, ge=1)
    base_learning_rate: Optional[StrictFloat] = Field(default=None, gt=0, allow_inf_nan=False)
    learning_rate_scaling: LearningRateScaling = "none"
    reference_cores: StrictInt = Field(default=8, ge=1)

    # YAML reads `1` as an integer; a learning rate of 1 is still a learning rate.
    _learning_rate_as_float = field_validator("base_learning_rate", mode="before")(_int_is_a_float)

    @model_validator(mode="after")
    def _one_length(self) -> TrainingConfig:
        if (self.total_examples is None) == (self.epochs is None):
            raise ValueError("set exactly one of totalExamples and epochs")
        if self.learning_rate_scaling != "none" and self.base_learning_rate is None:
            raise ValueError(f"learningRateScaling {self.learning_rate_scaling!r} needs baseLearningRate")
        return self

    def plan_for(self, cores: int) -> TrainingPlan:
        return plan_training(
            per_core_batch_size=self.per_core_batch_size,
            cores=cores,
            total_examples=self.total_examples,
            epochs=self.epochs,
            base_learning_rate=self.base_learning_rate,
            learning_rate_scaling=self.learning_rate_scaling,
            reference_cores=self.reference_cores,
        )


PositiveHours = Annotated[
    StrictFloat, BeforeValidator(_int_is_a_float), Field(gt=0, le=10 * 365 * 24, allow_inf_nan=False)
]


class CheckpointingConfig(_Model):
    """``tpu-training:checkpointing``: what a checkpoint costs and how often capacity goes away,
    from which each VM and Job gets Young's checkpoint interval."""

    # Up to a day: a checkpoint that takes longer cannot beat any interruption rate we model.
    cost_seconds: Annotated[
        StrictFloat, BeforeValidator(_int_is_a_float), Field(gt=0, le=24 * 3600, allow_inf_nan=False)
    ]
    mean_hours_between_interruptions: dict[InterruptionModel, PositiveHours] = Field(default_factory=dict)


class RecoveryConfig(_Model):
    """``tpu-training:recovery``: how `pulumi up` recovers TPU VMs."""

    # At most a week: a maintenance event that has not healed in a week will not heal.
    maintenance_grace_minutes: StrictInt = Field(default=30, ge=0, le=7 * 24 * 60)
    read_live_state: StrictBool = True


class MaintenanceWindowConfig(_Model):
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


class NetworkConfig(_Model):
    """``tpu-training:network``: the VPC the TPU VMs and the cluster use."""

    create: StrictBool = True
    name: Optional[Annotated[StrictStr, AfterValidator(_dns_label("network name", 63))]] = None
    iap_ssh: StrictBool = True


class ClusterConfig(_Model):
    """``tpu-training:cluster``: the GKE Standard cluster that runs flex-start TPU pools."""

    name: Annotated[StrictStr, AfterValidator(_dns_label("cluster name", 40))]
    location: StrictStr
    release_channel: Literal["RAPID", "REGULAR", "STABLE"] = "REGULAR"
    min_version: Optional[StrictStr] = None
    maintenance_window: MaintenanceWindowConfig = MaintenanceWindowConfig()
    system_machine_type: Annotated[
        StrictStr, AfterValidator(_no_problem(naming.system_machine_type_problem))
    ] = "e2-standard-4"
    system_max_nodes: StrictInt = Field(default=3, ge=1)
    network: Optional[Annotated[StrictStr, AfterValidator(_no_problem(naming.network_problem))]] = None
    subnetwork: Optional[Annotated[StrictStr, AfterValidator(_no_problem(naming.subnetwork_problem))]] = None
    master_ipv4_cidr_block: Optional[StrictStr] = None
    deletion_protection: StrictBool = True
    upgrade_exclusion_scope: Literal["NO_MINOR_OR_NODE_UPGRADES", "NO_MINOR_UPGRADES", "NONE"] = (
        "NO_MINOR_OR_NODE_UPGRADES"
    )
    upgrade_exclusion_start: StrictStr = DEFAULT_UPGRADE_EXCLUSION_START

    _exclusion_start = field_validator("upgrade_exclusion_start")(_no_problem(exclusion_start_problem))

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
        _no_problem(lambda version: naming.min_version_problem(version, gke_version_problem))
    )

    @model_validator(mode="after")
    def _subnetwork_in_the_clusters_region(self) -> ClusterConfig:
        problem = self.subnetwork and naming.subnetwork_problem(self.subnetwork, self.location)
        if problem:
            raise ValueError(f"subnetwork: {problem}")
        return self


class NodePoolConfig(_Model):
    """One entry of ``tpu-training:nodePools``: a TPU slice node pool, flex-start by default."""

    name: Annotated[StrictStr, AfterValidator(_dns_label("node pool name", 40))]
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
        return plan_tpu_node_pool(
            name=self.name,
            machine_type=self.machine_type,
            topology=self.topology,
            node_locations=self.node_locations,
            cluster_region=cluster_region,
            slices=self.slices,
            flex_start=self.flex_start,
            spot=self.spot,
            reservation=self.reservation,
            max_run_duration=self.max_run_duration,
        )


class JobConfig(_Model):
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

    _job_name = field_validator("name")(_no_problem(job_name_problem))
    _image = field_validator("image")(_no_problem(image_problem))
    _namespace = field_validator("namespace")(_no_problem(namespace_problem))

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


def _repeated(names: list[str]) -> list[str]:
    return sorted({n for n in names if names.count(n) > 1})


def _compatible_name(earlier: str, safe: str, problem_of: Callable[[str], Optional[str]]) -> str:
    """The name earlier versions derived, when it is valid: a deployed stack keeps its bucket and
    identities (a new name would replace them, and the TPU VMs using them). Otherwise the name made
    from the DNS-safe stack name, which earlier versions could not deploy at all."""
    return earlier if problem_of(earlier) is None else safe


class StackConfig(_Model):
    """Everything the stack program needs, validated as a whole."""

    stack: StrictStr
    gcp_project: Annotated[StrictStr, AfterValidator(_no_problem(naming.project_id_problem))]
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    network: NetworkConfig = NetworkConfig()
    tpu_vms: tuple[TpuVmConfig, ...] = ()
    bucket: BucketConfig = BucketConfig()
    training: Optional[TrainingConfig] = None
    checkpointing: Optional[CheckpointingConfig] = None
    recovery: RecoveryConfig = RecoveryConfig()
    cluster: Optional[ClusterConfig] = None
    node_pools: tuple[NodePoolConfig, ...] = ()
    jobs: tuple[JobConfig, ...] = ()
    trainer_code: Optional[TrainerCodeConfig] = None

    @model_validator(mode="after")
    def _consistent(self) -> StackConfig:
        problems = [
            f"{PROJECT}:tpuVms: TPU VM names must be unique; repeated: {name}"
            for name in _repeated([vm.name for vm in self.tpu_vms])
        ]
        planned = self._plan_pools()
        problems += self._gke_problems(planned)
        problems += self._label_count_problems()
        problems += self._metadata_problems()
        problems += self._training_problems(planned)
        problems += self._checkpointing_problems(planned)
        regions = self.regions
        if len(regions) > 1 and self.bucket.name:
            problems.append(
                f"{PROJECT}:bucket.name = {self.bucket.name!r} names one bucket, but the TPUs use "
                f"{len(regions)} regions ({', '.join(regions)}), each with its own bucket; "
                f"remove bucket.name to get one generated name per region"
            )
        if self.bucket.location is not None and regions and regions != (self.bucket.location,):
            problems.append(
                f"{PROJECT}:bucket.location = {self.bucket.location!r} differs from the TPUs' region "
                f"{', '.join(regions)}: checkpoints must live in the region of the TPUs that use "
                f"them (seed 003); remove bucket.location or set it to {regions[0]!r}"
            )
        if not self.bucket.name:
            problems += self._derived_name_problems()
        if problems:
            raise ValueError("\n  - ".join(problems))
        return self

    def _metadata_problems(self) -> list[str]:
        """Each VM's startup and shutdown scripts within Compute Engine's metadata limits; the
        training command, setup command and env are what make them grow."""
        problems = []
        for index, vm in enumerate(self.tpu_vms):
            try:
                metadata = vm_metadata(
                    vm_name=vm.name,
                    checkpoint_dir=self.checkpoint_dir(vm),
                    train_command=vm.train_command,
                    environment=self.training_environment(vm),
                    setup_command=vm.setup_command,
                )
            except ValueError:
                continue  # a training or checkpointing problem, reported by its own key
            problem = metadata_problem(metadata)
            if problem:
                problems.append(f"{PROJECT}:tpuVms[{index}] ({vm.name}): {problem}")
        return problems

    def _label_count_problems(self) -> list[str]:
        # Every resource carries the project's own labels and the user's; TPU VMs also carry
        # their recovery generation, and pulumi-gcp adds its attribution label
        # (goog-pulumi-provisioned) to each. Google Cloud allows 64 labels per resource.
        most = len(self.common_labels) + 1 + naming.PROVIDER_LABELS
        if most <= naming.MAX_LABELS:
            return []
        own = len(self.common_labels) - len(self.labels) + 1
        return [
            f"{PROJECT}:labels has {len(self.labels)} labels; with the {own} the stack adds (managed-by, "
            f"pulumi-project, pulumi-stack, and {GENERATION_LABEL} on TPU VMs) and pulumi-gcp's own "
            f"goog-pulumi-provisioned a resource would carry {most}, above Google Cloud's limit of "
            f"{naming.MAX_LABELS} per resource; remove {most - naming.MAX_LABELS}"
        ]

    def _plan_pools(self) -> list[TpuNodePoolPlan | catalogue.CatalogueError]:
        """Each nodePools entry's plan, or why it has none; planned once for all the checks."""
        if self.cluster is None:
            return []
        planned: list[TpuNodePoolPlan | catalogue.CatalogueError] = []
        for pool in self.node_pools:
            try:
                planned.append(pool.plan(self.cluster.location))
            except catalogue.CatalogueError as exc:
                planned.append(exc)
        return planned

    def _checkpointing_problems(self, planned: list[TpuNodePoolPlan | catalogue.CatalogueError]) -> list[str]:
        """Every VM and Job must have an interval worth checkpointing at."""
        if self.checkpointing is None:
            return []
        # No plans without a cluster (a problem reported on its own): then no Job is checked here.
        pools = dict(zip((p.name for p in self.node_pools), planned, strict=False))
        problems = []
        for index, vm in enumerate(self.tpu_vms):
            try:
                self._vm_checkpoints(vm)
            except GoodputError as exc:
                problems.append(
                    f"{PROJECT}:checkpointing, for tpuVms[{index}] ({vm.name}, {vm.provisioning}): {exc}"
                )
        for index, job in enumerate(self.jobs):
            plan = pools.get(job.node_pool)
            if not isinstance(plan, TpuNodePoolPlan):
                continue  # the pool's own problem is reported
            try:
                self._job_checkpoints(plan, job.slices)
            except GoodputError as exc:
                problems.append(f"{PROJECT}:checkpointing, for jobs[{index}] ({job.name}): {exc}")
        return problems

    def _training_problems(self, planned: list[TpuNodePoolPlan | catalogue.CatalogueError]) -> list[str]:
        """The scaling rules must give a plan for every VM and every Job's slice."""
        if self.training is None:
            return []
        training = self.training
        runs = [
            (f"tpuVms[{index}] ({vm.name})", vm.accelerator.cores) for index, vm in enumerate(self.tpu_vms)
        ]
        # Without a cluster nothing is planned (and the pools are reported as needing one).
        plans = {pool.name: plan for pool, plan in zip(self.node_pools, planned, strict=False)}
        for index, job in enumerate(self.jobs):
            plan = plans.get(job.node_pool)
            if isinstance(plan, TpuNodePoolPlan):  # otherwise reported by the pool's and the Job's keys
                runs.append((f"jobs[{index}] ({job.name})", plan.shape.cores * job.slices))
        problems = []
        for run, cores in runs:
            try:
                training.plan_for(cores)
            except ValueError as exc:
                problems.append(f"{PROJECT}:training: {exc}, for {PROJECT}:{run} on {cores} cores")
        return problems

    def _derived_name_problems(self) -> list[str]:
        """Names made from gcp:project and the stack name, checked here so the error says what to
        change rather than failing inside a component after others were declared."""
        source = f"made from gcp:project {self.gcp_project!r} and the stack name {self.stack!r}"
        problems = []
        for region in self.regions:
            problem = naming.bucket_name_problem(self.bucket_name(region))
            if problem:
                fix = "set tpu-training:bucket.name" if len(self.regions) == 1 else "use another stack name"
                problems.append(f"{PROJECT}:bucket.name: the generated {problem} ({source}); {fix}")
        for account_id in (
            self.service_account_id,
            self.gke_service_account_id,
            self.node_service_account_id,
        ):
            problem = naming.service_account_id_problem(account_id)
            if problem:
                problems.append(
                    f"gcp:project: the stack's {problem} (made from the stack name {self.stack!r})"
                )
        return problems

    def _network_problems(self) -> list[str]:
        """Per-resource networks only when the stack does not declare its own."""
        if not self.network.create:
            return []
        keys = [
            f"{PROJECT}:tpuVms[{index}].{key}"
            for index, vm in enumerate(self.tpu_vms)
            for key in ("network", "subnetwork")
            if getattr(vm, key) is not None
        ]
        if self.cluster is not None:
            cluster = self.cluster
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
        if self.cluster is not None and self.cluster.master_ipv4_cidr_block is not None:
            problems.extend(self._control_plane_overlaps(self.cluster.master_ipv4_cidr_block))
        return problems

    def _control_plane_overlaps(self, block: str) -> list[str]:
        assert self.cluster is not None
        try:
            plan = plan_network(self.network_regions, self.cluster.location)
        except NetworkPlanError:
            return []  # the regions are reported by their own keys
        control_plane = ipaddress.IPv4Network(block)
        return [
            f"{PROJECT}:cluster.masterIpv4CidrBlock = {block!r} overlaps the network's {name} range "
            f"{cidr}; pick a /28 outside 10.0.0.0/8, e.g. '172.16.0.32/28'"
            for name, cidr in plan.named_ranges().items()
            if control_plane.overlaps(cidr)
        ]

    def _gke_problems(self, planned: list[TpuNodePoolPlan | catalogue.CatalogueError]) -> list[str]:
        """Every problem of the cluster, node pools and jobs together, each naming its key."""
        problems: list[str] = self._network_problems()
        pool_names = [pool.name for pool in self.node_pools]
        for name in _repeated(pool_names):
            problems.append(f"{PROJECT}:nodePools: node pool names must be unique; repeated: {name}")
        for name in _repeated([job.name for job in self.jobs]):
            problems.append(f"{PROJECT}:jobs: job names must be unique; repeated: {name}")
        for name in sorted({job.name for job in self.jobs} & {vm.name for vm in self.tpu_vms}):
            problems.append(
                f"{PROJECT}:jobs: {name!r} also names a TPU VM; each training run needs a name "
                f"of its own, because the name picks its checkpoint directory"
            )
        if self.cluster is None:
            if self.node_pools or self.jobs:
                problems.append(
                    f"{PROJECT}:nodePools and {PROJECT}:jobs need {PROJECT}:cluster "
                    f"(at least {{name, location}}) to run on"
                )
            return problems
        # GKE pool name -> (the nodePools entry it comes from, how to name that in a message).
        gke_pools: dict[str, tuple[Optional[str], str]] = {
            SYSTEM_POOL: (None, f"{PROJECT}:cluster's CPU system pool")
        }
        for index, (pool, plan) in enumerate(zip(self.node_pools, planned, strict=True)):
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
        problems.extend(self._cluster_size_problems(planned))
        for index, job in enumerate(self.jobs):
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
        return problems

    def _cluster_size_problems(self, planned: list[TpuNodePoolPlan | catalogue.CatalogueError]) -> list[str]:
        assert self.cluster is not None
        # A pool without a plan is reported by its own key.
        sizes = [
            (pool.name, plan.max_nodes)
            for pool, plan in zip(self.node_pools, planned, strict=True)
            if isinstance(plan, TpuNodePoolPlan)
        ]
        total = sum(size for _, size in sizes) + self.cluster.system_max_nodes
        if total <= MAX_NODES_PER_CLUSTER:
            return []
        if self.cluster.system_max_nodes > MAX_NODES_PER_CLUSTER:
            return [
                f"{PROJECT}:cluster.systemMaxNodes = {self.cluster.system_max_nodes}: above GKE's limit of "
                f"{MAX_NODES_PER_CLUSTER} nodes per cluster"
            ]
        largest = ", ".join(f"{name}: {size}" for name, size in sorted(sizes, key=lambda s: -s[1])[:3])
        return [
            f"{PROJECT}:nodePools: the pools reach {total} nodes together (the system pool's "
            f"{self.cluster.system_max_nodes} included; largest {largest}), above GKE's limit of "
            f"{MAX_NODES_PER_CLUSTER} nodes per cluster; use fewer slices or another cluster"
        ]

    @property
    def network_name(self) -> str:
        """The VPC the stack declares: ``tpu-training-<stack>`` unless named."""
        # As every earlier version named it: renaming would replace the VPC and all on it.
        stack = re.sub(r"[^a-z0-9-]+", "-", self.stack.lower()).strip("-")
        return self.network.name or naming.bounded_name(PROJECT, stack)

    @property
    def network_regions(self) -> tuple[str, ...]:
        """Regions with TPU VMs or the cluster: one subnet, router and NAT each."""
        regions = {vm.region for vm in self.tpu_vms}
        if self.cluster is not None:
            regions.add(self.cluster.location)
        return tuple(sorted(regions))

    @property
    def warnings(self) -> tuple[str, ...]:
        """What is valid but may not work, for the plan and `pulumi preview` to show."""
        found: list[str] = []
        for index, vm in enumerate(self.tpu_vms):
            warning = zone_warning(vm.accelerator.generation, vm.zone)
            if warning:
                found.append(f"{PROJECT}:tpuVms[{index}].zone: {warning}")
        if self.cluster is not None:
            for index, pool in enumerate(self.node_pools):
                plan = self.pool_plan(pool)
                found.extend(f"{PROJECT}:nodePools[{index}].nodeLocations: {w}" for w in plan.zone_warnings)
                found.extend(f"{PROJECT}:nodePools[{index}].topology: {w}" for w in plan.size_warnings)
        if not self.network.create and (self.network.name is not None or not self.network.iap_ssh):
            found.append(
                f"{PROJECT}:network.name and iapSsh apply only to the network the stack declares; "
                f"with network.create false they are ignored"
            )
        found.extend(self._foreign_bucket_warnings())
        if not self.network.create and self.network_regions:
            found.append(
                f"{PROJECT}:network.create is false: the TPU VMs and the cluster use your network "
                f"(or the project's default one), which must give them Private Google Access (to "
                f"reach gs:// without external IPs) and Cloud NAT (to install packages and pull "
                f"images from outside Google), or training never starts"
            )
        return tuple(found)

    def _foreign_bucket_warnings(self) -> list[str]:
        # A command that names a bucket by hand stops working, or reads someone else's data,
        # once the stack moves to another project; $TRAINER_CODE and $CHECKPOINT_DIR move with it.
        own = {self.bucket_name(region) for region in self.regions}
        commands = [
            *(
                (f"tpuVms[{i}].{key}", text)
                for i, vm in enumerate(self.tpu_vms)
                for key, text in (("setupCommand", vm.setup_command), ("trainCommand", vm.train_command))
                if text
            ),
            *((f"jobs[{i}].command", " ".join(job.command)) for i, job in enumerate(self.jobs)),
        ]
        found = []
        for where, text in commands:
            for bucket in sorted(set(_GS_BUCKET.findall(text)) - own):
                found.append(
                    f"{PROJECT}:{where} names gs://{bucket}, which is not one of this stack's buckets "
                    f"({', '.join(sorted(own)) or 'none'}): in another project it reads someone else's "
                    f"bucket, or nothing; use $TRAINER_CODE (trainerCode) or $CHECKPOINT_DIR"
                )
        return found

    @property
    def regions(self) -> tuple[str, ...]:
        """Regions with TPUs (VMs, and the cluster's), sorted: one checkpoint bucket each."""
        regions = {vm.region for vm in self.tpu_vms}
        if self.cluster is not None and self.node_pools:
            regions.add(self.cluster.location)
        return tuple(sorted(regions))

    def bucket_name(self, region: str) -> str:
        if self.bucket.name:
            return self.bucket.name
        return _compatible_name(
            naming.bounded_name(self.gcp_project, self.stack, "ckpt", region),
            naming.bounded_name(self.gcp_project, naming.name_part(self.stack), "ckpt", region),
            naming.bucket_name_problem,
        )

    def _checkpoint_dir(self, region: str, run: str) -> str:
        # Named after the run (a VM or a Job), not after any one instance of it, so one re-created
        # after preemption or failure finds the checkpoints of the one before.
        return f"gs://{self.bucket_name(region)}/checkpoints/{run}"

    def _environment(
        self, checkpoint_dir: str, cores: int, checkpoints: Optional[CheckpointPlan], env: dict[str, str]
    ) -> dict[str, str]:
        # Where and how often to checkpoint, the run's scale, then the user's own variables (which win).
        plan = self.training.plan_for(cores) if self.training else None
        code = (
            {TRAINER_CODE_VARIABLE: f"{checkpoint_dir.split('/checkpoints/')[0]}/code"}
            if self.trainer_code
            else {}
        )
        return {
            "CHECKPOINT_DIR": checkpoint_dir,
            **code,
            **(checkpoints.environment() if checkpoints else {}),
            **(plan.environment() if plan else {}),
            **env,
        }

    def _vm_checkpoints(self, vm: TpuVmConfig) -> CheckpointPlan:
        assert self.checkpointing is not None
        model: InterruptionModel = "onDemand" if vm.provisioning == "on-demand" else vm.provisioning
        # One TPU node resource is preempted, stopped or maintained as a whole: hosts=1.
        mean = mean_seconds_between_interruptions(
            model, overrides_hours=self.checkpointing.mean_hours_between_interruptions
        )
        return plan_checkpoints(self.checkpointing.cost_seconds, mean)

    def _job_checkpoints(self, pool: TpuNodePoolPlan, slices: int = 1) -> CheckpointPlan:
        assert self.checkpointing is not None
        model: InterruptionModel = (
            "flexStart"
            if pool.flex_start
            else "spot"
            if pool.spot
            else "reserved"
            if pool.reservation
            else "onDemand"
        )
        mean = mean_seconds_between_interruptions(
            model,
            overrides_hours=self.checkpointing.mean_hours_between_interruptions,
            run_limit_seconds=pool.max_run_seconds,
            # Every host of every slice: losing any one restarts them all.
            hosts=pool.shape.vms * slices,
        )
        return plan_checkpoints(self.checkpointing.cost_seconds, mean)

    def vm_checkpoints(self, vm: TpuVmConfig) -> Optional[CheckpointPlan]:
        """When the VM's run checkpoints (Young's interval), or None without ``checkpointing``."""
        return self._vm_checkpoints(vm) if self.checkpointing else None

    def job_checkpoints(self, job: JobConfig) -> Optional[CheckpointPlan]:
        """When the Job's run checkpoints (Young's interval), or None without ``checkpointing``."""
        if self.checkpointing is None:
            return None
        return self._job_checkpoints(self.pool_plan(self.job_pool(job)), job.slices)

    def checkpoint_dir(self, vm: TpuVmConfig) -> str:
        """Where a VM's run keeps its checkpoints, in the bucket of the VM's region."""
        return self._checkpoint_dir(vm.region, vm.name)

    def training_environment(self, vm: TpuVmConfig) -> dict[str, str]:
        """The environment every training process of the VM receives."""
        return self._environment(
            self.checkpoint_dir(vm), vm.accelerator.cores, self.vm_checkpoints(vm), vm.env
        )

    # GKE ------------------------------------------------------------------------------------

    def pool_plan(self, pool: NodePoolConfig) -> TpuNodePoolPlan:
        assert self.cluster is not None  # validated: pools need a cluster
        return pool.plan(self.cluster.location)

    def job_pool(self, job: JobConfig) -> NodePoolConfig:
        return next(pool for pool in self.node_pools if pool.name == job.node_pool)

    def job_checkpoint_dir(self, job: JobConfig) -> str:
        """Where a Job's run keeps its checkpoints, in the bucket of the cluster's region."""
        assert self.cluster is not None
        return self._checkpoint_dir(self.cluster.location, job.name)

    def job_environment(self, job: JobConfig) -> dict[str, str]:
        """The environment of every Pod of the Job, scaled to all the slices it spans."""
        cores = self.pool_plan(self.job_pool(job)).shape.cores * job.slices
        return self._environment(self.job_checkpoint_dir(job), cores, self.job_checkpoints(job), job.env)

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Namespaces of the Jobs, other than ``default``: the stack creates them."""
        return tuple(sorted({job.namespace for job in self.jobs} - {"default"}))

    @property
    def gke_service_account_id(self) -> str:
        """The Google identity of the stack's training Pods (Workload Identity)."""
        return self._account_id("tpu-gke")

    @property
    def node_service_account_id(self) -> str:
        """The Google identity of the cluster's nodes."""
        return self._account_id("gke-nodes")

    @property
    def service_account_id(self) -> str:
        """One training identity per stack."""
        return self._account_id("tpu-train")

    def _account_id(self, prefix: str) -> str:
        return _compatible_name(
            naming.bounded_name(prefix, naming.label_value(self.stack), limit=30),
            naming.bounded_name(prefix, naming.name_part(self.stack), limit=30),
            naming.service_account_id_problem,
        )

    @property
    def common_labels(self) -> dict[str, str]:
        """The project's own labels, then the user's (which win)."""
        managed_by, project, stack = naming.STACK_LABEL_KEYS
        return {
            managed_by: "pulumi",
            project: PROJECT,
            stack: naming.label_value(self.stack),
            **self.labels,
        }


def _configured_keys() -> set[str]:
    """Every config key set for this run. The SDK has no public listing, so read both places it
    keeps config: values set by the language host and the ``PULUMI_CONFIG`` environment."""
    from pulumi.runtime import config as runtime_config

    return set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())


def _key_path(loc: tuple[Any, ...]) -> str:
    head, *rest = loc
    path = "gcp:project" if head == "gcpProject" else f"{PROJECT}:{head}"
    for part in rest:
        if part != "[key]":  # pydantic's mark for an error in a mapping's key, named just before
            path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _format_error(error: Any, allowed_by_path: dict[str, list[str]]) -> str:
    loc = tuple(error["loc"])
    if not loc:
        return str(error["msg"]).removeprefix("Value error, ")
    path = _key_path(loc)
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        parent = _key_path(loc[:-1]) if len(loc) > 1 else PROJECT
        allowed = allowed_by_path.get(_shape(loc[:-1]), [])
        return (
            f"{path}: unknown key{suggestion(str(loc[-1]), allowed)}; "
            f"allowed in {parent}: {', '.join(allowed)}"
        )
    if error["type"] == "missing":
        return f"{path}: required but not set"
    if loc[-1] == "[key]":
        return f"{path}: {message}"
    value = error["input"]
    if error["type"] == "string_type" and isinstance(value, (bool, int, float)):
        # YAML reads `5` and `true` as a number and a boolean: the value wants quotes.
        message += f'; write it in quotes ("{json.dumps(value)}") so YAML reads it as text'
    return f"{path} = {json.dumps(value, default=str, ensure_ascii=False)}: {message}"


def _shape(loc: tuple[Any, ...]) -> str:
    return ".".join("[]" if isinstance(p, int) else str(p) for p in loc)


def _allowed_keys() -> dict[str, list[str]]:
    def aliases(model: type[BaseModel]) -> list[str]:
        return sorted(f.alias or n for n, f in model.model_fields.items())

    return {
        "tpuVms.[]": aliases(TpuVmConfig),
        "bucket": aliases(BucketConfig),
        "training": aliases(TrainingConfig),
        "checkpointing": aliases(CheckpointingConfig),
        "network": aliases(NetworkConfig),
        "recovery": aliases(RecoveryConfig),
        "cluster": aliases(ClusterConfig),
        "cluster.maintenanceWindow": aliases(MaintenanceWindowConfig),
        "nodePools.[]": aliases(NodePoolConfig),
        "jobs.[]": aliases(JobConfig),
        "trainerCode": aliases(TrainerCodeConfig),
    }


OFFLINE_SECRET = "offline-secret"
"""What a `secure:` value reads as in an offline plan (``infra/offline.py``), where there is no key
to decrypt it: a stand-in that is also a valid project ID, label value, name or image, so a secret
where one of those goes is a warning, not an error."""


def is_config_secret(key: str) -> bool:
    from pulumi.runtime import config as runtime_config

    return runtime_config.is_config_secret(key)


def _not_structured(key: str, text: str) -> str:
    if text == "":
        return (
            f"{PROJECT}:{key} is empty (null in the stack file?); give it a YAML object or list, "
            f"or remove the key"
        )
    return (
        f"{PROJECT}:{key} = {text!r}: expected a structured value (a YAML object or list in "
        f"Pulumi.<stack>.yaml, or JSON), not a plain string"
    )


@functools.cache
def gcp_provider_keys() -> frozenset[str]:
    """Every `gcp:` config key the installed pulumi-gcp reads (its generated ``config/vars.py``);
    `pulumi up` refuses any other key in that namespace before it starts."""
    # Read, not imported: importing it alone trips pulumi-gcp's lazy module loading.
    spec = importlib.util.find_spec("pulumi_gcp")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    source = Path(next(iter(spec.submodule_search_locations)), "config", "vars.py")
    try:
        text = source.read_text(encoding="utf-8")
    except OSError:
        return frozenset()
    return frozenset(re.findall(r"__config__\.get\w*\('(\w+)'\)", text))


def _unknown_key_problems(keys: list[str]) -> list[str]:
    """Keys of this project's namespace it does not read, `gcp:` keys the provider does not know,
    and namespaces that look like a misspelt `tpu-training`."""
    allowed_top = sorted(_PROJECT_KEYS)
    known_gcp = gcp_provider_keys()
    problems = []
    for key in keys:
        namespace, _, short = key.partition(":")
        if namespace == PROJECT and short not in _PROJECT_KEYS:
            problems.append(
                f"{key}: unknown key{suggestion(short, allowed_top)}; allowed: "
                + ", ".join(f"{PROJECT}:{k}" for k in allowed_top)
            )
        elif namespace == "gcp" and known_gcp and short not in known_gcp:
            problems.append(
                f"{key}: the gcp provider has no such key{suggestion(short, sorted(known_gcp))}; "
                f"`pulumi up` would refuse it"
            )
        elif namespace != PROJECT and difflib.get_close_matches(namespace, [PROJECT], cutoff=0.8):
            problems.append(
                f"{key}: unknown namespace {namespace!r} (did you mean '{PROJECT}:{short}'?); this "
                f"program reads {PROJECT}: and gcp: keys"
            )
    return problems


_LISTS = ("tpuVms", "nodePools", "jobs")


def _stands_in_for_a_secret(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return OFFLINE_SECRET in value
    return value == OFFLINE_SECRET


def _leave_out_secrets(raw: dict[str, Any], places: list[tuple[Any, ...]]) -> bool:
    """Offline, a secret reads as a stand-in (``OFFLINE_SECRET``); where the stack needs the real
    value (a zone, a machine type, a number), leave out of the plan the item or the key that holds
    it, and what depends on it, with a warning (`pulumi up` decrypts and uses it). Whether
    anything was left out."""
    left_out: dict[str, set[int]] = {key: set() for key in _LISTS}
    dropped_keys = set()
    for place in places:
        key = place[0]
        if key in _LISTS and len(place) >= 2 and isinstance(place[1], int):
            left_out[key].add(place[1])
        elif key in raw and key != "gcpProject":
            dropped_keys.add(key)
        else:
            continue
        pulumi.log.warn(
            f"{_key_path(place)} is a secret the offline plan cannot decrypt, and the plan needs its "
            f"value: it leaves out {_key_path(place[:2] if key in _LISTS else place[:1])} (`pulumi up` "
            f"decrypts and uses it)"
        )
    for key in dropped_keys:
        raw.pop(key)
    if "cluster" in dropped_keys:
        for key in ("nodePools", "jobs"):
            if raw.pop(key, None):
                pulumi.log.warn(f"{PROJECT}:{key} is left out of the offline plan with {PROJECT}:cluster")
    pools: list[Any] = raw["nodePools"] if isinstance(raw.get("nodePools"), list) else []
    jobs: list[Any] = raw["jobs"] if isinstance(raw.get("jobs"), list) else []
    gone_pools = {
        pool.get("name")
        for index, pool in enumerate(pools)
        if index in left_out["nodePools"] and isinstance(pool, dict)
    }
    for index, job in enumerate(jobs):
        if isinstance(job, dict) and job.get("nodePool") in gone_pools and index not in left_out["jobs"]:
            left_out["jobs"].add(index)
            pulumi.log.warn(f"{PROJECT}:jobs[{index}] is left out of the offline plan with its node pool")
    for key, indexes in left_out.items():
        if indexes and isinstance(raw.get(key), list):
            raw[key] = [item for index, item in enumerate(raw[key]) if index not in indexes]
    return bool(dropped_keys or any(left_out.values()))


def _nul_problems(value: Any, loc: tuple[Any, ...]) -> list[str]:
    """Every text of the config holding a NUL byte: no Google API, shell or environment takes
    one (bash drops it, a C string ends at it), so the run would get other text than written."""
    if isinstance(value, str):
        return (
            [f"{_key_path(loc)} = {json.dumps(value, ensure_ascii=False)}: contains a NUL byte (\\u0000)"]
            if "\x00" in value
            else []
        )
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in _nul_problems(item, (*loc, index))]
    if isinstance(value, dict):
        problems = []
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                problems.append(f"{_key_path((*loc, key))}: the key contains a NUL byte (\\u0000)")
            problems.extend(_nul_problems(item, (*loc, key)))
        return problems
    return []


def load(stack: str | None = None) -> StackConfig:
    """Read and validate the stack's configuration, or raise ``ConfigError`` listing every
    problem found."""
    stack = stack or pulumi.get_stack()
    problems: list[str] = []

    project_config = pulumi.Config(PROJECT)
    problems.extend(_unknown_key_problems(sorted(_configured_keys())))

    raw: dict[str, Any] = {"stack": stack}
    gcp_project = pulumi.Config("gcp").get("project")
    if gcp_project is not None:
        raw["gcpProject"] = gcp_project
    for key in _PROJECT_KEYS:
        text = project_config.get(key)
        # Pulumi.yaml declares `training: {}` as the default: an empty object means "not set".
        if text is None or (key in _EMPTY_MEANS_UNSET and text.strip() == "{}"):
            continue
        if text == OFFLINE_SECRET and is_config_secret(f"{PROJECT}:{key}"):
            # A secret object: the offline plan cannot decrypt it (`pulumi up` can).
            pulumi.log.warn(
                f"{PROJECT}:{key} is a secret the offline plan cannot decrypt; the plan leaves it at "
                f"its default (`pulumi up` decrypts and uses it)"
            )
            continue
        try:
            raw[key] = json.loads(text)
        except json.JSONDecodeError:
            problems.append(_not_structured(key, text))

    for key, value in raw.items():
        if key != "stack":
            problems.extend(_nul_problems(value, (key,)))

    config: Optional[StackConfig] = None
    for _ in range(len(_PROJECT_KEYS) + 1):  # each round leaves out at least one key or item
        try:
            config = StackConfig.model_validate(raw)
            break
        except ValidationError as exc:
            secret_places = [tuple(e["loc"]) for e in exc.errors() if _stands_in_for_a_secret(e.get("input"))]
            if not secret_places or not _leave_out_secrets(raw, secret_places):
                allowed = _allowed_keys()
                problems.extend(_format_error(e, allowed) for e in exc.errors())
                break

    if problems:
        raise ConfigError(
            f"invalid configuration for stack {stack!r}:\n" + "\n".join(f"  - {p}" for p in problems)
        )
    assert config is not None
    return config
