"""The stack's configuration: read once from Pulumi config into frozen, validated objects.

This is the only module that reads ``pulumi.Config``. Every check runs before the program declares
a single resource, so bad input never leaves a half-applied change behind.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Optional

import pulumi
from pydantic import (
    BaseModel,
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
from tpu_training_components import catalogue, naming
from tpu_training_components.errors import suggestion
from tpu_training_components.scaling import LearningRateScaling, TrainingPlan, plan_training
from tpu_training_components.startup_script import env_name_problem

PROJECT = "tpu-training"
"""The Pulumi project name, and so the namespace of every project config key."""

# Keys of the project namespace this program reads.
_PROJECT_KEYS = ("labels", "tpuVms", "bucket", "training", "recovery")
# Declared for the GKE path; accepted by nothing yet, so a value there is an error, not ignored.
_RESERVED_KEYS = ("cluster", "nodePools", "jobs")


class ConfigError(pulumi.RunError):
    """The stack configuration is invalid. A ``pulumi.RunError``, so the CLI shows the message
    without a traceback; ``python -m infra.plan`` exits with status 2."""


class _Model(BaseModel):
    # Frozen: config is read once and never changes. Unknown keys are refused (typos).
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


Provisioning = Literal["preemptible", "spot", "on-demand", "reserved"]


class TpuVmConfig(_Model):
    """One entry of ``tpu-training:tpuVms``: a TPU VM that trains and resumes from checkpoints."""

    name: StrictStr = Field(pattern=r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
    zone: StrictStr
    accelerator_type: StrictStr
    runtime_version: StrictStr = Field(min_length=1)
    provisioning: Provisioning = "spot"
    train_command: StrictStr = Field(min_length=1)
    setup_command: Optional[StrictStr] = None
    env: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    external_ip: StrictBool = False
    network: Optional[StrictStr] = None
    subnetwork: Optional[StrictStr] = None

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            problem = env_name_problem(name)
            if problem:
                raise ValueError(problem)
        return env

    @field_validator("zone")
    @classmethod
    def _zone_is_a_zone(cls, zone: str) -> str:
        catalogue.region_of_zone(zone)
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

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        problem = naming.bucket_name_problem(name)
        if problem:
            raise ValueError(problem)
        return name


class TrainingConfig(_Model):
    """``tpu-training:training``: seed 003's scaling rules for every workload of the stack."""

    per_core_batch_size: StrictInt = Field(ge=1)
    total_examples: Optional[StrictInt] = Field(default=None, ge=1)
    epochs: Optional[StrictInt] = Field(default=None, ge=1)
    base_learning_rate: Optional[StrictFloat] = Field(default=None, gt=0)
    learning_rate_scaling: LearningRateScaling = "none"
    reference_cores: StrictInt = Field(default=8, ge=1)

    @field_validator("base_learning_rate", mode="before")
    @classmethod
    def _int_is_a_float(cls, value: Any) -> Any:
        # YAML reads `1` as an integer; a learning rate of 1 is still a learning rate.
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

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


class RecoveryConfig(_Model):
    """``tpu-training:recovery``: how `pulumi up` recovers TPU VMs."""

    maintenance_grace_minutes: StrictInt = Field(default=30, ge=0)
    read_live_state: StrictBool = True


class StackConfig(_Model):
    """Everything the stack program needs, validated as a whole."""

    stack: StrictStr
    gcp_project: StrictStr = Field(min_length=1)
    labels: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    tpu_vms: tuple[TpuVmConfig, ...] = ()
    bucket: BucketConfig = BucketConfig()
    training: Optional[TrainingConfig] = None
    recovery: RecoveryConfig = RecoveryConfig()

    @field_validator("labels")
    @classmethod
    def _valid_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            problem = naming.label_problem(key, value)
            if problem:
                raise ValueError(problem)
        return labels

    @model_validator(mode="after")
    def _consistent(self) -> StackConfig:
        names = [vm.name for vm in self.tpu_vms]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"TPU VM names must be unique; repeated: {', '.join(duplicates)}")
        regions = self.regions
        if len(regions) > 1 and self.bucket.name:
            raise ValueError(
                f"bucket.name {self.bucket.name!r} names one bucket, but the TPUs use "
                f"{len(regions)} regions ({', '.join(regions)}), each with its own bucket; "
                f"remove bucket.name to get one generated name per region"
            )
        if self.bucket.location is not None and regions and regions != (self.bucket.location,):
            raise ValueError(
                f"bucket.location {self.bucket.location!r} differs from the TPUs' region "
                f"{', '.join(regions)}: checkpoints must live in the region of the TPUs that use "
                f"them (seed 003); remove bucket.location or set it to {regions[0]!r}"
            )
        for region in regions:
            problem = naming.bucket_name_problem(self.bucket_name(region))
            if problem:
                raise ValueError(f"{problem}; set tpu-training:bucket.name to choose one")
        return self

    @property
    def regions(self) -> tuple[str, ...]:
        """Regions with TPUs, sorted: one checkpoint bucket each."""
        return tuple(sorted({vm.region for vm in self.tpu_vms}))

    def bucket_name(self, region: str) -> str:
        if self.bucket.name:
            return self.bucket.name
        return naming.bounded_name(self.gcp_project, self.stack, "ckpt", region)

    def checkpoint_dir(self, vm: TpuVmConfig) -> str:
        """Where a VM's run keeps its checkpoints: named after the VM, not after any one instance
        of it, so a VM re-created after preemption finds the checkpoints of the one before."""
        return f"gs://{self.bucket_name(vm.region)}/checkpoints/{vm.name}"

    def training_plan(self, vm: TpuVmConfig) -> Optional[TrainingPlan]:
        return self.training.plan_for(vm.accelerator.cores) if self.training else None

    def training_environment(self, vm: TpuVmConfig) -> dict[str, str]:
        """The environment every training process of the VM receives: the run's scale, where to
        checkpoint, then the user's own variables (which win)."""
        plan = self.training_plan(vm)
        return {
            "CHECKPOINT_DIR": self.checkpoint_dir(vm),
            **(plan.environment() if plan else {}),
            **vm.env,
        }

    @property
    def service_account_id(self) -> str:
        """One training identity per stack."""
        return naming.bounded_name("tpu-train", naming.label_value(self.stack), limit=30)

    @property
    def common_labels(self) -> dict[str, str]:
        """The project's own labels, then the user's (which win)."""
        return {
            "managed-by": "pulumi",
            "pulumi-project": PROJECT,
            "pulumi-stack": naming.label_value(self.stack),
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
    return f"{path} = {json.dumps(error['input'], default=str)}: {message}"


def _shape(loc: tuple[Any, ...]) -> str:
    return ".".join("[]" if isinstance(p, int) else str(p) for p in loc)


def _allowed_keys() -> dict[str, list[str]]:
    def aliases(model: type[BaseModel]) -> list[str]:
        return sorted(f.alias or n for n, f in model.model_fields.items())

    return {
        "tpuVms.[]": aliases(TpuVmConfig),
        "bucket": aliases(BucketConfig),
        "training": aliases(TrainingConfig),
        "recovery": aliases(RecoveryConfig),
    }


def load(stack: str | None = None) -> StackConfig:
    """Read and validate the stack's configuration, or raise ``ConfigError`` listing every
    problem found."""
    stack = stack or pulumi.get_stack()
    problems: list[str] = []

    allowed_top = sorted(_PROJECT_KEYS)
    project_config = pulumi.Config(PROJECT)
    for key in sorted(_configured_keys()):
        namespace, _, short = key.partition(":")
        if namespace != PROJECT:
            continue
        if short in _RESERVED_KEYS and project_config.get(short) not in (None, "", "{}", "[]"):
            problems.append(f"{key}: GKE clusters, node pools and jobs are not supported by this version yet")
        elif short not in _PROJECT_KEYS:
            problems.append(
                f"{key}: unknown key{suggestion(short, allowed_top)}; allowed: "
                + ", ".join(f"{PROJECT}:{k}" for k in allowed_top)
            )

    raw: dict[str, Any] = {"stack": stack}
    gcp_project = pulumi.Config("gcp").get("project")
    if gcp_project is not None:
        raw["gcpProject"] = gcp_project
    for key in _PROJECT_KEYS:
        text = project_config.get(key)
        # Pulumi.yaml declares `training: {}` as the default: an empty object means "not set".
        if text is None or (key == "training" and text.strip() == "{}"):
            continue
        try:
            raw[key] = json.loads(text)
        except json.JSONDecodeError:
            problems.append(
                f"{PROJECT}:{key} = {text!r}: expected a structured value (a YAML object or list "
                f"in Pulumi.<stack>.yaml, or JSON), not a plain string"
            )

    try:
        config = StackConfig.model_validate(raw)
    except ValidationError as exc:
        allowed = _allowed_keys()
        problems.extend(_format_error(e, allowed) for e in exc.errors())
        config = None

    if problems:
        raise ConfigError(
            f"invalid configuration for stack {stack!r}:\n" + "\n".join(f"  - {p}" for p in problems)
        )
    assert config is not None
    return config
