"""A command whose live reads run out of time still ends, by the interpreter's own exit, soon after
their deadlines and with its documented status: no probe leaves a thread in a socket read to
outlive the round (HTTP calls are bounded by the libraries' own timeouts, cut to the deadline),
and the one wait that has no timeout of its own (a Kubernetes credential plugin) is left in a
daemon thread that neither holds up nor aborts the exit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.fakes import stub_pulumi
from support.fakes.fake_kube_api import FakeKubernetesApi, job
from support.fakes.fake_tpu_api import FakeTpuApi

from tpu_training import exit_codes

REPO = Path(__file__).resolve().parents[2]
ZONE = "europe-west4-a"
DEADLINE = 3.0
"""Each probe call's deadline in the runs against APIs that never answer (30 s in use): the
command is otherwise the real one."""
ANSWERED_DEADLINE = 60.0
"""The deadline of the run whose APIs answer: on a loaded machine a read that answers can take
longer than ``DEADLINE`` (load average 14 on 2 cores ran out of it), and that run asserts no upper
bound, only that nothing ran out."""
MARGIN = 10.0
"""What "soon after" allows for on a busy machine: a hang would take the servers' 600 s."""

# `tpu-training recover ARGS`, with the probes' deadline shortened: the real command, the real
# exit (SystemExit out of the module, then the interpreter's teardown).
DRIVER = """
import runpy, sys
from tpu_training_components.live import kube_api, tpu_api
deadline = float(sys.argv[1])
tpu_api.list_live_nodes.__kwdefaults__["deadline"] = deadline
kube_api.list_live_jobs.__kwdefaults__["deadline"] = deadline
kube_api.list_pool_nodes.__kwdefaults__["deadline"] = deadline
sys.argv = ["tpu-training", "recover", *sys.argv[2:]]
runpy.run_module("tpu_training", run_name="__main__", alter_sys=True)
"""


@pytest.fixture
def world(tmp_path, monkeypatch):
    """The dev stack's VM and Job on loopback APIs, and a stand-in Pulumi CLI on PATH."""
    folder = stub_pulumi.install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    with FakeTpuApi() as tpu, FakeKubernetesApi() as kube:
        tpu.add(ZONE, "demo-tpu", "READY", labels={"recovery-generation": "3"}, health="HEALTHY")
        kube.add("default", job("train-v6e", generation=1, active=4, ready=4))
        monkeypatch.setenv("TPU_API_ENDPOINT", tpu.endpoint)
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path)))
        yield tpu, kube


def _recover_once(deadline: float = DEADLINE) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(deadline), "--stack", "dev", "--once"],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, time.monotonic() - started


def _clean(done: subprocess.CompletedProcess[str]) -> None:
    # An exit torn down under a live thread aborts ("Fatal Python error", status 134) or complains.
    assert "Fatal Python error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr


@pytest.mark.slow
def test_rounds_whose_reads_run_out_of_time_end_soon_after_the_deadline_with_75(world, tmp_path, monkeypatch):
    tpu, kube = world
    answered, usual = _recover_once(ANSWERED_DEADLINE)
    assert answered.returncode == exit_codes.EXIT_OK, answered.stderr

    # APIs that never answer: each request waits for ever.
    tpu.delay_seconds = kube.delay_seconds = 600
    done, seconds = _recover_once()
    assert done.returncode == exit_codes.EXIT_TRY_LATER, done.stderr
    assert "TPU API unavailable (DeadlineExceeded" in done.stdout
    assert "Kubernetes API unavailable (DeadlineExceeded" in done.stdout
    # One zone and one namespace of Jobs, and the node pool's nodes (their maintenance notices):
    # three calls, each ended at its deadline.
    assert seconds - usual < 3 * DEADLINE + MARGIN
    assert "GKE nodes not read, so their maintenance notices are unknown: DeadlineExceeded" in done.stdout
    _clean(done)

    # A credential plugin that never ends, waiting on a FIFO nothing writes to; the TPU API
    # answers again. The Jobs are unknown: kept, and the round asks to try later.
    tpu.delay_seconds = kube.delay_seconds = 0
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    plugin = tmp_path / "credential-helper"
    plugin.write_text(f"#!/bin/sh\ncat '{gate}'\n")
    plugin.chmod(0o755)
    user = f"{{exec: {{apiVersion: client.authentication.k8s.io/v1beta1, command: {plugin}}}}}"
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path, user)))
    try:
        done, seconds = _recover_once()
    finally:
        # The plugin outlives the command, blocked on the FIFO: opening it for writing lets it end.
        try:
            os.close(os.open(gate, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: nothing waits on it
            pass
    assert done.returncode == exit_codes.EXIT_TRY_LATER, done.stderr
    assert "DeadlineExceeded: loading KUBECONFIG=" in done.stdout
    # The Jobs' listing and the nodes' each load it once, each ended at its deadline.
    assert seconds - usual < 2 * DEADLINE + MARGIN
    _clean(done)
