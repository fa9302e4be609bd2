"""How a component validates its arguments, before it declares anything.

1. pydantic validates the arguments against the component's ``TypedDict`` (``ARGUMENTS``, its
   config, says how): every required argument given, no unknown one, each of its declared type,
   strictly, so ``"yes"`` is no boolean and ``2.0`` or ``True`` no count.
2. Then the component checks the values against the cloud's rules (a zone that exists, labels
   Google takes, a slice the pool holds), adding each problem to ``Problems``.

Every problem of a step is reported at once, in one ``InvalidArgument`` that names each argument
(its property path), shows its value and says what is allowed; the values are checked only once
their types are right. A ``pulumi.Output`` or other awaitable where the ``TypedDict`` declares
``pulumi.Input[...]`` passes untouched: its value is not known yet (during a preview, not at all),
and nothing is checked that is not known (AWS CDK's design guidelines).
"""

from __future__ import annotations

import collections.abc
import functools
import typing
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, TypeVar

import pulumi
import typing_extensions
from pydantic import ConfigDict, TypeAdapter, ValidationError

from .domain.naming import MAX_LABELS, PROVIDER_LABELS, kubernetes_label_problem, label_problem
from .domain.startup_script import CHECKPOINT_VARIABLE, user_env_problem
from .errors import InvalidArgument, PropertyPath, Refusal, suggestion

ARGUMENTS = ConfigDict(strict=True, extra="forbid", arbitrary_types_allowed=True, allow_inf_nan=False)
"""The pydantic config of every component's arguments (``@pydantic.with_config(ARGUMENTS)`` on
its ``TypedDict``; nested ``TypedDict``s inherit it): strict types, no unknown keys, no NaN or
infinity, and resources (a ``k8s.Provider``) checked to be instances of their class."""

_OUTPUT_REASON = (
    "is a pulumi.Output, but must be a value known when the program runs: the component plans with "
    "it before anything is created"
)


def shown(value: Any) -> str:
    """``value`` as a message shows it: its repr, shortened."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        # repr() refuses integers beyond 4,300 digits (sys.int_info.default_max_str_digits).
        return f"a whole number of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, pulumi.Output):
        return "a pulumi.Output"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


class Problems:
    """The problems found with one component's arguments, raised together."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.found: list[Refusal] = []

    def add(self, path: PropertyPath | str, reason: str, value: Any = ...) -> None:
        """A problem at ``path`` (a top-level argument by its name); ``value`` is shown before
        the reason when given. An argument refused once is not refused again for a second reason."""
        path = (path,) if isinstance(path, str) else path
        if not any(path[: len(r.path)] == r.path for r in self.found if r.path):
            self.found.append(Refusal(path, reason, None if value is ... else shown(value)))

    def check(self, path: PropertyPath | str, problem: Optional[str]) -> None:
        """``problem`` (a domain check's answer, which shows the value) at ``path``, if any."""
        if problem:
            self.add(path, problem)

    def add_validation_errors(
        self, exc: ValidationError, keys_at: Callable[[PropertyPath], list[str]], names: Sequence[str] = ()
    ) -> None:
        """pydantic's errors: ``keys_at(path)`` lists the keys allowed at ``path`` (for an unknown
        key's hint), ``names`` are a function's parameters (for an argument pydantic locates by
        its position)."""
        self.found.extend(_refusals(exc, keys_at, names))

    def refuse_nul_bytes(self, args: Any) -> None:
        """Refuse every text in ``args`` that holds a NUL byte: no Google API, shell or container
        environment takes one."""
        for path in _nul_bytes(args):
            self.add(path, "contains a NUL byte (\\x00), which no Google Cloud API takes")

    def error(self) -> InvalidArgument:
        """The error that refuses the arguments for the problems found (at least one)."""
        return InvalidArgument.of(self.where, self.found)

    def raise_any(self) -> None:
        if self.found:
            raise self.error()


def check_arguments(component: str, name: Any, args: Any, args_type: Any, opts: Any) -> Problems:
    """Refuse a bad resource name or options and every argument that is missing, unknown or of
    the wrong type, at once; then hand the component its ``Problems`` to add the values' own."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise InvalidArgument(
            f"{component}: the resource name {shown(name)} must be non-empty text (str) without NUL bytes"
        )
    problems = Problems(f"{component} {name!r}")
    if opts is not None and not isinstance(opts, pulumi.ResourceOptions):
        problems.add((), f"opts = {shown(opts)} must be a pulumi.ResourceOptions or None")
    try:
        _adapter(args_type).validate_python(args)
    except ValidationError as exc:
        problems.add_validation_errors(exc, functools.partial(_declared_keys, args_type))
    problems.raise_any()
    problems.refuse_nul_bytes(args)
    return problems


@functools.cache
def _adapter(args_type: Any) -> TypeAdapter[Any]:
    # `pulumi.Input[T]` is `Union[T, Awaitable[T], "Output[T]"]`; pydantic resolves the forward
    # reference in the namespace of the frame that makes the adapter, this one.
    Output, T = pulumi.Output, TypeVar("T")  # noqa: F841, N806
    return TypeAdapter(args_type)


def _is_deferred(error: Mapping[str, Any]) -> bool:
    """An error of the ``Output`` or ``Awaitable`` member of a ``pulumi.Input`` union."""
    return error["type"] == "is_instance_of" and error.get("ctx", {}).get("class") in ("Output", "Awaitable")


_MISSING = {
    "missing",
    "missing_argument",
    "missing_keyword_only_argument",
    "missing_positional_only_argument",
}
_UNKNOWN = {"extra_forbidden", "unexpected_keyword_argument"}


def _refusals(
    exc: ValidationError, keys_at: Callable[[PropertyPath], list[str]], names: Sequence[str]
) -> Iterator[Refusal]:
    """pydantic's errors as refusals. A value a ``pulumi.Input[T]`` refuses fails each member of
    the union (``T``, an awaitable, an Output): it is one refusal, the ``T`` member's, at the
    argument's own path (pydantic puts the member's name after it)."""
    errors = exc.errors(include_url=False)
    unions = {tuple(e["loc"][:-1]) for e in errors if _is_deferred(e)}
    for error in errors:
        if _is_deferred(error):
            continue
        loc = tuple(error["loc"])
        if loc and isinstance(loc[0], int) and loc[0] < len(names):
            loc = (names[loc[0]], *loc[1:])
        for union in unions:
            if len(loc) > len(union) and loc[: len(union)] == union:
                loc = loc[: len(union)] + loc[len(union) + 1 :]
        value, kind = error["input"], error["type"]
        if kind in _MISSING:
            yield Refusal(loc, "required but not given")
        elif kind in _UNKNOWN:
            allowed = sorted(keys_at(loc[:-1]))
            hint = suggestion(str(loc[-1]), allowed)
            yield Refusal(loc[:-1], f"unknown argument {loc[-1]!r}{hint}; allowed: {', '.join(allowed)}")
        elif loc and loc[-1] == "[key]":  # pydantic's mark for a mapping's key
            yield Refusal(loc[:-1], f"the key {shown(value)}: {error['msg']}")
        elif isinstance(value, pulumi.Output):
            yield Refusal(loc, _OUTPUT_REASON)
        else:
            yield Refusal(loc, error["msg"], shown(value))


def _declared_keys(annotation: Any, path: PropertyPath) -> list[str]:
    """The keys of the ``TypedDict`` at ``path`` in ``annotation``, for an unknown key's hint."""
    for member in _members(annotation):
        if typing_extensions.is_typeddict(member):
            if not path:
                return list(member.__annotations__)
            if path[0] in member.__annotations__:
                return _declared_keys(member.__annotations__[path[0]], path[1:])
        elif path and isinstance(path[0], int) and typing.get_origin(member) is collections.abc.Sequence:
            return _declared_keys(typing.get_args(member)[0], path[1:])
    return []


def _members(annotation: Any) -> list[Any]:
    wrappers = (typing_extensions.NotRequired, typing_extensions.Required, typing.Union)
    if typing_extensions.get_origin(annotation) in wrappers:
        return [m for arg in typing_extensions.get_args(annotation) for m in _members(arg)]
    return [annotation]


def _nul_bytes(value: Any, path: PropertyPath = ()) -> Iterator[PropertyPath]:
    if isinstance(value, str):
        if "\x00" in value:
            yield path
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                yield (*path, key)
            else:
                yield from _nul_bytes(item, (*path, key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _nul_bytes(item, (*path, index))


def count_problem(value: int, least: int = 0, most: Optional[int] = None) -> Optional[str]:
    """Why the count ``value`` is out of range (``least``-``most``), or None."""
    if value < least or (most is not None and value > most):
        allowed = f"{least}-{most}" if most is not None else f"{least} or more"
        return f"{shown(value)} is out of range; allowed: {allowed}"
    return None


# --- Rules several components share ------------------------------------------------------------


def gcp_labels(problems: Problems, labels: Mapping[str, str], *, added: int = 0) -> None:
    """Labels Google Cloud would refuse: each label's rules, and their number with the ``added``
    ones the component adds itself and the provider's own attribution label
    (``naming.PROVIDER_LABELS``) within ``naming.MAX_LABELS``."""
    for key, value in labels.items():
        problems.check(("labels", key), label_problem(key, value))
    most = MAX_LABELS - PROVIDER_LABELS - added
    if len(labels) > most:
        problems.add(
            "labels",
            f"{len(labels)} labels; Google Cloud allows {MAX_LABELS} per resource, of which pulumi-gcp's "
            f"attribution label takes 1" + (f" and this component's own {added}" if added else "") + f", "
            f"so at most {most}",
        )


def kubernetes_labels(problems: Problems, labels: Mapping[str, str]) -> None:
    """Labels the Kubernetes API server would refuse (a Google Cloud label may still be one: a
    key ending in '-', a value with an accented letter)."""
    for key, value in labels.items():
        problems.check(("labels", key), kubernetes_label_problem(key, value))


def checkpoint_places(problems: Problems, checkpoint_dir: str, environment: Mapping[str, str]) -> None:
    """Checkpoints live in Cloud Storage, under ``checkpoint_dir``; the environment may repeat it
    as ``CHECKPOINT_DIR``, not change it, and names that break the training script or would not
    reach the trainer as given are refused rather than dropped (``startup_script.user_env_problem``,
    the stack file's rule too)."""
    if not checkpoint_dir.startswith("gs://"):
        problems.add("checkpoint_dir", f"{checkpoint_dir!r} must start with gs://")
    for key, value in environment.items():
        if key != CHECKPOINT_VARIABLE:
            problems.check(("environment", key), user_env_problem(key))
        elif value != checkpoint_dir:
            problems.add(
                ("environment", key),
                f"{value!r} differs from checkpoint_dir {checkpoint_dir!r}, where the run checkpoints; "
                f"drop it from environment",
            )
