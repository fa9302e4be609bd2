"""The loopback fakes the engine tests deploy into: the read-only fakes every other test uses, plus
the writes a provider makes (create, get one, patch, delete), so the provider doubles keep no
state of their own and the recovery probe reads what the engine deployed.

- ``CloudTpuApi``: ``FakeTpuApi`` and the v2 REST calls of ``projects.locations.nodes`` that
  pulumi-gcp's V2Vm makes: ``POST .../nodes?nodeId=N`` (a finished long-running Operation whose
  ``response`` is the Node), ``GET``/``PATCH``/``DELETE .../nodes/N``. A created node is READY and
  HEALTHY, as a node is once its create operation is done. ``refuse_creates`` makes the next
  creates fail as a stockout does. It also serves ``projects.locations.queuedResources`` at v2 and
  at v2alpha1 (flex-start exists only there): ``POST ...?queuedResourceId=Q`` (a finished
  Operation whose ``response`` is the QueuedResource), ``GET`` one or the list, ``DELETE``
  (``force=true`` deletes its nodes first; without it, a request whose nodes live and that is not
  ACCEPTED, FAILED or SUSPENDED is refused, as the API reference says). A request's life is the
  test's to drive (``grant``, ``suspend``, ``fail_queued``): created, it waits
  (WAITING_FOR_RESOURCES) unless ``capacity`` says its zone has room, and then it is ACTIVE with
  its nodes READY, each carrying ``queuedResource``. Both versions serve the same requests, each
  in its own schema (AIP-185: a version is a view of the same resources): at v2 a request shows
  no ``provisioningModel`` or ``runDuration`` (v2alpha1 fields) and its group as
  ``multisliceParams``; at v2alpha1 the group is ``multiNodeParams``.
- ``KubernetesApi``: ``FakeJobSetApi`` and the object writes pulumi-kubernetes makes: ``POST`` to
  a namespaced collection, ``GET``/``PUT``/``DELETE`` of one object, for any kind. Jobs and
  JobSets go into the fake's own lists (so its lists and watches serve them); other kinds are kept
  by path. Each stored object gets a ``uid``, a ``resourceVersion`` and a ``creationTimestamp``.
"""

from __future__ import annotations

import copy
import json
import re
import time
import uuid
from typing import Any, Optional

from support.fakes.fake_kube_api import FakeJobSetApi
from support.fakes.fake_tpu_api import FakeTpuApi

_NODES = re.compile(r"^/v2/projects/([^/]+)/locations/([^/]+)/nodes$")
_NODE = re.compile(r"^/v2/projects/([^/]+)/locations/([^/]+)/nodes/([^/]+)$")
_OPERATION = re.compile(r"^/(?:v2|v2alpha1)/(projects/[^/]+/locations/[^/]+/operations/[^/]+)$")
_QUEUED = re.compile(r"^/(v2|v2alpha1)/projects/([^/]+)/locations/([^/]+)/queuedResources(?:/([^/]+))?$")
_OBJECTS = re.compile(r"^(/api/v1|/apis/[^/]+/[^/]+)/namespaces/([^/]+)/([^/]+)(?:/([^/]+))?$")
_CLUSTER_OBJECTS = re.compile(r"^(/api/v1|/apis/[^/]+/[^/]+)/([^/]+)(?:/([^/]+))?$")
CREATED_AT = "2026-11-28T09:00:00Z"


def _error(code: int, status: str, message: str) -> tuple[int, Any]:
    """An error in the shape every Google REST API answers (google.rpc.Status)."""
    return code, {"error": {"code": code, "message": message, "status": status}}


class CloudTpuApi(FakeTpuApi):
    APIS = (("tpu", "v2"), ("tpu", "v2alpha1"))

    def __init__(self) -> None:
        super().__init__()
        self.refuse_creates = 0
        """Refuse this many creates from now on as a stockout does (RESOURCE_EXHAUSTED)."""
        self.queued: dict[str, dict[str, dict[str, Any]]] = {}
        """zone -> queued resource id -> the QueuedResource as the API keeps it (its version too)."""
        self.capacity: dict[str, bool] = {}
        """zone -> whether a new request there is granted at once (default: it waits)."""
        self.unavailable_zones: set[str] = set()
        """Zones whose queued resources are answered 503 UNAVAILABLE."""
        self.unfinished_polls: Optional[int] = 0
        """Operations from now on are done only after this many polls (None: never)."""
        self.unfinished_only = ""
        """Only operations whose name starts with this (``create-``, ``delete-``) are held so."""
        self.pending: dict[str, list[Any]] = {}
        """operation name -> [polls left, the finished operation]."""

    def node(self, zone: str, name: str) -> Optional[dict[str, Any]]:
        return next((n for n in self.nodes.get(zone, []) if n["name"] == name), None)

    def set_state(self, zone: str, name: str, state: str, **fields: Any) -> None:
        """What the TPU service does to a node: preempts it (PREEMPTED), and so on."""
        node = self.node(zone, name)
        assert node is not None, f"no node {name} in {zone}"
        node.update(state=state, **fields)

    # --- queued resources ---------------------------------------------------------------------

    def queued_resource(self, zone: str, name: str) -> Optional[dict[str, Any]]:
        return self.queued.get(zone, {}).get(name)

    def _queued_nodes(self, zone: str, name: str) -> list[dict[str, Any]]:
        return [
            n
            for n in self.nodes.get(zone, [])
            if n.get("queuedResource", "").endswith(f"/queuedResources/{name}")
        ]

    def grant(self, zone: str, name: str) -> None:
        """Capacity came: the request is ACTIVE and its nodes READY (named as ``nodeId``, or
        ``nodeIdPrefix-0`` ... for several), each with the node spec's fields."""
        request = self.queued_resource(zone, name)
        assert request is not None and request["state"]["state"] in ("WAITING_FOR_RESOURCES", "ACCEPTED"), (
            request
        )
        (spec,) = request["tpu"]["nodeSpec"]
        group = spec.get("multisliceParams") or spec.get("multiNodeParams")
        ids = (
            [spec["nodeId"]]
            if group is None
            else [f"{group.get('nodeIdPrefix', name)}-{i}" for i in range(group["nodeCount"])]
        )
        for node_id in ids:
            self.add(zone, node_id, "READY", health="HEALTHY", queuedResource=request["name"], **spec["node"])
        request["state"] = {"state": "ACTIVE"}

    def suspend(self, zone: str, name: str, initiator: str = "SERVICE") -> None:
        """The service (Spot capacity taken back, a flex-start run at its end) or a person
        deletes its nodes: SUSPENDED."""
        request = self.queued_resource(zone, name)
        assert request is not None, name
        for node in self._queued_nodes(zone, name):
            self.nodes[zone].remove(node)
        request["state"] = {"state": "SUSPENDED", "stateInitiator": initiator}

    def fail_queued(self, zone: str, name: str, code: int, message: str) -> None:
        request = self.queued_resource(zone, name)
        assert request is not None, name
        request["state"] = {"state": "FAILED", "failedData": {"error": {"code": code, "message": message}}}

    @staticmethod
    def _view(request: dict[str, Any], version: str) -> dict[str, Any]:
        """``request`` as API ``version`` shows it (see the module's docstring)."""
        shown = copy.deepcopy(request)
        group, other = (
            ("multisliceParams", "multiNodeParams")
            if version == "v2"
            else ("multiNodeParams", "multisliceParams")
        )
        for spec in shown.get("tpu", {}).get("nodeSpec", []):
            if other in spec:
                spec[group] = spec.pop(other)
        if version == "v2":
            shown.pop("provisioningModel", None)
            shown.pop("runDuration", None)
        return shown

    def _queued(self, method: str, path: str, query: str) -> tuple[int, Any]:
        match = _QUEUED.match(path)
        assert match is not None
        version, project, zone, name = match.groups()
        params = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
        kept = self.queued.setdefault(zone, {})
        if zone in self.unavailable_zones:
            return _error(503, "UNAVAILABLE", "The service is currently unavailable.")
        if name is None and method == "GET":
            found = [self._view(r, version) for r in kept.values()]
            return 200, {"queuedResources": found} if found else {}
        if name is None and method == "POST":
            name = params.get("queuedResourceId", "")
            if not name:
                return _error(400, "INVALID_ARGUMENT", "queuedResourceId is required")
            if name in kept:
                return _error(409, "ALREADY_EXISTS", f"queued resource {name} already exists")
            request = json.loads(self.bodies[-1] or b"{}")
            request.update(
                name=f"projects/{project}/locations/{zone}/queuedResources/{name}",
                createTime=self.now(),
                state={"state": "WAITING_FOR_RESOURCES"},
            )
            kept[name] = request
            if self.capacity.get(zone):
                self.grant(zone, name)
            return 200, self._operation(
                project, zone, f"create-{name}", copy.deepcopy(request), version, "QueuedResource"
            )
        request = kept.get(name or "")
        if request is None:
            return _error(404, "NOT_FOUND", f"Resource '{path[len(version) + 2 :]}' was not found")
        if method == "GET":
            return 200, self._view(request, version)
        if method == "DELETE":
            nodes = self._queued_nodes(zone, name or "")
            force = params.get("force", "").lower() == "true"
            if nodes and not force and request["state"]["state"] not in ("ACCEPTED", "FAILED", "SUSPENDED"):
                return _error(
                    400,
                    "FAILED_PRECONDITION",
                    f"queued resource {name} has nodes; delete them first or delete with force",
                )
            for node in nodes:
                self.nodes[zone].remove(node)
            del kept[name or ""]
            return 200, self._operation(project, zone, f"delete-{name}", {}, version, "QueuedResource")
        return _error(405, "METHOD_NOT_ALLOWED", f"{method} {path}")

    @staticmethod
    def now() -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    # --- nodes ----------------------------------------------------------------------------------

    def route(self, method: str, path: str, query: str, headers: dict[str, str]) -> tuple[int, Any]:
        if _QUEUED.match(path) is not None:
            return self._queued(method, path, query)
        operation = _OPERATION.match(path)
        if operation is not None and method == "GET":
            return self._poll(operation.group(1))
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

    def _operation(
        self,
        project: str,
        zone: str,
        name: str,
        response: dict[str, Any],
        version: str = "v2",
        kind: str = "Node",
    ) -> dict[str, Any]:
        """A long-running Operation: done at once, or, while ``unfinished_polls`` is set, not
        done until polled (``GET .../operations/NAME``) that many times (``None``: never), those
        named as ``unfinished_only`` begins."""
        operation = {
            "name": f"projects/{project}/locations/{zone}/operations/{name}",
            "done": True,
            "response": {"@type": f"type.googleapis.com/google.cloud.tpu.{version}.{kind}", **response},
        }
        if self.unfinished_polls == 0 or not name.startswith(self.unfinished_only):
            return operation
        self.pending[operation["name"]] = [self.unfinished_polls, operation]
        return {"name": operation["name"], "done": False}

    def _poll(self, name: str) -> tuple[int, Any]:
        if name not in self.pending:
            return _error(404, "NOT_FOUND", f"Resource '{name}' was not found")
        left, operation = self.pending[name]
        if left is not None:
            left -= 1
            self.pending[name][0] = left
        if left is None or left > 0:
            return 200, {"name": name, "done": False}
        del self.pending[name]
        return 200, operation


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
