"""`tpu-training plan ARGS` run in the test's own process: the command's ``main`` with its
arguments, its working directory and environment, and its standard output and error captured.

What a test of the plan's output, its files and its exit status checks is the same either way; a
subprocess adds a second of imports and nothing the test looks at. The tests that check what only
a process shows (a signal, a reader that goes away, standard output closed or full, the
interpreter's own exit) keep ``support.harness.program.run_plan``."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import signal
import subprocess
from pathlib import Path
from typing import Iterator

from support.harness.program import REPO
from tpu_training import cli


@contextlib.contextmanager
def _environment(changes: dict[str, str]) -> Iterator[None]:
    # The command sets TPU_TRAINING_OFFLINE itself: the test's environment comes back whole.
    saved = dict(os.environ)
    os.environ.update(changes)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _signal_handlers() -> Iterator[None]:
    # A command that watches (tpu-training recover) handles SIGINT and SIGTERM itself: the test's process
    # gets its own handlers back.
    saved = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def run_recover(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`tpu-training recover ARGS`, in this process (as ``run_plan``), in this environment with
    ``env``'s changes."""
    return run_plan(*args, env=env, command="recover")


def run_plan(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None, command: str = "plan"
) -> subprocess.CompletedProcess[str]:
    """As ``support.harness.program.run_plan``, in this process: the subcommand's own ``main(args)`` (as
    ``tpu_training.cli`` finds it, without the command's start: no signal handler, the collector
    left on), its exit status (an argparse exit included) and what it printed. An exception that
    escapes ``main`` is raised, as a traceback would end the command."""
    subcommand = cli.SUBCOMMANDS[command]
    main = getattr(importlib.import_module(f"tpu_training.commands.{subcommand.module}"), subcommand.main)
    out, err = io.StringIO(), io.StringIO()
    with (
        _signal_handlers(),
        _environment(env or {}),
        contextlib.chdir(cwd),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            status = main(list(args))
        except SystemExit as exit_:  # argparse: a usage error, or --help
            status = exit_.code if isinstance(exit_.code, int) else 2
    return subprocess.CompletedProcess(
        ["tpu-training", command, *args], status, out.getvalue(), err.getvalue()
    )
