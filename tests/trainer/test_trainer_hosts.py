"""The reference trainer on a slice of several hosts: real JAX processes on this machine's CPU,
forming one cluster on loopback (``jax.distributed``, the trainer's explicit cluster settings
standing in for what JAX reads from a TPU VM's metadata), all checkpointing to one store, with
the **time-based** checkpoint interval of the stacks.

As on TPU VMs, every host runs the real startup script with its own retry loop (``Slice``); as
in a JobSet, the Pods of a slice are started and restarted together (``gang``). Every run that is
killed, stopped or refused ends with exactly the bytes of an uninterrupted run of the same number
of processes, or with every checkpoint as it was. No test sleeps to wait: each waits for the
trainers' own log lines, with a deadline against a hang; a process that dies is noticed by the
others within JAX's heartbeat (5 s here, ``support.harness.sandbox.CLUSTER_TIMEOUTS``).
"""

from __future__ import annotations

import random
import shutil
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np
import pytest
from support.fakes.fake_metadata import MAINTENANCE_EVENT, PREEMPTED, FakeMetadataServer
from support.harness.sandbox import (
    CheckpointStore,
    Event,
    LocalStore,
    Output,
    Pod,
    Slice,
    checkpoint_snapshot,
    gang,
    job_pod,
    load_final_state,
)
from support.harness.waiting import eventually

pytestmark = pytest.mark.usefixtures("jax_compilation_cache")

HOSTS = 2
STEPS = 60
RUN = {
    "TRAIN_STEPS": str(STEPS),
    "GLOBAL_BATCH_SIZE": "32",
    "LEARNING_RATE": "0.01",
    # By time, as the stacks do: each host has its own clock, and saves must still be agreed.
    # Steps of at least 20 ms make a run of 60 steps long enough to interrupt at several points.
    "CHECKPOINT_INTERVAL_SECONDS": "0.25",
    "TRAINER_STEP_SECONDS": "0.02",
}
DEADLINE = 240.0
"""Against a hang only: a start of two processes takes a few seconds, more on a loaded machine."""
FAULTS = Path(__file__).resolve().parents[1] / "support" / "fakes" / "faults"

_STARTED: list[Slice | Pod] = []


@pytest.fixture(autouse=True)
def _nothing_left_running() -> Iterator[None]:
    yield
    while _STARTED:
        _STARTED.pop().close()


def deadline() -> float:
    return time.monotonic() + DEADLINE


def wait_for(output: Output, event: str, until: float) -> Event:
    for seen in output.next_events(until):
        if seen.event == event:
            return seen
    raise AssertionError(f"the trainer ended without {event!r}:\n{output.text()}")


def wait_for_step(output: Output, step: int, until: float) -> Event:
    for seen in output.next_events(until):
        if seen.event == "step" and seen.int("step") >= step:
            return seen
    raise AssertionError(f"the trainer ended before step {step}:\n{output.text()}")


def events_named(output: Output, name: str) -> list[Event]:
    return [event for event in output.events if event.event == name]


def assert_same_state(got: Mapping[str, object], want: Mapping[str, object]) -> None:
    assert sorted(got) == sorted(want)
    for key in want:
        a, b = np.asarray(got[key]), np.asarray(want[key])
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), f"{key} differs"


def new_slice(root: Path, store: CheckpointStore, **extra: str) -> Slice:
    hosts = Slice(root, {**RUN, **extra}, store=store, hosts=HOSTS)
    _STARTED.append(hosts)
    return hosts


def new_gang(store: CheckpointStore, **extra: str) -> list[Pod]:
    pods = gang(job_pod(store, {**RUN, **extra}), HOSTS)
    _STARTED.extend(pods)
    return pods


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Mapping[str, object], Path]:
    """An uninterrupted run on two hosts: its final state, and its checkpoint folder (which the
    tests that start from existing checkpoints copy)."""
    root = tmp_path_factory.mktemp("two-hosts")
    store = LocalStore(root / "checkpoints")
    hosts = new_slice(root, store)
    boots = hosts.boot()
    for boot in boots:
        assert boot.finish(timeout=DEADLINE) == 0, boot.text()
    resumes = [events_named(boot, "resume") for boot in boots]
    assert all(len(found) == 1 and found[0].int("processes") == HOSTS for found in resumes)
    # Both hosts saved the same steps, by time: more than one, and not on a step schedule.
    saved = [[event.int("step") for event in events_named(boot, "saving")] for boot in boots]
    assert saved[0] == saved[1] and len(saved[0]) >= 3, saved
    completes = [events_named(boot, "complete")[0].fields["checksum"] for boot in boots]
    assert completes[0] == completes[1]
    _STARTED.remove(hosts)
    return load_final_state(store), store.path


def test_sigkill_one_host_then_another_then_all_resumes_bit_for_bit(tmp_path, reference):
    """A host lost (its trainer SIGKILLed: the other notices within the heartbeat and exits too),
    the coordinator lost, then every host at once, at seeded random steps. Each time every host's
    retry loop restarts its trainer, the cluster forms again, and all resume from one step: one
    that was committed, never a save cut short."""
    want, _ = reference
    store = LocalStore(tmp_path / "checkpoints")
    hosts = new_slice(tmp_path, store)
    boots = hosts.boot()
    rng = random.Random(25)
    kill_steps = sorted(rng.sample(range(5, STEPS - 5), 3))
    victims = [[1], [0], [0, 1]]
    resumed = [1] * HOSTS
    for kill_step, victim in zip(kill_steps, victims, strict=True):
        until = deadline()
        reached = wait_for_step(boots[0], kill_step, until).int("step")
        committed = [event.int("step") for event in events_named(boots[0], "committed")]
        for index in victim:
            hosts.members[index].kill_trainer(signal.SIGKILL)
        # Every host restarts and resumes, from the same step.
        restored = set()
        for index, boot in enumerate(boots):
            while len(events_named(boot, "resume")) <= resumed[index]:
                wait_for(boot, "resume", until)
            resumed[index] += 1
            restored.add(events_named(boot, "resume")[-1].int("step"))
        [step] = restored
        saving = {event.int("step") for event in events_named(boots[0], "saving")}
        # Never newer than what was trained, never older than what was known committed.
        assert step <= reached + 1 and (step == 0 or step in saving), (step, reached)
        assert step >= max(committed, default=0), (step, committed)
    for boot in boots:
        assert boot.finish(timeout=DEADLINE) == 0, boot.text()
    assert hosts.completed
    assert not [name for name in store.names() if "tmp" in name], store.names()
    assert "damaged" not in store.names()
    assert_same_state(load_final_state(store), want)


@pytest.mark.parametrize("service", ["on", "off"], ids=["preemption-service", "no-preemption-service"])
def test_sigterm_to_one_host_saves_on_every_host_at_one_step(tmp_path, reference, service):
    """The shutdown script of one host (its VM preempted or under maintenance) signals its
    trainer. With JAX's preemption service (on by default with jax.distributed) SIGTERM is the
    service's, which tells the other hosts; without it the trainer's own handler tells them at the
    next step. Either way every host saves the same step once and exits 143; the signalled host's
    loop ends with its VM, the other's waits for it to come back, and the next boot resumes from
    that step with nothing redone."""
    want, _ = reference
    store = LocalStore(tmp_path / "checkpoints")
    enabled = "true" if service == "on" else "false"
    hosts = new_slice(tmp_path, store, JAX_ENABLE_PREEMPTION_SERVICE=enabled)
    boots = hosts.boot()
    wait_for_step(boots[0], 25, deadline())
    done = hosts.members[1].run_shutdown_script()
    assert done.returncode == 0, done.stdout + done.stderr

    until = deadline()
    stopped = [wait_for(boot, "stopped", until) for boot in boots]
    assert {event.fields["exit"] for event in stopped} == {"143"}
    [step] = {event.int("step") for event in stopped}
    for boot in boots:
        sigterm_saves = [
            e.int("step") for e in events_named(boot, "saving") if e.fields["reason"] == "sigterm"
        ]
        assert sigterm_saves in ([step], []), boot.text()  # none when the step was just saved by time
    # The signalled host's VM goes down: its loop ends; the other host's loop starts again and
    # waits for the cluster. Then the VM boots again.
    assert boots[1].finish(timeout=DEADLINE) == 0, boots[1].text()
    assert "while the VM shuts down; the next boot resumes" in boots[1].text()
    again = hosts.members[1].boot()
    resumes = [wait_for(boots[0], "resume", until), wait_for(again, "resume", until)]
    assert {event.int("step") for event in resumes} == {step}
    assert {event.fields["redone_steps"] for event in resumes} == {"0"}
    assert boots[0].finish(timeout=DEADLINE) == 0, boots[0].text()
    assert again.finish(timeout=DEADLINE) == 0, again.text()
    assert_same_state(load_final_state(store), want)


@pytest.mark.parametrize(
    ("key", "value"),
    [(MAINTENANCE_EVENT, "TERMINATE_ON_HOST_MAINTENANCE"), (PREEMPTED, "TRUE")],
    ids=["maintenance-event", "preempted"],
)
def test_a_terminate_or_preemption_on_one_hosts_metadata_saves_before_its_sigterm(
    tmp_path, key, value, capsys
):
    """Compute Engine decides to stop host 1's VM: its metadata server's ``maintenance-event``
    (or ``preempted``) changes the moment that is decided, before the VM's shutdown script sends
    the trainer SIGTERM. Host 1's trainer, watching the key with a hanging GET, asks for a save
    at once; both hosts agree on it and save one step, with SIGTERM not yet sent. Then the
    shutdown script runs: both stop at 143, with no second save when no step came between.
    Measured: the time from the change to both saves under way (printed; docs/trainer.md): on a
    real VM the save starts that much after the change, and the shutdown script's SIGTERM comes
    when the guest's shutdown reaches it."""
    store = LocalStore(tmp_path / "checkpoints")
    servers = [FakeMetadataServer().__enter__() for _ in range(HOSTS)]
    try:
        # No save by time: the one save before SIGTERM is the notice's.
        hosts = new_slice(
            tmp_path, store, TRAINER_METADATA_WAIT_SECONDS="30", CHECKPOINT_INTERVAL_SECONDS="3600"
        )
        # Each host reads its own VM's metadata server (the startup script's default URL, here
        # the host's loopback fake).
        hosts.members = [
            replace(member, environment={**member.environment, "TRAINER_MAINTENANCE_URL": server.url})
            for member, server in zip(hosts.members, servers, strict=True)
        ]
        boots = hosts.boot()
        wait_for_step(boots[0], 10, deadline())
        until = deadline()
        assert eventually(lambda: servers[1].waits(key) >= 1, DEADLINE), f"host 1 never waited on {key}"
        changed = time.monotonic()
        servers[1].set(key, value)
        saves = [wait_for(boot, "saving", until) for boot in boots]
        assert {event.fields["reason"] for event in saves} == {"requested"}, [b.text() for b in boots]
        [step] = {event.int("step") for event in saves}
        signalled = time.monotonic()
        done = hosts.members[1].run_shutdown_script()
        assert done.returncode == 0, done.stdout + done.stderr
        stopped = [wait_for(boot, "stopped", until) for boot in boots]
        assert {event.fields["exit"] for event in stopped} == {"143"}
        for boot in boots:
            assert [e.int("step") for e in events_named(boot, "saving")][0] == step
        assert f"metadata-event key={key.rsplit('/', 1)[1]} value={value} save=now" in boots[1].text()
        assert "short-notice-saved" in boots[1].text()
        # Both hosts' saves were under way (their log lines read) before SIGTERM was sent.
        started = max(event.at for event in saves)
        assert changed < started < signalled
        with capsys.disabled():
            print(f"\n{key}: both hosts saving {started - changed:.3f} s after the change, before SIGTERM")
    finally:
        for server in servers:
            server.__exit__(None, None, None)


def test_sigterm_to_every_pod_150ms_apart_saves_once(tmp_path, reference):
    """A JobSet's Pods, stopped (preemption, a drain): Kubernetes sends each its SIGTERM, here 150
    ms apart. Each Pod saves the same step once and exits 143; the JobSet starts every Pod again,
    and they resume from that step. With JAX's preemption service, as GKE TPU Pods run (the
    trainer's own handler, the service off, is the one-host test's other case: one process
    signalled is the harder agreement, so two signalled adds nothing but a minute)."""
    want, _ = reference
    store = LocalStore(tmp_path / "checkpoints")
    pods = new_gang(store, JAX_ENABLE_PREEMPTION_SERVICE="true")
    first = [pod.start(tmp_path / f"pod-{index}-a") for index, pod in enumerate(pods)]
    wait_for_step(first[0], 30, deadline())
    for output in first:
        output.process.send_signal(signal.SIGTERM)
        time.sleep(0.15)
    stopped = []
    for output in first:
        assert output.finish(timeout=DEADLINE) == 143, output.text()
        [event] = events_named(output, "stopped")
        stopped.append(event.int("step"))
        assert len([e for e in events_named(output, "saving") if e.fields["reason"] == "sigterm"]) <= 1
    [step] = set(stopped)

    second = [pod.start(tmp_path / f"pod-{index}-b") for index, pod in enumerate(pods)]
    for output in second:
        assert output.finish(timeout=DEADLINE) == 0, output.text()
        [resume] = events_named(output, "resume")
        assert resume.int("step") == step
    assert_same_state(load_final_state(store), want)


def test_a_restore_error_on_one_host_leaves_every_checkpoint_and_exits_try_again(tmp_path, reference):
    """One host cannot read the newest checkpoint's arrays (EIO, as a disk or network file system
    says "not now"); the other can. They decide together: retry, then every host exits 75 ("try
    again") with every checkpoint as it was. The next start, storage healthy, resumes from the
    newest."""
    want, checkpoints = reference
    folder = tmp_path / "checkpoints"
    shutil.copytree(checkpoints, folder)
    before = checkpoint_snapshot(folder)
    newest = max(int(name.split("/")[0]) for name in before if name.split("/")[0].isdigit())
    store = LocalStore(folder)
    faulty = new_gang(
        store,
        TRAINER_RESTORE_ATTEMPTS="2",
        TRAINER_RETRY_SECONDS="0.1",
        TPU_TRAINER_TEST_FAULT="restore-eio",
        TPU_TRAINER_TEST_FAULT_PROCESSES="1",
        PYTHONPATH=str(FAULTS),
    )
    outputs = [pod.start(tmp_path / f"pod-{index}-a") for index, pod in enumerate(faulty)]
    for output in outputs:
        assert output.finish(timeout=DEADLINE) == 75, output.text()
        assert not events_named(output, "resume") and not events_named(output, "skip")
        assert [e.int("attempt") for e in events_named(output, "retry")] == [1]
    assert "try again later: could not read step" in outputs[1].text()
    assert "Input/output error (injected)" in outputs[1].text()
    assert checkpoint_snapshot(folder) == before

    healthy = new_gang(store)
    for index, pod in enumerate(healthy):
        output = pod.start(tmp_path / f"pod-{index}-b")
        outputs.append(output)
    for output in outputs[HOSTS:]:
        assert output.finish(timeout=DEADLINE) == 0, output.text()
        [resume] = events_named(output, "resume")
        assert resume.int("step") == newest
    assert_same_state(load_final_state(store), want)


# --- Two slices of a multislice queued TPU VM ---------------------------------------------------

# Each TPU VM of a multislice queued resource learns where it stands from its metadata, which
# the TPU service writes and JAX's own TPU cluster detection reads (jax 0.10.2,
# jax/_src/clusters/cloud_tpu_cluster.py, GceTpuCluster): ``agent-worker-number`` (its worker in
# its slice), ``worker-network-endpoints`` (its slice's workers) and ``tpu-env``, lines such as
# ``MEGASCALE_NUM_SLICES: '2'``. JAX then counts slices x workers processes, numbers this one
# slice id x workers + worker, and takes the coordinator from MEGASCALE_COORDINATOR_ADDRESS.
FORCED_TPU_TRAINER = """
import os, runpy, sys
# JAX's hardware probe (libtpu and TPU chips present), stood in for on this CPU machine: JAX
# found no chips, so it set TPU_SKIP_MDS_QUERY and left running_in_cloud_tpu_vm false. Every
# other step of its TPU cluster detection runs as on a TPU VM.
import jax._src.clusters.cloud_tpu_cluster as tpu_cluster
tpu_cluster.running_in_cloud_tpu_vm = True
os.environ.pop("TPU_SKIP_MDS_QUERY", None)
sys.path.insert(0, {folder!r})
sys.argv[0] = {train!r}
runpy.run_path({train!r}, run_name="__main__")
"""


def multislice_metadata(slice_id: int, slices: int) -> dict[str, str]:
    """What the TPU service gives the one-host slice ``slice_id`` of ``slices`` (as JAX reads it)."""
    return {
        "agent-worker-number": "0",
        "worker-network-endpoints": "127.0.0.1",
        "tpu-env": (
            "MEGASCALE_COORDINATOR_ADDRESS: '127.0.0.1'\n"
            f"MEGASCALE_NUM_SLICES: '{slices}'\n"
            f"MEGASCALE_SLICE_ID: '{slice_id}'\n"
        ),
    }


def test_two_slices_of_a_queued_request_train_as_one_cluster_through_jaxs_own_detection(tmp_path, reference):
    import shlex
    import sys

    from support.harness.program import run_components
    from support.harness.sandbox import CLUSTER_TIMEOUTS, TRAIN_PY, Sandbox, free_port
    from tpu_training_components import PreemptibleTpuVm
    from tpu_training_components.domain.queued_resources import node_ids, requested_slices

    # The request the component makes for `slices: 2`: one queued resource, two nodes.
    run = run_components(
        lambda: PreemptibleTpuVm(
            "trainer",
            {
                "zone": "us-east5-a",
                "accelerator_type": "v6e-8",
                "runtime_version": "v2-alpha-tpuv6e",
                "provisioning": "spot",
                "slices": 2,
                "train_command": "python3 train.py",
                "checkpoint_dir": "gs://b/trainer",
                "service_account_email": "t@p.iam.gserviceaccount.com",
                "project": "p",
            },
        )
    )
    ((spec,),) = [r.inputs["body"]["tpu"]["nodeSpec"] for r in run.by_type("pulumi-python:dynamic:Resource")]
    slices = requested_slices(spec)
    names = node_ids(spec["multisliceParams"]["nodeIdPrefix"], slices)
    assert (slices, names) == (HOSTS, ("trainer-0", "trainer-1"))

    wrapper = tmp_path / "forced_tpu_train.py"
    wrapper.write_text(FORCED_TPU_TRAINER.format(folder=str(TRAIN_PY.parent), train=str(TRAIN_PY)))
    store = LocalStore(tmp_path / "checkpoints")
    coordinator = free_port()
    servers = [FakeMetadataServer() for _ in names]
    members = []
    try:
        for slice_id, (name, server) in enumerate(zip(names, servers, strict=True)):
            server.__enter__()
            server.attributes.update(multislice_metadata(slice_id, slices))
            host_env = {
                "GCE_METADATA_IP": server.endpoint.removeprefix("http://"),
                # Both VMs share this machine's loopback: the coordinator gets a free port, not 8482.
                "JAX_COORDINATOR_PORT": str(coordinator),
                # The TPU chips a TPU VM has, which make the trainer join its cluster.
                "TRAINER_DISTRIBUTED": "on",
                **CLUSTER_TIMEOUTS,
            }
            member = Sandbox(
                tmp_path / name,
                RUN,
                vm_name=name,
                train_command=f"{shlex.quote(sys.executable)} {shlex.quote(str(wrapper))}",
                store=store,
                host_env=host_env,
            )
            members.append(member)
        boots = [member.boot() for member in members]
        for boot in boots:
            assert boot.finish(timeout=DEADLINE) == 0, boot.text()
    finally:
        for member in members:
            member.close()
        for server in servers:
            server.__exit__(None, None, None)
    # Each process counted both slices and took its place from its slice id: the cluster of the
    # two-host reference, and so its exact bytes.
    resumes = [events_named(boot, "resume")[0] for boot in boots]
    assert [event.int("processes") for event in resumes] == [HOSTS, HOSTS]
    assert_same_state(load_final_state(store), reference[0])
    for server in servers:
        asked = {path.rsplit("/", 1)[-1] for path, _, _ in server.requests if "/attributes/" in path}
        assert {"agent-worker-number", "tpu-env"} <= asked, asked
