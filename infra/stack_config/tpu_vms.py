"""``tpu-training:tpuVms``: TPU VMs that train and resume from checkpoints."""

from __future__ import annotations

from typing import Annotated, Optional

from pydantic import (
    AfterValidator,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from tpu_training_components.domain import catalogue, naming
from tpu_training_components.domain.gcp_locations import zone_problem
from tpu_training_components.domain.tpu_software import runtime_version_problem

from .fields import (
    EnvName,
    HangMinutes,
    Model,
    Provisioning,
    dns_label,
    no_problem,
    not_blank,
)


class TpuVmConfig(Model):
    """One entry of ``tpu-training:tpuVms``: a TPU VM that trains and resumes from checkpoints."""

    name: Annotated[StrictStr, AfterValidator(dns_label("TPU node name", 63))]
    zone: StrictStr
    accelerator_type: StrictStr
    runtime_version: Annotated[StrictStr, AfterValidator(no_problem(naming.runtime_version_problem))]
    provisioning: Provisioning = "spot"
    # A blank command "succeeds" at once, and the script would mark training complete untrained.
    train_command: Annotated[StrictStr, AfterValidator(not_blank("the training command"))]
    setup_command: Optional[StrictStr] = None
    env: dict[EnvName, StrictStr] = Field(default_factory=dict)
    external_ip: StrictBool = False
    network: Optional[Annotated[StrictStr, AfterValidator(no_problem(naming.network_problem))]] = None
    subnetwork: Optional[Annotated[StrictStr, AfterValidator(no_problem(naming.subnetwork_problem))]] = None
    # Bumped by the user to re-create this VM now (a fresh boot running the current startup
    # script); edits of the command, environment or scale otherwise wait for the next boot.
    restart_generation: StrictInt = Field(default=0, ge=0)
    # Overrides recovery.hangMinutes for this VM.
    hang_minutes: Optional[HangMinutes] = None

    @field_validator("runtime_version")
    @classmethod
    def _runtime_for_the_generation(cls, value: str, info: ValidationInfo) -> str:
        accelerator = info.data.get("accelerator_type")  # absent when it was refused itself
        if accelerator is not None:
            problem = runtime_version_problem(value, catalogue.accelerator_type(accelerator).generation)
            if problem:
                raise ValueError(problem)
        return value

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
