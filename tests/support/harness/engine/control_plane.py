"""A real Kubernetes control plane on loopback for the engine tier: etcd, kube-apiserver,
kube-controller-manager (the Job, garbage-collector and service-account controllers) and the JobSet controller
v0.12.0 with its webhooks, built by .ci/kube into .engine/kube/bin. No kubelet and no scheduler: a
Pod stays Pending until a test binds it to a Node object it made, or writes its status through the
status subresource, which is how a test fails a worker on purpose; the real controllers then do
what they do with a failed Pod.

``ControlPlane`` starts them in a folder of its own and stops them; ``kubeconfig`` is an admin's (a
static token in the ``system:masters`` group; the CA it trusts is the one the API server made for
its own self-signed serving certificate)."""

from __future__ import annotations

import base64
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
from typing import Any, Optional

import yaml

from support.harness.crds import JOBSET_CRD
from support.harness.engine.engine import REPO, EngineProject, endpoints
from support.harness.engine.providers import (
    CLUSTER_CA_VARIABLE,
    CLUSTER_ENDPOINT_VARIABLE,
    KUBERNETES_API_VARIABLE,
    KUBERNETES_TOKEN_VARIABLE,
)
from support.harness.waiting import eventually

KUBE_BIN = REPO / ".engine" / "kube" / "bin"
PROVIDER = KUBE_BIN / "pulumi-resource-kubernetes"
"""The real pulumi-kubernetes provider, built by .ci/kube with the control plane."""
EXEC_CREDENTIAL = {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential"}
TOOLS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "jobset-controller",
    "pulumi-resource-kubernetes",
)
"""What .ci/kube builds: the control plane, and the real Kubernetes provider the engine tier runs on it."""
JOBSET_WEBHOOKS = {
    # name: (path, group, version, resource, operations, mutating), from the kubebuilder markers in
    # jobset v0.12.0's pkg/webhooks/jobset_webhook.go and pod_webhook.go.
    "mjobset.kb.io": (
        "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        "jobset.x-k8s.io",
        "v1alpha2",
        "jobsets",
        ["CREATE"],
        True,
    ),
    "mpod.kb.io": ("/mutate--v1-pod", "", "v1", "pods", ["CREATE"], True),
    "vjobset.kb.io": (
        "/validate-jobset-x-k8s-io-v1alpha2-jobset",
        "jobset.x-k8s.io",
        "v1alpha2",
        "jobsets",
        ["CREATE", "UPDATE"],
        False,
    ),
    "vpod.kb.io": ("/validate--v1-pod", "", "v1", "pods", ["CREATE"], False),
}
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
        self.etcd = ""
        """etcd's client URL, once started."""

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
        self.etcd = f"http://127.0.0.1:{etcd_client}"
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
            "--controllers=job-controller,garbage-collector-controller,serviceaccount-controller",
            "--leader-elect=false",
            "--secure-port=0",
            "--use-service-account-credentials=false",
        )
        self._start_jobset()

    def _start_jobset(self) -> None:
        """The JobSet CRD, the controller manager with its webhook server on a loopback port (a
        self-signed certificate for 127.0.0.1, which the webhook configurations trust), and the
        four webhook configurations pointing at it by URL (in a cluster they name a Service)."""
        folder = self.folder / "jobset"
        certificates = folder / "certificates"
        certificates.mkdir(parents=True)
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
            + ["-keyout", str(certificates / "tls.key"), "-out", str(certificates / "tls.crt")]
            + ["-subj", "/CN=jobset-webhook", "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True,
            capture_output=True,
        )
        crd = yaml.safe_load(JOBSET_CRD.read_text())
        status, answer = self.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        assert status == 201, answer
        _wait(lambda: self._established(crd["metadata"]["name"]), "the JobSet CRD")
        webhook_port, health_port = _free_port(), _free_port()
        (folder / "config.yaml").write_text(
            json.dumps(
                {
                    "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                    "kind": "Configuration",
                    "internalCertManagement": {"enable": False},
                    "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(certificates)},
                    "metrics": {"bindAddress": "0"},
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        self._spawn(
            "jobset-controller", f"--kubeconfig={self.kubeconfig}", f"--config={folder / 'config.yaml'}"
        )
        ca_bundle = base64.b64encode((certificates / "tls.crt").read_bytes()).decode()
        for mutating in (True, False):
            kind = "MutatingWebhookConfiguration" if mutating else "ValidatingWebhookConfiguration"
            webhooks = [
                {
                    "name": name,
                    "clientConfig": {"url": f"https://127.0.0.1:{webhook_port}{path}", "caBundle": ca_bundle},
                    "rules": [
                        {
                            "apiGroups": [group],
                            "apiVersions": [version],
                            "operations": operations,
                            "resources": [resource],
                        }
                    ],
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                }
                for name, (path, group, version, resource, operations, is_mutating) in JOBSET_WEBHOOKS.items()
                if is_mutating == mutating
            ]
            plural = kind.lower() + "s"
            status, answer = self.request(
                "POST",
                f"/apis/admissionregistration.k8s.io/v1/{plural}",
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": kind,
                    "metadata": {"name": "jobset"},
                    "webhooks": webhooks,
                },
            )
            assert status == 201, answer
        _wait(lambda: _ready(f"http://127.0.0.1:{health_port}/readyz"), "the JobSet controller")

    def _established(self, name: str) -> bool:
        _, crd = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = ((crd.get("status") or {}).get("conditions") or []) if isinstance(crd, dict) else []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    def _cluster(self) -> dict[str, Any]:
        # The API server's own self-signed certificate (written to --cert-dir as it starts, with the
        # CA that signed it), trusted as the cluster's CA: clients verify it, as against GKE.
        return {
            "server": self.endpoint,
            "certificate-authority": str(self.folder / "certificates" / "apiserver.crt"),
        }

    def _spawn(self, tool: str, *args: str) -> subprocess.Popen:
        with (self.folder / f"{tool}.log").open("ab") as log:  # the child keeps its own descriptor
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

    def engine_environment(self) -> dict[str, str]:
        """What points an engine project here: the `kubernetes` double's API server and token, and
        the kubeconfig the program's own reads use."""
        return {
            KUBERNETES_API_VARIABLE: self.endpoint,
            KUBERNETES_TOKEN_VARIABLE: TOKEN,
            "KUBECONFIG": str(self.kubeconfig),
        }

    def project_with_the_real_provider(self, folder: Path, programs: str, cloud: Any) -> EngineProject:
        """An engine project whose Kubernetes objects the real pulumi-kubernetes provider writes
        here: the gcp double's GKE cluster names this control plane's endpoint and CA, so the
        stack's own kubeconfig takes the provider here, with gke-gcloud-auth-plugin a script that
        hands out this control plane's token as an ExecCredential."""
        ca = (self.folder / "certificates" / "apiserver.crt").read_bytes()
        project = EngineProject(
            folder,
            {
                **endpoints(*cloud),
                CLUSTER_ENDPOINT_VARIABLE: self.endpoint.removeprefix("https://"),
                CLUSTER_CA_VARIABLE: base64.b64encode(ca).decode(),
                # The program's own reads (recovery's live state) come here too.
                "KUBECONFIG": str(self.kubeconfig),
            },
            programs,
            kubernetes_provider=PROVIDER,
        )
        credential = json.dumps({**EXEC_CREDENTIAL, "status": {"token": TOKEN}})
        plugin = project.plugins / "gke-gcloud-auth-plugin"
        plugin.write_text(f"#!/bin/sh\necho '{credential}'\n")
        plugin.chmod(0o755)
        return project

    def job(self, namespace: str, name: str) -> dict[str, Any]:
        status, job = self.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
        assert status == 200, job
        return dict(job)

    def workloads(self, namespace: str, kind: str = "jobs") -> list[dict[str, Any]]:
        """The namespace's Jobs (``jobs``) or JobSets (``jobsets``), those not being deleted."""
        group = {"jobs": "/apis/batch/v1", "jobsets": "/apis/jobset.x-k8s.io/v1alpha2"}[kind]
        status, answer = self.request("GET", f"{group}/namespaces/{namespace}/{kind}")
        assert status == 200, answer
        return [item for item in answer["items"] if not item["metadata"].get("deletionTimestamp")]

    def workload_names(self, namespace: str, kind: str = "jobs") -> list[str]:
        """The names of ``workloads(namespace, kind)``."""
        return [item["metadata"]["name"] for item in self.workloads(namespace, kind)]

    def uids(self, namespace: str, *resources: str) -> dict[str, str]:
        """``resource/name`` -> uid of the namespace's core objects of those resources
        (``configmaps``, ``serviceaccounts``, ``services``)."""
        found = {}
        for resource in resources:
            status, answer = self.request("GET", f"/api/v1/namespaces/{namespace}/{resource}")
            assert status == 200, answer
            for item in answer["items"]:
                found[f"{resource}/{item['metadata']['name']}"] = item["metadata"]["uid"]
        return found

    def report_failed(self, pod: dict[str, Any], disruption: bool = False) -> tuple[int, Any]:
        """Write ``pod``'s status as a kubelet reports a failed Pod (``failed_pod_status``), through
        the status subresource; the API server's answer."""
        pod = dict(pod, status=failed_pod_status(pod, disruption))
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        return self.request("PUT", f"/api/v1/namespaces/{namespace}/pods/{name}/status", pod)

    def fail_pods_until_the_job_fails(self, namespace: str, job: str, within: float) -> list[tuple[str, str]]:
        """Report each Pending Pod of the Job failed, as a kubelet would, until the Job controller
        marks the Job failed; returns the Job's conditions then."""
        deadline = time.monotonic() + within
        failed: set[str] = set()
        while time.monotonic() < deadline:
            conditions = conditions_of(self.job(namespace, job))
            if any(kind == "Failed" for kind, _ in conditions):
                return conditions
            _, pods = self.request(
                "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3D{job}"
            )
            for pod in pods.get("items", []):
                name = pod["metadata"]["name"]
                if (
                    name in failed
                    or pod["status"].get("phase") != "Pending"
                    or pod["metadata"].get("deletionTimestamp")
                ):
                    continue
                status, answer = self.report_failed(pod)
                if status in (404, 409):  # deleted or changed meanwhile (the controller's): look again
                    continue
                assert status == 200, answer
                failed.add(name)
            time.sleep(0.2)
        raise AssertionError(
            f"the Job did not fail within {within:g} s: {conditions_of(self.job(namespace, job))}"
        )

    def compact_etcd(self) -> int:
        """Compact etcd to its latest revision, as the API server itself does every five minutes
        (``--etcd-compaction-interval``): what was read at an earlier revision (a list's
        continue token) can no longer be read on. Through etcd's JSON gateway (v3 API, the
        ``/v3/kv/range`` and ``/v3/kv/compaction`` of its gRPC-gateway). Returns the revision."""

        def call(path: str, body: dict[str, Any]) -> dict[str, Any]:
            request = urllib.request.Request(self.etcd + path, data=json.dumps(body).encode(), method="POST")
            with urllib.request.urlopen(request, timeout=30) as answer:
                return json.loads(answer.read())

        revision = int(call("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
        call("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

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


def failed_pod_status(pod: dict[str, Any], disruption: bool = False) -> dict[str, Any]:
    """A failed Pod's status as a kubelet reports it: each container terminated with exit code 1
    (a crash), or with 137 and the DisruptionTarget condition a preemption or a drain writes."""
    conditions = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    return {
        "phase": "Failed",
        "conditions": conditions if disruption else [],
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 137 if disruption else 1, "reason": "Error"}},
            }
            for container in pod["spec"]["containers"]
        ],
    }


def conditions_of(item: dict[str, Any]) -> list[tuple[str, str]]:
    """A Job's or JobSet's status conditions, as (type, reason)."""
    return [(c["type"], c.get("reason", "")) for c in (item.get("status") or {}).get("conditions") or []]


def _first_line(process: subprocess.Popen, log: Path) -> str:
    assert process.stdout is not None
    if process.poll() is not None:
        raise RuntimeError(f"etcd ended with {process.returncode}: {log.read_text()[-2000:]}")
    return process.stdout.readline().decode().strip()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _wait(ready: Any, what: str) -> None:
    if not eventually(ready, START_SECONDS, every=0.2):
        raise RuntimeError(f"{what} did not answer within {START_SECONDS:g} s")
