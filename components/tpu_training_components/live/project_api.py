"""Read what a Google Cloud project offers a stack before it is deployed: the caller's
credentials, the project, its enabled APIs, the caller's permissions on it, the TPU types and
software versions of a zone, and the GKE versions of a location. Used by ``python -m
tpu-training preflight``.

Each function makes its calls with the real client library (REST transport, the endpoint of
``endpoints``), without retries, all of them within the ``Deadline`` it is given: each request
waits at most the time left, and each answer is checked and read against it (``http_answers``).
Errors are the client library's own, or ``DeadlineExceeded``: the caller says which check they
leave unanswered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

from ..library_internals import rest_session
from .deadline import MAX_PAGES, Deadline
from .endpoints import TimedRequest
from .http_answers import checking_answers, timeouts_of

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


def application_default_credentials(deadline: Deadline) -> Identity:
    """Find the Application Default Credentials (``google.auth.default``) and get a token with
    them. Raises ``google.auth.exceptions.DefaultCredentialsError`` when there are none, and the
    token endpoint's error when they do not work (revoked, expired)."""
    import google.auth

    with timeouts_of(deadline):
        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        if not credentials.valid:  # a file without a current token (gcloud writes none): get one
            credentials.refresh(TimedRequest(deadline))
    email = getattr(credentials, "service_account_email", None)
    if isinstance(email, str) and "@" in email:
        kind, member = f"service account {email}", f"serviceAccount:{email}"
    elif type(credentials).__module__ == "google.oauth2.credentials":
        kind, member = "user credentials (gcloud auth application-default login)", None
    else:
        kind, member = f"{type(credentials).__module__}.{type(credentials).__name__}", None
    return Identity(credentials, kind, member, getattr(credentials, "quota_project_id", None))


def project_state(client: Any, project: str, deadline: Deadline) -> str:
    """The project's lifecycle state (``ACTIVE``, ``DELETE_REQUESTED``)."""
    with checking_answers(rest_session(client), deadline):
        found = client.get_project(name=f"projects/{project}", retry=None, timeout=deadline.left())
    return str(found.state.name)


def api_states(client: Any, project: str, apis: Iterable[str], deadline: Deadline) -> dict[str, str]:
    """Each API's state in the project (``ENABLED``, ``DISABLED``), by API name."""
    names = sorted(set(apis))
    states: dict[str, str] = {}
    for start in range(0, len(names), MAX_SERVICES_PER_CALL):
        chunk = names[start : start + MAX_SERVICES_PER_CALL]
        with checking_answers(rest_session(client), deadline):
            answer = client.batch_get_services(
                request={
                    "parent": f"projects/{project}",
                    "names": [f"projects/{project}/services/{a}" for a in chunk],
                },
                retry=None,
                timeout=deadline.left(),
            )
        for service in answer.services:
            states[service.name.rsplit("/", 1)[-1]] = str(service.state.name)
    return states


def granted_permissions(
    client: Any, project: str, permissions: Iterable[str], deadline: Deadline
) -> set[str]:
    """Which of ``permissions`` the caller holds on the project (``testIamPermissions``)."""
    wanted = sorted(set(permissions))
    granted: set[str] = set()
    for start in range(0, len(wanted), MAX_PERMISSIONS_PER_CALL):
        with checking_answers(rest_session(client), deadline):
            answer = client.test_iam_permissions(
                request={
                    "resource": f"projects/{project}",
                    "permissions": wanted[start : start + MAX_PERMISSIONS_PER_CALL],
                },
                retry=None,
                timeout=deadline.left(),
            )
        granted.update(answer.permissions)
    return granted


@dataclass(frozen=True)
class TpuOffering:
    """What the Cloud TPU API offers this project in one zone."""

    accelerator_types: frozenset[str]
    runtime_versions: frozenset[str]


def tpu_offering(
    client: Any, project: str, zone: str, deadline: Deadline, max_pages: int = MAX_PAGES
) -> TpuOffering:
    """The accelerator types and TPU software versions of ``zone`` (two list calls)."""
    parent = f"projects/{project}/locations/{zone}"
    types = _all(client, client.list_accelerator_types, parent, "accelerator_types", deadline, max_pages)
    versions = _all(client, client.list_runtime_versions, parent, "runtime_versions", deadline, max_pages)
    return TpuOffering(frozenset(t.type_ for t in types), frozenset(v.version for v in versions))


def _all(
    client: Any, list_call: Any, parent: str, field: str, deadline: Deadline, max_pages: int
) -> list[Any]:
    """Every item of a list, one request per page, each with the time left (the client's pager
    would give every page the first one's timeout)."""
    items: list[Any] = []
    token = ""
    for _ in range(max_pages):
        with checking_answers(rest_session(client), deadline):
            pager = list_call(
                request={"parent": parent, "page_token": token}, retry=None, timeout=deadline.left()
            )
            page = next(iter(pager.pages))  # the page this call read; iterating on would read the next
        items.extend(getattr(page, field))
        token = page.next_page_token
        if not token:
            return items
    raise RuntimeError(f"the list has more than {max_pages} pages")


def gke_channel_versions(
    client: Any, project: str, location: str, deadline: Deadline
) -> dict[str, tuple[str, ...]]:
    """The GKE versions each release channel offers in ``location`` (``serverConfig``)."""
    with checking_answers(rest_session(client), deadline):
        config = client.get_server_config(
            name=f"projects/{project}/locations/{location}", retry=None, timeout=deadline.left()
        )
    return {str(channel.channel.name): tuple(channel.valid_versions) for channel in config.channels}
