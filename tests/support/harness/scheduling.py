"""The order pytest-xdist's workers run the suite in (the hooks in tests/conftest.py):
whole modules, the longest first, so that no long module starts last and runs on alone while the
other workers idle (on 2 cores the suite's wall time is its CPU time over two plus that tail). A
module is one unit of work, as pytest-xdist's loadscope runs it, so each module's fixtures are set
up once; the engine tier's two largest modules have each test a unit of its own (each deploys its
own stack and shares nothing but the session's engine; the kill points' three, 65 to 107 s each,
were the tier's tail on one worker). How long a unit runs is told by
what its tests start: the real Pulumi CLI (marker ``engine``; with ``slow`` too, the longest of
the tier), the real trainer's processes (fixture ``jax_compilation_cache``), or a long wait
(marker ``slow``).
"""

from __future__ import annotations

from typing import Any

import pytest

SPLIT_PER_TEST = ("tests/engine/test_engine.py", "tests/engine/test_engine_crash.py")
"""Modules whose tests are units of work of their own. Not the tier's other modules: a module on
one worker starts one control plane for its Kubernetes tests, where its tests spread over four
started four (one run each: 618 CPU-seconds for the tier against 586)."""


def _tier(item: pytest.Item) -> int:
    if item.get_closest_marker("engine"):
        return 4 if item.get_closest_marker("slow") else 3
    if "jax_compilation_cache" in getattr(item, "fixturenames", ()):
        return 2
    if item.get_closest_marker("slow"):
        return 1
    return 0


def unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its module, or itself in ``SPLIT_PER_TEST``."""
    module = nodeid.split("::", 1)[0]
    return nodeid if module in SPLIT_PER_TEST else module


def longest_units_first(items: list[pytest.Item]) -> None:
    """Units with the longest tests first, then the larger ones; within a unit, the order the
    collection (and pytest-randomly's shuffle) gave. A stable sort: ties keep that order too, and
    every worker, collecting with the same seed, sorts to the same order (as xdist requires)."""
    tiers: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for item in items:
        name = unit(item.nodeid)
        tiers[name] = max(tiers.get(name, 0), _tier(item))
        sizes[name] = sizes.get(name, 0) + 1
    items.sort(key=lambda item: (-tiers[unit(item.nodeid)], -sizes[unit(item.nodeid)]))


def scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's loadscope scheduling with ``unit`` as its scope (the extension point xdist's own
    loadgroup uses), its units in the collection's order rather than the most tests first."""
    from xdist.scheduler import LoadScopeScheduling

    class LongestUnitsFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit(nodeid)

    config.option.loadscopereorder = False
    return LongestUnitsFirst(config, log)
