"""Reading a Kubernetes list page by page (``kube_api.read_list``): what it asks, and what it does
when the continue token expires, repeats or never ends. The real API server's own paging is
tested in tests/engine/test_engine_kube_readers.py; here the pages are scripted."""

from __future__ import annotations

import io
import json
from typing import Any, Optional

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException
from tpu_training_components.live.deadline import Deadline, TooManyPages
from tpu_training_components.live.kube_pages import ContinueExpired, MalformedAnswer, read_list


def _page(names: list[str], token: str, version: str = "41") -> urllib3.HTTPResponse:
    body = json.dumps(
        {
            "kind": "JobList",
            "apiVersion": "batch/v1",
            "metadata": {"resourceVersion": version, "continue": token},
            "items": [{"metadata": {"name": name}} for name in names],
        }
    ).encode()
    return urllib3.HTTPResponse(
        body=io.BytesIO(body), headers={"Content-Type": "application/json"}, status=200, preload_content=False
    )


def _expired() -> ApiException:
    # The API server's answer to a continue token from a compacted snapshot (Status, reason Expired).
    return ApiException(status=410, reason="Gone")


class _Server:
    """Answers each request with the next scripted page (or raises it), and notes what was asked."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[int, Optional[str]]] = []

    def __call__(self, limit: int, _continue: Optional[str] = None) -> urllib3.HTTPResponse:
        self.asked.append((limit, _continue))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer() if callable(answer) else answer


def _names(items: list[Any]) -> list[str]:
    return [item["metadata"]["name"] for item in items]


def _read(server: _Server, **limits: Any) -> tuple[list[Any], str]:
    return read_list(server, "JobList", 1 << 20, Deadline(30, "listing Jobs in ns"), **limits)


def test_pages_are_followed_by_their_continue_token_and_joined() -> None:
    server = _Server(_page(["a", "b"], "t1"), _page(["c", "d"], "t2"), _page(["e"], ""))
    items, version = _read(server, page_size=2)
    assert _names(items) == ["a", "b", "c", "d", "e"]
    assert version == "41"
    assert server.asked == [(2, None), (2, "t1"), (2, "t2")]


def test_an_expired_continue_token_starts_the_list_again_once() -> None:
    server = _Server(
        _page(["a", "b"], "t1"), _expired(), _page(["a", "b"], "t9", "57"), _page(["c"], "", "57")
    )
    items, version = _read(server, page_size=2)
    assert _names(items) == ["a", "b", "c"], "nothing from the expired snapshot is kept twice"
    assert version == "57"
    assert server.asked == [(2, None), (2, "t1"), (2, None), (2, "t9")]


def test_a_token_that_expires_twice_in_one_call_is_an_error_not_a_loop() -> None:
    server = _Server(_page(["a"], "t1"), _expired(), _page(["a"], "t2"), _expired())
    with pytest.raises(ContinueExpired, match="listing Jobs in ns: .*expire twice"):
        _read(server, page_size=1)


def test_a_410_on_the_first_page_is_the_callers_to_judge() -> None:
    # Without a token, 410 is not an expired page: a watcher maps it to "relist", a reader to "unknown".
    server = _Server(_expired())
    with pytest.raises(ApiException) as raised:
        _read(server)
    assert raised.value.status == 410


def test_a_continue_token_handed_out_twice_is_refused() -> None:
    server = _Server(_page(["a"], "t1"), _page(["b"], "t1"))
    with pytest.raises(MalformedAnswer, match="continue token 't1' twice"):
        _read(server, page_size=1)


def test_endless_pages_stop_at_the_page_cap() -> None:
    server = _Server(*(lambda n=n: _page([f"j{n}"], f"t{n}") for n in range(10)))
    with pytest.raises(TooManyPages, match="more than 3 pages of 1"):
        _read(server, page_size=1, max_pages=3)
    assert len(server.asked) == 3
