"""The suite's two tiers: README command 2 runs every test but the engine tier's (pyproject.toml's
``-m 'not engine'``); the engine tier is a command of its own, ``pytest -m engine``, after
``bash .ci/engine`` has built what it runs (docs/tests.md). A test is of the tier when it needs
the built engine: it asks for the ``engine`` fixture, itself or through one that does
(``programs``, ``kubernetes``), or is marked ``engine``."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Sequence

ENGINE_TIER = Path(__file__).resolve().parents[2] / "engine"
"""tests/engine/, where the tier's tests are (and the program server's own, which need no build)."""


def needs_the_engine(fixturenames: Sequence[str]) -> bool:
    return "engine" in fixturenames


def selects_the_engine_tier(markexpr: str) -> bool:
    """Whether a ``-m`` expression lets a test of the engine tier through (README command 2's
    default, ``not engine``, does not; ``engine``, ``slow`` or ``engine and slow`` do): true for
    some test marked ``engine`` and any of the expression's other markers. pytest's own reading
    of the expression; were its internals ever to change, the answer is yes."""
    if not markexpr:
        return True
    try:
        from _pytest.mark.expression import Expression

        expression = Expression.compile(markexpr)
        others = sorted(expression.idents() - {"engine"})
        return any(
            expression.evaluate(lambda name, _marked=marked, **_: name in _marked)
            for marked in (
                {"engine", *(name for name, value in zip(others, values, strict=True) if value)}
                for values in itertools.product((False, True), repeat=len(others))
            )
        )
    except Exception:  # noqa: BLE001 - any change of pytest's internals: yes
        return True


def names_only_the_engine_tier(arguments: Sequence[str], paths: Sequence[str], invoked_in: Path) -> bool:
    """Whether a command line (``arguments``, as typed) names test ``paths``, all of them in
    tests/engine/, and no ``-m``: ``pytest tests/engine/test_engine.py`` then runs that module
    rather than deselecting it."""
    if any(argument.startswith("-m") for argument in arguments):
        return False
    if not paths:
        return False
    for path in paths:
        resolved = (invoked_in / path.split("::", 1)[0]).resolve()
        if resolved != ENGINE_TIER and ENGINE_TIER not in resolved.parents:
            return False
    return True
