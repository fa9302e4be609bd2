"""Read live TPU nodes through the Cloud TPU v2 API (``google-cloud-tpu``, REST transport).

One ``list`` call per zone in use, never one call per VM: a 64-VM stack in one zone costs one
request. Any failure (no credentials, HTTP error, time-out, refused connection) is reported per
zone, and the caller keeps everything in that zone as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ..domain.recovery import LiveNode, failure_summary
from ..library_internals import rest_session
from .deadline import MAX_ANSWER_BYTES, MAX_PAGES, PROBE_DEADLINE_SECONDS, Deadline
from .endpoints import TPU_ENDPOINT_VARIABLE, tpu_client
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


make_client = tpu_client
"""A ``tpu_v2.TpuClient`` (``endpoints.tpu_client``)."""


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


class TooManyPages(Exception):
    """A list that will not end: its server keeps handing out next-page tokens."""


class MalformedAnswer(Exception):
    """An answer the client library accepts but that is not a ``ListNodesResponse``: read as
    it parses, it would make the zone's nodes look deleted."""


def node_states_in_answer(body: bytes, parent: str) -> dict[str, str]:
    """The state string the API sent for each node of one answer, by node name; raises
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
    states: dict[str, str] = {}
    seen: set[str] = set()
    for index, node in enumerate(nodes):
        name = node.get("name") if isinstance(node, dict) else None
        if not isinstance(name, str) or not name.rsplit("/", 1)[-1]:
            # A node without a name cannot be matched to a VM: each VM would look deleted.
            raise MalformedAnswer(f"{parent}: node {index} of the answer has no name")
        short = name.rsplit("/", 1)[-1]
        if "/" in name and name.rsplit("/nodes/", 1)[0] != parent:
            raise MalformedAnswer(f"{parent}: node {index} of the answer is {name!r}, of another location")
        if short in seen:
            # Two answers for one node: which one holds is anybody's guess.
            raise MalformedAnswer(f"{parent}: the answer names node {short!r} twice")
        seen.add(short)
        state = node.get("state")
        if isinstance(state, str):
            states[short] = state
    return states


def _list_zone(
    client: Any, parent: str, zone: str, timeout: float, deadline: Deadline, max_pages: int, max_bytes: int
) -> list[LiveNode]:
    # The client parses leniently: a body of ``[]`` or ``"x"`` reads as a zone without nodes, and
    # a state it does not know as STATE_UNSPECIFIED; the raw bodies tell those apart.
    with checking_answers(rest_session(client), deadline, max_bytes=max_bytes) as bodies:
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
        # One request per page, each with the time left: the client's pager would give every
        # page the first one's timeout. No automatic retries: a preview must not hang; the next
        # `up` asks again.
        pager = client.list_nodes(
            request={"parent": parent, "page_token": token}, retry=None, timeout=deadline.timeout(timeout)
        )
        page = next(iter(pager.pages))  # the page this call read; iterating on would read the next
        if number > max_pages:
            raise TooManyPages(f"{parent} has more than {max_pages} pages of nodes")
        if page.next_page_token in tokens:
            # A token handed out twice leads back to a page already read: the list never ends.
            raise MalformedAnswer(f"{parent}: the API hands out page token {page.next_page_token!r} twice")
        tokens.add(page.next_page_token)
        sent_states = node_states_in_answer(bodies[-1], parent) if bodies else {}
        for node in page.nodes:
            name = node.name.rsplit("/", 1)[-1]
            if name in names:
                raise MalformedAnswer(f"{parent}: node {name!r} is on two pages")
            names.add(name)
            state = node.state.name
            if state == "STATE_UNSPECIFIED" and sent_states.get(name):
                state = sent_states[name]  # a state this client does not know: say what was sent
            nodes.append(
                LiveNode(
                    name=name,
                    zone=zone,
                    state=state,
                    health=node.health.name if node.health else "",
                    health_description=node.health_description,
                    labels=dict(node.labels),
                    create_time=node.create_time.isoformat() if node.create_time else "",
                )
            )
        token = page.next_page_token
        if not token:
            break
    return nodes
