"""``StackConfig``: the stack's config validated as a whole, what the program reads. Each key is
checked on its own (``StackKeys``), then every check that spans keys runs (``checks``); the values
made from the config are ``derived``'s."""

from __future__ import annotations

from pydantic import model_validator

from . import checks
from .keys import StackKeys


class StackConfig(StackKeys):
    """Everything the stack program needs, validated as a whole."""

    @model_validator(mode="after")
    def _consistent(self) -> StackConfig:
        problems = checks.problems(self)
        if problems:
            raise ValueError("\n  - ".join(problems))
        return self

    @property
    def warnings(self) -> tuple[str, ...]:
        """What is valid but may not work, for the plan and `pulumi preview` to show."""
        return checks.warnings(self)
