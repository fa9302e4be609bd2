"""pydantic's validation errors in the words of the stack file: what a key must be, never
pydantic's own (``Input should be a valid string``, ``literal['spot', ...]``, ``Tuple should
have at least 1 item after validation``) nor a Python type name.

A key whose value may take one of several shapes (``provisioning: spot`` or ``provisioning:
[flex-start, spot]``) is a union to pydantic, which reports one error per shape, each under a
tag of its own in the error's place (``literal[...]``, ``tuple[...]``); ``merged`` makes them one
problem: the list's own item when a list was given, else the one value's with "or a list of
them".
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Iterable

from tpu_training_components.errors import suggestion

_UNION_TAG = re.compile(
    r"^(literal|tuple|list|dict|set|function-\w+|union|nullable|constrained-\w+|json-or-python|"
    r"str|int|float|bool|decimal|lax-or-strict|chain|default|model|is-instance)(\[.*\])?$"
)
"""How pydantic tags the branch of a union an error belongs to, in the error's ``loc``."""

_LIST_TAG = re.compile(r"^(tuple|list|set)\[")


def _is_tag(part: Any) -> bool:
    return (
        isinstance(part, str)
        and bool(_UNION_TAG.match(part))
        and ("[" in part or "-" in part or part.isalpha())
    )


def _allowed(expected: str) -> list[str]:
    """``'none', 'linear' or 'sqrt'`` -> ``['none', 'linear', 'sqrt']``."""
    return re.findall(r"'((?:[^'\\]|\\.)*)'", expected) or [expected]


ELSEWHERE = {
    ("flex-start-queued", "preemptible"): "; flex-start-queued is a capacity of GKE node pools "
    "(nodePools[].provisioning): a TPU VM waits for capacity in the Cloud TPU queue with flex-start, or "
    "with queued: {validFor: 6h} on spot or on-demand (docs/tpu-vms-and-recovery.md)",
}
"""A value that belongs to another key (``(value, a value this key allows)``): where it goes."""


def plain(error: dict[str, Any]) -> str:
    """What the value of ``error`` must be, in plain words."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "literal_error" or kind == "enum":
        allowed = _allowed(str(ctx.get("expected", "")))
        hint = suggestion(value, allowed) if isinstance(value, str) else ""
        if isinstance(value, str):
            hint += next(
                (
                    why
                    for (elsewhere, marker), why in ELSEWHERE.items()
                    if marker in allowed and difflib.get_close_matches(value, [elsewhere], cutoff=0.8)
                ),
                "",
            )
        more = f", {error['alternatives']}" if error.get("alternatives") else ""
        return f"must be one of {', '.join(allowed)}{more}{hint}"
    words = {
        "string_type": "must be text",
        "int_type": "must be a whole number",
        "int_parsing": "must be a whole number",
        "int_from_float": "must be a whole number",
        "float_type": "must be a number",
        "float_parsing": "must be a number",
        "finite_number": "must be a finite number",
        "bool_type": "must be true or false",
        "bool_parsing": "must be true or false",
        "dict_type": "must be an object (in YAML, `key: value` lines under it)",
        "model_type": "must be an object (in YAML, `key: value` lines under it)",
        "model_attributes_type": "must be an object (in YAML, `key: value` lines under it)",
        "none_required": "must not be set",
    }
    if kind in words:
        return words[kind]
    if kind == "greater_than":
        return f"must be more than {ctx.get('gt')}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}"
    if kind == "less_than":
        return f"must be less than {ctx.get('lt')}"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')}"
    if kind == "string_too_short":
        least = ctx.get("min_length", 1)
        return "must not be empty" if least == 1 else f"must be at least {least} characters long"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters long"
    if kind == "too_short":
        least = ctx.get("min_length", 1)
        items = "item" if least == 1 else "items"
        return f"must hold at least {least} {items}; it holds {ctx.get('actual_length', 0)}"
    if kind == "too_long":
        return f"must hold at most {ctx.get('max_length')} items; it holds {ctx.get('actual_length')}"
    if kind == "string_pattern_mismatch":
        return f"must match the pattern {ctx.get('pattern')}"
    return str(error["msg"]).removeprefix("Value error, ")


def _untagged(error: dict[str, Any]) -> dict[str, Any]:
    return dict(error, loc=tuple(p for p in error["loc"] if not _is_tag(p)))


def merged(errors: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The errors with each union's branches made one: the tags dropped from every place, and of a
    union's errors only those of the shape the value was written in (a list, or one value)."""
    errors = list(errors)
    unions: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    first_at: dict[tuple[Any, ...], int] = {}
    for index, error in enumerate(errors):
        loc = tuple(error["loc"])
        tag_at = next((i for i, part in enumerate(loc) if _is_tag(part)), None)
        if tag_at is not None:
            unions.setdefault(loc[:tag_at], []).append(error)
            first_at.setdefault(loc[:tag_at], index)
    out: list[dict[str, Any]] = []
    for index, error in enumerate(errors):
        loc = tuple(error["loc"])
        place = next(
            (p for p in unions if loc[: len(p)] == p and len(loc) > len(p) and _is_tag(loc[len(p)])), None
        )
        if place is None:
            out.append(error)
            continue
        if first_at[place] != index:
            continue
        members = unions[place]
        whole = [e for e in members if len(e["loc"]) == len(place) + 1]
        listed = [e for e in members if _LIST_TAG.match(str(e["loc"][len(place)]))]
        as_list = not whole or isinstance(whole[0]["input"], list)
        if as_list and listed:
            seen: set[tuple[Any, ...]] = set()
            for member in listed:
                plain_error = _untagged(member)
                if plain_error["loc"] not in seen:
                    seen.add(plain_error["loc"])
                    out.append(plain_error)
            continue
        single = [e for e in whole if not _LIST_TAG.match(str(e["loc"][len(place)]))] or whole or members
        chosen = _untagged(single[0])
        if listed and chosen["type"] in ("literal_error", "enum"):
            chosen["alternatives"] = "or a list of them"
        out.append(chosen)
    return out
