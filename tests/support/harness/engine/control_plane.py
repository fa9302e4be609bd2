"""A real Kubernetes control plane on loopback for the engine tier: etcd, kube-apiserver and
kube-controller-manager (the Job and garbage-collector controllers), built by .ci/kube into
.engine/kube/bin. No kubelet and no scheduler: a Pod stays Pending until a test writes its status
through the status subresource, which is how a test fails a worker on purpose; the real Job
controller then does what it does with a failed Pod.

``ControlPlane`` starts the three in a folder of its own and stops them; ``kubeconfig`` is an
admin's (a static token in the ``system:masters`` group, TLS not verified: the serving
certificate is the API server's own self-signed one)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator, Optional

from support.harness.engine.engine import REPO

KUBE_BIN = REPO / ".engine" / "kube" / "bin"
TOOLS = ("etcd", "kube-apiserver", "kube-controller-manager")
TOKEN = "engine-tests-admin-token"
START_SECONDS = 180.0
"""How long the control plane may take to answer on a loaded two-core machine (about 10 s quiet)."""


def kube_version() -> Optional[str]:
    """The Kubernetes version .ci/kube built, or None when it is not built here."""
    stamp = KUBE_BIN / "VERSION"
    if not all((KUBE_BIN / tool).is_file() for tool in TOOLS) or not stamp.is_file():
        return None
    return stamp.read_text().strip()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager, started in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.processes: list[subprocess.Popen] = []
        self.port = _free_port()
        self.endpoint = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = folder / "kubeconfig"

    def __enter__(self) -> ControlPlane:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self) -> None:
        folder = self.folder
        folder.mkdir(parents=True, exist_ok=True)
        keys = folder / "service-accounts.key"
        subprocess.run(["openssl", "genrsa", "-out", str(keys), "2048"], check=True, capture_output=True)
        subprocess.run(
            ["openssl", "rsa", "-in", str(keys), "-pubout", "-out", str(folder / "service-accounts.pub")],
            check=True,
            capture_output=True,
        )
        (folder / "tokens.csv").write_text(f'{TOKEN},admin,admin,"system:masters"\n')
        etcd_client, etcd_peer = _free_port(), _free_port()
        etcd = self._spawn(
            "etcd",
            f"--data-dir={folder / 'etcd'}",
            f"--listen-client-url=http://127.0.0.1:{etcd_client}",
            f"--listen-peer-url=http://127.0.0.1:{etcd_peer}",
        )
        _wait(lambda: _first_line(etcd, folder / "etcd.log") == "ready", "etcd")
        self._spawn(
            "kube-apiserver",
            f"--etcd-servers=http://127.0.0.1:{etcd_client}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={folder / 'certificates'}",
            f"--token-auth-file={folder / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={folder / 'service-accounts.pub'}",
            f"--service-account-signing-key-file={keys}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--enable-priority-and-fairness=false",
        )
        self.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "engine", "cluster": self._cluster()}],
                    "users": [{"name": "admin", "user": {"token": TOKEN}}],
                    "contexts": [{"name": "engine", "context": {"cluster": "engine", "user": "admin"}}],
                    "current-context": "engine",
                }
            )
        )
        _wait(lambda: self.request("GET", "/readyz")[0] == 200, "kube-apiserver")
        _wait(lambda: self.request("GET", "/api/v1/namespaces/default")[0] == 200, "the default namespace")
        self._spawn(
            "kube-controller-manager",
            f"--kubeconfig={self.kubeconfig}",
            "--controllers=job-controller,garbage-collector-controller",
            "--leader-elect=false",
            "--secure-port=0",
            "--use-service-account-credentials=false",
        )

    def _cluster(self) -> dict[str, Any]:
        return {"server": self.endpoint, "insecure-skip-tls-verify": True}

    def _spawn(self, tool: str, *args: str) -> subprocess.Popen:
        log = (self.folder / f"{tool}.log").open("ab")
        process = subprocess.Popen(
            [str(KUBE_BIN / tool), *args],
            stdout=subprocess.PIPE if tool == "etcd" else log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def stop(self) -> None:
        # Not gracefully: the API server's graceful shutdown waits its seconds for requests nobody
        # will send, and nothing here outlives the run.
        for process in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        for process in reversed(self.processes):
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.processes.clear()

    def request(self, method: str, path: str, body: Any = None, timeout: float = 30) -> tuple[int, Any]:
        """An admin's request to the API server: (status, decoded JSON body or text)."""
        data = None if body is None else json.dumps(body).encode()
        call = urllib.request.Request(
            self.endpoint + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(call, timeout=timeout, context=context) as answer:
                text = answer.read().decode()
                status = answer.status
        except urllib.error.HTTPError as error:
            text, status = error.read().decode(), error.code
        except OSError:
            return 0, None
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text


def _first_line(process: subprocess.Popen, log: Path) -> str:
    assert process.stdout is not None
    if process.poll() is not None:
        raise RuntimeError(f"etcd ended with {process.returncode}: {log.read_text()[-2000:]}")
    return process.stdout.readline().decode().strip()


def _wait(ready: Any, what: str) -> None:
    deadline = time.monotonic() + START_SECONDS
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer within {START_SECONDS:g} s")
        time.sleep(0.2)


@contextlib.contextmanager
def control_plane(folder: Path) -> Iterator[ControlPlane]:
    with ControlPlane(folder) as plane:
        yield plane
