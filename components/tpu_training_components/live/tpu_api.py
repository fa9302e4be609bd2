"""Read live TPU nodes through the Cloud TPU API's v2 REST surface: each node's name, state,
health and labels (parsed by google-cloud-tpu's ``tpu_v2`` messages) and its
``upcomingMaintenance`` (read from the answer itself: the v2 REST ``Node`` has it, the v2 proto
the library is made from does not; ``domain.maintenance_notices``).

One ``list`` call per zone in use, never one call per VM: a 64-VM stack in one zone costs one
request. Any failure (no credentials, HTTP error, time-out, refused connection) is reported per
zone, and the caller keeps everything in that zone as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ..domain.recovery import LiveNode, failure_summary
from .deadline import MAX_ANSWER_BYTES, MAX_PAGES, PROBE_DEADLINE_SECONDS, Deadline, TooManyPages
from .endpoints import TPU_ENDPOINT_VARIABLE, tpu_nodes_client
from .http_answers import checking_answers

ENDPOINT_VARIABLE = TPU_ENDPOINT_VARIABLE


@dataclass
class LiveNodes:
    """What the API said, zone by zone."""

    nodes: dict[tuple[str, str], LiveNode] = field(default_factory=dict)
    """(zone, node name) -> node, for every zone that answered."""
    failures: dict[str, str] = field(default_factory=dict)
    """zone -> why it could not be read."""
    calls: int = 0


make_client = tpu_nodes_client
"""An ``endpoints.TpuNodesClient`` (``endpoints.tpu_nodes_client``)."""


def list_live_nodes(
    project: str,
    zones: Iterable[str],
    *,
    client: Any = None,
    endpoint: Optional[str] = None,
    timeout: float = 15.0,
    deadline: float = PROBE_DEADLINE_SECONDS,
    max_pages: int = MAX_PAGES,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> LiveNodes:
    """List the nodes of every zone, one call per zone. ``timeout`` bounds each HTTP request,
    ``deadline`` the whole call (every page of it, each request's timeout cut to the time
    left), ``max_pages`` its pages, ``max_bytes`` each page's body. An answer that is not the
    API's own (a redirect, not JSON: see ``http_answers``) makes the zone unavailable."""
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
            nodes = _list_zone(
                client, parent, zone, timeout, Deadline(deadline, f"listing {parent}"), max_pages, max_bytes
            )
            result.nodes.update(((zone, node.name), node) for node in nodes)
        except Exception as exc:  # noqa: BLE001 - any failure means "unknown", reported per zone
            result.failures[zone] = failure_summary(exc)
    return result


class MalformedAnswer(Exception):
    """An answer the client library accepts but that is not a ``ListNodesResponse``: read as
    it parses, it would make the zone's nodes look deleted."""


def nodes_in_answer(body: bytes, parent: str) -> dict[str, dict[str, Any]]:
    """Each node of one answer as the API sent it (its JSON object), by node name; raises
    ``MalformedAnswer`` when the answer is not an object of named nodes."""
    try:
        answer = json.loads(body)
    except ValueError:
        return {}  # not JSON at all: the client library refuses it itself
    if not isinstance(answer, dict):
        raise MalformedAnswer(f"{parent}: the answer is a JSON {type(answer).__name__}, not an object")
    if answer.get("unreachable"):
        # The API could not reach (part of) the location: a missing node there is not a gone one.
        raise MalformedAnswer(f"{parent}: the API reports unreachable locations {answer['unreachable']!r}")
    nodes = answer.get("nodes", [])
    if not isinstance(nodes, list):
        raise MalformedAnswer(f"{parent}: 'nodes' is a JSON {type(nodes).__name__}, not a list")
    sent: dict[str, dict[str, Any]] = {}
    for index, node in enumerate(nodes):
        name = node.get("name") if isinstance(node, dict) else None
        if not isinstance(name, str) or not name.rsplit("/", 1)[-1]:
            # A node without a name cannot be matched to a VM: each VM would look deleted.
            raise MalformedAnswer(f"{parent}: node {index} of the answer has no name")
        short = name.rsplit("/", 1)[-1]
        if "/" in name and name.rsplit("/nodes/", 1)[0] != parent:
            raise MalformedAnswer(f"{parent}: node {index} of the answer is {name!r}, of another location")
        if short in sent:
            # Two answers for one node: which one holds is anybody's guess.
            raise MalformedAnswer(f"{parent}: the answer names node {short!r} twice")
        sent[short] = node
    return sent


def _maintenance(sent: dict[str, Any]) -> dict[str, Any]:
    """The node's ``upcomingMaintenance`` as the API sent it: its times as text, so that one
    that does not parse is a warning for that notice (``maintenance_notices``)."""
    found = sent.get("upcomingMaintenance")
    return dict(found) if isinstance(found, dict) else {}


def _list_zone(
    client: Any, parent: str, zone: str, timeout: float, deadline: Deadline, max_pages: int, max_bytes: int
) -> list[LiveNode]:
    # The client parses leniently: a body of ``[]`` or ``"x"`` reads as a zone without nodes, and
    # a state it does not know as STATE_UNSPECIFIED; the raw bodies tell those apart.
    with checking_answers(client.session, deadline, max_bytes=max_bytes) as bodies:
        return _read_pages(client, parent, zone, timeout, deadline, max_pages, bodies)


def _read_pages(
    client: Any,
    parent: str,
    zone: str,
    timeout: float,
    deadline: Deadline,
    max_pages: int,
    bodies: list[bytes],
) -> list[LiveNode]:
    nodes = []
    names: set[str] = set()
    tokens: set[str] = set()
    token = ""
    for number in range(1, max_pages + 2):
        # One request per page, each with the time left. No automatic retries: a preview must
        # not hang; the next `up` asks again.
        page = client.list_nodes_page(parent, token, deadline.timeout(timeout))
        if number > max_pages:
            raise TooManyPages(f"{parent} has more than {max_pages} pages of nodes")
        if page.next_page_token in tokens:
            # A token handed out twice leads back to a page already read: the list never ends.
            raise MalformedAnswer(f"{parent}: the API hands out page token {page.next_page_token!r} twice")
        tokens.add(page.next_page_token)
        sent_nodes = nodes_in_answer(bodies[-1], parent) if bodies else {}
        for node in page.nodes:
            name = node.name.rsplit("/", 1)[-1]
            if name in names:
                raise MalformedAnswer(f"{parent}: node {name!r} is on two pages")
            names.add(name)
            sent = sent_nodes.get(name, {})
            state = node.state.name
            if state == "STATE_UNSPECIFIED" and isinstance(sent.get("state"), str) and sent["state"]:
                state = sent["state"]  # a state this client does not know: say what was sent
            nodes.append(
                LiveNode(
                    name=name,
                    zone=zone,
                    state=state,
                    health=node.health.name if node.health else "",
                    health_description=node.health_description,
                    labels=dict(node.labels),
                    create_time=node.create_time.isoformat() if node.create_time else "",
                    maintenance=_maintenance(sent),
                )
            )
        token = page.next_page_token
        if not token:
            break
    return nodes
