"""`tpu-training recover` at its edges: every CLI call ends within a bound well under a minute
and a half (also in a dry run, also when the CLI ignores SIGINT), output no one can read from
`stack select` is a try-later, a Ctrl-C while it starts exits 130, and a Pulumi.yaml this
project cannot run under is refused with what was wrong."""

from __future__ import annotations

import os
import re
import time

import pytest
import yaml
from support.fakes import stub_pulumi
from support.fakes.fake_kube_api import job
from support.harness.in_process import run_recover
from support.harness.program import REPO
from support.harness.recover_runs import live_dev_stack, run_snippet, set_behaviour

from tpu_training import exit_codes, project_files
from tpu_training.commands import recover
from tpu_training.recovery import pulumi_process, watch_loop
from tpu_training.recovery.automation import AutomationUp

SECRET_STACK = (
    "config:\n  gcp:project: tpu-training-dev\n  tpu-training:tpuVms:\n    secure: AAABAHhlbmNyeXB0ZWQ=\n"
)


@pytest.fixture
def apis(tmp_path, monkeypatch):
    """The dev stack live on loopback: demo-tpu PREEMPTED (to recover), train-v6e running."""
    with live_dev_stack(
        tmp_path, monkeypatch, "PREEMPTED", job("train-v6e", generation=1, active=4, ready=4)
    ) as apis:
        yield apis


# --- deadlines ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [["version"], ["config", "--show-secrets", "--json"], ["stack", "select"], ["stack", "output"]]
)
def test_every_read_of_the_cli_ends_well_within_a_minute_and_a_half(args):
    full = ["--non-interactive", *args]
    bound = pulumi_process._timeout_for(full, pulumi_process.UP_TIMEOUT_SECONDS)
    bound += pulumi_process._grace_for(full, pulumi_process.STOP_GRACE_SECONDS) + 10.0  # then SIGKILL's wait
    assert bound <= 75.0


@pytest.mark.parametrize("command", ["version", "config"])
def test_a_cli_that_ignores_sigint_is_killed_after_a_short_grace_in_a_dry_run(
    command, stub, scratch_project, monkeypatch, capsys
):
    # The dry run of a stack with secrets starts the CLI for `version` and `config`; a CLI that
    # neither answers nor stops on SIGINT is killed after READ_GRACE_SECONDS, not after the
    # minute `pulumi up` gets to finish its operations.
    monkeypatch.setattr(pulumi_process, "CLI_TIMEOUT_SECONDS", 0.5)
    monkeypatch.setattr(pulumi_process, "VERSION_TIMEOUT_SECONDS", 0.5)
    monkeypatch.setattr(pulumi_process, "READ_GRACE_SECONDS", 0.5)
    monkeypatch.setattr(watch_loop.StopSignal, "install", lambda self: None)
    (scratch_project / "Pulumi.dev.yaml").write_text(SECRET_STACK)
    monkeypatch.chdir(scratch_project)
    set_behaviour(stub, hang_ignoring_sigint=command)
    started = time.monotonic()
    status = recover.main(["--stack", "dev", "--once", "--dry-run"])
    assert time.monotonic() - started < 10
    assert status == (exit_codes.EXIT_UNAVAILABLE if command == "version" else exit_codes.EXIT_TRY_LATER)
    assert "did not finish within 0.5 s and was stopped" in capsys.readouterr().out


def test_the_version_call_alone_is_bounded_too(stub, monkeypatch):
    monkeypatch.setattr(pulumi_process, "VERSION_TIMEOUT_SECONDS", 0.5)
    monkeypatch.setattr(pulumi_process, "READ_GRACE_SECONDS", 0.5)
    set_behaviour(stub, hang_ignoring_sigint="version")
    started = time.monotonic()
    with pytest.raises(pulumi_process.PulumiUnavailable, match=r"does not answer.*within 0\.5 s"):
        AutomationUp(REPO, lambda line: None)
    assert time.monotonic() - started < 5


# --- `stack select` printing binary garbage -----------------------------------------------------


@pytest.mark.parametrize("exit_status", [255, 1])
def test_stack_select_printing_garbage_and_failing_is_a_try_later_not_a_traceback(
    apis,
    stub,
    exit_status,
):
    set_behaviour(stub, select_output="\x00\xff\xfe\x89PNG\r\n\x1a\n\xc3(garbage", select_exit=exit_status)
    done = run_recover("--stack", "dev", "--once")
    assert done.returncode == exit_codes.EXIT_TRY_LATER, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "`pulumi stack select` for stack 'dev' failed" in done.stdout
    assert not [c for c in stub_pulumi.calls(stub) if c[1] == "up"]


def test_stack_select_printing_garbage_and_succeeding_is_read_through(apis, stub):
    set_behaviour(stub, select_output="\xff\xfe garbage\n")
    done = run_recover("--stack", "dev", "--once")
    assert done.returncode == exit_codes.EXIT_OK, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


# --- SIGINT during start-up ---------------------------------------------------------------------

_INTERRUPTED_WHILE_LOADING = """
import builtins, os, runpy, signal, sys
real_import = builtins.__import__
def interrupting_import(name, *args, **kwargs):
    if name == "pulumi":  # the first heavy library recover.py loads: a Ctrl-C arrives now
        builtins.__import__ = real_import
        os.kill(os.getpid(), signal.SIGINT)
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupting_import
sys.argv = ["tpu-training", "recover", "--stack", "dev", "--once", "--dry-run"]
runpy.run_module("tpu_training", run_name="__main__", alter_sys=True)
"""


def test_a_ctrl_c_while_it_starts_exits_130_without_a_traceback():
    env = {k: v for k, v in os.environ.items() if k not in ("TPU_API_ENDPOINT", "KUBECONFIG")}
    done = run_snippet(_INTERRUPTED_WHILE_LOADING, env)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr


# --- Pulumi.yaml this project cannot run under ---------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("runtime", "nodejs", 'runtime = "nodejs": this project\'s program is Python'),
        ("runtime", {"name": "nodejs"}, 'runtime = {"name": "nodejs"}: this project\'s program is Python'),
        (
            "requiredPulumiVersion",
            "garbage",
            "requiredPulumiVersion = \"garbage\": 'garbage' is no comparison",
        ),
        (
            "requiredPulumiVersion",
            ">= 3.226",
            "requiredPulumiVersion = \">= 3.226\": '>=3.226' is no comparison",
        ),
    ],
    ids=["nodejs", "nodejs-object", "garbage-version", "short-version"],
)
def test_a_project_file_this_project_cannot_run_under_is_refused(
    scratch_project, key, value, message, capsys, monkeypatch
):
    project_file = scratch_project / "Pulumi.yaml"
    document = yaml.safe_load(project_file.read_text())
    project_file.write_text(yaml.safe_dump({**document, key: value}))
    with pytest.raises(project_files.ProjectFileError, match=re.escape(f"Pulumi.yaml: {message}")):
        project_files.load_project(scratch_project)
    monkeypatch.chdir(scratch_project)
    monkeypatch.setattr(watch_loop.StopSignal, "install", lambda self: None)
    status = recover.main(["--stack", "dev", "--once", "--dry-run"])
    assert status == exit_codes.EXIT_CONFIG_ERROR
    assert message in capsys.readouterr().err


def test_valid_version_ranges_the_cli_reads_are_accepted(scratch_project):
    project_file = scratch_project / "Pulumi.yaml"
    text = project_file.read_text()
    for version in (">=3.226.0 <4.0.0", "3.x", ">= 3.226.0 || 4.1.x", ">=3.226.0-alpha.1"):
        project_file.write_text(text.replace('">=3.226.0"', f'"{version}"'))
        assert project_files.load_project(scratch_project).name == "tpu-training"
