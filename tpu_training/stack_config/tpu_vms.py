"""``tpu-training:tpuVms``: TPU VMs that train and resume from checkpoints."""

from __future__ import annotations

from typing import Annotated, Any, Optional, Union

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
from tpu_training_components.domain.capacity_ladder import Rung, build_ladder
from tpu_training_components.domain.gcp_locations import zone_problem
from tpu_training_components.domain.node_pool_plan import NodePoolError, parse_duration
from tpu_training_components.domain.queued_resources import (
    QueuedRequest,
    flex_start_zone_warning,
    request_problems,
    requested_from_queue,
)
from tpu_training_components.domain.tpu_software import runtime_version_problem

from .fields import (
    EnvName,
    HangMinutes,
    Model,
    Provisioning,
    dns_label,
    no_problem,
    not_blank,
    repeated,
)


def _duration(key: str) -> Any:
    def check(value: str) -> str:
        try:
            parse_duration(value, key)
        except NodePoolError as exc:
            raise ValueError(str(exc)) from None
        return value

    return AfterValidator(check)


class QueuedConfig(Model):
    """``tpuVms[].queued``: request the VM from the Cloud TPU queue, where it waits for capacity."""

    # How long the request may wait before the API fails it; it waits until capacity comes when omitted.
    valid_for: Optional[Annotated[StrictStr, _duration("validFor")]] = None
    # Not before this long after the request.
    valid_after: Optional[Annotated[StrictStr, _duration("validAfter")]] = None


# The component's keys in request_problems, as the stack file spells them.
_REQUEST_KEYS = {"provisioning": "provisioning", "slices": "slices", "max_run_duration": "maxRunDuration"}


class TpuVmConfig(Model):
    """One entry of ``tpu-training:tpuVms``: a TPU VM that trains and resumes from checkpoints."""

    name: Annotated[StrictStr, AfterValidator(dns_label("TPU node name", 63))]
    # One of `zone` and `zones`: `zones` is the capacity ladder's zones, in order of preference.
    zone: Optional[StrictStr] = None
    zones: Optional[tuple[StrictStr, ...]] = None
    # The zone (or a ladder's zones) checked against Google's list: our table's warning is not said.
    allow_unlisted_zone: StrictBool = False
    accelerator_type: StrictStr
    runtime_version: Annotated[StrictStr, AfterValidator(no_problem(naming.runtime_version_problem))]
    # One capacity type, or the ladder's capacity types in order of preference.
    provisioning: Union[Provisioning, tuple[Provisioning, ...]] = "spot"
    # Through the Cloud TPU queue (queued resources): implied by flex-start and by slices > 1.
    queued: Optional[QueuedConfig] = None
    # Flex-start only: how long its VMs may run (at most 7d), after which the service ends them.
    max_run_duration: Optional[Annotated[StrictStr, _duration("maxRunDuration")]] = None
    # Slices requested together, as one multislice queued resource.
    slices: StrictInt = Field(default=1, ge=1)
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
        if self.zone is None and self.zones is None:
            return self  # _one_of_zone_and_zones says so
        problem = self.subnetwork and naming.subnetwork_problem(self.subnetwork, self.region)
        if problem:
            raise ValueError(f"subnetwork: {problem}")
        return self

    @field_validator("zone", "zones", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        # Optional only because the other key may be given instead: a null is a mistake.
        if value is None:
            raise ValueError("is null; give a zone (zone) or a list of zones in one region (zones)")
        return value

    @field_validator("zone")
    @classmethod
    def _zone_is_a_zone(cls, zone: Optional[str]) -> Optional[str]:
        if zone is not None:
            _check_zone(zone)
        return zone

    @field_validator("zones")
    @classmethod
    def _zones_in_one_region(cls, zones: Optional[tuple[str, ...]]) -> Optional[tuple[str, ...]]:
        if zones is None:
            return zones
        if not zones:
            raise ValueError("is empty; give at least one zone, the preferred first")
        for zone in zones:
            _check_zone(zone)
        repeats = repeated(zones)
        if repeats:
            raise ValueError(f"repeats {', '.join(repeats)}; each zone is one rung of the ladder")
        regions = {catalogue.region_of_zone(zone) for zone in zones}
        if len(regions) > 1:
            # The checkpoint bucket is regional: a rung in another region would not resume from it.
            raise ValueError(
                f"{', '.join(zones)} are in {len(regions)} regions ({', '.join(sorted(regions))}); the zones "
                f"of one VM must share a region, where its checkpoint bucket is"
            )
        return zones

    @field_validator("provisioning")
    @classmethod
    def _capacity_types_once(cls, value: Any) -> Any:
        if isinstance(value, tuple):
            if not value:
                raise ValueError("is empty; give one capacity type or a list of them, the preferred first")
            repeats = repeated(value)
            if repeats:
                raise ValueError(f"repeats {', '.join(repeats)}; each capacity type is listed once")
        return value

    @model_validator(mode="after")
    def _one_of_zone_and_zones(self) -> TpuVmConfig:
        if self.zone is not None and self.zones is not None:
            raise ValueError(
                f"zone ({self.zone}) and zones ({', '.join(self.zones)}) are both given; give zones alone "
                f"for a ladder of zones, or zone alone"
            )
        if self.zone is None and self.zones is None:
            raise ValueError("zone: required (or zones: a list of zones in one region, the preferred first)")
        return self

    @model_validator(mode="after")
    def _each_rung_can_be_requested(self) -> TpuVmConfig:
        if self.zone is None and self.zones is None:
            return self  # _one_of_zone_and_zones says so
        if self.max_run_duration is not None and "flex-start" not in self.capacity_types:
            raise ValueError("maxRunDuration: is for flex-start only; the other kinds run until they end")
        generation = self.accelerator.generation
        for rung in self.ladder:
            request = self.request_on(rung.provisioning)
            for key, problem in request_problems(request, generation, rung.zone) if request else ():
                raise ValueError(f"{_REQUEST_KEYS.get(key, key)}: {problem}")
        return self

    def request_on(self, provisioning: str) -> Optional[QueuedRequest]:
        """How the VM is requested from the queue on a rung of ``provisioning``; None when it is
        created directly there."""
        if not requested_from_queue(provisioning, self.queued is not None, self.slices):
            return None
        flex_start = provisioning == "flex-start"
        return QueuedRequest(
            provisioning,
            self.slices,
            parse_duration(self.max_run_duration) if flex_start and self.max_run_duration else None,
            parse_duration(self.queued.valid_for) if self.queued and self.queued.valid_for else None,
            parse_duration(self.queued.valid_after) if self.queued and self.queued.valid_after else None,
        )

    def flex_start_warnings(self) -> list[str]:
        """Its flex-start rungs in zones our table does not list (Google adds zones)."""
        found = []
        for rung in self.ladder:
            warning = rung.provisioning == "flex-start" and flex_start_zone_warning(
                self.accelerator.generation, rung.zone
            )
            if warning:
                found.append(warning)
        return found

    @field_validator("accelerator_type")
    @classmethod
    def _known_accelerator(cls, value: str) -> str:
        catalogue.accelerator_type(value)
        return value

    @property
    def ladder_zones(self) -> tuple[str, ...]:
        """The zones it may run in, the preferred first (``zone`` alone is a ladder of one)."""
        if self.zones is not None:
            return self.zones
        assert self.zone is not None  # _one_of_zone_and_zones
        return (self.zone,)

    @property
    def capacity_types(self) -> tuple[str, ...]:
        """The capacity types it may run on, the preferred first."""
        return self.provisioning if isinstance(self.provisioning, tuple) else (self.provisioning,)

    @property
    def preferred_provisioning(self) -> str:
        return self.capacity_types[0]

    @property
    def ladder(self) -> tuple[Rung, ...]:
        """Its rungs in order (``domain.capacity_ladder``: capacity types outer, zones inner)."""
        return build_ladder(self.ladder_zones, self.capacity_types)

    @property
    def region(self) -> str:
        return catalogue.region_of_zone(self.ladder_zones[0])

    @property
    def accelerator(self) -> catalogue.AcceleratorType:
        return catalogue.accelerator_type(self.accelerator_type)


def _check_zone(zone: str) -> None:
    catalogue.region_of_zone(zone)
    problem = zone_problem(zone)
    if problem:
        raise ValueError(problem)
