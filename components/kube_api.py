"""Read live training Jobs through the Kubernetes API (the official ``kubernetes`` client).

One ``list`` call per namespace, never one per Job. Credentials come from ``KUBECONFIG`` when it
is set; otherwise from the GKE API (``google-cloud-container``: the cluster's endpoint and CA
certificate) and Application Default Credentials (a bearer token). Any failure (no credentials,
HTTP error, time-out, refused connection) is reported per namespace, and the caller keeps every
Job there as it is. A cluster that does not exist yet has no Jobs: that is known, not unknown.
"""

from __future__ import annotations

import base64
import functools
import os
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from .deadline import PROBE_DEADLINE_SECONDS, call_with_deadline
from .job_manifests import PART_OF, PART_OF_LABEL
from .job_recovery import JobCondition, LiveJob, LiveJobSet
from .jobset_manifests import JOBSET_API_VERSION
from .recovery import failure_summary

KUBECONFIG_VARIABLE = "KUBECONFIG"
GKE_ENDPOINT_VARIABLE = "GKE_API_ENDPOINT"
"""Overrides the GKE API endpoint, e.g. ``http://127.0.0.1:8080`` for a test server; a plain
``http://`` endpoint is called without Google credentials."""
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


@dataclass
class LiveJobs:
    """What the cluster said, namespace by namespace."""

    jobs: dict[tuple[str, str], LiveJob] = field(default_factory=dict)
    """(namespace, Job name) -> Job, for every namespace that answered."""
    failures: dict[str, str] = field(default_factory=dict)
    """namespace -> why it could not be read."""
    cluster_absent: bool = False
    """The GKE API says the cluster does not exist (yet): it has no Jobs."""
    source: str = ""
    """Where the credentials came from, for the log."""
    calls: int = 0
    jobsets: dict[tuple[str, str], LiveJobSet] = field(default_factory=dict)
    """(namespace, JobSet name) -> JobSet, for every namespace whose JobSets were listed."""
    jobset_failures: dict[str, str] = field(default_factory=dict)
    """namespace -> why its JobSets could not be read."""


class ClusterAbsent(Exception):
    """The GKE API answered that the cluster does not exist."""


def make_container_client(endpoint: Optional[str] = None) -> Any:
    """A ``container_v1.ClusterManagerClient`` on the REST transport; Application Default
    Credentials unless the endpoint is a plain-HTTP local one."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import container_v1

    endpoint = endpoint or os.environ.get(GKE_ENDPOINT_VARIABLE) or None
    options = {"api_endpoint": endpoint} if endpoint else {}
    credentials = AnonymousCredentials() if endpoint and endpoint.startswith("http://") else None
    return container_v1.ClusterManagerClient(
        transport="rest", client_options=options, credentials=credentials
    )


def _configuration_from_kubeconfig(path: str) -> Any:
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=path, client_configuration=configuration)
    return configuration


def _configuration_from_gke(
    cluster: ClusterRef, container_client: Any, credentials: Any, cleanup: ExitStack, timeout: float
) -> Any:
    import google.auth
    import google.auth.transport.requests
    from google.api_core import exceptions
    from kubernetes import client

    container_client = container_client or make_container_client()
    try:
        described = container_client.get_cluster(name=cluster.path, retry=None, timeout=timeout)
    except exceptions.NotFound:
        raise ClusterAbsent(cluster.path) from None
    if credentials is None:
        credentials, _ = google.auth.default(scopes=[_CLOUD_PLATFORM])
    if not credentials.valid:
        credentials.refresh(google.auth.transport.requests.Request())

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


class MalformedAnswer(Exception):
    """An answer the Kubernetes client accepts but that cannot be matched to our Jobs."""


def _check_answer(namespace: str, jobs: Sequence[LiveJob | LiveJobSet]) -> None:
    """Refuse a list that cannot be matched to our Jobs one to one: read as it is, one of ours
    would look deleted or failed."""
    seen: set[str] = set()
    for index, live in enumerate(jobs):
        if not isinstance(live.name, str) or not live.name:
            raise MalformedAnswer(f"Jobs in {namespace}: item {index} of the answer has no name")
        if live.namespace not in (None, namespace):
            raise MalformedAnswer(f"Jobs in {namespace}: {live.name!r} is in namespace {live.namespace!r}")
        if live.name in seen:
            raise MalformedAnswer(f"Jobs in {namespace}: the answer names Job {live.name!r} twice")
        seen.add(live.name)


def _live_job(job: Any) -> LiveJob:
    status = job.status
    conditions = tuple(
        JobCondition(c.type or "", c.status or "", c.reason or "", c.message or "")
        for c in (status.conditions if status and status.conditions else [])
    )
    return LiveJob(
        name=job.metadata.name,
        namespace=job.metadata.namespace,
        labels=dict(job.metadata.labels or {}),
        conditions=conditions,
        active=(status.active or 0) if status else 0,
        ready=(status.ready or 0) if status else 0,
        succeeded=(status.succeeded or 0) if status else 0,
        failed=(status.failed or 0) if status else 0,
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _live_jobset(item: Any) -> LiveJobSet:
    """A JobSet from the custom-objects API, which answers plain dictionaries."""
    if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict):
        raise MalformedAnswer("a JobSet of the answer is not an object with metadata")
    metadata, spec, status = item["metadata"], item.get("spec") or {}, item.get("status") or {}
    conditions = tuple(
        JobCondition(
            str(c.get("type") or ""),
            str(c.get("status") or ""),
            str(c.get("reason") or ""),
            str(c.get("message") or ""),
        )
        for c in status.get("conditions") or []
        if isinstance(c, dict)
    )
    replicated = [r for r in spec.get("replicatedJobs") or [] if isinstance(r, dict)]
    statuses = [r for r in status.get("replicatedJobsStatus") or [] if isinstance(r, dict)]
    return LiveJobSet(
        name=metadata.get("name"),  # checked by _check_answer
        namespace=metadata.get("namespace"),
        labels={str(k): str(v) for k, v in (metadata.get("labels") or {}).items()},
        conditions=conditions,
        restarts=_int(status.get("restarts")),
        restarts_counted=_int(status.get("restartsCountTowardsMax")),
        slices=sum(_int(r.get("replicas")) for r in replicated),
        ready=sum(_int(r.get("ready")) for r in statuses),
    )


def list_live_jobs(
    cluster: ClusterRef,
    namespaces: Iterable[str],
    *,
    jobset_namespaces: Iterable[str] = (),
    kubeconfig: Optional[str] = None,
    container_client: Any = None,
    credentials: Any = None,
    timeout: float = 15.0,
    deadline: float = PROBE_DEADLINE_SECONDS,
) -> LiveJobs:
    """List this project's Jobs in every namespace, one call per namespace, and its JobSets in
    every one of ``jobset_namespaces``, one more call each.

    ``kubeconfig`` defaults to ``$KUBECONFIG``; without one (or with ``""``), the cluster is
    found through the GKE API. ``container_client`` and ``credentials`` are seams for tests."""
    from kubernetes import client

    namespaces = sorted(set(namespaces))
    jobset_namespaces = sorted(set(jobset_namespaces))
    result = LiveJobs()
    if not namespaces and not jobset_namespaces:
        return result
    kubeconfig = kubeconfig if kubeconfig is not None else os.environ.get(KUBECONFIG_VARIABLE) or None
    with ExitStack() as cleanup:
        try:
            if kubeconfig:
                result.source = f"{KUBECONFIG_VARIABLE}={kubeconfig}"
                configuration = _configuration_from_kubeconfig(kubeconfig)
            else:
                result.source = f"GKE API ({cluster.path}) and Application Default Credentials"
                configuration = call_with_deadline(
                    lambda: _configuration_from_gke(cluster, container_client, credentials, cleanup, timeout),
                    deadline,
                    f"finding {cluster.path}",
                )
        except ClusterAbsent:
            result.cluster_absent = True
            return result
        except Exception as exc:  # noqa: BLE001 - no credentials must never stop or replace anything
            for namespace in namespaces:
                result.failures[namespace] = failure_summary(exc)
            for namespace in jobset_namespaces:
                result.jobset_failures[namespace] = failure_summary(exc)
            return result
        # No automatic retries: a preview must not hang; the next `up` asks again.
        configuration.retries = False
        api_client = cleanup.enter_context(client.ApiClient(configuration))
        batch = client.BatchV1Api(api_client)
        for namespace in namespaces:
            result.calls += 1
            try:
                list_namespace = functools.partial(
                    batch.list_namespaced_job,
                    namespace,
                    label_selector=f"{PART_OF_LABEL}={PART_OF}",
                    _request_timeout=timeout,
                )
                listed = call_with_deadline(list_namespace, deadline, f"listing Jobs in {namespace}")
                jobs = [_live_job(job) for job in listed.items]
                _check_answer(namespace, jobs)
                result.jobs.update(((namespace, live.name), live) for live in jobs)
            except Exception as exc:  # noqa: BLE001 - any failure means "unknown", per namespace
                result.failures[namespace] = failure_summary(exc)
        custom = client.CustomObjectsApi(api_client)
        group, version = JOBSET_API_VERSION.split("/")
        for namespace in jobset_namespaces:
            result.calls += 1
            try:
                list_jobsets = functools.partial(
                    custom.list_namespaced_custom_object,
                    group,
                    version,
                    namespace,
                    "jobsets",
                    label_selector=f"{PART_OF_LABEL}={PART_OF}",
                    _request_timeout=timeout,
                )
                answer = call_with_deadline(list_jobsets, deadline, f"listing JobSets in {namespace}")
                if not isinstance(answer, dict) or not isinstance(answer.get("items"), list):
                    raise MalformedAnswer(f"JobSets in {namespace}: the answer is not a list")
                jobsets = [_live_jobset(item) for item in answer["items"]]
                _check_answer(namespace, jobsets)
                result.jobsets.update(((namespace, live.name), live) for live in jobsets)
            except Exception as exc:  # noqa: BLE001 - any failure means "unknown", per namespace
                # Also when the JobSet CRD is not installed (404): the JobSets are unknown, not gone.
                result.jobset_failures[namespace] = failure_summary(exc)
    return result
