"""The suite's two tiers: README command 2 runs every test but the engine tier's (pyproject.toml's
``-m 'not engine'``); the engine tier, tests/engine/, is a command of its own, ``pytest -m engine``,
after ``bash .ci/engine`` has built what it runs (docs/tests.md)."""

from __future__ import annotations

from pathlib import Path

ENGINE_TIER = Path(__file__).resolve().parents[2] / "engine"
"""tests/engine/: every test there is the engine tier."""


def in_the_engine_tier(path: Path) -> bool:
    return ENGINE_TIER in Path(path).resolve().parents


def selects_the_engine_tier(markexpr: str) -> bool:
    """Whether a ``-m`` expression lets a test of the engine tier through (README command 2's
    default, ``not engine``, does not). pytest's own reading of the expression; were its internals
    ever to change, the answer is yes, as it was before the tier had a command of its own."""
    if not markexpr:
        return True
    try:
        from _pytest.mark.expression import Expression

        return bool(Expression.compile(markexpr).evaluate(lambda name, **_: name == "engine"))
    except Exception:  # noqa: BLE001 - any change of pytest's internals: yes
        return True
