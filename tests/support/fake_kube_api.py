"""Local stand-ins, on loopback, for the two APIs the Job probe uses through real clients:

- ``FakeKubernetesApi``: ``GET /apis/batch/v1/namespaces/NS/jobs`` answering a ``batch/v1``
  JobList, filtered by ``labelSelector`` as the real API server does; plain HTTP or TLS.
- ``FakeGkeApi``: ``GET /v1/projects/P/locations/L/clusters/C`` answering a GKE ``Cluster``.
"""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path
from typing import Any, Optional
from urllib.parse import parse_qs

from tpu_training_components.domain.job_manifests import PART_OF, PART_OF_LABEL

from support.loopback import LoopbackJsonServer, not_found

_JOBS = re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs$")
_CLUSTER = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/clusters/[^/]+)$")


def job(
    name: str,
    *,
    generation: int = 0,
    conditions: tuple[tuple[str, str, str], ...] = (),
    ours: bool = True,
    **status: int,
) -> dict[str, Any]:
    """A Job as the API server returns it; ``conditions`` are (type, status, reason)."""
    labels = {PART_OF_LABEL: PART_OF, "recovery-generation": str(generation)} if ours else {"team": "other"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels, "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}}},
        "status": {
            "conditions": [
                {
                    "type": kind,
                    "status": state,
                    "reason": reason,
                    "message": f"{reason} happened",
                    "lastProbeTime": "2026-11-21T10:00:00Z",
                    "lastTransitionTime": "2026-11-21T10:00:00Z",
                }
                for kind, state, reason in conditions
            ],
            "startTime": "2026-11-20T10:00:00Z",
            **status,
        },
    }


def _selected(item: dict[str, Any], selector: str) -> bool:
    labels = item["metadata"].get("labels", {})
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakeKubernetesApi(LoopbackJsonServer):
    def __init__(self, tls: Optional[tuple[Path, Path]] = None) -> None:
        super().__init__(tls)
        self.jobs: dict[str, list[dict[str, Any]]] = {}

    def add(self, namespace: str, item: dict[str, Any]) -> None:
        item["metadata"]["namespace"] = namespace
        self.jobs.setdefault(namespace, []).append(item)

    def route(self, method: str, path: str, query: str, headers: dict[str, str]) -> tuple[int, Any]:
        match = _JOBS.match(path)
        if match is None:
            return not_found()
        selector = parse_qs(query).get("labelSelector", [""])[0]
        items = [i for i in self.jobs.get(match.group(1), []) if _selected(i, selector)]
        return 200, {
            "apiVersion": "batch/v1",
            "kind": "JobList",
            "metadata": {"resourceVersion": "9"},
            "items": items,
        }

    def kubeconfig(self, folder: Path, user: str = "{}") -> Path:
        """A kubeconfig file pointing at this server (plain HTTP); ``user`` is its user's entry
        (flow-style YAML), no credentials unless given."""
        return kubeconfig_for(self.endpoint, folder, user)


def kubeconfig_for(endpoint: str, folder: Path, user: str = "{}") -> Path:
    """A kubeconfig file pointing at ``endpoint``, with ``user`` as its user's entry."""
    path = folder / "kubeconfig"
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "{endpoint}"}}}}]
users: [{{name: fake, user: {user}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: fake}}}}]
current-context: fake
"""
    )
    return path


class FakeGkeApi(LoopbackJsonServer):
    def __init__(self) -> None:
        super().__init__()
        self.clusters: dict[str, dict[str, Any]] = {}

    def add(self, path: str, endpoint: str, ca_pem: bytes) -> None:
        self.clusters[path] = {
            "name": path.rsplit("/", 1)[-1],
            "endpoint": endpoint,
            "status": "RUNNING",
            "masterAuth": {"clusterCaCertificate": base64.b64encode(ca_pem).decode()},
        }

    def route(self, method: str, path: str, query: str, headers: dict[str, str]) -> tuple[int, Any]:
        match = _CLUSTER.match(path)
        if match is None or match.group(1) not in self.clusters:
            return not_found()
        return 200, self.clusters[match.group(1)]


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made by the openssl command-line tool."""
    cert, key = folder / "server.crt", folder / "server.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert),
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key
