"""The scaling rules of Google's Training on TPU Pods page: keep the per-core batch constant, and
rescale steps and learning rate.

Pure Python. The result reaches every training process as environment variables, so moving a
stack from ``v3-8`` to ``v3-32`` rescales the run by changing one config value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

LearningRateScaling = Literal["none", "linear", "sqrt"]
LEARNING_RATE_SCALINGS: tuple[LearningRateScaling, ...] = ("none", "linear", "sqrt")


@dataclass(frozen=True)
class TrainingPlan:
    """What one training workload is told: its batch, its length and its learning rate."""

    per_core_batch_size: int
    cores: int
    global_batch_size: int
    train_steps: Optional[int]
    """Set when the run is sized by total examples; None when it is sized by epochs."""
    epochs: Optional[int]
    learning_rate: Optional[float]

    def environment(self) -> dict[str, str]:
        """The environment variables every training process of the workload receives."""
        env = {
            "PER_CORE_BATCH_SIZE": str(self.per_core_batch_size),
            "GLOBAL_BATCH_SIZE": str(self.global_batch_size),
        }
        if self.train_steps is not None:
            env["TRAIN_STEPS"] = str(self.train_steps)
        if self.epochs is not None:
            env["EPOCHS"] = str(self.epochs)
        if self.learning_rate is not None:
            env["LEARNING_RATE"] = repr(self.learning_rate)
        return env


INT64_MAX = 2**63 - 1
"""The largest batch, step or core count: the trainer reads each as an int64."""


def _shown(value: int) -> str:
    # str() refuses integers past 4,300 digits (sys.int_info.default_max_str_digits).
    return (
        str(value)
        if value.bit_length() <= 200
        else f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    )


def plan_training(
    *,
    per_core_batch_size: int,
    cores: int,
    total_examples: Optional[int] = None,
    epochs: Optional[int] = None,
    base_learning_rate: Optional[float] = None,
    learning_rate_scaling: LearningRateScaling = "none",
    reference_cores: int = 8,
) -> TrainingPlan:
    """Scale a run to ``cores`` TensorCores.

    - global batch = per-core batch x cores (Google's Training on TPU Pods page: 1024 on v2-8
      becomes 4096 on v2-32);
    - with ``total_examples``, steps = ceil(total_examples / global batch). Rounding up means the
      run never sees fewer examples than asked; it sees at most one global batch more;
    - with ``epochs``, the step count is the trainer's business and is not scaled;
    - the learning rate is ``base_learning_rate`` as tuned at ``reference_cores``, scaled by the
      ratio of global batches: linearly, by its square root, or not at all.
    """
    for label, value in (
        ("per_core_batch_size", per_core_batch_size),
        ("cores", cores),
        ("reference_cores", reference_cores),
        ("total_examples", total_examples),
        ("epochs", epochs),
    ):
        if value is not None and not 1 <= value <= INT64_MAX:
            raise ValueError(f"{label} must be a whole number from 1 to 2**63 - 1, got {_shown(value)}")
    if (total_examples is None) == (epochs is None):
        raise ValueError("give exactly one of total_examples and epochs")
    if learning_rate_scaling not in LEARNING_RATE_SCALINGS:
        raise ValueError(
            f"learning_rate_scaling must be one of {', '.join(LEARNING_RATE_SCALINGS)}, "
            f"got {learning_rate_scaling!r}"
        )

    if base_learning_rate is not None and not (math.isfinite(base_learning_rate) and base_learning_rate > 0):
        raise ValueError(f"base_learning_rate must be a positive, finite number, got {base_learning_rate}")

    global_batch = per_core_batch_size * cores
    if global_batch > INT64_MAX:
        raise ValueError(
            f"per_core_batch_size {_shown(per_core_batch_size)} x {cores} cores is a global batch past "
            f"2**63 - 1, which the trainer cannot read"
        )
    # Integer ceiling division: `math.ceil(a / b)` divides as floats and is off past 2**53.
    steps = -(-total_examples // global_batch) if total_examples is not None else None

    learning_rate: Optional[float] = None
    if base_learning_rate is not None:
        ratio = cores / reference_cores
        factor = {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[learning_rate_scaling]
        learning_rate = base_learning_rate * factor
        if not (math.isfinite(learning_rate) and learning_rate > 0):
            raise ValueError(
                f"base_learning_rate {base_learning_rate} scaled {learning_rate_scaling} to {cores} cores "
                f"(from {reference_cores} reference cores) is {learning_rate}, not a finite number above 0"
            )

    return TrainingPlan(per_core_batch_size, cores, global_batch, steps, epochs, learning_rate)
