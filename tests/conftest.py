"""Shared helpers: run components or the whole stack program under recording mocks."""

from __future__ import annotations

import copy
import json
import os
import runpy
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from support import policy_env

from infra import offline

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

REPO = offline.REPO_ROOT
INFRA = REPO / "infra"


def run_components(body: Callable[[], Any], stack: str = "test") -> offline.ProgramRun:
    """Run a few component constructors under mocks and return what they registered."""
    return offline.run(body, project="tpu-training", stack=stack)


def dev_config() -> dict[str, Any]:
    """The dev stack's config as Python values (what Pulumi.yaml + Pulumi.dev.yaml give)."""
    values, _, _ = offline.stack_config(offline.load_project(REPO), "dev")
    decoded: dict[str, Any] = {}
    for key, text in values.items():
        try:
            decoded[key] = json.loads(text)
        except json.JSONDecodeError:
            decoded[key] = text
    return decoded


def run_stack(
    config: dict[str, Any], stack: str = "dev", previous_outputs: dict[str, Any] | None = None
) -> offline.ProgramRun:
    """Run the real infra/__main__.py with this config (Python values, encoded as the CLI does)."""
    encoded = {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}
    if str(INFRA) not in sys.path:
        sys.path.insert(0, str(INFRA))
    return offline.run(
        lambda: runpy.run_path(str(INFRA / "__main__.py"), run_name="__main__"),
        project="tpu-training",
        stack=stack,
        config=encoded,
        previous_outputs=previous_outputs,
    )


def changed_registrations(before: offline.ProgramRun, after: offline.ProgramRun) -> list[str]:
    """Names of the resources whose inputs or options differ between two runs of one stack."""
    return [
        a.name
        for a, b in zip(before.registrations, after.registrations, strict=True)
        if (a.inputs, a.options) != (b.inputs, b.options)
    ]


def refused(config: dict[str, Any]) -> str:
    """The message of the error the stack program stops with for this config."""
    import pulumi

    with pytest.raises(pulumi.RunError) as err:
        run_stack(config)
    return str(err.value)


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
    return tmp_path


def run_plan(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None, module: str = "infra.plan"
) -> subprocess.CompletedProcess[str]:
    """`python -m infra.plan ARGS` (or another command's ``module``) in a subprocess, as a user
    runs it."""
    env = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


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
    when missing or stale (tests/policy_env.py: as the Pulumi CLI builds it). A venv that cannot be
    built fails every test that needs it, with the command and pip's output; nothing is skipped."""
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
    """One JAX compilation cache for every trainer the session starts (support.sandbox passes it
    on, to Pods too): the first start compiles, the others load what it compiled, about a second
    less each. Every compilation is kept (JAX's default keeps only those over 1 s). The programs
    are the same either way, and the tests compare final states bit for bit across starts that
    compiled and starts that loaded."""
    directory = tmp_path_factory.mktemp("jax-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAX_COMPILATION_CACHE_DIR", str(directory))
        patch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        yield directory


DECIDED_AT = datetime(2026, 11, 23, 12, 0, 0, tzinfo=timezone.utc)
FRESH = 20261123120000
"""The generation a VM or Job re-created at ``DECIDED_AT`` gets (``recovery.fresh_generation``)."""


@pytest.fixture
def decided_at(monkeypatch):
    """Recovery decides at ``DECIDED_AT``: a re-created resource gets generation ``FRESH``. Only
    the clock that stamps new generations is fixed; grace periods still count from real time."""
    from tpu_training_components import recovery

    monkeypatch.setattr(recovery, "utc_now", lambda: DECIDED_AT)
    return FRESH


def fresh_stamp_since(started: datetime, value: Any) -> bool:
    """Whether ``value`` is a generation stamped (YYYYMMDDhhmmss, UTC) at or after ``started``:
    for a subprocess, whose clock a test cannot fix."""
    return isinstance(value, int) and int(started.strftime("%Y%m%d%H%M%S")) <= value <= int(
        datetime.now(timezone.utc).strftime("%Y%m%d%H%M%S")
    )
