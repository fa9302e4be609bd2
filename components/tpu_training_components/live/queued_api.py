"""Request, read and delete Cloud TPU queued resources (``projects.locations.queuedResources``).

Through google-api-python-client, Google's discovery-based client, built from the ``tpu`` v2 and
v2alpha1 documents it bundles (no network to build it). Not google-cloud-tpu: its 1.28.0 messages
have no ``provisioningModel`` or ``runDuration`` in any version, so they cannot ask for
flex-start; and the bodies here are REST JSON already (``domain.queued_resources``), checked
against those same documents by the tests.

Every call is bounded: each request by ``timeout`` seconds, a call that waits for a long-running
operation by its ``Deadline``. The endpoint is decided as for every other client
(``endpoints.TPU_ENDPOINT_VARIABLE``; a plain ``http://`` one is a local test server and is called
without credentials).
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional

from .deadline import MAX_PAGES, Deadline, TooManyPages
from .endpoints import CLOUD_PLATFORM_SCOPE, TPU_DEFAULT_ENDPOINT, TPU_ENDPOINT_VARIABLE


class OperationFailed(Exception):
    """A long-running operation ended with an error (its ``google.rpc.Status``)."""

    def __init__(self, what: str, error: dict[str, Any]) -> None:
        self.code = error.get("code")
        super().__init__(f"{what} failed: {error.get('message', error)} (code {self.code})")


class AlreadyExists(Exception):
    """A queued resource of that id exists already (409 ALREADY_EXISTS)."""


def _status(exc: BaseException) -> Optional[int]:
    response = getattr(exc, "resp", None)
    status = getattr(response, "status", None)
    return int(status) if status is not None else None


class QueuedResourcesApi:
    """One client per process; ``services`` are built on first use, per API version."""

    def __init__(
        self, endpoint: Optional[str] = None, credentials: Any = None, timeout: float = 30.0
    ) -> None:
        self.endpoint = endpoint or os.environ.get(TPU_ENDPOINT_VARIABLE) or TPU_DEFAULT_ENDPOINT
        self.credentials = credentials
        self.timeout = timeout
        self._services: dict[str, Any] = {}

    def _http(self, timeout: Optional[float] = None) -> Any:
        """An HTTP client whose requests time out after ``timeout`` seconds (default ``self.timeout``)."""
        import httplib2

        http = httplib2.Http(timeout=self.timeout if timeout is None else timeout)
        if self.endpoint.startswith("http://"):
            return http
        import google_auth_httplib2

        if self.credentials is None:
            import google.auth

            self.credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        return google_auth_httplib2.AuthorizedHttp(self.credentials, http=http)

    def _service(self, version: str) -> Any:
        if version not in self._services:
            from googleapiclient.discovery import build

            base = self.endpoint if "://" in self.endpoint else f"https://{self.endpoint}"
            self._services[version] = build(
                "tpu",
                version,
                http=self._http(),
                client_options={"api_endpoint": base.rstrip("/")},
                static_discovery=True,  # the bundled document: nothing is fetched to build it
                cache_discovery=False,
            )
        return self._services[version]

    def _queued(self, version: str) -> Any:
        return self._service(version).projects().locations().queuedResources()

    def get(self, name: str, version: str = "v2") -> Optional[dict[str, Any]]:
        """The queued resource ``name`` (``projects/P/locations/Z/queuedResources/Q``), or None
        when the API says there is none (404)."""
        try:
            return self._queued(version).get(name=name).execute(num_retries=0)
        except Exception as exc:
            if _status(exc) == 404:
                return None
            raise

    def list(self, parent: str, version: str = "v2", max_pages: int = MAX_PAGES) -> list[dict[str, Any]]:
        """Every queued resource of ``parent`` (``projects/P/locations/Z``), page by page."""
        found: list[dict[str, Any]] = []
        token = ""
        for _ in range(max_pages):
            page = self._queued(version).list(parent=parent, pageToken=token or None).execute(num_retries=0)
            found.extend(page.get("queuedResources", []))
            token = page.get("nextPageToken", "")
            if not token:
                return found
        raise TooManyPages(f"{parent} has more than {max_pages} pages of queued resources")

    def create(
        self, parent: str, queued_resource_id: str, body: dict[str, Any], version: str, deadline: Deadline
    ) -> dict[str, Any]:
        """Request ``body`` as ``queued_resource_id`` and wait, within ``deadline``, for the API
        to take it (the operation ends when the request is queued, not when it is granted);
        returns the queued resource as the API then reads it."""
        try:
            operation = (
                self._queued(version)
                .create(parent=parent, queuedResourceId=queued_resource_id, body=body)
                .execute(num_retries=0)
            )
        except Exception as exc:
            if _status(exc) == 409:
                raise AlreadyExists(f"{parent}/queuedResources/{queued_resource_id} already exists") from exc
            raise
        self._wait(operation, version, deadline)
        name = f"{parent}/queuedResources/{queued_resource_id}"
        found = self.get(name, version)
        if found is None:
            raise OperationFailed(f"requesting {name}", {"message": "the API made no such queued resource"})
        return found

    def delete(self, name: str, version: str, deadline: Deadline, force: bool = True) -> None:
        """Delete ``name`` and wait for it within ``deadline``; with ``force``, its nodes first
        (the API deletes a request whose nodes live only with force). One already gone is
        deleted."""
        try:
            operation = self._queued(version).delete(name=name, force=force).execute(num_retries=0)
        except Exception as exc:
            if _status(exc) == 404:
                return
            raise
        self._wait(operation, version, deadline)

    def patch_node(self, name: str, fields: dict[str, Any], deadline: Deadline) -> None:
        """Change ``fields`` (top-level Node fields: ``metadata``, ``labels``) of the node ``name``
        in place (v2 ``nodes.patch`` with an ``updateMask``), and wait for it within ``deadline``."""
        nodes = self._service("v2").projects().locations().nodes()
        operation = nodes.patch(name=name, updateMask=",".join(sorted(fields)), body=fields).execute(
            num_retries=0
        )
        self._wait(operation, "v2", deadline)

    def _wait(self, operation: dict[str, Any], version: str, deadline: Deadline) -> dict[str, Any]:
        """Poll ``operation`` until done (1 s, then longer, at most 10 s apart) within ``deadline``."""
        operations = self._service(version).projects().locations().operations()
        pause = 1.0
        while not operation.get("done"):
            time.sleep(min(pause, deadline.left()))
            deadline.left()
            # No poll outlives the deadline by a whole request timeout: each gets what is left.
            timed = self._http(deadline.timeout(self.timeout))
            operation = operations.get(name=operation["name"]).execute(http=timed, num_retries=0)
            pause = min(pause * 2, 10.0)
        if "error" in operation:
            raise OperationFailed(deadline.what, operation["error"])
        return operation
