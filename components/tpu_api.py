"""Read live TPU nodes through the Cloud TPU v2 API (``google-cloud-tpu``, REST transport).

One ``list`` call per zone in use, never one call per VM: a 64-VM stack in one zone costs one
request. Any failure (no credentials, HTTP error, time-out, refused connection) is reported per
zone, and the caller keeps everything in that zone as it is.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from .deadline import MAX_PAGES, PROBE_DEADLINE_SECONDS, call_with_deadline
from .recovery import LiveNode, failure_summary

ENDPOINT_VARIABLE = "TPU_API_ENDPOINT"
"""Overrides the API endpoint, e.g. ``http://127.0.0.1:8080`` for an emulator or a test server;
a plain ``http://`` endpoint is called without Google credentials."""


@dataclass
class LiveNodes:
    """What the API said, zone by zone."""

    nodes: dict[tuple[str, str], LiveNode] = field(default_factory=dict)
    """(zone, node name) -> node, for every zone that answered."""
    failures: dict[str, str] = field(default_factory=dict)
    """zone -> why it could not be read."""
    calls: int = 0


def make_client(endpoint: Optional[str] = None) -> Any:
    """A ``tpu_v2.TpuClient`` on the REST transport; Application Default Credentials unless the
    endpoint is a plain-HTTP local one."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import tpu_v2

    endpoint = endpoint or os.environ.get(ENDPOINT_VARIABLE) or None
    options = {"api_endpoint": endpoint} if endpoint else {}
    credentials = AnonymousCredentials() if endpoint and endpoint.startswith("http://") else None
    return tpu_v2.TpuClient(transport="rest", client_options=options, credentials=credentials)


def list_live_nodes(
    project: str,
    zones: Iterable[str],
    *,
    client: Any = None,
    endpoint: Optional[str] = None,
    timeout: float = 15.0,
    deadline: float = PROBE_DEADLINE_SECONDS,
    max_pages: int = MAX_PAGES,
) -> LiveNodes:
    """List the nodes of every zone, one call per zone. ``timeout`` bounds each HTTP request,
    ``deadline`` the whole call (every page of it), ``max_pages`` its pages."""
    zones = sorted(set(zones))
    result = LiveNodes()
    if not zones:
        return result
    if client is None:
        try:
            client = make_client(endpoint)
        except Exception as exc:  # noqa: BLE001 - no credentials must never stop or replace anything
            for zone in zones:
                result.failures[zone] = failure_summary(exc)
            return result
    for zone in zones:
        result.calls += 1
        parent = f"projects/{project}/locations/{zone}"
        try:
            list_zone = functools.partial(_list_zone, client, parent, zone, timeout, max_pages)
            nodes = call_with_deadline(list_zone, deadline, f"listing {parent}")
            result.nodes.update(((zone, node.name), node) for node in nodes)
        except Exception as exc:  # noqa: BLE001 - any failure means "unknown", reported per zone
            result.failures[zone] = failure_summary(exc)
    return result


class TooManyPages(Exception):
    """A list that will not end: its server keeps handing out next-page tokens."""


def _list_zone(client: Any, parent: str, zone: str, timeout: float, max_pages: int) -> list[LiveNode]:
    # No automatic retries: a preview must not hang; the next `up` asks again.
    pager = client.list_nodes(parent=parent, retry=None, timeout=timeout)
    nodes = []
    for number, page in enumerate(pager.pages, start=1):
        if number > max_pages:
            raise TooManyPages(f"{parent} has more than {max_pages} pages of nodes")
        for node in page.nodes:
            name = node.name.rsplit("/", 1)[-1]
            nodes.append(
                LiveNode(
                    name=name,
                    zone=zone,
                    state=node.state.name,
                    health=node.health.name if node.health else "",
                    health_description=node.health_description,
                    labels=dict(node.labels),
                    create_time=node.create_time.isoformat() if node.create_time else "",
                )
            )
    return nodes
