"""``tpu-training:training``, ``checkpointing`` and ``recovery``: how runs scale, how often they
checkpoint, and how `pulumi up` recovers TPU VMs."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Optional

from pydantic import (
    BeforeValidator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    field_validator,
    model_validator,
)
from tpu_training_components.domain.capacity_ladder import DEFAULT_ATTEMPTS
from tpu_training_components.domain.goodput import (
    InterruptionModel,
)
from tpu_training_components.domain.restart_budget import (
    DEFAULT_RESTARTS,
    DEFAULT_WINDOW_HOURS,
    RestartBudget,
)
from tpu_training_components.domain.scaling import INT64_MAX, LearningRateScaling, TrainingPlan, plan_training
from tpu_training_components.domain.termination_grace import (
    DEFAULT_POD_GRACE_SECONDS,
    GKE_MAX_HONOURED_GRACE_SECONDS,
)

from .fields import (
    HangMinutes,
    Model,
    int_is_a_float,
)


class TrainingConfig(Model):
    """``tpu-training:training``: the Training on TPU Pods page's scaling rules for every workload of the "
    "stack."""

    # At most int64: the trainer reads each as one, and Python will not print an integer past
    # 4,300 digits into the environment.
    per_core_batch_size: StrictInt = Field(ge=1, le=INT64_MAX)
    total_examples: Optional[StrictInt] = Field(default=None, ge=1, le=INT64_MAX)
    epochs: Optional[StrictInt] = Field(default=None, ge=1, le=INT64_MAX)
    base_learning_rate: Optional[StrictFloat] = Field(default=None, gt=0, allow_inf_nan=False)
    learning_rate_scaling: LearningRateScaling = "none"
    reference_cores: StrictInt = Field(default=8, ge=1, le=INT64_MAX)

    # YAML reads `1` as an integer; a learning rate of 1 is still a learning rate.
    _learning_rate_as_float = field_validator("base_learning_rate", mode="before")(int_is_a_float)

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
    StrictFloat, BeforeValidator(int_is_a_float), Field(gt=0, le=10 * 365 * 24, allow_inf_nan=False)
]


class CheckpointingConfig(Model):
    """``tpu-training:checkpointing``: what a checkpoint costs and how often capacity goes away,
    from which each VM and Job gets Young's checkpoint interval."""

    # Up to a day: a checkpoint that takes longer cannot beat any interruption rate we model.
    cost_seconds: Annotated[
        StrictFloat, BeforeValidator(int_is_a_float), Field(gt=0, le=24 * 3600, allow_inf_nan=False)
    ]
    mean_hours_between_interruptions: dict[InterruptionModel, PositiveHours] = Field(default_factory=dict)
    # Five minutes by default: an assumption (a new VM or Pod, set-up, JAX start-up and compiling,
    # restoring), stated in docs/checkpointing.md; set what your runs measure. At most a day.
    restart_seconds: Annotated[
        StrictFloat, BeforeValidator(int_is_a_float), Field(ge=0, le=24 * 3600, allow_inf_nan=False)
    ] = 300.0
    # Its own key, not derived from costSeconds: the grace is in the Pod template, and a Job whose
    # template changes is replaced, so re-measuring the save must not move it (the plan warns when
    # the save no longer fits). At most what GKE honours for a drain.
    pod_grace_seconds: StrictInt = Field(
        default=DEFAULT_POD_GRACE_SECONDS, ge=0, le=GKE_MAX_HONOURED_GRACE_SECONDS
    )


class RestartBudgetConfig(Model):
    """``tpu-training:recovery.restartBudget``: how often one Job or JobSet may start over within
    a window before `tpu-training recover` stops re-creating it (domain/restart_budget.py)."""

    restarts: StrictInt = Field(default=DEFAULT_RESTARTS, ge=1, le=1000)
    # At most 30 days: a longer window would keep a workload that was fixed long ago stopped.
    window_hours: Annotated[
        StrictFloat, BeforeValidator(int_is_a_float), Field(gt=0, le=30 * 24, allow_inf_nan=False)
    ] = DEFAULT_WINDOW_HOURS

    @property
    def budget(self) -> RestartBudget:
        return RestartBudget(self.restarts, timedelta(hours=self.window_hours))


class LadderConfig(Model):
    """``tpu-training:recovery.ladder``: when a TPU VM moves down its capacity ladder
    (domain/capacity_ladder.py)."""

    # At least one stockout; more than 100 in a row on one rung is a wait, not a ladder.
    attempts: StrictInt = Field(default=DEFAULT_ATTEMPTS, ge=1, le=100)


class RecoveryConfig(Model):
    """``tpu-training:recovery``: how `pulumi up` recovers TPU VMs."""

    # At most a week: a maintenance event that has not healed in a week will not heal.
    maintenance_grace_minutes: StrictInt = Field(default=30, ge=0, le=7 * 24 * 60)
    read_live_state: StrictBool = True
    restart_budget: RestartBudgetConfig = RestartBudgetConfig()
    ladder: LadderConfig = LadderConfig()
    # Hang detection (domain/progress.py): on by default, as it replaces nothing that has not
    # published progress; hangMinutes None: 20 measured steps, at least 10 minutes.
    hang_detection: StrictBool = True
    hang_minutes: Optional[HangMinutes] = None
