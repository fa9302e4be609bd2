"""A JSON file named on the command line (``--previous-outputs``, ``--compare-to``), read as a
command should: within a time and a size, whatever the path is (a file, a `<(...)` pipe, a FIFO
nobody writes to, /dev/zero), with every problem said in one line that names the option."""

from __future__ import annotations

import json
import re
from typing import Any

from tpu_training_components.live.deadline import DeadlineExceeded, call_with_deadline

MAX_BYTES = 16 * 1024 * 1024
"""The most such a file may hold: stack outputs and plans are kilobytes; /dev/zero never ends."""
SECONDS = 30.0
"""How long reading it may take: a FIFO nobody writes to blocks for ever."""


class JsonFileError(Exception):
    """The file cannot be used; the message names the option and the file."""


def read_text(
    source: str, option: str, *, writer: str, max_bytes: int = MAX_BYTES, seconds: float = SECONDS
) -> str:
    """The text of ``source``, read whole within ``seconds`` and up to ``max_bytes``. The read runs
    in a thread that is left behind if it never ends (a FIFO with no writer blocks even its
    opening); the process exits without waiting for it. ``writer`` is the command that writes
    such a file, for the messages."""

    def read() -> bytes:
        with open(source, "rb") as file:
            return file.read(max_bytes + 1)

    try:
        data = call_with_deadline(read, seconds, f"reading {option} {source}")
    except DeadlineExceeded:
        raise JsonFileError(
            f"{option} {source}: nothing came to read in {seconds:g} s (a FIFO no program writes to?); "
            f"give a file written by `{writer}`"
        ) from None
    except OSError as exc:
        raise JsonFileError(f"{option} {source}: cannot be read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise JsonFileError(
            f"{option} {source}: larger than {max_bytes} bytes; what `{writer}` writes is far smaller"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise JsonFileError(f"{option} {source}: is not UTF-8 text") from None


def read_json(source: str, option: str, *, writer: str, seconds: float = SECONDS) -> Any:
    """The JSON document in ``source`` (``read_text``'s bounds), or ``JsonFileError``."""
    text = read_text(source, option, writer=writer, seconds=seconds)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonFileError(
            f"{option} {source}: not JSON ({exc.msg}, line {exc.lineno}); write it with `{writer}`"
        ) from None
    except (ValueError, RecursionError) as exc:  # a number of thousands of digits; deep nesting
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        raise JsonFileError(f"{option} {source}: cannot be read as JSON ({reason})") from None
    where = lone_surrogate(document)
    if where is not None:
        # JSON's \udXXX escapes can spell half a character, which no UTF-8 output (the terminal,
        # protobuf, a file) can carry; `pulumi stack output --json` never writes one.
        raise JsonFileError(
            f"{option} {source}: {where} holds a lone surrogate escape (\\ud800-\\udfff alone), "
            f"which is no Unicode text; write it with `{writer}`"
        )
    return document


def lone_surrogate(value: Any, path: str = "the document") -> str | None:
    """Where in ``value`` a key or text holds half of a UTF-16 surrogate pair, or None."""
    pending = [(path, value)]
    while pending:
        where, item = pending.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return where
        elif isinstance(item, dict):
            for key, sub in item.items():
                if _SURROGATE.search(key):
                    return f"{where}: a key ({key.encode('utf-8', 'backslashreplace').decode()})"
                pending.append((f"{where}.{key}", sub))
        elif isinstance(item, list):
            pending.extend((f"{where}[{index}]", sub) for index, sub in enumerate(item))
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")
