"""Errors the components raise for bad arguments."""

from __future__ import annotations

import collections.abc
import difflib
import inspect
import math
import typing
from typing import Any, ForwardRef, Iterable, Mapping, Optional, Sequence

import pulumi

from .domain.naming import MAX_LABELS, PROVIDER_LABELS, kubernetes_label_problem, label_problem
from .domain.startup_script import user_env_problem


class InvalidArgument(pulumi.RunError):
    """A component argument is wrong. Subclasses ``pulumi.RunError`` so the Pulumi CLI prints the
    message alone, without a Python traceback."""


def suggestion(unknown: str, allowed: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for a likely typo, else an empty string."""
    close = difflib.get_close_matches(unknown, list(allowed), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_known(where: str, args: Any, allowed: Iterable[str]) -> None:
    """Reject argument names the component does not know (they are almost always typos); given
    the annotations of the arguments' ``TypedDict`` (``XArgs.__annotations__``), also reject a
    missing required argument and any value of the wrong type (``check_types``)."""
    if not isinstance(args, Mapping):
        raise InvalidArgument(
            f"{where}: the arguments must be a dict of argument names to values, got {_shown(args)}"
        )
    names = sorted(allowed)
    for key in args:
        if key not in names:
            raise InvalidArgument(
                f"{where}: unknown argument {key!r}{suggestion(str(key), names)}; allowed: {', '.join(names)}"
            )
    if isinstance(allowed, Mapping):
        check_types(where, args, allowed)


# --- Types of the arguments, from the TypedDict annotations ------------------------------------
#
# Python does not check annotations; the components' arguments arrive from Python programs and,
# through the component provider, from other languages. A wrong type would otherwise surface as
# a TypeError or AttributeError deep inside a component, or, worse, be taken: `"yes"` is truthy,
# so `external_ip="yes"` would give the VMs public addresses. Reading the annotations keeps the
# check complete: a new argument is checked the day it is declared.


def _shown(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        # repr() refuses integers beyond 4,300 digits (sys.int_info.default_max_str_digits).
        return f"a whole number of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _is_output_ref(annotation: Any) -> bool:
    # `pulumi.Input[T]` is `Union[T, Awaitable[T], "Output[T]"]`, the last a forward reference.
    return isinstance(annotation, ForwardRef) and annotation.__forward_arg__.startswith("Output")


def _is_typed_dict(annotation: Any) -> bool:
    return isinstance(annotation, type) and hasattr(annotation, "__required_keys__")


def _unwrapped(annotation: Any) -> Any:
    while typing.get_origin(annotation) in (typing.NotRequired, typing.Required, typing.Annotated):
        annotation = typing.get_args(annotation)[0]
    return annotation


def _describe(annotation: Any) -> str:
    """What a value of this annotation is, in words."""
    annotation = _unwrapped(annotation)
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return "anything"
    if annotation is type(None):
        return "None"
    if _is_output_ref(annotation):
        return "a pulumi.Output"
    if origin is typing.Union:
        members = [
            a for a in typing.get_args(annotation) if typing.get_origin(a) is not collections.abc.Awaitable
        ]
        return " or ".join(_describe(m) for m in members)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (collections.abc.Mapping, dict):
        key, value = typing.get_args(annotation) or (Any, Any)
        return f"a dict of {_plural(key)} to {_plural(value)}"
    if origin in (collections.abc.Sequence, list, tuple):
        (item,) = typing.get_args(annotation)[:1] or (Any,)
        return f"a list of {_plural(item)}"
    if _is_typed_dict(annotation):
        return f"a dict with keys {', '.join(annotation.__annotations__)} ({annotation.__name__})"
    return {
        str: "text (str)",
        bool: "True or False",
        int: "a whole number >= 0",
        float: "a number (float)",
    }.get(annotation, f"a {getattr(annotation, '__name__', annotation)}")


def _plural(annotation: Any) -> str:
    text = _describe(annotation)
    return {"text (str)": "text", "a whole number >= 0": "whole numbers"}.get(text, text)


def type_problem(value: Any, annotation: Any, path: str) -> Optional[str]:
    """Why ``value`` is no ``annotation``, naming ``path``, or None."""
    annotation = _unwrapped(annotation)
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return None
    if origin is typing.Union:
        members = typing.get_args(annotation)
        if isinstance(value, pulumi.Output) and any(_is_output_ref(m) for m in members):
            return None  # not known yet: checked by nobody, as AWS CDK's guidelines say
        if inspect.isawaitable(value) and any(
            typing.get_origin(m) is collections.abc.Awaitable for m in members
        ):
            return None
        plain = [
            m
            for m in members
            if not _is_output_ref(m) and typing.get_origin(m) is not collections.abc.Awaitable
        ]
        problems = [type_problem(value, m, path) for m in plain]
        if any(p is None for p in problems):
            return None
        # One plain type: its own, more precise, reason (a NUL byte, a negative count).
        if len(plain) == 1 or (len(plain) == 2 and type(None) in plain and value is not None):
            return next(p for p, m in zip(problems, plain, strict=True) if m is not type(None))
        return f"{path} must be {_describe(annotation)}, got {_shown(value)}"
    if annotation is type(None):
        return None if value is None else f"{path} must be None, got {_shown(value)}"
    if isinstance(value, pulumi.Output):
        return (
            f"{path} is a pulumi.Output, but must be {_describe(annotation)} known when the program "
            f"runs: the component plans with it before anything is created"
        )
    if origin is typing.Literal:
        allowed = typing.get_args(annotation)
        return None if value in allowed else f"{path} must be {_describe(annotation)}, got {_shown(value)}"
    if annotation is str:
        if not isinstance(value, str):
            return f"{path} must be text (str), got {_shown(value)}"
        if "\x00" in value:
            # No Google API, shell or container environment takes a NUL byte.
            return f"{path} {_shown(value)} contains a NUL byte (\\x00), which no Google Cloud API takes"
        return None
    if annotation is bool:
        # Strictly a bool: "yes", "false" and 1 are truthy or falsy by accident, not by intent.
        return None if isinstance(value, bool) else f"{path} must be True or False, got {_shown(value)}"
    if annotation is int:
        # Every whole number the components take is a count: never negative, never a fraction.
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"{path} {_shown(value)} must be a whole number >= 0"
        return None
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"{path} must be a finite number (float), got {_shown(value)}"
        return None
    if origin in (collections.abc.Mapping, dict):
        if not isinstance(value, Mapping):
            return f"{path} must be {_describe(annotation)}, got {_shown(value)}"
        key_type, value_type = typing.get_args(annotation) or (Any, Any)
        for key, item in value.items():
            problem = type_problem(key, key_type, f"{path} key {key!r}") or type_problem(
                item, value_type, f"{path}[{key!r}]"
            )
            if problem:
                return problem
        return None
    if origin in (collections.abc.Sequence, list, tuple):
        # Text is a sequence of characters, never a list of values.
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            return f"{path} must be {_describe(annotation)}, got {_shown(value)}"
        (item_type,) = typing.get_args(annotation)[:1] or (Any,)
        for index, item in enumerate(value):
            problem = type_problem(item, item_type, f"{path}[{index}]")
            if problem:
                return problem
        return None
    if _is_typed_dict(annotation):
        try:
            check_types(path, value, annotation)
        except InvalidArgument as exc:
            return str(exc)
        return None
    if isinstance(annotation, type):
        return (
            None
            if isinstance(value, annotation)
            else f"{path} must be {_describe(annotation)}, got {_shown(value)}"
        )
    return None  # an annotation this check does not know: the component's own checks decide


def check_types(where: str, args: Any, annotations: Any) -> None:
    """Reject arguments that are missing or of the wrong type, as the ``TypedDict`` (or its
    ``__annotations__``) declares them: the message names the argument, shows the value and says
    what is allowed. ``None`` is refused unless the annotation is ``Optional``."""
    fields: Mapping[str, Any] = (
        annotations if isinstance(annotations, Mapping) else annotations.__annotations__
    )
    if not isinstance(args, Mapping):
        raise InvalidArgument(f"{where} = {_shown(args)} must be a dict with keys {', '.join(fields)}")
    for key, annotation in fields.items():
        required = typing.get_origin(annotation) is not typing.NotRequired
        if key not in args:
            if required:
                raise InvalidArgument(f"{where}: {key} is required; give {_describe(annotation)}")
            continue
        problem = type_problem(args[key], annotation, key)
        if problem:
            raise InvalidArgument(f"{where}: {problem}")


def check_resource_name(what: str, name: Any, opts: Any) -> None:
    """A component's own name and options: Pulumi's constructor would raise a bare TypeError."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"{what}: the resource name {_shown(name)} must be non-empty text (str)")
    if "\x00" in name:
        raise InvalidArgument(f"{what} {name!r}: the resource name contains a NUL byte (\\x00)")
    if opts is not None and not isinstance(opts, pulumi.ResourceOptions):
        raise InvalidArgument(
            f"{what} {name!r}: opts = {_shown(opts)} must be a pulumi.ResourceOptions or None"
        )


def check_one_of(where: str, key: str, value: Any, allowed: Sequence[str]) -> None:
    """Reject a value outside a fixed set of choices, listing them."""
    if value not in allowed:
        raise InvalidArgument(f"{where}: {key} {value!r} is not one of {', '.join(allowed)}")


def check_labels(where: str, labels: Mapping[str, str], *, added: int = 0) -> None:
    """Reject labels Google Cloud would refuse, before anything is declared: each label's rules,
    and their number with the ``added`` ones the component adds itself and the provider's own
    attribution label (``naming.PROVIDER_LABELS``) within ``naming.MAX_LABELS``."""
    for key, value in labels.items():
        problem = label_problem(key, value)
        if problem:
            raise InvalidArgument(f"{where}: {problem}")
    most = MAX_LABELS - PROVIDER_LABELS - added
    if len(labels) > most:
        raise InvalidArgument(
            f"{where}: labels has {len(labels)} labels; Google Cloud allows {MAX_LABELS} per resource, "
            f"of which pulumi-gcp's attribution label takes 1"
            + (f" and this component's own {added}" if added else "")
            + f", so at most {most}"
        )


def check_kubernetes_labels(where: str, labels: Mapping[str, str]) -> None:
    """Reject labels the Kubernetes API server would refuse (a Google Cloud label may still be one:
    a key ending in '-', a value with an accented letter), before anything is declared."""
    for key, value in labels.items():
        problem = kubernetes_label_problem(key, value)
        if problem:
            raise InvalidArgument(f"{where}: labels: {problem}")


def check_checkpoint_dir(where: str, checkpoint_dir: str) -> None:
    """Checkpoints live in Cloud Storage: refuse anything but a ``gs://`` prefix."""
    if not checkpoint_dir.startswith("gs://"):
        raise InvalidArgument(f"{where}: checkpoint_dir {checkpoint_dir!r} must start with gs://")


CHECKPOINT_VARIABLE = "CHECKPOINT_DIR"


def check_environment(where: str, environment: Mapping[str, str], checkpoint_dir: str) -> None:
    """Reject environment variable names a shell or a container would refuse, and values the run
    would not get: ``CHECKPOINT_DIR`` is ``checkpoint_dir`` (it may be repeated, not changed), and
    names that break the training script or would not reach the trainer as given are refused
    rather than dropped (``startup_script.user_env_problem``, the stack file's rule too)."""
    for key, value in environment.items():
        if key == CHECKPOINT_VARIABLE:
            if value != checkpoint_dir:
                raise InvalidArgument(
                    f"{where}: environment {key}={value!r} differs from checkpoint_dir "
                    f"{checkpoint_dir!r}, where the run checkpoints; drop it from environment"
                )
            continue
        problem = user_env_problem(key)
        if problem:
            raise InvalidArgument(f"{where}: environment: {problem}")


def check_whole_number(where: str, key: str, value: Any, *, most: Optional[int] = None) -> None:
    """A plain count must be a whole number >= 0, and at most ``most`` when given (an Output is
    checked by nobody: its value is not known yet). For a recovery generation: it becomes a label
    value and the replacement trigger, where ``2.0`` or ``-1`` would read as a different
    generation."""
    if isinstance(value, pulumi.Output):
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"{where}: {key} {_shown(value)} must be a whole number >= 0")
    if most is not None and value > most:
        raise InvalidArgument(f"{where}: {key} = {_shown(value)}; allowed: 0-{most}")
