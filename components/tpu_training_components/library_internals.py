"""The one place that uses private names of the Pulumi SDK or of a client library.

Each function here does what no public API offers, says why, and names the tests that fail
without it (or, for the one kept for speed, the benchmark that measured it). A private name can
change in any release: when one does, the tests named here fail, and this module is the only one
to mend. Nothing else may take a private name from another module
(``tests/project/test_private_names.py``). No Pulumi or client library is imported here when the module
is: each function works on an object its caller already has, or imports what it patches.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Iterator, Optional


def rest_session(client: Any) -> Optional[Any]:
    """The `requests` session of a Google API client on the REST transport (``transport._session``),
    or None for another transport.

    Its response hooks (``http_answers.checking_answers``) are the only way to see an answer
    before the client follows a redirect or parses the body: the generated clients take no
    session of their own, and their interceptors see only the parsed message. Without it a
    redirect is followed to wherever it points, a 200 that is a captive portal's page or a JSON
    list reads as a zone without nodes (every VM "deleted", re-created by the next `up`), an
    endless body fills the memory and a body dripped a byte at a time outlives every deadline:
    tests/live/test_probe_faults.py fails (the redirect, Content-Type, huge-answer and dripping-body
    tests, the GKE API's redirect)."""
    return getattr(getattr(client, "transport", None), "_session", None)


def storage_session(client: Any) -> Optional[Any]:
    """The `requests` session of a ``google.cloud.storage.Client`` (``Client._http``), for the
    same hooks as ``rest_session``: the storage library reads each answer whole inside the
    session, so without them a bucket listing dripped a byte at a time outlives the deadline of
    ``tpu-training status``, and a redirect is followed: tests/live/test_probe_faults.py
    (test_a_bucket_whose_listing_drips_is_cut_off_at_the_deadline) fails."""
    return getattr(client, "_http", None)


def resolved_value(output: Any) -> tuple[bool, Any, bool, bool]:
    """(resolved, value, known, secret) of a Pulumi ``Output`` that is already resolved, read
    without the event loop (``Output._data``, the future of its value and flags).

    The component provider must read a plain input (``tpuVms``) while it constructs the
    component, synchronously, inside the provider server's running event loop, where the
    Output's public accessors (``future()``, ``is_known()``) are coroutines it cannot await. The
    server makes such an Output from a value it already holds (an input written from another
    resource, as a YAML ``${...}`` is), so its future is done. Without this the input is refused:
    tests/components/test_provider.py::test_a_plain_input_written_from_another_resource_is_used_by_value
    fails."""
    data = getattr(output, "_data", None)
    if not isinstance(data, asyncio.Future) or not data.done() or data.cancelled() or data.exception():
        return False, None, False, False
    resolved = data.result()
    return True, resolved.value, bool(resolved.is_known), bool(resolved.is_secret)


@contextlib.contextmanager
def sdk_without_stack_traces() -> Iterator[None]:
    """While the block runs, the Pulumi SDK takes no stack trace of each resource it registers
    (``pulumi.runtime.resource._get_stack_trace``, replaced by an empty one).

    The SDK takes one per resource (``traceback.extract_stack``, which also reads every frame's
    source file) to tell the engine where the resource was declared; under mocks nothing keeps
    it. Only for the offline plan (``tpu_training/offline.py``), for speed: measured with
    benchmarks/plan_speed.py's method (fresh processes, 9 interleaved rounds, median CPU time,
    2026-11-26), without it the 256-VM plan takes 7.02 s instead of 5.82 s and the dev plan
    3.44 s instead of 2.84 s, with 9 and 4 MiB more at their peak. Fails loudly (AttributeError)
    if the SDK renames it: every test that runs a program under the offline plan does."""
    from pulumi.runtime import resource
    from pulumi.runtime.proto import source_pb2

    taken = resource._get_stack_trace
    resource._get_stack_trace = source_pb2.StackTrace  # called with nothing: an empty trace
    try:
        yield
    finally:
        resource._get_stack_trace = taken
