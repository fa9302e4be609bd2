"""Read what a Google Cloud project offers a stack before it is deployed: the caller's
credentials, the project, its enabled APIs, the caller's permissions on it, the TPU types and
software versions of a zone, and the GKE versions of a location. Used by ``python -m
infra.preflight``.

Each function makes its calls with the real client library (REST transport, the endpoint of
``endpoints``), without retries and with a per-request ``timeout``; the caller bounds the whole of
each call with ``deadline.call_with_deadline``. Errors are the client library's own: the caller
says which check they leave unanswered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

from .deadline import MAX_PAGES

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"

MAX_SERVICES_PER_CALL = 30
"""``services:batchGet`` takes at most 30 names (Service Usage API reference, BatchGetServices)."""
MAX_PERMISSIONS_PER_CALL = 100
"""``testIamPermissions`` takes at most 100 permissions (Resource Manager API reference)."""


@dataclass(frozen=True)
class Identity:
    """The Application Default Credentials, refreshed once (so they work), and who they are."""

    credentials: Any
    kind: str
    """What they are, for a person: a service account's email, "user credentials", ..."""
    member: Optional[str]
    """The IAM member to grant roles to (``serviceAccount:...``), when the credentials say."""
    quota_project: Optional[str]


def application_default_credentials(timeout: float) -> Identity:
    """Find the Application Default Credentials (``google.auth.default``) and get a token with
    them. Raises ``google.auth.exceptions.DefaultCredentialsError`` when there are none, and the
    token endpoint's error when they do not work (revoked, expired)."""
    import google.auth
    from google.auth.transport.requests import Request

    credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    if not credentials.valid:  # a file without a current token (gcloud writes none): get one
        credentials.refresh(_TimedRequest(Request(), timeout))
    email = getattr(credentials, "service_account_email", None)
    if isinstance(email, str) and "@" in email:
        kind, member = f"service account {email}", f"serviceAccount:{email}"
    elif type(credentials).__module__ == "google.oauth2.credentials":
        kind, member = "user credentials (gcloud auth application-default login)", None
    else:
        kind, member = f"{type(credentials).__module__}.{type(credentials).__name__}", None
    return Identity(credentials, kind, member, getattr(credentials, "quota_project_id", None))


class _TimedRequest:
    """google-auth's transport with a timeout on every request (its default is two minutes)."""

    def __init__(self, request: Any, timeout: float) -> None:
        self._request, self._timeout = request, timeout

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["timeout"] = self._timeout
        return self._request(*args, **kwargs)


def project_state(client: Any, project: str, timeout: float) -> str:
    """The project's lifecycle state (``ACTIVE``, ``DELETE_REQUESTED``)."""
    found = client.get_project(name=f"projects/{project}", retry=None, timeout=timeout)
    return str(found.state.name)


def api_states(client: Any, project: str, apis: Iterable[str], timeout: float) -> dict[str, str]:
    """Each API's state in the project (``ENABLED``, ``DISABLED``), by API name."""
    names = sorted(set(apis))
    states: dict[str, str] = {}
    for start in range(0, len(names), MAX_SERVICES_PER_CALL):
        chunk = names[start : start + MAX_SERVICES_PER_CALL]
        answer = client.batch_get_services(
            request={
                "parent": f"projects/{project}",
                "names": [f"projects/{project}/services/{a}" for a in chunk],
            },
            retry=None,
            timeout=timeout,
        )
        for service in answer.services:
            states[service.name.rsplit("/", 1)[-1]] = str(service.state.name)
    return states


def granted_permissions(client: Any, project: str, permissions: Iterable[str], timeout: float) -> set[str]:
    """Which of ``permissions`` the caller holds on the project (``testIamPermissions``)."""
    wanted = sorted(set(permissions))
    granted: set[str] = set()
    for start in range(0, len(wanted), MAX_PERMISSIONS_PER_CALL):
        answer = client.test_iam_permissions(
            request={
                "resource": f"projects/{project}",
                "permissions": wanted[start : start + MAX_PERMISSIONS_PER_CALL],
            },
            retry=None,
            timeout=timeout,
        )
        granted.update(answer.permissions)
    return granted


@dataclass(frozen=True)
class TpuOffering:
    """What the Cloud TPU API offers this project in one zone."""

    accelerator_types: frozenset[str]
    runtime_versions: frozenset[str]


def tpu_offering(
    client: Any, project: str, zone: str, timeout: float, max_pages: int = MAX_PAGES
) -> TpuOffering:
    """The accelerator types and TPU software versions of ``zone`` (two list calls)."""
    parent = f"projects/{project}/locations/{zone}"
    types = _all(
        client.list_accelerator_types(parent=parent, retry=None, timeout=timeout),
        "accelerator_types",
        max_pages,
    )
    versions = _all(
        client.list_runtime_versions(parent=parent, retry=None, timeout=timeout),
        "runtime_versions",
        max_pages,
    )
    return TpuOffering(frozenset(t.type_ for t in types), frozenset(v.version for v in versions))


def _all(pager: Any, field: str, max_pages: int) -> list[Any]:
    items: list[Any] = []
    for number, page in enumerate(pager.pages, start=1):
        if number > max_pages:
            raise RuntimeError(f"the list has more than {max_pages} pages")
        items.extend(getattr(page, field))
    return items


def gke_channel_versions(
    client: Any, project: str, location: str, timeout: float
) -> dict[str, tuple[str, ...]]:
    """The GKE versions each release channel offers in ``location`` (``serverConfig``)."""
    config = client.get_server_config(
        name=f"projects/{project}/locations/{location}", retry=None, timeout=timeout
    )
    return {str(channel.channel.name): tuple(channel.valid_versions) for channel in config.channels}
