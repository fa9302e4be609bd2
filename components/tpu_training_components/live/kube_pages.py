"""Reading one Kubernetes list whole, page by page (``limit``, ``continue``), from the raw answers
of the official client's generated list methods, and refusing what is not the API server's own
list. Used by the readers (``kube_api``) and the watcher (``kube_watch``)."""

from __future__ import annotations

import json
from typing import Any, Callable

from .deadline import MAX_PAGES, Deadline, TooManyPages
from .http_answers import UnexpectedAnswer, answer_problem, read_whole


class MalformedAnswer(Exception):
    """An answer the Kubernetes client accepts but that cannot be matched to our Jobs."""


PAGE_SIZE = 500
"""Objects per list page: what kubectl (``--chunk-size``) and client-go's pager ask for. A
namespace of a large multislice JobSet holds thousands of Pods; page by page, each answer stays
a few megabytes, and the server still answers every page from one consistent snapshot."""


class ContinueExpired(Exception):
    """The API server no longer honours a list's continue token, twice in one call."""


def read_page(raw: Any, list_kind: str, max_bytes: int, deadline: Deadline) -> tuple[list[Any], str, str]:
    """One page of a list answer, from the raw urllib3 response (``_preload_content=False``):
    its items, its ``metadata.resourceVersion`` ("" when it has none: where a watch of it
    starts) and its ``metadata.continue`` ("" on the last page). The client's own reading takes
    any JSON (``{"items": []}`` from anything at all) as an empty list, so the answer must be
    the API server's own and of ``list_kind``."""
    what = deadline.what
    problem = answer_problem(raw.status, raw.headers, what)
    if problem is not None:
        raw.close()
        raise UnexpectedAnswer(problem)
    body = read_whole(raw, raw.headers.get("Content-Length", ""), max_bytes, deadline)
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise MalformedAnswer(f"{what}: the answer is not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("kind") != list_kind:
        kind = document.get("kind") if isinstance(document, dict) else type(document).__name__
        raise MalformedAnswer(f"{what}: the answer is a {kind!r}, not a {list_kind}")
    items = document.get("items")
    items = [] if items is None else items  # an empty list may be sent as null
    if not isinstance(items, list):
        raise MalformedAnswer(f"{what}: the {list_kind}'s items are not a list")
    metadata = document.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    version, token = metadata.get("resourceVersion"), metadata.get("continue")
    return items, version if isinstance(version, str) else "", token if isinstance(token, str) else ""


def read_list(
    request: Callable[..., Any],
    list_kind: str,
    max_bytes: int,
    deadline: Deadline,
    *,
    page_size: int = PAGE_SIZE,
    max_pages: int = MAX_PAGES,
) -> tuple[list[Any], str]:
    """Every item of one list, page by page: ``request(limit=..., _continue=...)`` is one call of
    the Kubernetes client's generated list method, answering the raw response. Returns the items
    and the list's ``resourceVersion``. Each page's body is bounded by ``max_bytes``, the pages by
    ``max_pages``, all of it by ``deadline``.

    A continue token the server no longer honours (410 Gone: its snapshot was compacted, about
    five minutes after the first page) starts the list again from the first page, once; client-go's
    pager falls back to a full list there too. A token handed out twice would never end."""
    items: list[Any] = []
    tokens: set[str] = set()
    version, token, restarted, number = "", "", False, 0
    while True:
        number += 1
        if number > max_pages:
            raise TooManyPages(f"{deadline.what}: more than {max_pages} pages of {page_size}")
        try:
            raw = request(limit=page_size, **({"_continue": token} if token else {}))
        except Exception as exc:
            if not (token and getattr(exc, "status", None) == 410):
                raise
            if restarted:
                raise ContinueExpired(
                    f"{deadline.what}: the server let the list's continue token expire twice"
                ) from None
            items, token, tokens, restarted = [], "", set(), True
            continue
        page, version, token = read_page(raw, list_kind, max_bytes, deadline)
        items.extend(page)
        if not token:
            return items, version
        if token in tokens:
            raise MalformedAnswer(f"{deadline.what}: the server hands out continue token {token!r} twice")
        tokens.add(token)
