"""The package's public functions, checked where they are called from outside.

The pure domain modules (``catalogue``, ``scaling``, ``node_pool_plan``) raise ``ValueError``
subclasses and trust their callers' types: the stack's config module has validated everything
before it calls them. A program importing the package has not, so the functions it imports are
wrapped here: every argument is checked against the function's annotations (as component
arguments are, ``errors.check_types``), and a refusal is an ``InvalidArgument`` naming the
function, the argument and the value, never a ``TypeError`` from deep inside.
"""

from __future__ import annotations

import functools
import inspect
import typing
from typing import Any, Callable, ParamSpec, TypeVar

from .domain import catalogue, node_pool_plan, scaling
from .errors import InvalidArgument, type_problem

P = ParamSpec("P")
R = TypeVar("R")

_REFUSALS: dict[type[Exception], type[Exception]] = {}


def _refusal(error: type[Exception]) -> type[Exception]:
    """An ``InvalidArgument`` that is still the domain's own error (``CatalogueError``, ...), so
    code catching either catches it."""
    if error not in _REFUSALS:
        _REFUSALS[error] = type(error.__name__, (InvalidArgument, error), {"__module__": error.__module__})
    return _REFUSALS[error]


def checked(func: Callable[P, R]) -> Callable[P, R]:
    """``func`` with its arguments checked against its annotations and its ``ValueError``s
    raised as ``InvalidArgument``."""
    signature = inspect.signature(func)
    hints = typing.get_type_hints(func)
    name = func.__name__

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:  # a missing, unknown or repeated argument
            allowed = ", ".join(signature.parameters)
            raise InvalidArgument(f"{name}: {exc}; its arguments: {allowed}") from None
        for key, value in bound.arguments.items():
            problem = type_problem(value, hints.get(key, Any), key)
            if problem:
                # A ValueError too, as the domain's own refusals are: `except ValueError` holds.
                raise _refusal(ValueError)(f"{name}: {problem}")
        try:
            return func(*args, **kwargs)
        except ValueError as exc:
            shown = ", ".join(f"{k}={v!r}" for k, v in bound.arguments.items())
            raise _refusal(type(exc))(f"{name}({shown}): {exc}") from None

    return wrapper


accelerator_type = checked(catalogue.accelerator_type)
machine_type = checked(catalogue.machine_type)
region_of_zone = checked(catalogue.region_of_zone)
slice_shape = checked(catalogue.slice_shape)
topology_chips = checked(catalogue.topology_chips)
plan_training = checked(scaling.plan_training)
plan_tpu_node_pool = checked(node_pool_plan.plan_tpu_node_pool)
