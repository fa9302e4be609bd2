"""Your own stack under the real Pulumi engine, offline: the loopback fakes the engine tier deploys
into (Cloud TPU, Cloud Storage, a Kubernetes API server), the provider doubles in front of them,
and a shell environment that points the real CLI (.engine/bin, built by ``bash .ci/engine``) at
both, with a file backend of its own. README, "Your own stack": preview, up, recover and destroy.

    .venv/bin/python tests/support/harness/engine/offline_cloud.py start .offline
    . .offline/env                       # this shell's pulumi is the built one, on the fakes
    ...
    .venv/bin/python tests/support/harness/engine/offline_cloud.py preempt .offline ZONE NAME
    .venv/bin/python tests/support/harness/engine/offline_cloud.py fail-job .offline NAMESPACE NAME
    .venv/bin/python tests/support/harness/engine/offline_cloud.py stop .offline

``start`` returns once the fakes serve (their process runs on, in its own session, until
``stop``); FOLDER holds ``env`` (the variables, for ``.``), the state, the Pulumi home, the
provider doubles' executables and the fakes' log. ``preempt`` and ``fail-job`` do to the fakes
what Google does to a node and what a training Job's backoff does, so ``tpu-training recover``
has something to recover. Nothing here reaches Google: the doubles stand in for pulumi-gcp, which
cannot be built here (docs/engine-tests.md says what they do not prove).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Client, Listener
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[4]
for _entry in (REPO / "tests", REPO):
    if str(_entry) not in sys.path:
        sys.path.insert(0, str(_entry))

from support.harness.engine.engine import ENGINE_BIN, engine_version, plugin_executable  # noqa: E402
from support.harness.engine.providers import KUBERNETES_API_VARIABLE  # noqa: E402

PASSPHRASE = "offline"
"""The file backend's passphrase: the stack's secrets are encrypted with it, in FOLDER/state only."""
FAILED_JOB_STATUS = {
    "failed": 1,
    "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}],
}
READY_SECONDS = 60


def _control(folder: Path) -> str:
    return str(folder / "control.sock")


def _env_file(folder: Path, fakes: dict[str, str]) -> str:
    """The shell lines that point ``pulumi`` and ``tpu-training`` at the built CLI, the doubles, a
    file backend in FOLDER and the fakes."""
    variables = {
        "PULUMI_HOME": str(folder / "home"),
        "PULUMI_BACKEND_URL": f"file://{folder / 'state'}",
        "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        **fakes,
    }
    path = os.pathsep.join(shlex.quote(str(part)) for part in (folder / "plugins", ENGINE_BIN))
    return "\n".join(
        [
            f"# Written by {Path(__file__).name} start; `. {folder}/env` points this shell at the fakes.",
            f'export PATH={path}{os.pathsep}"$PATH"',
            *(f"export {name}={shlex.quote(value)}" for name, value in variables.items()),
            "",
        ]
    )


def serve(folder: Path) -> None:
    """The fakes, served until SIGTERM; FOLDER/env written once they answer."""
    from support.fakes.loopback_gcs import LoopbackGcs
    from support.harness.engine.engine import endpoints
    from support.harness.engine.fakes import CloudTpuApi, KubernetesApi

    stopped = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stopped.set())
    with CloudTpuApi() as tpu, LoopbackGcs() as storage, KubernetesApi() as kube:
        # Whatever a user's stack makes them serve is theirs to see, not a test failure.
        for fake in (tpu, storage, kube):
            fake.allow_off_schema = True
        fakes = {
            **endpoints(tpu, storage),
            KUBERNETES_API_VARIABLE: kube.endpoint,
            "KUBECONFIG": str(kube.kubeconfig(folder)),
        }
        listener = Listener(_control(folder), family="AF_UNIX")

        def answer() -> None:
            while True:
                with listener.accept() as connection:
                    connection.send(_act(connection.recv(), tpu, kube))

        threading.Thread(target=answer, daemon=True).start()
        (folder / "env").write_text(_env_file(folder, fakes))
        stopped.wait()
        listener.close()


def _act(request: dict[str, Any], tpu: Any, kube: Any) -> str:
    """What ``preempt`` and ``fail-job`` ask of the fakes; the answer is a line for the user."""
    if request["do"] == "preempt":
        zone, name = request["zone"], request["name"]
        if tpu.node(zone, name) is None:
            return f"no TPU VM {name!r} in {zone} (the fakes hold: {_nodes(tpu)})"
        tpu.set_state(zone, name, "PREEMPTED")
        return f"TPU VM {name} in {zone} is PREEMPTED"
    namespace, name = request["namespace"], request["name"]
    job = kube.stored("jobs", namespace, name)
    if job is None:
        return f"no Job {name!r} in namespace {namespace!r}"
    kube.put("jobs", namespace, dict(job, status=FAILED_JOB_STATUS))
    return f"Job {namespace}/{name} has failed (BackoffLimitExceeded)"


def _nodes(tpu: Any) -> str:
    names = [f"{zone}/{node['name']}" for zone, nodes in tpu.nodes.items() for node in nodes]
    return ", ".join(names) or "none"


def start(folder: Path) -> int:
    if engine_version() is None:
        print("offline_cloud: the engine is not built here; run `bash .ci/engine` first", file=sys.stderr)
        return 69
    if (folder / "pid").exists():
        print(f"offline_cloud: {folder} is running already (stop it first)", file=sys.stderr)
        return 64
    plugins = folder / "plugins"
    for part in (plugins, folder / "state", folder / "home"):
        part.mkdir(parents=True, exist_ok=True)
    (folder / "env").unlink(missing_ok=True)
    for name, kind in (("pulumi-resource-gcp", "gcp"), ("pulumi-resource-kubernetes", "kubernetes")):
        plugin_executable(plugins, name, "support.harness.engine.providers", kind, pythonpath=True)
    with (folder / "cloud.log").open("ab") as log:
        fakes = subprocess.Popen(
            [sys.executable, __file__, "serve", str(folder)],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + READY_SECONDS
    while not (folder / "env").exists():
        if fakes.poll() is not None or time.monotonic() > deadline:
            print(f"offline_cloud: the fakes did not start; see {folder / 'cloud.log'}", file=sys.stderr)
            return 1
        time.sleep(0.05)
    (folder / "pid").write_text(f"{fakes.pid}\n")
    print(f"the fakes serve; `. {folder}/env` points this shell's pulumi ({ENGINE_BIN}) at them")
    return 0


def stop(folder: Path) -> int:
    pid_file = folder / "pid"
    if not pid_file.exists():
        print(f"offline_cloud: nothing runs from {folder}", file=sys.stderr)
        return 0
    try:
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
    except ProcessLookupError:
        pass
    pid_file.unlink()
    (folder / "env").unlink(missing_ok=True)
    print(f"the fakes of {folder} are stopped (the state stays in {folder / 'state'})")
    return 0


def ask(folder: Path, request: dict[str, str]) -> int:
    try:
        with Client(_control(folder), family="AF_UNIX") as connection:
            connection.send(request)
            answer = connection.recv()
    except (FileNotFoundError, ConnectionRefusedError):
        print(f"offline_cloud: no fakes run from {folder} (start them first)", file=sys.stderr)
        return 69
    print(answer)
    return 0 if not answer.startswith("no ") else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="offline_cloud.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("start", "stop", "serve"):
        commands.add_parser(name).add_argument("folder", type=Path)
    preempt = commands.add_parser("preempt", help="a TPU VM preempted, as Google preempts one")
    preempt.add_argument("folder", type=Path)
    preempt.add_argument("zone")
    preempt.add_argument("name")
    fail = commands.add_parser("fail-job", help="a training Job failed, out of retries")
    fail.add_argument("folder", type=Path)
    fail.add_argument("namespace")
    fail.add_argument("name")
    args = parser.parse_args(argv)
    folder = args.folder.absolute()
    if args.command == "serve":
        serve(folder)
        return 0
    if args.command == "start":
        return start(folder)
    if args.command == "stop":
        return stop(folder)
    if args.command == "preempt":
        return ask(folder, {"do": "preempt", "zone": args.zone, "name": args.name})
    return ask(folder, {"do": "fail-job", "namespace": args.namespace, "name": args.name})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
