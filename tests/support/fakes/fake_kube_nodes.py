"""The Kubernetes API's node list, on loopback, for ``kube_api.list_pool_nodes``: a
``FakeKubernetesApi`` that also serves ``GET /api/v1/nodes`` as a ``v1`` NodeList, filtered by
``labelSelector`` as the API server does (``key in (a,b)`` included).

``gke_node`` makes a node as GKE labels and taints it around host maintenance (GKE
1.31.1-gke.2008000 and later; tests/recovery/test_maintenance_notices.py cites the sources)."""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import parse_qs

from support.fakes.fake_kube_api import FakeKubernetesApi, _selected


def gke_node(
    name: str, pool: str, *, labels: Optional[dict[str, str]] = None, taints: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A TPU node of GKE pool ``pool``; ``taints`` are keys, each with the NoSchedule effect."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "cloud.google.com/gke-nodepool": pool,
                "cloud.google.com/gke-tpu-topology": "4x4",
                **(labels or {}),
            },
            "resourceVersion": "11",
        },
        "spec": {
            "taints": [
                {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"},
                *({"key": key, "effect": "NoSchedule"} for key in taints),
            ]
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


class FakeNodeApi(FakeKubernetesApi):
    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[dict[str, Any]] = []
        self.node_selectors: list[str] = []
        """The label selector of every node list call."""

    def route(self, method: str, path: str, query: str, headers: dict[str, str]) -> tuple[int, Any]:
        if path != "/api/v1/nodes":
            return super().route(method, path, query, headers)
        selector = parse_qs(query).get("labelSelector", [""])[0]
        self.node_selectors.append(selector)
        items = [node for node in self.nodes if _selected(node, selector)]
        return 200, {
            "apiVersion": "v1",
            "kind": "NodeList",
            "metadata": {"resourceVersion": "12"},
            "items": items,
        }
