"""policy/venv, the policy pack's own environment, built the way the Pulumi CLI builds it.

pulumi-policy pins protobuf~=5.29.5 and the stack pins protobuf 6, so the pack never shares an
interpreter with the stack or with the tests: the CLI runs it with the virtualenv its
PulumiPolicy.yaml names, and the tests and the type check use that same environment.

What the CLI does (pulumi/pulumi at 1b5949891b3cefcb9974752b24a5ecef0acc86c8):
- ``sdk/python/toolchain/pip.go`` ``EnsureVenv`` (L248-283): when the virtualenv folder is missing
  or empty, ``InstallDependencies`` (L444-556) runs ``python -m venv DIR`` (L467) and then, in the
  pack's folder, ``python -m pip install -r requirements.txt`` (L551);
- ``sdk/python/toolchain/toolchain.go`` ``ActivateVirtualEnv`` (L176-206): the environment it runs
  pip and the pack with: the venv's ``bin`` first on PATH, ``VIRTUAL_ENV`` set, no ``PYTHONHOME``.

Unlike the CLI, this also rebuilds a venv built from another policy/requirements.txt (or
pyproject.toml, which the ``-e ..`` line installs, or Python), so the tests always run the pins in
the repository. (The CLI's extra ``pip install --upgrade pip setuptools wheel``, L536, is left out:
it installs whatever is newest, and the venv's own pip installs these pins.)

Standard library only, and usable as a script: ``python tests/support/harness/policy_env.py`` builds
or reuses the venv and prints its interpreter's path (.ci/typecheck type-checks the pack with it).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[3]
POLICY_DIR = REPO / "policy"
VENV = POLICY_DIR / "venv"
PYTHON = VENV / "bin" / "python"
# Written last, inside the venv (so `git clean` and `rm -r policy/venv` take it along): what the
# venv was built from. A venv without it (half built, or built by `pulumi install`) is rebuilt.
STAMP = VENV / ".built-from"
BUILD_TIMEOUT = 1800
"""Seconds; a cold build downloads about 60 wheels and takes one or two minutes."""


class BuildError(Exception):
    """policy/venv could not be built; the message says which step failed, with pip's output."""


def activated_env(venv: Path = VENV) -> dict[str, str]:
    """This process's environment as the CLI activates a virtualenv for pip and for the pack."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *filter(None, [os.environ.get("PATH")])])
    env["VIRTUAL_ENV"] = str(venv)
    return env


def wanted_stamp() -> str:
    """What a venv built now would be built from: the requirements (comments aside), what
    pyproject.toml tells pip about the library `-e ..` installs, and the Python that creates it."""
    requirements = [
        line.strip()
        for line in (POLICY_DIR / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    pyproject = (REPO / "pyproject.toml").read_bytes()
    try:
        import tomllib
    except ImportError:  # Python 3.10: the whole file, then
        library = pyproject.decode()
    else:
        # Only what pip builds the editable install from, not the tools' settings beside it.
        document = tomllib.loads(pyproject.decode())
        tool = document.get("tool", {})
        library = json.dumps(
            [document.get("build-system"), document.get("project"), tool.get("setuptools")], sort_keys=True
        )
    digest = hashlib.sha256(json.dumps([requirements, library]).encode())
    return f"sha256:{digest.hexdigest()} python:{sys.version.split()[0]}\n"


def is_current() -> bool:
    return PYTHON.is_file() and STAMP.is_file() and STAMP.read_text() == wanted_stamp()


def ensure(announce: Callable[[str], None] = lambda message: None) -> Path:
    """policy/venv's python, building the venv first if it is missing or stale.

    Raises ``BuildError`` with the failing command and its output; never returns a venv that was
    not completely built from the current requirements.
    """
    # Two test runs in one checkout (or the type check and the tests) must not build the same
    # folder at once: hold an exclusive lock on the requirements file the venv is built from.
    with open(POLICY_DIR / "requirements.txt", "rb") as requirements:
        fcntl.flock(requirements, fcntl.LOCK_EX)
        if is_current():
            return PYTHON
        stamp = wanted_stamp()
        announce(f"building {VENV.relative_to(REPO)} from policy/requirements.txt (once; a minute or two)")
        # --clear: a stale venv is rebuilt from nothing, so a pin removed from the file is gone.
        _run([sys.executable, "-m", "venv", "--clear", str(VENV)], cwd=REPO, env=dict(os.environ))
        # As the CLI runs it: inside policy/, where `-e ..` in requirements.txt means this repository.
        _run(
            [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-r", "requirements.txt"],
            cwd=POLICY_DIR,
            env=activated_env(),
        )
        STAMP.write_text(stamp)
        return PYTHON


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> None:
    shown = " ".join(command)
    try:
        done = subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BuildError(f"policy/venv could not be built: `{shown}` in {cwd}: {err}") from err
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-4000:]
        raise BuildError(
            f"policy/venv could not be built: `{shown}` in {cwd} exited with {done.returncode}:\n{output}"
        )


if __name__ == "__main__":
    try:
        print(ensure(announce=lambda message: print(message, file=sys.stderr)))
    except BuildError as err:
        sys.exit(str(err))
