"""The package's public functions, validated where they are called from outside.

The pure domain modules (``catalogue``, ``scaling``, ``node_pool_plan``) raise ``ValueError``
subclasses and trust their callers' types: the stack's config module has validated everything
before it calls them. A program importing the package has not, so pydantic validates the
arguments of the functions it imports against their annotations (``pydantic.validate_call``,
strictly, as the components' arguments are: ``validation.ARGUMENTS``), and every refusal is an
``InvalidArgument`` naming the function, the argument and the value, never a ``TypeError`` from
deep inside.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable, ParamSpec, TypeVar

from pydantic import ValidationError, validate_call

from .domain import catalogue, node_pool_plan, scaling
from .errors import InvalidArgument
from .validation import ARGUMENTS, Problems, shown

P = ParamSpec("P")
R = TypeVar("R")

_REFUSALS: dict[type[Exception], type[InvalidArgument]] = {}


def _refusal(error: type[Exception]) -> type[InvalidArgument]:
    """An ``InvalidArgument`` that is still the domain's own error (``CatalogueError``, or a
    ``ValueError`` as pydantic's are), so code catching either catches it."""
    if error not in _REFUSALS:
        _REFUSALS[error] = type(error.__name__, (InvalidArgument, error), {"__module__": error.__module__})
    return _REFUSALS[error]


def _validated(func: Callable[P, R]) -> Callable[P, R]:
    """``func`` with its arguments validated by pydantic and its ``ValueError``s raised as
    ``InvalidArgument``."""
    # Built at the first call, not at import: a program that imports the package (the stack's,
    # which calls none of these) does not pay for pydantic's schemas.
    validated = functools.cache(lambda: validate_call(config=ARGUMENTS)(func))
    name = func.__name__
    parameters = list(inspect.signature(func).parameters)

    @functools.wraps(func)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        # More positional arguments than parameters: pydantic refuses them below.
        given = {**dict(zip(parameters, args, strict=False)), **kwargs}
        problems = Problems(name)
        problems.refuse_nul_bytes(given)
        problems.raise_any()
        try:
            return validated()(*args, **kwargs)
        except ValidationError as exc:
            problems.add_validation_errors(exc, lambda path: [] if path else parameters, parameters)
            # A ValueError too, as the domain's own refusals are: `except ValueError` holds.
            raise _refusal(ValueError).of(name, problems.found) from None
        except ValueError as exc:
            arguments = ", ".join(f"{key}={shown(value)}" for key, value in given.items())
            raise _refusal(type(exc))(f"{name}({arguments}): {exc}") from None

    return call


accelerator_type = _validated(catalogue.accelerator_type)
machine_type = _validated(catalogue.machine_type)
region_of_zone = _validated(catalogue.region_of_zone)
slice_shape = _validated(catalogue.slice_shape)
topology_chips = _validated(catalogue.topology_chips)
plan_training = _validated(scaling.plan_training)
plan_tpu_node_pool = _validated(node_pool_plan.plan_tpu_node_pool)
