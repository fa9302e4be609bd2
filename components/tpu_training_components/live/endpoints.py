"""Where the live-state clients connect, and with which credentials, decided in one place.

Each Google API client is built on the REST transport (the one a loopback test server speaks),
at the endpoint its environment variable names, if any. A plain ``http://`` endpoint is a local
emulator or test server and is called without credentials; anything else uses Application
Default Credentials. (Kubernetes credentials come from the kubeconfig: ``kube_api``.)
"""

from __future__ import annotations

import os
from typing import Any, Optional

from .deadline import Deadline

TPU_ENDPOINT_VARIABLE = "TPU_API_ENDPOINT"
"""Overrides the Cloud TPU API endpoint, e.g. ``http://127.0.0.1:8080``."""
GKE_ENDPOINT_VARIABLE = "GKE_API_ENDPOINT"
"""Overrides the GKE API endpoint, e.g. ``http://127.0.0.1:8081``."""
SERVICE_USAGE_ENDPOINT_VARIABLE = "SERVICE_USAGE_API_ENDPOINT"
"""Overrides the Service Usage API endpoint (which APIs a project has enabled)."""
STORAGE_ENDPOINT_VARIABLE = "STORAGE_API_ENDPOINT"
"""Overrides the Cloud Storage JSON API endpoint (reading the checkpoints in a bucket)."""
RESOURCE_MANAGER_ENDPOINT_VARIABLE = "RESOURCE_MANAGER_API_ENDPOINT"
"""Overrides the Resource Manager API endpoint (a project, and the caller's permissions on it)."""


def google_client(
    client_class: Any, variable: str, endpoint: Optional[str] = None, credentials: Any = None
) -> Any:
    """A Google API client of ``client_class`` at ``endpoint``, or the one ``variable`` names, or
    Google's own; with ``credentials`` when given (a caller that has checked them already)."""
    from google.auth.credentials import AnonymousCredentials

    endpoint = endpoint or os.environ.get(variable) or None
    options = {"api_endpoint": endpoint} if endpoint else {}
    if credentials is None and endpoint and endpoint.startswith("http://"):
        credentials = AnonymousCredentials()
    return client_class(transport="rest", client_options=options, credentials=credentials)


def tpu_client(endpoint: Optional[str] = None, credentials: Any = None) -> Any:
    """A ``tpu_v2.TpuClient``: lists a zone's TPU nodes, accelerator types and runtime versions."""
    from google.cloud import tpu_v2

    return google_client(tpu_v2.TpuClient, TPU_ENDPOINT_VARIABLE, endpoint, credentials)


def tpu_nodes_client(endpoint: Optional[str] = None, credentials: Any = None) -> TpuNodesClient:
    """Lists a zone's TPU nodes through the Cloud TPU API's v2 REST surface, whose ``Node``
    carries ``upcomingMaintenance`` (``tpu_api``). Preflight keeps ``tpu_client`` (the generated
    v2 client) for accelerator types and runtime versions."""
    from google.auth.credentials import AnonymousCredentials
    from google.auth.transport.requests import AuthorizedSession

    endpoint = endpoint or os.environ.get(TPU_ENDPOINT_VARIABLE) or TPU_DEFAULT_ENDPOINT
    if credentials is None and endpoint.startswith("http://"):
        credentials = AnonymousCredentials()
    if credentials is None:
        import google.auth

        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    base = endpoint if "://" in endpoint else f"https://{endpoint}"
    return TpuNodesClient(base.rstrip("/"), AuthorizedSession(credentials))


TPU_DEFAULT_ENDPOINT = "tpu.googleapis.com"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class TpuNodesClient:
    """``GET /v2/projects/P/locations/Z/nodes`` over REST, each page parsed by the client
    library's own message (``tpu_v2.ListNodesResponse``, ignoring unknown fields, as its
    generated REST transports do).

    The v2 REST API's ``Node`` has ``upcomingMaintenance`` (discovery document ``tpu.v2.json``,
    revision 20261001; docs/fidelity.md), but google-cloud-tpu 1.28.0's ``tpu_v2`` messages, made
    from the v2 proto, do not: the message drops it, and ``tpu_api`` reads it from the raw body.
    So the call is made here, with a session that is this object's own, and the answer checks
    (``http_answers.checking_answers``) hook it without any private name of the library."""

    def __init__(self, base_url: str, session: Any) -> None:
        self.base_url = base_url
        self.session = session
        """A `requests` session (google-auth's ``AuthorizedSession``)."""

    def list_nodes_page(self, parent: str, page_token: str, timeout: float) -> Any:
        """One page of ``parent``'s nodes (a ``tpu_v2.ListNodesResponse``); raises the
        ``google.api_core`` exception of an HTTP error, as the generated clients do."""
        from google.api_core import exceptions
        from google.cloud import tpu_v2

        response = self.session.get(
            f"{self.base_url}/v2/{parent}/nodes",
            params={"pageToken": page_token} if page_token else None,
            timeout=timeout,
            allow_redirects=False,
        )
        if response.status_code >= 400:
            raise exceptions.from_http_response(response)
        return tpu_v2.ListNodesResponse.from_json(response.content, ignore_unknown_fields=True)


def container_client(endpoint: Optional[str] = None, credentials: Any = None) -> Any:
    """A ``container_v1.ClusterManagerClient``: finds a GKE cluster's endpoint and CA, and the
    versions a location offers."""
    from google.cloud import container_v1

    return google_client(container_v1.ClusterManagerClient, GKE_ENDPOINT_VARIABLE, endpoint, credentials)


def service_usage_client(endpoint: Optional[str] = None, credentials: Any = None) -> Any:
    """A ``service_usage_v1.ServiceUsageClient``: which APIs a project has enabled."""
    from google.cloud import service_usage_v1

    return google_client(
        service_usage_v1.ServiceUsageClient, SERVICE_USAGE_ENDPOINT_VARIABLE, endpoint, credentials
    )


def projects_client(endpoint: Optional[str] = None, credentials: Any = None) -> Any:
    """A ``resourcemanager_v3.ProjectsClient``: a project's state, and which permissions the
    caller holds on it."""
    from google.cloud import resourcemanager_v3

    return google_client(
        resourcemanager_v3.ProjectsClient, RESOURCE_MANAGER_ENDPOINT_VARIABLE, endpoint, credentials
    )


def storage_client(project: str, endpoint: Optional[str] = None, credentials: Any = None) -> Any:
    """A ``google.cloud.storage.Client`` for ``project``: lists the checkpoints in a bucket. (The
    storage library has its own transport, not the REST one of the others; the endpoint and
    credentials are decided the same way.)"""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.storage import Client

    endpoint = endpoint or os.environ.get(STORAGE_ENDPOINT_VARIABLE) or None
    options = {"api_endpoint": endpoint} if endpoint else None
    if credentials is None and endpoint and endpoint.startswith("http://"):
        credentials = AnonymousCredentials()
    return Client(project=project, credentials=credentials, client_options=options)


class TimedRequest:
    """google-auth's `requests` transport (``google.auth.transport.requests.Request``) with the
    time left before ``deadline`` as the timeout of every request it makes (its default is two
    minutes): what a credentials refresh is given, so that a token endpoint that never answers
    cannot outlast a probe's deadline, retries included."""

    def __init__(self, deadline: Deadline) -> None:
        from google.auth.transport.requests import Request

        self.request, self.deadline = Request(), deadline

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["timeout"] = self.deadline.left()
        return self.request(*args, **kwargs)
