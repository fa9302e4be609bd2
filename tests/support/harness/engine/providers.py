"""Doubles of the ``gcp`` and ``kubernetes`` resource providers, for the engine tests: plugin
executables (``pulumi-resource-gcp``, ``pulumi-resource-kubernetes``) that the real Pulumi CLI
starts from PATH and calls over the provider protocol (pulumi/pulumi proto/pulumi/provider.proto:
CheckConfig, DiffConfig, Configure, Check, Diff, Create, Read, Update, Delete, Invoke).

What is the double's and what is the engine's:

- **Replace decisions are the double's.** ``Diff`` answers "replace" exactly where
  ``domain/provider_rules.py`` says the real provider does (``change_impact.provider_replacements``:
  Terraform ForceNew fields for gcp, pulumi-kubernetes' diff.go for Kubernetes objects,
  ``DiffConfig`` for the Kubernetes provider). Everything the engine adds on top — replacement
  triggers, ``replaceOnChanges``, ``deleteBeforeReplace``, ``protect``, ``retainOnDelete``,
  aliases, targets, pending operations, the order of steps, the state file — is the real engine's.
- **No state of its own.** Resources with a loopback fake (TPU VMs in the Cloud TPU API fake,
  buckets and objects in the Cloud Storage emulator, Kubernetes objects in the API server fake)
  are created, read, changed and deleted there, over the APIs' REST surfaces, so what the engine
  deploys is what the recovery probe reads. Other types (networks, IAM, service accounts, node
  pools, ...) have nothing to talk to: their outputs are their inputs plus what the offline plan
  computes for them (``preview.computed_outputs``), and a read returns the state the engine holds.

Where the fakes are comes from the same variables the live readers use (``TPU_API_ENDPOINT``,
``STORAGE_API_ENDPOINT``); Kubernetes objects go to the API server fake ``ENGINE_KUBERNETES_API``
names (the program's own reads find it through ``KUBECONFIG``).

Run as a plugin: ``python -m support.harness.engine.providers gcp|kubernetes ENGINE_ADDRESS``.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Mapping, Optional

import grpc
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import plugin_pb2, provider_pb2, provider_pb2_grpc
from tpu_training_components.domain.change_impact import changed_paths, provider_replacements
from tpu_training_components.domain.provider_rules import (
    kubernetes_provider_replaced,
    plan_facts,
)
from tpu_training_components.domain.wire_values import has_unknown
from tpu_training_components.live.endpoints import STORAGE_ENDPOINT_VARIABLE, TPU_ENDPOINT_VARIABLE
from tpu_training_components.preview import computed_outputs

from support.harness.engine.plugin_server import serve

ASSET_SIGNATURE = "c44067f5952c0a294b673a41bacd8c17"
SIGNATURE_KEY = "4dabf18193072939515e22adb298388d"
SECRET_SIGNATURE = "1b47061264138c4ac30d75fd1eb44270"

PACKAGES = {"gcp": "pulumi_gcp", "kubernetes": "pulumi_kubernetes"}

TPU_VM = "gcp:tpu/v2Vm:V2Vm"
BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_OBJECT = "gcp:storage/bucketObject:BucketObject"
# The Node fields of the Cloud TPU v2 REST API that a V2Vm's inputs carry under the same names
# (one nested field is renamed: ``_node_body``).
_NODE_FIELDS = (
    "acceleratorType",
    "runtimeVersion",
    "description",
    "labels",
    "metadata",
    "tags",
    "schedulingConfig",
    "networkConfig",
    "networkConfigs",
    "serviceAccount",
    "dataDisks",
    "shieldedInstanceConfig",
    "acceleratorConfig",
    "cidrBlock",
)


KUBERNETES_API_VARIABLE = "ENGINE_KUBERNETES_API"
"""The Kubernetes API server the Kubernetes double writes to: the fake (``http://127.0.0.1:PORT``) or
the real one control_plane.py starts (``https://127.0.0.1:PORT``)."""
KUBERNETES_TOKEN_VARIABLE = "ENGINE_KUBERNETES_TOKEN"
"""A bearer token for that server, when it is a real one (control_plane.py)."""
HOLD_VARIABLE = "ENGINE_TPU_CREATE_HOLD"
"""A file: while it exists, the step ``HOLD_AT_VARIABLE`` names waits (writing FILE.started first),
so a test can hold an update in the middle, with the stack locked, or crash it there. At most
``HOLD_SECONDS``."""
HOLD_AT_VARIABLE = "ENGINE_HOLD_AT"
"""Where the hold waits: ``tpu-delete`` (before a node's DELETE), ``tpu-create`` (the default:
before its POST), ``tpu-created`` (after the API made the node, before the engine learns of it),
and the same for Kubernetes objects: ``kube-delete``, ``kube-create``, ``kube-created``."""
HOLD_POINTS = ("tpu-delete", "tpu-create", "tpu-created", "kube-delete", "kube-create", "kube-created")
HOLD_SECONDS = 120.0


def _node_body(inputs: dict[str, Any]) -> dict[str, Any]:
    """The REST ``Node`` a V2Vm's inputs make: pulumi-gcp's ``serviceAccount.scopes`` is the API's
    ``serviceAccount.scope`` (tpu.v2.json's ``ServiceAccount``; the fake checks the body)."""
    body = {key: _unwrapped(inputs[key]) for key in _NODE_FIELDS if key in inputs}
    account = body.get("serviceAccount")
    if isinstance(account, dict) and "scopes" in account:
        body["serviceAccount"] = {**account, "scope": account["scopes"]}
        del body["serviceAccount"]["scopes"]
    return body


def _hold_at(point: str) -> None:
    """Wait while the hold file exists, when the test holds the update at ``point``."""
    if os.environ.get(HOLD_AT_VARIABLE, "tpu-create") == point:
        _hold_while(os.environ.get(HOLD_VARIABLE))


def _hold_while(path: Optional[str]) -> None:
    if not path or not Path(path).exists():
        return
    Path(f"{path}.started").touch()
    deadline = time.monotonic() + HOLD_SECONDS
    while Path(path).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


class ProviderError(Exception):
    """A call the provider could not complete; the engine shows the message and fails the step."""


def plugin_version(package: str) -> str:
    """The version the installed SDK asks the engine for (its pulumi-plugin.json)."""
    # Found, not imported: importing pulumi_gcp takes seconds, and every engine command starts this.
    spec = importlib.util.find_spec(PACKAGES[package])
    assert spec is not None and spec.submodule_search_locations, f"{PACKAGES[package]} is not installed"
    folder = Path(list(spec.submodule_search_locations)[0])
    return str(json.loads((folder / "pulumi-plugin.json").read_text())["version"])


def _plain(struct: Any) -> dict[str, Any]:
    return json_format.MessageToDict(struct) if struct is not None else {}


def _struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(dict(value))
    return message


def _unwrapped(value: Any) -> Any:
    """A value with the engine's secret wrappers taken off (what a provider sends to its API), and
    its whole numbers whole again: the engine's protobuf Struct carries every number as a double,
    and an API server refuses 4.0 where its schema has an integer (a real provider converts by
    its schema; a number with no fraction is an integer in every input this stack declares)."""
    if isinstance(value, dict):
        if value.get(SIGNATURE_KEY) == SECRET_SIGNATURE:
            return _unwrapped(value.get("value"))
        return {k: _unwrapped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrapped(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _endpoint(variable: str, double: str) -> str:
    """The loopback fake the variable names, for the ``double`` to call."""
    endpoint = os.environ.get(variable)
    if not endpoint:
        raise ProviderError(f"{variable} is not set: the {double} double has nothing to call")
    return endpoint.rstrip("/")


def _http(method: str, url: str, body: Optional[Any] = None, token: Optional[str] = None) -> tuple[int, Any]:
    """A JSON request; ``token``: a bearer token (the real API server's). An ``https`` loopback
    server is the control plane's own (control_plane.py): its self-signed certificate is not
    verified."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    context = None
    if url.startswith("https://127.0.0.1"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            raw = answer.read()
            return answer.status, json.loads(raw) if raw else {}
    except urllib.error.HTTPError as error:
        raw = error.read()
        try:
            return error.code, json.loads(raw) if raw else {}
        except ValueError:
            return error.code, {"error": {"message": raw.decode(errors="replace")}}


# ---------------------------------------------------------------------------------------------
# Backends: where each type's resources live
# ---------------------------------------------------------------------------------------------


CLUSTER_ENDPOINT_VARIABLE = "ENGINE_CLUSTER_ENDPOINT"
"""``HOST:PORT`` of a real API server (control_plane.py) that a GKE cluster's ``endpoint`` output
names, with ``CLUSTER_CA_VARIABLE`` (base64 PEM) its ``masterAuth.clusterCaCertificate``: the
stack's kubeconfig then reaches that server, and the real pulumi-kubernetes provider with it."""
CLUSTER_CA_VARIABLE = "ENGINE_CLUSTER_CA"


def _computed(type_: str, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    outputs = computed_outputs(type_, name, inputs)
    if type_ == "gcp:container/cluster:Cluster" and os.environ.get(CLUSTER_ENDPOINT_VARIABLE):
        outputs["endpoint"] = os.environ[CLUSTER_ENDPOINT_VARIABLE]
        outputs["masterAuth"] = dict(
            outputs["masterAuth"], clusterCaCertificate=os.environ[CLUSTER_CA_VARIABLE]
        )
    return outputs


class Backend:
    """A type with nothing to talk to: the engine's state is the resource."""

    def create(
        self, provider: ProviderDouble, type_: str, name: str, inputs: dict[str, Any]
    ) -> tuple[str, dict]:
        identifier = str(inputs.get("name") or name)
        return identifier, {**inputs, **_computed(type_, name, inputs)}

    def read(
        self, provider: ProviderDouble, type_: str, identifier: str, state: dict[str, Any]
    ) -> Optional[dict]:
        return state

    def update(self, provider: ProviderDouble, type_: str, identifier: str, news: dict[str, Any]) -> dict:
        return {**news, **_computed(type_, str(news.get("name") or identifier), news)}

    def delete(self, provider: ProviderDouble, type_: str, identifier: str, state: dict[str, Any]) -> None:
        return None


class TpuVms(Backend):
    """TPU VMs in the Cloud TPU API fake, through the v2 REST surface the real provider calls
    (``projects.locations.nodes``: create with ``nodeId``, get, patch, delete)."""

    @staticmethod
    def _base() -> str:
        return _endpoint(TPU_ENDPOINT_VARIABLE, "TPU")

    def _node_url(self, identifier: str) -> str:
        return f"{self._base()}/v2/{identifier}"

    @staticmethod
    def _outputs(inputs: dict[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
        live = {key: node[key] for key in ("state", "health", "healthDescription") if key in node}
        return {**inputs, "state": "", "health": "", **live}

    def create(
        self, provider: ProviderDouble, type_: str, name: str, inputs: dict[str, Any]
    ) -> tuple[str, dict]:
        _hold_at("tpu-create")
        project = inputs.get("project") or provider.project()
        zone, node_id = (
            inputs.get("zone") or provider.config.get("gcp:config:zone"),
            inputs.get("name") or name,
        )
        body = _node_body(inputs)
        status, answer = _http(
            "POST", f"{self._base()}/v2/projects/{project}/locations/{zone}/nodes?nodeId={node_id}", body
        )
        if status >= 300:
            raise ProviderError(f"creating TPU node {node_id}: {status} {json.dumps(answer)}")
        identifier = f"projects/{project}/locations/{zone}/nodes/{node_id}"
        _hold_at("tpu-created")
        status, node = _http("GET", self._node_url(identifier))
        if status != 200:
            raise ProviderError(f"reading TPU node {node_id} after its creation: {status} {json.dumps(node)}")
        return identifier, self._outputs(inputs, node)

    def read(
        self, provider: ProviderDouble, type_: str, identifier: str, state: dict[str, Any]
    ) -> Optional[dict]:
        status, node = _http("GET", self._node_url(identifier))
        if status == 404:
            return None
        if status != 200:
            raise ProviderError(f"reading TPU node {identifier}: {status} {json.dumps(node)}")
        return self._outputs(state, node)

    def update(self, provider: ProviderDouble, type_: str, identifier: str, news: dict[str, Any]) -> dict:
        # Only what the API updates in place (the others replace: provider_rules.TPU_VM).
        body = {
            key: _unwrapped(news[key]) for key in ("description", "labels", "metadata", "tags") if key in news
        }
        status, answer = _http("PATCH", f"{self._node_url(identifier)}?updateMask={','.join(body)}", body)
        if status >= 300:
            raise ProviderError(f"updating TPU node {identifier}: {status} {json.dumps(answer)}")
        status, node = _http("GET", self._node_url(identifier))
        return self._outputs(news, node if status == 200 else {})

    def delete(self, provider: ProviderDouble, type_: str, identifier: str, state: dict[str, Any]) -> None:
        _hold_at("tpu-delete")
        status, answer = _http("DELETE", self._node_url(identifier))
        if status not in (200, 404):
            raise ProviderError(f"deleting TPU node {identifier}: {status} {json.dumps(answer)}")


class Storage(Backend):
    """Buckets and objects in the Cloud Storage emulator, through google-cloud-storage."""

    @staticmethod
    def _client(provider: ProviderDouble) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        endpoint = _endpoint(STORAGE_ENDPOINT_VARIABLE, "storage")
        return storage.Client(
            project=provider.project(),
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": endpoint},
        )

    def create(
        self, provider: ProviderDouble, type_: str, name: str, inputs: dict[str, Any]
    ) -> tuple[str, dict]:
        client = self._client(provider)
        if type_ == BUCKET:
            bucket_name = str(inputs.get("name") or name)
            client.create_bucket(bucket_name, location=inputs.get("location"))
            return bucket_name, {**inputs, **computed_outputs(type_, bucket_name, inputs)}
        bucket_name, object_name = str(inputs["bucket"]), str(inputs.get("name") or name)
        blob = client.bucket(bucket_name).blob(object_name)
        source = inputs.get("source")
        if isinstance(source, dict) and source.get(SIGNATURE_KEY) == ASSET_SIGNATURE and source.get("path"):
            blob.upload_from_filename(str(source["path"]))
        else:
            blob.upload_from_string(str(_unwrapped(inputs.get("content") or "")))
        return f"{bucket_name}-{object_name}", {**inputs, "name": object_name, "md5hash": blob.md5_hash}

    def read(
        self, provider: ProviderDouble, type_: str, identifier: str, state: dict[str, Any]
    ) -> Optional[dict]:
        client = self._client(provider)
        if type_ == BUCKET:
            return state if client.lookup_bucket(identifier) is not None else None
        blob = client.bucket(str(state["bucket"])).get_blob(str(state["name"]))
        return state if blob is not None else None

    def update(self, provider: ProviderDouble, type_: str, identifier: str, news: dict[str, Any]) -> dict:
        if type_ == BUCKET_OBJECT:
            return self.create(provider, type_, str(news.get("name")), news)[1]
        return {**news, **computed_outputs(type_, identifier, news)}

    def delete(self, provider: ProviderDouble, type_: str, identifier: str, state: dict[str, Any]) -> None:
        from google.api_core.exceptions import NotFound

        client = self._client(provider)
        try:
            if type_ == BUCKET:
                client.bucket(identifier).delete(force=True)
            else:
                client.bucket(str(state["bucket"])).blob(str(state["name"])).delete()
        except NotFound:
            pass


class KubernetesObjects(Backend):
    """Objects in the Kubernetes API server fake ``ENGINE_KUBERNETES_API`` names: created with
    POST to their collection, read with GET, replaced with PUT and deleted with DELETE, at the
    paths the real API server serves (``/api/v1/...`` for the core group, ``/apis/G/V/...``)."""

    @staticmethod
    def _server(provider: ProviderDouble) -> str:
        # The API server fake, named by the test: the provider's kubeconfig names the cluster's
        # endpoint as the gcp double made it up, which no server answers at.
        return _endpoint(KUBERNETES_API_VARIABLE, "Kubernetes")

    @staticmethod
    def _collection(inputs: Mapping[str, Any]) -> str:
        api_version, kind = str(inputs["apiVersion"]), str(inputs["kind"])
        plural = kind.lower() + ("es" if kind.lower().endswith("s") else "s")
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if kind in CLUSTER_SCOPED:
            return f"{prefix}/{plural}"
        namespace = (inputs.get("metadata") or {}).get("namespace") or "default"
        return f"{prefix}/namespaces/{namespace}/{plural}"

    def _url(self, provider: ProviderDouble, inputs: Mapping[str, Any], name: str = "") -> str:
        return self._server(provider) + self._collection(inputs) + (f"/{name}" if name else "")

    def create(
        self, provider: ProviderDouble, type_: str, name: str, inputs: dict[str, Any]
    ) -> tuple[str, dict]:
        body = _unwrapped(copy.deepcopy(inputs))
        body.setdefault("metadata", {}).setdefault("name", name)
        _hold_at("kube-create")
        status, answer = _http("POST", self._url(provider, body), body, _token())
        if status >= 300:
            raise ProviderError(
                f"creating {body['kind']} {body['metadata']['name']}: {status} {json.dumps(answer)}"
            )
        _hold_at("kube-created")
        namespace = answer.get("metadata", {}).get("namespace", "default")
        return f"{namespace}/{answer['metadata']['name']}", {**inputs, **answer}

    def read(
        self, provider: ProviderDouble, type_: str, identifier: str, state: dict[str, Any]
    ) -> Optional[dict]:
        status, answer = _http(
            "GET", self._url(provider, state, identifier.rsplit("/", 1)[-1]), token=_token()
        )
        if status == 404:
            return None
        if status != 200:
            raise ProviderError(f"reading {identifier}: {status} {json.dumps(answer)}")
        return {**state, **answer}

    def update(self, provider: ProviderDouble, type_: str, identifier: str, news: dict[str, Any]) -> dict:
        body = _unwrapped(copy.deepcopy(news))
        status, answer = _http(
            "PUT", self._url(provider, body, identifier.rsplit("/", 1)[-1]), body, _token()
        )
        if status >= 300:
            raise ProviderError(f"updating {identifier}: {status} {json.dumps(answer)}")
        return {**news, **answer}

    def delete(self, provider: ProviderDouble, type_: str, identifier: str, state: dict[str, Any]) -> None:
        _hold_at("kube-delete")
        url = self._url(provider, state, identifier.rsplit("/", 1)[-1])
        # In the background, as pulumi-kubernetes deletes (a Job's own default would orphan its
        # Pods), then awaited until the object is gone, as it awaits a delete: a replacement of
        # the same name is created after.
        status, answer = _http("DELETE", f"{url}?propagationPolicy=Background", token=_token())
        if status not in (200, 202, 404):
            raise ProviderError(f"deleting {identifier}: {status} {json.dumps(answer)}")
        deadline = time.monotonic() + DELETE_SECONDS
        while _http("GET", url, token=_token())[0] != 404:
            if time.monotonic() > deadline:
                raise ProviderError(f"deleting {identifier}: still there after {DELETE_SECONDS:g} s")
            time.sleep(0.1)


CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "PriorityClass",
        "CustomResourceDefinition",
        "ComputeClass",
        "ClusterQueue",
        "ResourceFlavor",
        "AdmissionCheck",
        "ProvisioningRequestConfig",
    }
)
"""Kinds with no namespace: their objects live at ``/api[s]/.../PLURAL/NAME`` (the real API server
answers 404 for them under a namespace). The stack's own: Namespace, GKE's ComputeClass and
Kueue's cluster-wide objects (each CRD's ``scope: Cluster``)."""


def _token() -> Optional[str]:
    return os.environ.get(KUBERNETES_TOKEN_VARIABLE) or None


DELETE_SECONDS = 60.0


_STATE_ONLY = Backend()
_BACKENDS: dict[str, Backend] = {TPU_VM: TpuVms(), BUCKET: Storage(), BUCKET_OBJECT: Storage()}
_KUBERNETES_OBJECTS = KubernetesObjects()


def backend_for(type_: str) -> Backend:
    if type_.startswith("kubernetes:") and not type_.startswith("kubernetes:helm.sh/"):
        return _KUBERNETES_OBJECTS
    return _BACKENDS.get(type_, _STATE_ONLY)


# ---------------------------------------------------------------------------------------------
# The provider protocol
# ---------------------------------------------------------------------------------------------


class ProviderDouble(provider_pb2_grpc.ResourceProviderServicer):
    def __init__(self, package: str) -> None:
        self.package = package
        self.version = plugin_version(package)
        self.config: dict[str, Any] = {}

    def project(self) -> str:
        project = self.config.get("gcp:config:project") or self.config.get("project")
        if not project:
            raise ProviderError("no Google Cloud project: set gcp:project")
        return str(project)

    def facts(self) -> dict[str, Any]:
        """What this provider's configuration decides about its diffs (provider_rules.plan_facts):
        a Kubernetes provider with enableConfigMapMutable updates ConfigMap data in place."""
        if self.package != "kubernetes":
            return {}
        return plan_facts([{key.rsplit(":", 1)[-1]: value for key, value in self.config.items()}])

    def _fail(self, context: Any, error: Exception) -> Any:
        context.abort(grpc.StatusCode.UNKNOWN, str(error))

    # Configuration -----------------------------------------------------------------------------

    def GetPluginInfo(self, request: Any, context: Any) -> Any:
        return plugin_pb2.PluginInfo(version=self.version)

    def CheckConfig(self, request: Any, context: Any) -> Any:
        return provider_pb2.CheckResponse(inputs=request.news)

    def DiffConfig(self, request: Any, context: Any) -> Any:
        olds, news = _plain(request.old_inputs) or _plain(request.olds), _plain(request.news)
        changed = sorted({path.split(".", 1)[0] for path in changed_paths(olds, news)})
        replaces = []
        if self.package == "kubernetes" and kubernetes_provider_replaced(olds, news):
            replaces = [
                key for key in changed if key in ("kubeconfig", "context", "cluster", "clusterIdentifier")
            ]
        return provider_pb2.DiffResponse(
            changes=provider_pb2.DiffResponse.DIFF_SOME if changed else provider_pb2.DiffResponse.DIFF_NONE,
            diffs=changed,
            replaces=replaces,
        )

    def Configure(self, request: Any, context: Any) -> Any:
        self.config = dict(request.variables)
        self.config.update({k: v for k, v in _plain(request.args).items() if not isinstance(v, dict)})
        return provider_pb2.ConfigureResponse(
            acceptSecrets=True, supportsPreview=True, acceptResources=True, acceptOutputs=False
        )

    def Invoke(self, request: Any, context: Any) -> Any:
        context.abort(
            grpc.StatusCode.UNIMPLEMENTED, f"the {self.package} double has no function {request.tok}"
        )

    def Cancel(self, request: Any, context: Any) -> Any:
        return empty_pb2.Empty()

    # Resources ---------------------------------------------------------------------------------

    def Check(self, request: Any, context: Any) -> Any:
        return provider_pb2.CheckResponse(inputs=request.news)

    def Diff(self, request: Any, context: Any) -> Any:
        # As the real providers do, values are compared as values: a secret wrapper that appears
        # or goes is no change (the engine keeps track of secrecy itself).
        olds = _unwrapped(
            _plain(request.old_inputs) if request.HasField("old_inputs") else _plain(request.olds)
        )
        news = _unwrapped(_plain(request.news))
        ignored = list(request.ignoreChanges)
        changed = [
            path
            for path in changed_paths(olds, news)
            if not any(path == i or path.startswith(i + ".") or path.startswith(i + "[") for i in ignored)
        ]
        if not changed:
            return provider_pb2.DiffResponse(changes=provider_pb2.DiffResponse.DIFF_NONE)
        type_ = request.type or request.urn.split("::")[2].split("$")[-1]
        replaced = provider_replacements(type_, news, changed, self.facts())
        top = sorted({path.split(".", 1)[0].split("[", 1)[0] for path in changed})
        replaces = sorted({path.split(".", 1)[0].split("[", 1)[0] for path, _ in replaced})
        return provider_pb2.DiffResponse(
            changes=provider_pb2.DiffResponse.DIFF_SOME, diffs=top, replaces=replaces
        )

    def Create(self, request: Any, context: Any) -> Any:
        inputs = _plain(request.properties)
        type_, name = (
            request.type or request.urn.split("::")[2].split("$")[-1],
            request.name or request.urn.split("::")[-1],
        )
        if request.preview or has_unknown(inputs):
            if not request.preview:
                return self._fail(context, ProviderError(f"{name}: inputs still unknown at create"))
            return provider_pb2.CreateResponse(
                properties=_struct({**inputs, **computed_outputs(type_, name, inputs)})
            )
        try:
            identifier, outputs = backend_for(type_).create(self, type_, name, inputs)
        except Exception as error:  # noqa: BLE001 - a provider reports any failure as the step's error
            return self._fail(context, error)
        return provider_pb2.CreateResponse(id=identifier, properties=_struct(outputs))

    def Read(self, request: Any, context: Any) -> Any:
        state = _plain(request.properties)
        type_ = request.type or request.urn.split("::")[2].split("$")[-1]
        try:
            found = backend_for(type_).read(self, type_, request.id, state)
        except Exception as error:  # noqa: BLE001 - a provider reports any failure as the step's error
            return self._fail(context, error)
        if found is None:
            return provider_pb2.ReadResponse()  # gone: the engine drops it from the state
        inputs = _plain(request.inputs) if request.HasField("inputs") else None
        response = provider_pb2.ReadResponse(id=request.id, properties=_struct(found))
        if inputs is not None:
            response.inputs.CopyFrom(_struct(inputs))
        return response

    def Update(self, request: Any, context: Any) -> Any:
        news = _plain(request.news)
        type_ = request.type or request.urn.split("::")[2].split("$")[-1]
        if request.preview:
            return provider_pb2.UpdateResponse(properties=_struct({**_plain(request.olds), **news}))
        try:
            outputs = backend_for(type_).update(self, type_, request.id, news)
        except Exception as error:  # noqa: BLE001 - a provider reports any failure as the step's error
            return self._fail(context, error)
        return provider_pb2.UpdateResponse(properties=_struct(outputs))

    def Delete(self, request: Any, context: Any) -> Any:
        type_ = request.type or request.urn.split("::")[2].split("$")[-1]
        try:
            backend_for(type_).delete(self, type_, request.id, _plain(request.properties))
        except Exception as error:  # noqa: BLE001 - a provider reports any failure as the step's error
            return self._fail(context, error)
        return empty_pb2.Empty()


def main() -> None:
    # (The engine's address, the last argument, is not used: the doubles log nothing to it.)
    provider = ProviderDouble(sys.argv[1])
    serve(lambda server: provider_pb2_grpc.add_ResourceProviderServicer_to_server(provider, server))


if __name__ == "__main__":
    main()
