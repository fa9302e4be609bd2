"""Values as they come off Pulumi's gRPC wire, made plain again.

The engine's wire (``google.protobuf.Struct``) carries every number as a double, so a count of 4
arrives as 4.0, and maps and lists arrive as protobuf or read-only proxy containers. The offline
plan (``tpu_training/offline.py``, what the mock monitor records) and the policy pack (what the analyzer
hands a policy) both need the plain, JSON-ready value back; this is the one place that says how.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Callable, Optional

KEEP = object()
"""What a ``special`` function returns to leave a value to the ordinary rules."""

UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
"""How the wire carries a value not known until the update, in a preview (the Pulumi SDK's
``pulumi.runtime.rpc.UNKNOWN``; a provider that keeps unknowns sees this string)."""


def has_unknown(value: Any) -> bool:
    """Whether ``value``, or anything in its maps and lists, is ``UNKNOWN``."""
    if isinstance(value, Mapping):
        return any(has_unknown(v) for v in value.values())
    if is_list(value):
        return any(has_unknown(v) for v in value)
    return value == UNKNOWN


def is_list(value: Any) -> bool:
    """A list of the wire (any sequence but text)."""
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def plain(value: Any, special: Optional[Callable[[Any], Any]] = None) -> Any:
    """A JSON-ready copy of ``value``: maps (keys as text, in sorted order) and lists copied all
    the way down, and every whole double back to the integer it was. ``special`` sees each value
    first and may return its plain form itself (a file asset, a secret's envelope), or ``KEEP``."""
    if special is not None:
        replaced = special(value)
        if replaced is not KEEP:
            return replaced
    if isinstance(value, Mapping):
        return {
            str(key): plain(item, special) for key, item in sorted(value.items(), key=lambda kv: str(kv[0]))
        }
    if is_list(value):
        return [plain(item, special) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
