"""A Kubernetes API client for a stack's cluster: from ``KUBECONFIG``, or from the GKE API with
Application Default Credentials (``api_client_for``), with redirects refused and the client
library's own error logging kept out of the probe's output."""

from __future__ import annotations

import base64
import functools
import logging
import os
import tempfile
import threading
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from ..library_internals import rest_session
from .deadline import PROBE_DEADLINE_SECONDS, Deadline, call_with_deadline
from .endpoints import TimedRequest, container_client
from .http_answers import checking_answers, timeouts_of

KUBECONFIG_VARIABLE = "KUBECONFIG"


_CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


@dataclass(frozen=True)
class ClusterRef:
    """Which GKE cluster to ask."""

    project: str
    location: str
    name: str

    @property
    def path(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/clusters/{self.name}"


class ClusterAbsent(Exception):
    """The GKE API answered that the cluster does not exist."""


class CredentialsUnavailable(Exception):
    """The kubeconfig names a way to get credentials that gave none."""


@contextmanager
def _errors_logged_by_kubernetes() -> Iterator[list[str]]:
    """The errors the kubernetes client logs in this thread while the block runs.

    The client logs a failed exec plugin (one that exits non-zero, prints garbage or no token)
    and goes on without credentials (kubernetes 37.0.2, ``config/kube_config.py``,
    ``_load_from_exec_plugin``: ``except Exception as e: logging.error(str(e))``). A cluster
    that then answers an anonymous list is not answering for our Jobs."""
    messages: list[str] = []
    reader = threading.get_ident()

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if (
                record.thread == reader
                and record.levelno >= logging.ERROR
                and "kubernetes" in record.pathname
            ):
                messages.append(record.getMessage())

    handler = Collect()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield messages
    finally:
        root.removeHandler(handler)


def _configuration_from_kubeconfig(path: str) -> Any:
    from kubernetes import client, config

    configuration = client.Configuration()
    with _errors_logged_by_kubernetes() as errors:
        config.load_kube_config(config_file=path, client_configuration=configuration)
    if errors:
        raise CredentialsUnavailable(f"{KUBECONFIG_VARIABLE}={path}: {errors[0].splitlines()[0][:200]}")
    return configuration


def _configuration_from_gke(
    cluster: ClusterRef,
    container_client: Any,
    credentials: Any,
    cleanup: ExitStack,
    timeout: float,
    deadline: Deadline,
) -> Any:
    import google.auth
    from google.api_core import exceptions
    from kubernetes import client

    container_client = container_client or make_container_client()
    try:
        with checking_answers(rest_session(container_client), deadline):
            described = container_client.get_cluster(
                name=cluster.path, retry=None, timeout=deadline.timeout(timeout)
            )
    except exceptions.NotFound as exc:
        if not _google_not_found(exc):
            raise
        raise ClusterAbsent(cluster.path) from None
    if credentials is None:
        credentials, _ = google.auth.default(scopes=[_CLOUD_PLATFORM])
    if not credentials.valid:
        with timeouts_of(deadline):
            credentials.refresh(TimedRequest(deadline))

    # The client wants the cluster's CA certificate as a file; it lives only while we list.
    ca_file = cleanup.enter_context(tempfile.NamedTemporaryFile("wb", suffix=".crt"))
    ca_file.write(base64.b64decode(described.master_auth.cluster_ca_certificate))
    ca_file.flush()

    configuration = client.Configuration()
    configuration.host = f"https://{described.endpoint}"
    configuration.ssl_ca_cert = ca_file.name
    configuration.api_key = {"authorization": credentials.token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    return configuration


def _google_not_found(exc: Any) -> bool:
    """Whether a 404 is Google's own "no such cluster": a JSON error whose status is NOT_FOUND
    (google.rpc.Status in REST). A 404 page of a proxy or of a wrong endpoint says nothing
    about the cluster, and read as "absent" it would make every Job look gone."""
    response = getattr(exc, "response", None)
    try:
        error = response.json()["error"] if response is not None else None
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(error, dict) and error.get("status") == "NOT_FOUND"


def _refuse_redirects(api_client: Any) -> None:
    """urllib3's PoolManager follows a redirect unless each request says otherwise (``urlopen``'s
    ``redirect=True``), and the kubernetes client never says: the answer of wherever a redirect
    points would be read as the cluster's. Unfollowed, a 3xx fails the client's check for 2xx."""
    pool = api_client.rest_client.pool_manager
    pool.request = functools.partial(pool.request, redirect=False)


def api_client_for(
    cluster: ClusterRef,
    cleanup: ExitStack,
    *,
    kubeconfig: Optional[str] = None,
    container_client: Any = None,
    credentials: Any = None,
    timeout: float = 15.0,
    deadline: float = PROBE_DEADLINE_SECONDS,
) -> tuple[Any, str]:
    """An authenticated ``kubernetes.client.ApiClient`` for ``cluster``, and where its
    credentials came from (for the log); it lives, with the CA file it may need, until
    ``cleanup`` closes. ``kubeconfig`` defaults to ``$KUBECONFIG``; without one (or with ``""``)
    the cluster is found through the GKE API within ``deadline``. The client makes no automatic
    retries and follows no redirect. Raises ``ClusterAbsent`` when the GKE API says the cluster
    does not exist, and whatever the credentials' loading raised otherwise."""
    from kubernetes import client

    kubeconfig = kubeconfig if kubeconfig is not None else os.environ.get(KUBECONFIG_VARIABLE) or None
    if kubeconfig:
        source = f"{KUBECONFIG_VARIABLE}={kubeconfig}"
        # Reading it may wait for ever, and the Kubernetes client has no timeout for it:
        # a FIFO, a slow network file system, an exec plugin (a credential helper) that
        # hangs. The one wait of a probe in a thread of its own (call_with_deadline).
        configuration = call_with_deadline(
            functools.partial(_configuration_from_kubeconfig, kubeconfig), deadline, f"loading {source}"
        )
    else:
        source = f"GKE API ({cluster.path}) and Application Default Credentials"
        finding = Deadline(deadline, f"finding {cluster.path}")
        configuration = _configuration_from_gke(
            cluster, container_client, credentials, cleanup, timeout, finding
        )
    # No automatic retries: a preview must not hang; the next `up` asks again.
    configuration.retries = False
    api_client = cleanup.enter_context(client.ApiClient(configuration))
    _refuse_redirects(api_client)
    return api_client, source


make_container_client = container_client
"""A ``container_v1.ClusterManagerClient`` (``endpoints.container_client``)."""
