"""Run the reference trainer as the stacks run it, on this machine: under the startup script the
project renders for a TPU VM, or as a GKE Job's container. For the tests (tests/trainer/)
and the goodput benchmark (benchmarks/goodput_measured.py); not uploaded with the trainer.

The startup script is the real one (``render_startup_script``), run by bash with its state in a
temporary folder; only ``gcloud storage`` is a stand-in (``ls`` and ``cp -``), as in
tests/domain/test_startup_script.py. ``CHECKPOINT_DIR`` is a local folder (``LocalStore``) or a ``gs://``
path on a Cloud Storage JSON API endpoint (``GcsStore``; the tests run one on loopback,
tests/support/fakes/loopback_gcs.py), which the trainer's own storage clients are pointed at.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator, Mapping, Optional, Protocol, Sequence

from tpu_training_components.domain.job_manifests import (
    TrainingJobSpec,
    job_manifest,
    run_parameters_manifest,
)
from tpu_training_components.domain.startup_script import (
    COMPLETION_MARKER,
    render_shutdown_script,
    render_startup_script,
)

TRAINER = Path(__file__).resolve().parents[3] / "trainer"
"""The reference trainer's folder: flat modules, uploaded as they are and run as
``python3 trainer/train.py``, so each imports its siblings as top-level modules."""
TRAIN_PY = TRAINER / "train.py"


@contextlib.contextmanager
def trainer_modules() -> Iterator[SimpleNamespace]:
    """Every module of the reference trainer (``trainer/NAME.py`` as attribute ``NAME``), imported
    as ``python3 trainer/train.py`` imports them: top-level modules, ``trainer/`` first on
    ``sys.path``; to test their parts in this process. Importing ``train`` installs its SIGTERM
    handler; the caller's is put back, and so are ``sys.path`` and ``sys.modules``."""
    names = sorted(path.stem for path in TRAINER.glob("*.py"))
    taken = [name for name in names if name in sys.modules]
    assert not taken, f"modules named like the trainer's are imported already: {taken}"
    handler = signal.getsignal(signal.SIGTERM)
    sys.path.insert(0, str(TRAINER))
    try:
        yield SimpleNamespace(**{name: importlib.import_module(name) for name in names})
    finally:
        signal.signal(signal.SIGTERM, handler)
        sys.path.remove(str(TRAINER))
        for name in names:
            sys.modules.pop(name, None)


PROGRESS_RECORD = "progress.process-"
"""The trainer's progress records in ``CHECKPOINT_DIR`` (docs/trainer.md): written by every start,
so "nothing was touched" leaves them out."""


def checkpoint_snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` but the progress records, with a digest of its bytes: what
    "the checkpoints were not touched" compares."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.name.startswith(PROGRESS_RECORD)
    }


TRAIN_COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(TRAIN_PY))}"

# `gcloud storage ls PATH` and `gcloud storage cp - PATH`: all the startup script asks of it. A local
# PATH is a file; a gs:// PATH is an object, reached through the Cloud Storage JSON API at the
# endpoint gcloud itself would take from CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE. Anything else is
# refused, so a new use of gcloud in the script shows up here.
FAKE_GCLOUD = f"""#!{sys.executable}
import os, sys, urllib.error, urllib.parse, urllib.request

if sys.argv[1:2] != ["storage"] or sys.argv[2:3] not in (["ls"], ["cp"]):
    sys.exit(2)
verb, target = sys.argv[2], sys.argv[-1]
if verb == "cp" and (len(sys.argv) != 5 or sys.argv[3] != "-"):
    sys.exit(2)
if not target.startswith("gs://"):
    if verb == "ls":
        sys.exit(0 if os.path.exists(target) else 1)
    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    with open(target, "wb") as handle:
        handle.write(sys.stdin.buffer.read())
    sys.exit(0)
api = os.environ["CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE"].rstrip("/")
bucket, _, name = target[len("gs://"):].partition("/")
if verb == "ls":
    request = urllib.request.Request(f"{{api}}/b/{{bucket}}/o/{{urllib.parse.quote(name, safe='')}}")
else:
    upload = api.replace("/storage/v1", "/upload/storage/v1")
    query = urllib.parse.urlencode({{"uploadType": "media", "name": name}})
    request = urllib.request.Request(f"{{upload}}/b/{{bucket}}/o?{{query}}", data=sys.stdin.buffer.read())
try:
    urllib.request.urlopen(request, timeout=30).close()
except urllib.error.HTTPError as error:
    sys.exit(1 if error.code == 404 and verb == "ls" else 2)
"""


class CheckpointStore(Protocol):
    """Where ``CHECKPOINT_DIR`` is, and what a test does there as an operator would: list it, read
    an object, damage one. Names are relative to ``CHECKPOINT_DIR`` (``"60/state/_METADATA"``)."""

    @property
    def url(self) -> str:
        """``CHECKPOINT_DIR``."""
        ...

    def client_env(self) -> dict[str, str]:
        """What the trainer's storage clients (and the gcloud stand-in) need in their environment
        to reach it."""
        ...

    def names(self) -> list[str]:
        """The entries directly in ``CHECKPOINT_DIR``: step folders, markers, leftovers."""
        ...

    def files(self, under: str) -> list[str]:
        """Every file (object) under a folder (prefix), sorted."""
        ...

    def read(self, name: str) -> bytes: ...

    def write(self, name: str, data: bytes) -> None: ...

    def delete(self, name: str) -> None: ...

    def exists(self, name: str) -> bool: ...


@dataclass(frozen=True)
class LocalStore:
    """``CHECKPOINT_DIR`` as a folder on this machine."""

    path: Path

    @property
    def url(self) -> str:
        return str(self.path)

    def client_env(self) -> dict[str, str]:
        return {}

    def names(self) -> list[str]:
        return sorted(p.name for p in self.path.iterdir()) if self.path.exists() else []

    def files(self, under: str) -> list[str]:
        return sorted(str(p.relative_to(self.path)) for p in (self.path / under).rglob("*") if p.is_file())

    def read(self, name: str) -> bytes:
        return (self.path / name).read_bytes()

    def write(self, name: str, data: bytes) -> None:
        (self.path / name).write_bytes(data)

    def delete(self, name: str) -> None:
        (self.path / name).unlink()

    def exists(self, name: str) -> bool:
        return (self.path / name).exists()


@dataclass(frozen=True)
class GcsStore:
    """``CHECKPOINT_DIR`` as ``gs://BUCKET/PREFIX``, served by the Cloud Storage JSON API at
    ``endpoint`` (``http://127.0.0.1:PORT`` in the tests) instead of storage.googleapis.com."""

    endpoint: str
    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}"

    def client_env(self) -> dict[str, str]:
        # Each client's own, documented way to take another endpoint; nothing in the trainer knows.
        host = urllib.parse.urlsplit(self.endpoint).netloc
        return {
            # tensorstore's gcs driver (Orbax writes the arrays with it): the base URL of its
            # requests (tensorstore/kvstore/gcs/gcs_key_value_store.cc, GetGcsBaseUrl), and a fixed
            # bearer token, the first source in its credentials chain
            # (tensorstore/internal/oauth2/google_auth_provider.h). tensorstore's own tests against
            # Google's storage testbench set these two (kvstore/gcs_http/gcs_testbench_test.cc).
            "TENSORSTORE_GCS_HTTP_URL": self.endpoint,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "loopback",
            # gcsfs (etils.epath: Orbax's small files, the trainer's markers) and
            # google-cloud-storage (Orbax's bucket lookups): gcsfs/core.py _location(),
            # google/cloud/storage/client.py, which then sends no credentials.
            "STORAGE_EMULATOR_HOST": self.endpoint,
            # gcsfs without credentials: fsspec reads FSSPEC_<protocol>_<argument> as a default
            # argument of every filesystem of that protocol (fsspec/config.py, set_conf_env).
            "FSSPEC_GCS_TOKEN": "anon",
            # gcsfs 2026 first asks the Storage Control API (gRPC, on the same host and port) for
            # the bucket's layout, again before every operation while it gets no answer; no
            # emulator speaks it. For a bucket with a flat namespace, as the stack's are
            # (components/.../checkpoint_bucket.py), the answer selects the code this switch
            # selects (gcsfs/__init__.py, GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT; extended_gcsfs.py
            # hands every operation on such a bucket to the GCSFileSystem it extends).
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            # Where the metadata server would be, this endpoint, which is none (it answers without
            # "Metadata-Flavor: Google"): a credentials lookup that gets past the settings above
            # ends at once, on this machine, instead of trying 169.254.169.254 (google-auth reads
            # GCE_METADATA_HOST and GCE_METADATA_IP, tensorstore GCE_METADATA_ROOT).
            "NO_GCE_CHECK": "True",
            "GCE_METADATA_HOST": host,
            "GCE_METADATA_IP": host,
            "GCE_METADATA_ROOT": host,
            # The gcloud stand-in (FAKE_GCLOUD), as gcloud's own endpoint override.
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE": f"{self.endpoint}/storage/v1/",
        }

    def _object_url(self, name: str) -> str:
        full = urllib.parse.quote(f"{self.prefix}/{name}", safe="")
        return f"{self.endpoint}/storage/v1/b/{self.bucket}/o/{full}"

    def _call(self, request: urllib.request.Request) -> bytes:
        with urllib.request.urlopen(request, timeout=30) as response:
            data: bytes = response.read()
            return data

    def _list(self, prefix: str, delimiter: str) -> tuple[list[str], list[str]]:
        items: list[str] = []
        prefixes: list[str] = []
        token = ""
        while True:
            query = {"prefix": prefix, "delimiter": delimiter, **({"pageToken": token} if token else {})}
            url = f"{self.endpoint}/storage/v1/b/{self.bucket}/o?{urllib.parse.urlencode(query)}"
            page = json.loads(self._call(urllib.request.Request(url)))
            items += [item["name"] for item in page.get("items", [])]
            prefixes += page.get("prefixes", [])
            token = page.get("nextPageToken", "")
            if not token:
                return items, prefixes

    def names(self) -> list[str]:
        root = f"{self.prefix}/"
        items, prefixes = self._list(root, "/")
        return sorted(name[len(root) :].rstrip("/") for name in items + prefixes)

    def files(self, under: str) -> list[str]:
        items, _ = self._list(f"{self.prefix}/{under.rstrip('/')}/", "")
        return sorted(name[len(self.prefix) + 1 :] for name in items)

    def read(self, name: str) -> bytes:
        return self._call(urllib.request.Request(f"{self._object_url(name)}?alt=media"))

    def write(self, name: str, data: bytes) -> None:
        query = urllib.parse.urlencode({"uploadType": "media", "name": f"{self.prefix}/{name}"})
        url = f"{self.endpoint}/upload/storage/v1/b/{self.bucket}/o?{query}"
        self._call(urllib.request.Request(url, data=data, method="POST"))

    def delete(self, name: str) -> None:
        self._call(urllib.request.Request(self._object_url(name), method="DELETE"))

    def exists(self, name: str) -> bool:
        try:
            self._call(urllib.request.Request(self._object_url(name)))
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return False
            raise
        return True


# Anywhere in the line, not only at its start: the trainer writes each line whole (one write),
# but stdout and stderr share the pipe, and a library's message longer than the pipe's atomic
# write (PIPE_BUF, 4 KiB) can be cut by another write, leaving its first part, without a newline,
# in front of the trainer's line (a "moved" event lost that way under a loaded full suite).
EVENT = re.compile(r"tpu-trainer: (?P<event>\w+)(?P<fields>( .*)?)$")


@dataclass(frozen=True)
class Event:
    """One line of the trainer's log, with the time this process read it."""

    at: float
    event: str
    fields: Mapping[str, str]

    def int(self, key: str) -> int:
        return int(self.fields[key])

    def float(self, key: str) -> float:
        return float(self.fields[key])


def parse(line: str, at: float) -> Optional[Event]:
    match = EVENT.search(line.rstrip("\n"))
    if not match:
        return None
    # Values with spaces are JSON strings, which shlex reads as one word.
    try:
        words = shlex.split(match.group("fields"))
    except ValueError:
        return None
    if not all(re.match(r"^\w+=", word) for word in words):
        return None
    fields = dict(word.split("=", 1) for word in words)
    return Event(at, match.group("event"), fields)


class Output:
    """Reads a process's output on a thread, so the caller can wait for lines with a deadline."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self.timed_lines: list[tuple[float, str]] = []
        self.events: list[Event] = []
        self._queue: queue.Queue[Optional[Event]] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            at = time.monotonic()
            self.lines.append(line)
            self.timed_lines.append((at, line))
            event = parse(line, at)
            if event is not None:
                self.events.append(event)
                self._queue.put(event)
        self._queue.put(None)

    def next_events(self, deadline: float) -> Iterator[Event]:
        """The trainer's events as they come, until the output ends or the deadline passes."""
        while True:
            try:
                event = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError("no trainer output before the deadline:\n" + self.text()) from None
            if event is None:
                return
            yield event

    def next_event(self, deadline: float) -> tuple[bool, Optional[Event]]:
        """``(True, event)``, ``(True, None)`` at the end of the output, ``(False, None)`` when
        the deadline passes first."""
        try:
            return True, self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return False, None

    def text(self) -> str:
        return "".join(self.lines)

    def finish(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # What it printed is what tells a hang from a slow run: say it, not just the timeout.
            raise AssertionError(
                f"still running after {timeout:g} s; its output:\n{self.text()[-8000:]}"
            ) from None
        self._thread.join(timeout=timeout)
        return code


HARNESS_VARIABLES = (
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
)
"""Settings of this process that every trainer it starts gets, a Pod's too (whose environment is
otherwise built from scratch): a JAX compilation cache the tests share, so a start loads the
compiled programs instead of compiling them again. The programs are the same either way."""


@dataclass
class Sandbox:
    """A TPU VM on this machine: the rendered scripts, their state folder and a checkpoint store."""

    root: Path
    environment: Mapping[str, str]
    """The run's environment as the stack would export it (``TRAIN_STEPS``, ...)."""
    vm_name: str = "sandbox-tpu"
    train_command: str = TRAIN_COMMAND
    store: Optional[CheckpointStore] = None
    """Where ``CHECKPOINT_DIR`` is; a folder under ``root`` unless given."""
    host_env: Mapping[str, str] = field(default_factory=dict)
    """What this host's own environment adds (not the run's): on a slice, what JAX would read from
    the VM's metadata, its worker number and the coordinator (``Slice``)."""
    checkpoints: CheckpointStore = field(init=False)
    boots: list[Output] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.checkpoints = self.store or LocalStore(self.root / "checkpoints")
        bin_dir = self.root / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        _write(bin_dir / "gcloud", FAKE_GCLOUD)
        self.startup = _write(
            self.root / "startup.sh",
            render_startup_script(
                vm_name=self.vm_name,
                checkpoint_dir=self.checkpoints.url,
                train_command=self.train_command,
                environment=dict(self.environment),
            ),
        )
        self.shutdown = _write(self.root / "shutdown.sh", render_shutdown_script(vm_name=self.vm_name))
        self.state_dir = self.root / "state"
        self.env = dict(
            os.environ,
            PATH=f"{bin_dir}:{os.environ['PATH']}",
            TPU_TRAINING_STATE_DIR=str(self.state_dir),
            # The loop's back-off starts at 0 s and so stays there: restarts are immediate.
            TPU_TRAINING_RETRY_DELAY="0",
            PYTHONUNBUFFERED="1",
            # How this machine reaches the store (a TPU VM needs nothing here): in the VM's own
            # environment, which the trainer and gcloud inherit, not in the run's.
            **self.checkpoints.client_env(),
            **self.host_env,
        )

    @property
    def completed(self) -> bool:
        """Whether ``$CHECKPOINT_DIR/TRAINING_COMPLETE`` exists."""
        return self.checkpoints.exists(COMPLETION_MARKER)

    def boot(self) -> Output:
        """Run the startup script, as a VM does at boot."""
        process = subprocess.Popen(
            ["bash", str(self.startup)],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.boots.append(Output(process))
        return self.boots[-1]

    def trainer_pid(self) -> int:
        return int((self.state_dir / "trainer.pid").read_text())

    def kill_trainer(self, sig: int = signal.SIGKILL) -> None:
        """Signal the running attempt's whole process group, as a crash or the OOM killer would."""
        os.killpg(self.trainer_pid(), sig)

    def power_off(self, boot: Output) -> None:
        """Everything the boot started dies at once: the VM is gone without a shutdown script."""
        for pgid in {self.trainer_pid(), boot.process.pid}:
            _kill_group(pgid)
        boot.finish(timeout=30)
        # A new VM starts with an empty /run.
        for name in ("trainer.pid", "stopping"):
            (self.state_dir / name).unlink(missing_ok=True)

    def run_shutdown_script(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(self.shutdown)], env=self.env, capture_output=True, text=True, timeout=60
        )

    def close(self) -> None:
        """Kill whatever a boot left running (a test that failed half-way): the script first, so
        its retry loop starts no other attempt, then the trainer's session."""
        for boot in self.boots:
            if boot.process.poll() is None:
                _kill_group(boot.process.pid)
                if (self.state_dir / "trainer.pid").exists():
                    _kill_group(self.trainer_pid())
                boot.finish(timeout=30)


@dataclass
class Pod:
    """A GKE training Job's Pod run on this machine: its container's command, with the environment
    the kubelet builds from the Job's ``env`` and its ConfigMap (``envFrom``), and a fresh
    filesystem of its own (``TMPDIR``) like every new Pod."""

    command: Sequence[str]
    env: Mapping[str, str]
    storage_env: Mapping[str, str] = field(default_factory=dict)
    """The checkpoint store's endpoint settings (``CheckpointStore.client_env``): where a Pod on GKE
    reaches storage.googleapis.com, this one reaches the store."""
    started: list[Output] = field(init=False, default_factory=list)

    def start(self, scratch: Path) -> Output:
        scratch.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(scratch),
            "TMPDIR": str(scratch),
            "PYTHONUNBUFFERED": "1",
            **{name: os.environ[name] for name in HARNESS_VARIABLES if name in os.environ},
            **self.storage_env,
            **self.env,
        }
        process = subprocess.Popen(
            list(self.command), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.started.append(Output(process))
        return self.started[-1]

    def close(self) -> None:
        """Kill any of its containers still running (a test that failed half-way)."""
        for output in self.started:
            if output.process.poll() is None:
                output.process.kill()
                output.finish(timeout=30)


def job_pod(store: CheckpointStore, run_parameters: Mapping[str, str]) -> Pod:
    """The Pod of a single-host training Job that runs the reference trainer, built from the
    manifests the stack applies (components/job_manifests.py), checkpointing to ``store``."""
    spec = TrainingJobSpec(
        name="train-sandbox",
        namespace="default",
        image="us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:latest",
        command=(sys.executable, str(TRAIN_PY)),
        node_selector={},
        chips_per_vm=1,
        vms=1,
        service_account="train-sandbox",
        env={"CHECKPOINT_DIR": store.url},
        run_parameters=dict(run_parameters),
    )
    container = job_manifest(spec)["spec"]["template"]["spec"]["containers"][0]
    config_maps = {spec.run_parameters_name: run_parameters_manifest(spec)["data"]}
    env: dict[str, str] = {}
    for source in container["envFrom"]:
        env.update(config_maps[source["configMapRef"]["name"]])
    # A variable in `env` wins over the same name from `envFrom` (Kubernetes' EnvFromSource).
    env.update({entry["name"]: entry["value"] for entry in container["env"]})
    return Pod(command=container["command"], env=env, storage_env=store.client_env())


CLUSTER_TIMEOUTS = {
    "TRAINER_HEARTBEAT_SECONDS": "5",
    "TRAINER_JOIN_TIMEOUT_SECONDS": "90",
    "TRAINER_SHUTDOWN_TIMEOUT_SECONDS": "30",
}
"""Bounded waits for the clusters the tests form: a process that dies is noticed by the others
within 5 s (JAX's heartbeat; 100 s by default, and the other processes then abort), a start waits
at most 90 s for the others to join (300 s by default) before it exits "try again", and a process
that ends waits at most 30 s for the others to end too (300 s by default)."""


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now: the coordinator's."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def cluster_env(port: int, hosts: int, index: int) -> dict[str, str]:
    """What tells process ``index`` of ``hosts`` where the others are: on a TPU slice JAX reads it
    from the VM's metadata or the Pod's ``TPU_WORKER_*`` variables; here the trainer's explicit
    cluster settings say it."""
    return {
        "TRAINER_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
        "TRAINER_NUM_PROCESSES": str(hosts),
        "TRAINER_PROCESS_ID": str(index),
        **CLUSTER_TIMEOUTS,
    }


@dataclass
class Slice:
    """A multi-host TPU VM on this machine: one ``Sandbox`` per host, each running the real
    startup script with its own retry loop (as every host of a slice does), all checkpointing to
    one store and forming one JAX cluster on loopback (host 0 is the coordinator)."""

    root: Path
    environment: Mapping[str, str]
    store: CheckpointStore
    hosts: int = 2
    members: list[Sandbox] = field(init=False)

    def __post_init__(self) -> None:
        port = free_port()
        self.members = [
            Sandbox(
                self.root / f"host-{index}",
                self.environment,
                vm_name=f"sandbox-tpu-w{index}",
                store=self.store,
                host_env=cluster_env(port, self.hosts, index),
            )
            for index in range(self.hosts)
        ]

    def boot(self) -> list[Output]:
        """Boot every host: each runs its startup script."""
        return [member.boot() for member in self.members]

    @property
    def completed(self) -> bool:
        return self.store.exists(COMPLETION_MARKER)

    def close(self) -> None:
        for member in self.members:
            member.close()


def gang(pod: Pod, hosts: int) -> list[Pod]:
    """The Pods of one multi-host slice of a Job or JobSet: the same container, each with its
    worker's place in the cluster. They are started, and restarted, together (JobSet restarts
    every Pod of a failed slice)."""
    port = free_port()
    return [replace(pod, env={**pod.env, **cluster_env(port, hosts, index)}) for index in range(hosts)]


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def load_final_state(store: CheckpointStore) -> dict[str, object]:
    """The final parameters and optimizer state a completed run left (``final_state.npz``)."""
    import numpy as np

    with np.load(io.BytesIO(store.read("final_state.npz"))) as archive:
        return {key: archive[key] for key in archive.files}
