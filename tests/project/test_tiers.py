"""The suite's two tiers (tests/support/harness/tiers.py): which ``-m`` expressions let the engine
tier through (and so start the run's program server), and which command lines name only it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.harness import tiers
from support.harness.program import REPO


@pytest.mark.parametrize(
    ("markexpr", "selects"),
    [
        ("", True),
        ("engine", True),
        ("not engine", False),
        # The tier's longest tests are marked slow too: a run of the slow tests has them.
        ("slow", True),
        ("engine and slow", True),
        ("not slow", True),
        ("slow and not engine", False),
        ("not engine and not slow", False),
    ],
)
def test_an_expression_selects_the_engine_tier_when_some_test_of_it_gets_through(markexpr, selects):
    assert tiers.selects_the_engine_tier(markexpr) is selects


@pytest.mark.parametrize(
    ("arguments", "paths", "only"),
    [
        (["tests/engine/test_engine.py"], ["tests/engine/test_engine.py"], True),
        (["-q", "-p", "no:cacheprovider", "tests/engine"], ["tests/engine"], True),
        (["tests/engine/test_engine.py::test_x"], ["tests/engine/test_engine.py::test_x"], True),
        (["tests/engine", "-m", "not slow"], ["tests/engine"], False),  # the user's -m stands
        (["-mengine", "tests/engine"], ["tests/engine"], False),
        (["tests/engine", "tests/config"], ["tests/engine", "tests/config"], False),
        (["tests"], ["tests"], False),
        (["-q"], [], False),  # no path named: the testpaths, both tiers' folders
    ],
)
def test_a_command_line_that_names_only_the_tiers_paths_runs_them(arguments, paths, only):
    assert tiers.names_only_the_engine_tier(arguments, paths, REPO) is only


def test_command_2_leaves_the_tier_out_and_its_own_command_collects_it():
    def collected(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n0", "-p", "no:cacheprovider", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return done.stdout

    tier = collected("-m", "engine")
    assert "tests/engine/test_engine_crash.py::" in tier and "tests/engine/test_engine_readme.py::" in tier
    # The program server's own tests need no build: they stay in command 2.
    assert "test_engine_program_server.py" not in tier
    default = collected("tests/engine")
    assert "tests/engine/test_engine_crash.py::" in default, "a path of the tier alone runs it"
    everything = collected()
    assert "test_engine_crash.py" not in everything and "test_engine_program_server.py::" in everything
