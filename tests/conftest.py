"""Fixtures and hooks shared by the tests, and the environment every test runs in. Helpers live in
tests/support/ (a test imports them from there, never from here or from another test module:
tests/project/test_layout.py keeps it so)."""

from __future__ import annotations

import contextlib
import copy
import gc
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from support.fakes import stub_pulumi
from support.harness import policy_env, scheduling, tiers
from support.harness.engine.control_plane import ControlPlane, kube_version
from support.harness.engine.engine import SHARED_PROGRAM_SERVER, engine_version, program_server
from support.harness.generations import DECIDED_AT, FRESH
from support.harness.program import INFRA, REPO, dev_config

# No test reads live state unless it says so, and none may look for Google credentials (which
# would try the GCE metadata server, off this machine): live tests use a loopback endpoint.
os.environ["TPU_TRAINING_OFFLINE"] = "1"
# (google-auth reads it once, at import, and only as lower-case "true".)
os.environ["NO_GCE_CHECK"] = "true"
for variable in ("TPU_API_ENDPOINT", "GKE_API_ENDPOINT", "KUBECONFIG"):
    os.environ.pop(variable, None)
# Never the developer's own Application Default Credentials: a live test that forgets its
# loopback endpoint fails on missing credentials instead of reaching a real project.
os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = str(Path(__file__).parent / "no-such-credentials.json")
# Python's bytecode cache, as Python keeps it by default (in __pycache__, which git ignores), even
# where the environment turns it off (PYTHONDONTWRITEBYTECODE=1, as on the CI machines): else every
# process the suite starts (four workers, about two hundred programs, commands and trainers)
# compiles the project's sources anew, and every worker rewrites every test module's asserts.
# Loaded before the workers start, so they and everything they start inherit it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


@pytest.fixture
def config() -> dict[str, Any]:
    """A fresh, mutable copy of the dev stack's config: the known-good baseline."""
    return copy.deepcopy(dev_config())


@pytest.fixture
def scratch_project(tmp_path: Path) -> Path:
    """A project folder with this repo's Pulumi.yaml and program, for stack files made up by a
    test (the plan finds Pulumi.yaml from its working directory, as the CLI does)."""
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "infra").symlink_to(INFRA, target_is_directory=True)
    (tmp_path / "trainer").symlink_to(REPO / "trainer", target_is_directory=True)
    return tmp_path


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two workers per core (pyproject.toml's --maxprocesses caps them). The tests
    spend much of their time waiting on processes they started (the engine tier's CLI and
    plugins, the trainer's hosts: 253 CPU-seconds in 506 test-seconds for the engine tier), so
    one worker per core leaves cores idle. Measured on 2 quiet cores, 2026-11-28: the whole suite
    in 8 min 18 s at four workers, 8 min 49 s at two (docs/tests.md)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 2 * cores


def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test that needs the built engine (the ``engine`` fixture, itself or through
    ``programs`` or ``kubernetes``) is the engine tier, marker ``engine``, which README command 2
    leaves to its own command (`pytest -m engine`; pyproject.toml's addopts): marked here, before
    ``-m`` selects, so that no test of the tier can forget its marker."""
    if tiers.needs_the_engine(getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.engine)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest units of work first (support.harness.scheduling)."""
    scheduling.longest_units_first(items)


# optionalhook: without pytest-xdist (`-p no:xdist`) the hook is never called.
@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`-n`'s default distribution (``load``) becomes one by units of work (support.harness.scheduling),
    handed out in the collection's order, each to the first worker that is free. Any other
    ``--dist`` is left as asked."""
    if config.getvalue("dist") != "load":
        return None
    return scheduling.scheduler(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """One program server for the whole run (tests/support/harness/engine/program_server.py), started by
    the process that starts the workers, so every worker forks from the same warm process (one
    each cost every worker its own cold start and preload). Only where the engine is built, and
    for a run that selects the engine tier.

    A command line that names only paths of tests/engine/, and no ``-m``, selects them all:
    `pytest tests/engine/test_engine.py` runs that module, which addopts' `-m 'not engine'` would
    deselect (the workers, started with the same arguments, decide the same)."""
    named = config.args if config.args_source == pytest.Config.ArgsSource.ARGS else []
    if tiers.names_only_the_engine_tier(config.invocation_params.args, named, config.invocation_params.dir):
        config.option.markexpr = ""
    if hasattr(config, "workerinput") or engine_version() is None:
        return
    if not tiers.selects_the_engine_tier(config.getoption("markexpr")):
        return
    servers = contextlib.ExitStack()
    os.environ[SHARED_PROGRAM_SERVER] = servers.enter_context(program_server())
    config.add_cleanup(servers.close)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (the SDK, pulumi-gcp's hundreds of thousands of objects, every test
    module) is there for the whole run: moved out of the garbage collector's sight (gc.freeze), so
    its collections scan only what the tests make. Each in-process plan spent about a third of
    its time in collections that walked that heap (0.23 s a plan before, 0.14 s after).

    And collections made rarer: a plan allocates so fast that the default thresholds ran a
    collection every 700 allocations, and the older generations, where every module a test imports
    later lands, were walked again and again. On the 2-core machine, the in-process plan modules
    spent a third of their CPU in collections (16 of 50 CPU-seconds) and 5 with these thresholds;
    what the tests leave in cycles is freed a little later, never kept."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)


def pytest_sessionstart(session: pytest.Session) -> None:
    # Under pytest-xdist the workers' output is not shown: say here, once, why the first policy
    # test may wait (the worker that needs policy/venv first builds it; the others wait on its lock).
    if hasattr(session.config, "workerinput") or policy_env.is_current():
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            "policy/venv is missing or stale: the first test that needs it builds it from "
            "policy/requirements.txt (a minute or two, once)"
        )


@pytest.fixture(scope="session")
def policy_python(request: pytest.FixtureRequest) -> Path:
    """The policy pack's own interpreter, policy/venv/bin/python, built from policy/requirements.txt
    when missing or stale (tests/support/harness/policy_env.py: as the Pulumi CLI builds it). A venv
    that cannot be built fails every test that needs it, with the command and pip's output; nothing
    is skipped."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")

    def announce(message: str) -> None:
        # A cold build takes a minute or two: say why the run is waiting (past output capture,
        # which would otherwise swallow the line).
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(message)

    try:
        return policy_env.ensure(announce)
    except policy_env.BuildError as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(scope="session")
def jax_compilation_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One JAX compilation cache for every trainer the session starts (support.harness.sandbox passes it
    on, to Pods too): the first start compiles, the others load what it compiled, about a second
    less each. Every compilation is kept (JAX's default keeps only those over 1 s). The programs
    are the same either way, and the tests compare final states bit for bit across starts that
    compiled and starts that loaded."""
    directory = tmp_path_factory.mktemp("jax-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAX_COMPILATION_CACHE_DIR", str(directory))
        patch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        yield directory


@pytest.fixture
def decided_at(monkeypatch):
    """Recovery decides at ``DECIDED_AT``: a re-created resource gets generation ``FRESH``. Only
    the clock that stamps new generations is fixed; grace periods still count from real time."""
    from tpu_training_components.domain import recovery

    monkeypatch.setattr(recovery, "utc_now", lambda: DECIDED_AT)
    return FRESH


@pytest.fixture
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stub `pulumi` first on PATH (tests/support/fakes/stub_pulumi.py): its folder, where it records
    its calls and reads how to answer (``support.harness.recover_runs.set_behaviour``)."""
    folder = stub_pulumi.install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


# --- The engine tier (tests/engine/) ---------------------------------------------------


@pytest.fixture(scope="session")
def engine() -> str:
    version = engine_version()
    if version is None:
        reason = "the Pulumi engine is not built here: run `bash .ci/engine` (docs/engine-tests.md)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI builds it first", pytrace=False)
        pytest.skip(reason)
    return version


@pytest.fixture(scope="session")
def kubernetes(engine: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real control plane (etcd, kube-apiserver, the Job controller) for this worker's engine
    tests, built by .ci/kube (tests/support/harness/engine/control_plane.py)."""
    if kube_version() is None:
        reason = "the Kubernetes control plane is not built here: run `bash .ci/kube` (docs/engine-tests.md)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI builds it first", pytrace=False)
        pytest.skip(reason)
    with ControlPlane(tmp_path_factory.mktemp("kubernetes")) as plane:
        yield plane


@pytest.fixture(scope="session")
def programs(engine: str) -> str:
    """The program server every project here but the README's runs its programs and plugins
    through: the run's one server, which conftest starts before the workers."""
    socket_path = os.environ.get(SHARED_PROGRAM_SERVER)
    if not socket_path or not Path(socket_path).exists():
        pytest.fail("the run's program server is not running (tests/conftest.py starts it)", pytrace=False)
    return socket_path
