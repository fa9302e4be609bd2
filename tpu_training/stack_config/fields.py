"""What every part of the stack's config shares: the frozen model base, field types whose errors
name the one label or variable at fault, and validators made from the library's ``*_problem``
functions."""

from __future__ import annotations

from typing import Annotated, Any, Callable, ClassVar, Literal, Mapping, Optional, Sequence

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictFloat,
    StrictStr,
)
from pydantic.alias_generators import to_camel
from tpu_training_components.domain import naming
from tpu_training_components.domain.recovery import GENERATION_LABEL
from tpu_training_components.domain.startup_script import user_env_problem

PROJECT = "tpu-training"
"""The Pulumi project name, and so the namespace of every project config key."""


class Model(BaseModel):
    # Frozen: config is read once and never changes. Unknown keys are refused (typos).
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    replaced_keys: ClassVar[Mapping[str, Callable[[str, Any], str]]] = {}
    """Keys this part no longer takes, by name -> why ``key: value`` is refused: the key that
    replaced it and what that allows (the loader's error for an unknown key uses it)."""


Provisioning = Literal["preemptible", "spot", "on-demand", "reserved", "flex-start"]
"""A TPU VM's capacity types: the Preemptible TPUs page's kinds, and flex-start (always through
the Cloud TPU queue)."""


def no_problem(problem_of: Callable[[str], Optional[str]]) -> Callable[[str], str]:
    """A field validator from a ``*_problem`` function of the library: the value, or its problem
    as the error."""

    def check(value: str) -> str:
        problem = problem_of(value)
        if problem:
            raise ValueError(problem)
        return value

    return check


def dns_label(what: str, limit: int) -> Callable[[str], str]:
    """A validator stating Google Cloud's name rule in words (not as a regular expression)."""
    return no_problem(lambda name: naming.dns_label_problem(what, name, limit))


def not_blank(what: str) -> Callable[[str], str]:
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


def int_is_a_float(value: Any) -> Any:
    """YAML reads `60` as an integer; 60 seconds is still a number of seconds."""
    if not isinstance(value, int) or isinstance(value, bool):
        return value
    try:
        return float(value)
    except OverflowError:  # an integer of hundreds of digits
        raise ValueError("is too large a number (above 1.8e308)") from None


HangMinutes = Annotated[
    StrictFloat, BeforeValidator(int_is_a_float), Field(ge=1, le=7 * 24 * 60, allow_inf_nan=False)
]
"""``hangMinutes``: how long training may go without a step before recovery replaces it (a week
at most, as the maintenance grace)."""

# Types whose errors name the one label or variable at fault (`labels.Team`, `env.PATH`).
LabelKey = Annotated[
    StrictStr, AfterValidator(no_problem(naming.label_key_problem)), AfterValidator(_no_reserved_label)
]
LabelValue = Annotated[StrictStr, AfterValidator(no_problem(naming.label_value_problem))]
EnvName = Annotated[StrictStr, AfterValidator(no_problem(user_env_problem))]


def repeated(names: Sequence[str]) -> list[str]:
    """The names given more than once, sorted."""
    return sorted({n for n in names if names.count(n) > 1})
