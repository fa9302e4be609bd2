"""`tpu-training recover` driven by the tests: the dev stack live on the loopback fakes, a
recording stand-in for the CLI seam, the round's Recoverer, and the command in a subprocess.

The dev stack declares demo-tpu (europe-west4-a) and the Job train-v6e (namespace default)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import pytest
from tpu_training_components.domain.recovery_rounds import RecoveryRound, RoundOutcome
from tpu_training_components.live.progress_records import ProgressReading
from tpu_training_components.resources.reconcile import GENERATIONS_OUTPUT, JOB_GENERATIONS_OUTPUT

from support.fakes.fake_kube_api import FakeKubernetesApi, pod
from support.fakes.fake_tpu_api import FakeTpuApi
from support.harness.program import REPO
from tpu_training import project_files
from tpu_training.recovery import recovery_round, recovery_targets, stack_probe
from tpu_training.recovery.automation import PendingChange, UpResult

DEV_ZONE = "europe-west4-a"
STACK_URN = "urn:pulumi:dev::tpu-training::pulumi:pulumi:Stack::tpu-training-dev"
VM_URN = "urn:pulumi:dev::tpu-training::tpu-training:compute:PreemptibleTpuVm$gcp:tpu/v2Vm:V2Vm::demo-tpu-vm"


@contextmanager
def live_dev_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node_state: str, job: dict[str, Any], **node: Any
) -> Iterator[tuple[FakeTpuApi, FakeKubernetesApi]]:
    """The dev stack live on loopback, the environment pointing at it: demo-tpu in ``node_state``
    (recovery generation 3 unless ``node`` says otherwise) and ``job`` in namespace default."""
    with FakeTpuApi() as tpu, FakeKubernetesApi() as kube:
        tpu.add(DEV_ZONE, "demo-tpu", node_state, **{"labels": {"recovery-generation": "3"}, **node})
        kube.add("default", job)
        if job.get("status", {}).get("active"):
            kube.add_pod("default", pod(job["metadata"]["name"], "2026-11-20T09:00:00Z"))
        monkeypatch.setenv("TPU_API_ENDPOINT", tpu.endpoint)
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path)))
        yield tpu, kube


class RecordingRunner:
    """The CLI seam: records each stack it was asked to update and its targets, answers
    ``status``; a preview shows ``pending``."""

    def __init__(
        self,
        status: RoundOutcome = RoundOutcome.SUCCEEDED,
        pending: Sequence[PendingChange] = (),
        deployed: Sequence[str] = ("demo-tpu", "train-v6e"),
        outputs: Optional[dict[str, Any]] = None,
    ) -> None:
        self.status = status
        self.outputs = dict(outputs or {})
        """Other stack outputs (a Job's recoveries, say)."""
        self.rounds: list[Optional[RecoveryRound]] = []
        """What each `pulumi up` told the program."""
        self.pending = list(pending)
        self.deployed = list(deployed)
        self.refreshes: list[bool] = []
        self.stacks: list[str] = []
        self.targets: list[Optional[list[str]]] = []
        self.previews = 0
        self.state: dict[str, Any] = {"version": 3, "deployment": {"resources": []}}
        """The stack's state, as `pulumi stack export` prints it."""
        self.exports = 0
        self.imports: list[dict[str, Any]] = []
        self.refreshed: list[list[str]] = []

    def __call__(
        self,
        stack: str,
        targets: Optional[Sequence[str]] = None,
        *,
        refresh: bool = True,
        recovery_round: Optional[RecoveryRound] = None,
    ) -> UpResult:
        self.stacks.append(stack)
        self.targets.append(list(targets) if targets is not None else None)
        self.refreshes.append(refresh)
        self.rounds.append(recovery_round)
        return UpResult(self.status, f"update {self.status}", 0.01, {"replace": 1})

    def stack_outputs(self, stack: str) -> dict[str, Any]:
        # The names alone matter to a round; a VM and a Job never share one in these stacks.
        generations = {name: 1 for name in self.deployed}
        return {GENERATIONS_OUTPUT: generations, JOB_GENERATIONS_OUTPUT: generations, **self.outputs}

    def pending_changes(self, stack: str) -> list[PendingChange]:
        self.previews += 1
        return list(self.pending)

    def export_state(self, stack: str) -> dict[str, Any]:
        self.exports += 1
        return copy.deepcopy(self.state)

    def import_state(self, stack: str, state: dict[str, Any]) -> tuple[str, ...]:
        self.state = copy.deepcopy(state)
        self.imports.append(self.state)
        return ()

    def refresh(self, stack: str, urns: Sequence[str]) -> tuple[str, ...]:
        self.refreshed.append(list(urns))
        return ()


def recoverer(
    runner: Optional[RecordingRunner] = None, stack: str = "dev", root: Path = REPO
) -> tuple[recovery_round.Recoverer, list[str]]:
    """A Recoverer of ``stack`` whose `pulumi up` is ``runner`` (None: a dry run), and the lines
    it says. Its trainers publish no progress (``progress`` reads none)."""
    said: list[str] = []
    target = stack_probe.Target(project_files.load_project(root), stack, stack)
    probe = stack_probe.Probe(read_progress=lambda folder: ProgressReading())
    return recovery_round.Recoverer(target, probe=probe, up=runner, say=said.append), said


def dev_targets(*recovering: tuple[str, str]) -> recovery_targets.RecoveryTargets:
    """The targets of a round of the dev stack that recovers ``(kind, name)``."""
    project = project_files.load_project(REPO)
    config, secret_keys, _ = project_files.stack_config(project, "dev")
    return recovery_targets.find_targets(project, "dev", config, secret_keys, list(recovering))


def set_behaviour(folder: Path, **behaviour: Any) -> None:
    """How the stub `pulumi` in ``folder`` answers (tests/support/fakes/stub_pulumi.py)."""
    (folder / "behaviour.json").write_text(json.dumps(behaviour))


def run_recover(
    *args: str, env: Optional[dict[str, str]] = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """`tpu-training recover ARGS` in a subprocess, from the repository."""
    return subprocess.run(
        [sys.executable, "-m", "tpu_training", "recover", *args],
        cwd=REPO,
        env=dict(os.environ) if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_snippet(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Python ``code`` run in a process of its own, from the repository."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
