"""The loopback fakes the engine tests deploy into: the read-only fakes every other test uses, plus
the writes a provider makes (create, get one, patch, delete), so the provider doubles keep no
state of their own and the recovery probe reads what the engine deployed.

- ``CloudTpuApi``: ``FakeTpuApi`` and the v2 REST calls of ``projects.locations.nodes`` that
  pulumi-gcp's V2Vm makes: ``POST .../nodes?nodeId=N`` (a finished long-running Operation whose
  ``response`` is the Node), ``GET``/``PATCH``/``DELETE .../nodes/N``. A created node is READY and
  HEALTHY, as a node is once its create operation is done. ``refuse_creates`` makes the next
  creates fail as a stockout does.
- ``KubernetesApi``: ``FakeJobSetApi`` and the object writes pulumi-kubernetes makes: ``POST`` to
  a namespaced collection, ``GET``/``PUT``/``DELETE`` of one object, for any kind. Jobs and
  JobSets go into the fake's own lists (so its lists and watches serve them); other kinds are kept
  by path. Each stored object gets a ``uid``, a ``resourceVersion`` and a ``creationTimestamp``.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from typing import Any, Optional

from support.fakes.fake_kube_api import FakeJobSetApi
from support.fakes.fake_tpu_api import FakeTpuApi

_NODES = re.compile(r"^/v2/projects/([^/]+)/locations/([^/]+)/nodes$")
_NODE = re.compile(r"^/v2/projects/([^/]+)/locations/([^/]+)/nodes/([^/]+)$")
_OBJECTS = re.compile(r"^(/api/v1|/apis/[^/]+/[^/]+)/namespaces/([^/]+)/([^/]+)(?:/([^/]+))?$")
_CLUSTER_OBJECTS = re.compile(r"^(/api/v1|/apis/[^/]+/[^/]+)/([^/]+)(?:/([^/]+))?$")
CREATED_AT = "2026-11-28T09:00:00Z"


def _error(code: int, status: str, message: str) -> tuple[int, Any]:
    """An error in the shape every Google REST API answers (google.rpc.Status)."""
    return code, {"error": {"code": code, "message": message, "status": status}}


class CloudTpuApi(FakeTpuApi):
    def __init__(self) -> None:
        super().__init__()
        self.refuse_creates = 0
        """Refuse this many creates from now on as a stockout does (RESOURCE_EXHAUSTED)."""

    def node(self, zone: str, name: str) -> Optional[dict[str, Any]]:
        return next((n for n in self.nodes.get(zone, []) if n["name"] == name), None)

    def set_state(self, zone: str, name: str, state: str, **fields: Any) -> None:
        """What the TPU service does to a node: preempts it (PREEMPTED), and so on."""
        node = self.node(zone, name)
        assert node is not None, f"no node {name} in {zone}"
        node.update(state=state, **fields)

    def route(self, method: str, path: str, query: str, headers: dict[str, str]) -> tuple[int, Any]:
        collection, one = _NODES.match(path), _NODE.match(path)
        if collection is not None and method == "POST":
            project, zone = collection.groups()
            return self._create(project, zone, query)
        if one is None:
            return super().route(method, path, query, headers)
        project, zone, name = one.groups()
        node = self.node(zone, name)
        if node is None:
            return _error(404, "NOT_FOUND", f"Resource '{path[4:]}' was not found")
        full = dict(node, name=f"projects/{project}/locations/{zone}/nodes/{name}")
        if method == "GET":
            return 200, full
        if method == "DELETE":
            self.nodes[zone].remove(node)
            return 200, self._operation(project, zone, f"delete-{name}", {})
        if method == "PATCH":
            node.update(json.loads(self.bodies[-1] or b"{}"))
            return 200, self._operation(project, zone, f"update-{name}", dict(node, name=full["name"]))
        return _error(405, "METHOD_NOT_ALLOWED", f"{method} {path}")

    def _create(self, project: str, zone: str, query: str) -> tuple[int, Any]:
        name = dict(part.split("=", 1) for part in query.split("&") if "=" in part).get("nodeId", "")
        if not name:
            return _error(400, "INVALID_ARGUMENT", "nodeId is required")
        if self.node(zone, name) is not None:
            return _error(409, "ALREADY_EXISTS", f"node {name} already exists")
        if self.refuse_creates:
            self.refuse_creates -= 1
            return _error(429, "RESOURCE_EXHAUSTED", f"There is no more capacity in the zone {zone!r}")
        body = json.loads(self.bodies[-1] or b"{}")
        body.pop("name", None)
        self.add(zone, name, "READY", health="HEALTHY", **body)
        node = dict(self.node(zone, name) or {}, name=f"projects/{project}/locations/{zone}/nodes/{name}")
        return 200, self._operation(project, zone, f"create-{name}", node)

    @staticmethod
    def _operation(project: str, zone: str, name: str, response: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": f"projects/{project}/locations/{zone}/operations/{name}",
            "done": True,
            "response": {"@type": "type.googleapis.com/google.cloud.tpu.v2.Node", **response},
        }


def _kubernetes_error(code: int, reason: str, message: str) -> tuple[int, Any]:
    """A metav1.Status failure, as the API server answers."""
    return code, {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class KubernetesApi(FakeJobSetApi):
    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[str, dict[str, Any]] = {}
        """Objects of kinds the read-only fake does not list, by their path."""

    def _listed(self, plural: str) -> bool:
        return plural in ("jobs", "jobsets")

    def stored(self, plural: str, namespace: str, name: str) -> Optional[dict[str, Any]]:
        if self._listed(plural):
            items = self.jobs if plural == "jobs" else self.jobsets
            return next((i for i in items.get(namespace, []) if i["metadata"]["name"] == name), None)
        return next(
            (o for p, o in self.objects.items() if p.endswith(f"/namespaces/{namespace}/{plural}/{name}")),
            None,
        )

    def route(self, method: str, path: str, query: str, headers: dict[str, str]) -> tuple[int, Any]:
        match = _OBJECTS.match(path)
        if match is None:
            cluster_wide = _CLUSTER_OBJECTS.match(path)
            if cluster_wide is not None and (method != "GET" or path in self.objects):
                return self._cluster_wide(method, path, cluster_wide.group(2), cluster_wide.group(3))
            return super().route(method, path, query, headers)
        if method == "GET" and match.group(4) is None:
            return super().route(method, path, query, headers)
        prefix, namespace, plural, name = match.groups()
        if method == "POST" and name is None:
            item = json.loads(self.bodies[-1] or b"{}")
            name = item.get("metadata", {}).get("name", "")
            if self.stored(plural, namespace, name) is not None:
                return _kubernetes_error(409, "AlreadyExists", f'{plural} "{name}" already exists')
            item.setdefault("metadata", {}).update(
                uid=str(uuid.uuid4()), creationTimestamp=CREATED_AT, namespace=namespace
            )
            self._store(f"{prefix}/namespaces/{namespace}/{plural}/{name}", plural, namespace, item)
            return 201, copy.deepcopy(self.stored(plural, namespace, name))
        current = self.stored(plural, namespace, name or "")
        if current is None:
            return _kubernetes_error(404, "NotFound", f'{plural} "{name}" not found')
        if method == "GET":
            return 200, copy.deepcopy(current)
        if method == "PUT":
            item = json.loads(self.bodies[-1] or b"{}")
            item["metadata"].update(
                uid=current["metadata"]["uid"], creationTimestamp=current["metadata"]["creationTimestamp"]
            )
            item.setdefault("status", current.get("status"))
            self._store(path, plural, namespace, item)
            return 200, copy.deepcopy(self.stored(plural, namespace, name or ""))
        if method == "DELETE":
            if self._listed(plural):
                self.remove(plural, namespace, name or "")
            else:
                del self.objects[path]
            return 200, {"apiVersion": "v1", "kind": "Status", "status": "Success"}
        return _kubernetes_error(405, "MethodNotAllowed", f"{method} {path}")

    def _cluster_wide(self, method: str, path: str, plural: str, name: Optional[str]) -> tuple[int, Any]:
        """A cluster-scoped object (a Namespace, a ComputeClass, Kueue's ClusterQueue...), kept by
        its path: created with POST to its collection, then read, replaced and deleted there."""
        if method == "POST" and name is None:
            item = json.loads(self.bodies[-1] or b"{}")
            name = item.get("metadata", {}).get("name", "")
            if f"{path}/{name}" in self.objects:
                return _kubernetes_error(409, "AlreadyExists", f'{plural} "{name}" already exists')
            item.setdefault("metadata", {}).update(uid=str(uuid.uuid4()), creationTimestamp=CREATED_AT)
            self._store(f"{path}/{name}", plural, "", item)
            return 201, copy.deepcopy(item)
        current = self.objects.get(path)
        if current is None or name is None:
            return _kubernetes_error(404, "NotFound", f'{plural} "{name}" not found')
        if method == "GET":
            return 200, copy.deepcopy(current)
        if method == "PUT":
            item = json.loads(self.bodies[-1] or b"{}")
            item["metadata"].update(uid=current["metadata"]["uid"], creationTimestamp=CREATED_AT)
            self._store(path, plural, "", item)
            return 200, copy.deepcopy(item)
        if method == "DELETE":
            del self.objects[path]
            return 200, {"apiVersion": "v1", "kind": "Status", "status": "Success"}
        return _kubernetes_error(405, "MethodNotAllowed", f"{method} {path}")

    def _store(self, path: str, plural: str, namespace: str, item: dict[str, Any]) -> None:
        if self._listed(plural):
            self.put(plural, namespace, item)
        else:
            self.revision += 1
            item["metadata"]["resourceVersion"] = str(self.revision)
            self.objects[path] = item
