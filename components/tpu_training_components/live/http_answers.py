"""What a live probe accepts as an API's own answer over HTTP, whichever client library asked.

Pure Python (no Pulumi). Client libraries read leniently: `requests` and urllib3 follow redirects
to wherever they point, and the Google clients parse any 2xx body they can. An answer from
elsewhere (a captive portal, a proxy's page, a server a redirect points at) that happens to parse
as an empty list would make every VM or Job look deleted, and the next `up` re-create them. So an
answer that is not the API's own is refused here, and the caller reports "unavailable".
"""

from __future__ import annotations

import io
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Optional

from .deadline import MAX_ANSWER_BYTES, Deadline


class UnexpectedAnswer(Exception):
    """An HTTP answer that is not the API's answer to a read: a redirect, a status a read is
    never answered with, a body that is not JSON or is too large."""


def _shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:77] + "...")


def answer_problem(status: int, headers: Mapping[str, str], what: str) -> Optional[str]:
    """Why an answer with this status and these headers is not the API's answer to a read of
    ``what``, or None. Errors (4xx, 5xx) are left to the client library, which names them."""
    if 300 <= status < 400:
        location = headers.get("Location") or headers.get("location") or ""
        where = f" to {_shown(location)}" if location else ""
        return (
            f"{what}: answered with HTTP {status}, a redirect{where}; an answer from elsewhere is "
            f"not the API's, so it is not followed"
        )
    if status >= 400:
        return None
    if status != 200:
        # 203 is a proxy's changed copy, 204 no body at all: neither is the API's list.
        return f"{what}: answered with HTTP {status}; a read is answered with 200"
    content_type = headers.get("Content-Type") or headers.get("content-type") or ""
    if content_type.split(";")[0].strip().lower() != "application/json":
        return f"{what}: answered with Content-Type {_shown(content_type)}, not application/json"
    return None


def read_bounded(raw: Any, declared_length: str, limit: int, what: str, deadline: Deadline) -> bytes:
    """The whole body of ``raw`` (a urllib3 response not read yet), refusing one larger than
    ``limit`` bytes (as declared, or as it arrives) before it is all in memory, and one that
    is still arriving when ``deadline`` passes. Read in pieces as they come (``read1``), so a
    body dripped a byte at a time is cut off at the deadline, not at its end."""
    if declared_length.strip().isdigit() and int(declared_length) > limit:
        raise UnexpectedAnswer(f"{what}: the answer is {int(declared_length)} bytes, more than {limit}")
    body = bytearray()
    with timeouts_of(deadline):
        while True:
            deadline.left()
            chunk = raw.read1(64 * 1024)
            if not chunk:
                return bytes(body)
            body += chunk
            if len(body) > limit:
                raise UnexpectedAnswer(f"{what}: the answer is more than {limit} bytes")


def read_whole(raw: Any, declared_length: str, limit: int, deadline: Deadline) -> bytes:
    """``read_bounded``, then the connection goes back to its pool; closed instead when the body
    was not read to its end (what is left of it would be read as the next answer)."""
    try:
        body = read_bounded(raw, declared_length, limit, deadline.what, deadline)
    except BaseException:
        raw.close()
        raise
    raw.release_conn()
    return body


@contextmanager
def timeouts_of(deadline: Deadline) -> Iterator[None]:
    """A failure in the block once ``deadline`` has passed is the deadline's: each request waits
    at most the time left (``Deadline.timeout``), and the libraries report a wait cut short in
    their own ways (``ReadTimeout``, urllib3's ``ReadTimeoutError``, google-auth's
    ``TransportError`` around either)."""
    try:
        yield
    except Exception:
        if deadline.passed():
            raise deadline.exceeded() from None
        raise


@contextmanager
def checking_answers(
    session: Any, deadline: Deadline, *, max_bytes: int = MAX_ANSWER_BYTES
) -> Iterator[list[bytes]]:
    """While the block runs, refuse (raise ``UnexpectedAnswer`` from) every answer a `requests`
    session receives that is not the API's own, read each body within ``deadline`` (a request
    cut short by it raises ``DeadlineExceeded``), and collect each body it accepts.

    A `requests` response hook runs before the session follows a redirect and before it reads the
    body (``Session.send``), so a redirect is never followed and a huge body never read whole.
    The hook reads the body itself and hands the session the same bytes to parse. A session
    without hooks (another transport) is left alone and yields no bodies."""
    bodies: list[bytes] = []
    what = deadline.what
    hooks = getattr(session, "hooks", None)
    if not isinstance(hooks, dict):
        with timeouts_of(deadline):
            yield bodies
        return

    def check(response: Any, *args: Any, **kwargs: Any) -> Any:
        problem = answer_problem(response.status_code, response.headers, what)
        if problem is not None:
            response.close()
            raise UnexpectedAnswer(problem)
        body = read_whole(response.raw, response.headers.get("Content-Length", ""), max_bytes, deadline)
        # The client library reads the body from here (``Response.raw``, a file-like object).
        response.raw = io.BytesIO(body)
        if response.status_code == 200:
            bodies.append(body)
        return response

    hooks.setdefault("response", []).append(check)
    try:
        with timeouts_of(deadline):
            yield bodies
    finally:
        hooks["response"].remove(check)
