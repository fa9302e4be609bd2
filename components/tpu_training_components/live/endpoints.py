"""Where the live-state clients connect, and with which credentials, decided in one place.

Each Google API client is built on the REST transport (the one a loopback test server speaks),
at the endpoint its environment variable names, if any. A plain ``http://`` endpoint is a local
emulator or test server and is called without credentials; anything else uses Application
Default Credentials. (Kubernetes credentials come from the kubeconfig: ``kube_api``.)
"""

from __future__ import annotations

import os
from typing import Any, Optional

TPU_ENDPOINT_VARIABLE = "TPU_API_ENDPOINT"
"""Overrides the Cloud TPU API endpoint, e.g. ``http://127.0.0.1:8080``."""
GKE_ENDPOINT_VARIABLE = "GKE_API_ENDPOINT"
"""Overrides the GKE API endpoint, e.g. ``http://127.0.0.1:8081``."""


def google_client(client_class: Any, variable: str, endpoint: Optional[str] = None) -> Any:
    """A Google API client of ``client_class`` at ``endpoint``, or the one ``variable`` names, or
    Google's own."""
    from google.auth.credentials import AnonymousCredentials

    endpoint = endpoint or os.environ.get(variable) or None
    options = {"api_endpoint": endpoint} if endpoint else {}
    credentials = AnonymousCredentials() if endpoint and endpoint.startswith("http://") else None
    return client_class(transport="rest", client_options=options, credentials=credentials)


def tpu_client(endpoint: Optional[str] = None) -> Any:
    """A ``tpu_v2.TpuClient``: lists a zone's TPU nodes."""
    from google.cloud import tpu_v2

    return google_client(tpu_v2.TpuClient, TPU_ENDPOINT_VARIABLE, endpoint)


def container_client(endpoint: Optional[str] = None) -> Any:
    """A ``container_v1.ClusterManagerClient``: finds a GKE cluster's endpoint and CA."""
    from google.cloud import container_v1

    return google_client(container_v1.ClusterManagerClient, GKE_ENDPOINT_VARIABLE, endpoint)
