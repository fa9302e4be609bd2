"""TPU VMs requested through Cloud TPU queued resources: the request, and what recovery does with
one it finds. Pure Python.

A queued resource (``projects.locations.queuedResources``) is a request that waits in a queue
until capacity exists, rather than failing as a stockout; it is the only way to get flex-start
TPU VMs, and the documented way to create several slices at once (multislice). Sources, read on
2026-12-02:

- Cloud TPU "Manage queued resources" (https://cloud.google.com/tpu/docs/queued-resources):
  "WAITING_FOR_RESOURCES replaced the ACCEPTED state"; a SUSPENDED request "is no longer eligible
  for further allocation"; a FAILED one "remains in the queue until it is explicitly deleted";
  "Queued resources consume quota regardless of their state".
- The TPU API reference and discovery documents (``tpu.v2.json`` and ``tpu.v2alpha1.json``,
  revision 20261001, bundled with google-api-python-client), for every field and state below.
- Cloud TPU "Request TPUs using Flex-start" (https://cloud.google.com/tpu/docs/request-using-flex-start,
  Preview): "You must use the queued resources API to use Flex-start with Cloud TPU"; "up to 7
  days"; "After the requested run duration, the TPU VMs are deleted and the queued resource moves
  to the SUSPENDED state"; the zones in ``tpu_availability.VM_FLEX_START_ZONES``.

Which API version: flex-start (``provisioningModel: FLEX_START`` and ``runDuration``) exists only
in **v2alpha1**, where the multislice field is ``multiNodeParams``; everything else is requested
through GA **v2** (``spot`` tier, ``queueingPolicy``, ``multisliceParams``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping, Optional, Sequence

from .recovery import (
    Cause,
    Decision,
    LiveNode,
    decide,
    gone,
    keep,
    parse_generation,
    replace,
    zoned_time,
)
from .tpu_availability import VM_FLEX_START_GENERATIONS, VM_FLEX_START_ZONES

FLEX_START_MAX_RUN_SECONDS = 7 * 24 * 3600
"""Cloud TPU "Request TPUs using Flex-start": "You can request Flex-start resources for a duration
of up to 7 days"."""

QUEUED_PROVISIONING = ("flex-start", "spot", "on-demand", "reserved")
"""What a queued TPU VM may be: ``flex-start`` always waits in the queue; the others wait there
when asked to (``queued``)."""

QUEUED_TPU_VM_TYPE = "pulumi-python:dynamic:Resource"
"""How a queued TPU VM (``resources/queued_tpu_vm.py``, a dynamic resource) is registered."""


def requested_from_queue(provisioning: str, queued: bool, slices: int) -> bool:
    """Whether a TPU VM is requested from the Cloud TPU queue rather than created directly:
    flex-start always, any other when asked to wait (``queued``) or made of several slices."""
    return queued or provisioning == "flex-start" or slices != 1


def is_queued_tpu_vm(type_: Any, inputs: Any) -> bool:
    """Whether a registered resource (its type and inputs) is a queued TPU VM: a dynamic resource
    whose inputs name a queued resource (another dynamic resource is not one)."""
    return type_ == QUEUED_TPU_VM_TYPE and isinstance(inputs, Mapping) and "queuedResourceId" in inputs


def requested_node(inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``Node`` a queued TPU VM's request asks for (its first node spec's; every slice of one
    request is the same), or {} when its body cannot be read that far."""
    node: Any = inputs.get("body")
    for key in ("tpu", "nodeSpec", 0, "node"):
        if isinstance(key, int):
            node = node[key] if isinstance(node, list) and node else None
        else:
            node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


def queued_as_vm(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A queued TPU VM's request as the ``V2Vm`` inputs it stands for (its accelerator type, zone,
    capacity and slices), by which it is priced and warned about; {} for a dynamic resource that
    is no queued TPU VM."""
    body = inputs.get("body")
    specs = body.get("tpu", {}).get("nodeSpec") if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(specs, list) or len(specs) != 1:
        return {}
    spec, node = specs[0], specs[0].get("node") or {}
    return {
        "acceleratorType": node.get("acceleratorType"),
        "zone": inputs.get("zone"),
        "schedulingConfig": {"spot": True} if "spot" in body else node.get("schedulingConfig") or {},
        "flexStart": body.get("provisioningModel") == "FLEX_START",
        "slices": requested_slices(spec),
    }


# --- The request -------------------------------------------------------------------------------


class QueuedRequestError(ValueError):
    """A queued TPU VM that cannot be requested as declared; the message names the key."""


@dataclass(frozen=True)
class QueuedRequest:
    """How one TPU VM (or one multislice group) is requested from the queue."""

    provisioning: str
    """One of ``QUEUED_PROVISIONING``."""
    slices: int = 1
    """Slices requested together (``multisliceParams.nodeCount``); 1: a single node."""
    max_run_seconds: Optional[int] = None
    """Flex-start: how long the VMs may run (required, at most seven days)."""
    valid_for_seconds: Optional[int] = None
    """How long the request may wait before the API fails it (``validUntilDuration``); None: it
    waits until capacity comes."""
    valid_after_seconds: Optional[int] = None
    """Not before this long after the request (``validAfterDuration``)."""

    @property
    def flex_start(self) -> bool:
        return self.provisioning == "flex-start"

    @property
    def api_version(self) -> str:
        """``v2alpha1`` for flex-start (its fields exist nowhere else), ``v2`` otherwise."""
        return "v2alpha1" if self.flex_start else "v2"


def request_problems(request: QueuedRequest, generation: str, zone: str) -> list[tuple[str, str]]:
    """(key, problem) for each thing that makes ``request`` impossible for a TPU of
    ``generation`` in ``zone``; empty when it can be requested. Keys are the component's
    (``provisioning``, ``slices``, ``max_run_duration``)."""
    problems: list[tuple[str, str]] = []
    if request.provisioning not in QUEUED_PROVISIONING:
        problems.append(
            (
                "provisioning",
                f"{request.provisioning!r} cannot be queued; allowed: {', '.join(QUEUED_PROVISIONING)}",
            )
        )
    if isinstance(request.slices, bool) or not isinstance(request.slices, int) or request.slices < 1:
        problems.append(("slices", f"{request.slices!r} is not a number of slices (1 or more)"))
    if request.flex_start:
        if generation not in VM_FLEX_START_GENERATIONS:
            allowed = ", ".join(sorted(VM_FLEX_START_GENERATIONS))
            problems.append(
                (
                    "provisioning",
                    f"flex-start TPU VMs are offered for TPU {allowed} only, not {generation} "
                    f"(Cloud TPU 'Request TPUs using Flex-start'); use spot or on-demand with "
                    f"queued, or a {allowed} accelerator type",
                )
            )
        if request.max_run_seconds is None:
            problems.append(
                (
                    "max_run_duration",
                    "flex-start needs one: how long the VMs may run, at most 7d (e.g. '72h')",
                )
            )
        elif request.max_run_seconds > FLEX_START_MAX_RUN_SECONDS:
            problems.append(
                (
                    "max_run_duration",
                    f"{request.max_run_seconds}s is longer than flex-start's limit of 7 days "
                    f"({FLEX_START_MAX_RUN_SECONDS}s)",
                )
            )
    elif request.max_run_seconds is not None:
        problems.append(("max_run_duration", "is for flex-start only; the other kinds run until they end"))
    return problems


def flex_start_zone_warning(generation: str, zone: str) -> Optional[str]:
    """A warning when our table does not list ``zone`` for flex-start TPU VMs of ``generation``
    (only a warning: Google adds zones)."""
    listed = VM_FLEX_START_ZONES.get(generation, frozenset())
    if generation not in VM_FLEX_START_GENERATIONS or zone in listed:
        return None
    return (
        f"zone {zone} is not listed for flex-start TPU {generation} VMs "
        f"({', '.join(sorted(listed)) or 'none listed'}); check Google's current list "
        f"(https://cloud.google.com/tpu/docs/request-using-flex-start) before `pulumi up`"
    )


def _duration(seconds: int) -> str:
    return f"{seconds}s"  # google-duration: seconds with an "s"


def queued_resource_body(
    request: QueuedRequest, *, project: str, zone: str, node_id: str, node: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``QueuedResource`` to create (REST JSON of ``request.api_version``) for ``node`` (a
    ``Node`` in REST JSON: acceleratorType, runtimeVersion, metadata, labels, ...). One slice is
    requested as ``node_id``; several as ``node_id-0``, ``node_id-1``, ... (the API names them
    from ``nodeIdPrefix``)."""
    parent = f"projects/{project}/locations/{zone}"
    node = dict(node)
    # The request carries the capacity kind; the node's own schedulingConfig would say it twice
    # (SkyPilot, which requests Spot TPU VMs this way, drops it too).
    scheduling = node.pop("schedulingConfig", None)
    spec: dict[str, Any] = {"parent": parent, "node": node}
    if request.slices > 1:
        group = "multiNodeParams" if request.api_version == "v2alpha1" else "multisliceParams"
        spec[group] = {"nodeCount": request.slices, "nodeIdPrefix": node_id}
    else:
        spec["nodeId"] = node_id
    body: dict[str, Any] = {"tpu": {"nodeSpec": [spec]}}
    if request.flex_start:
        body["provisioningModel"] = "FLEX_START"
        body["runDuration"] = {"maxRunDuration": _duration(request.max_run_seconds or 0)}
    elif request.provisioning == "spot":
        body["spot"] = {}
    elif request.provisioning == "reserved":
        node["schedulingConfig"] = {"reserved": True}
    elif scheduling and request.provisioning != "on-demand":
        node["schedulingConfig"] = scheduling
    policy: dict[str, str] = {}
    if request.valid_for_seconds is not None:
        policy["validUntilDuration"] = _duration(request.valid_for_seconds)
    if request.valid_after_seconds is not None:
        policy["validAfterDuration"] = _duration(request.valid_after_seconds)
    if policy:
        body["queueingPolicy"] = policy
    return body


def requested_slices(spec: Mapping[str, Any]) -> int:
    """The slices one ``nodeSpec`` entry asks for: its multislice group's ``nodeCount`` (v2
    ``multisliceParams``, v2alpha1 ``multiNodeParams``), or 1."""
    group = spec.get("multisliceParams") or spec.get("multiNodeParams") or {}
    return int(group.get("nodeCount", 1))


def node_ids(node_id: str, slices: int) -> tuple[str, ...]:
    """The nodes a request makes: ``node_id`` itself, or ``node_id-0`` ... for several slices
    (``MultisliceParams.nodeIdPrefix``: 'If node_count = 3 and node_id_prefix = "np", node ids of
    nodes created will be "np-0", "np-1", "np-2"')."""
    return (node_id,) if slices == 1 else tuple(f"{node_id}-{index}" for index in range(slices))


# --- What recovery does with a live request ---------------------------------------------------

WAITING = frozenset({"CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES"})
"""Received and queued (ACCEPTED is WAITING_FOR_RESOURCES's older name): it has a place in the
queue, which a re-request would lose."""
PROVISIONING = "PROVISIONING"
ACTIVE = "ACTIVE"
SUSPENDING = "SUSPENDING"
SUSPENDED = "SUSPENDED"
FAILED = "FAILED"
DELETING = "DELETING"
# google.rpc.Code values that say "no capacity now": RESOURCE_EXHAUSTED, UNAVAILABLE, DEADLINE_EXCEEDED.
_CAPACITY_CODES = frozenset({8, 14, 4})


@dataclass(frozen=True)
class LiveQueuedResource:
    """What the TPU API says of one queued resource (REST JSON read into these fields)."""

    name: str
    state: str
    state_initiator: str = ""
    """``USER`` or ``SERVICE``: who began a SUSPENDING / SUSPENDED (the API's ``stateInitiator``)."""
    failure_code: Optional[int] = None
    failure_message: str = ""
    """``state.failedData.error`` of a FAILED one."""
    create_time: Optional[datetime] = None
    labels: Mapping[str, str] = field(default_factory=dict)
    """The labels of its node spec, carried to every node it makes."""
    provisioning_model: str = ""
    spot: bool = False
    valid_for_seconds: Optional[int] = None
    node_ids: tuple[str, ...] = ()
    """The nodes it asks for, as its node spec names them (``nodeId``, or ``nodeIdPrefix`` and
    ``nodeCount``): empty when the spec cannot be read."""

    @property
    def generation(self) -> Optional[int]:
        """The ``recovery-generation`` label its node spec carries to every node it makes."""
        return parse_generation(self.labels)


def _since(live: LiveQueuedResource) -> str:
    when = (
        live.create_time.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if live.create_time else ""
    )
    return f" since {when}" if when else ""


def _expired(live: LiveQueuedResource, now: datetime) -> bool:
    """Its ``validUntilDuration`` has passed: the API fails such a request ("the 'valid until'
    start timing constraint expired")."""
    if live.valid_for_seconds is None or live.create_time is None:
        return False
    return now >= live.create_time + timedelta(seconds=live.valid_for_seconds)


def decide_queued(
    name: str,
    live: Optional[LiveQueuedResource],
    nodes: Sequence[LiveNode],
    *,
    now: datetime,
    grace: timedelta = timedelta(minutes=30),
) -> Decision:
    """The decision table for one queued TPU VM whose zone the API answered for. ``nodes`` are
    the live nodes the request made, listed *after* the request was read (an ACTIVE request's
    nodes existed before it was ACTIVE, so one missing from the list was not just being made).

    A request still in the queue is never re-requested: that would lose its place. A SUSPENDED
    request (its VMs deleted by the service: Spot capacity taken back, a flex-start run at its
    end), a FAILED one for want of capacity, and an ACTIVE one whose node is lost are deleted and
    requested again at a new generation. What a person did (suspended it, a request the API
    refused) is kept and said."""
    if live is None:
        return gone(name, "no such queued resource in its zone")
    generation, state = live.generation, live.state
    if state in WAITING:
        return keep(name, generation, f"queued resource is {state}: waiting for capacity{_since(live)}")
    if state == PROVISIONING:
        return keep(name, generation, f"queued resource is {state}: capacity found, its VMs are being made")
    if state == ACTIVE:
        return _decide_active(name, live, nodes, now=now, grace=grace)
    if state == SUSPENDING:
        return keep(
            name,
            generation,
            f"queued resource is {state}: its VMs are being deleted; the next round requests it again",
        )
    if state == SUSPENDED:
        if live.state_initiator != "SERVICE":
            who = "by a person" if live.state_initiator == "USER" else "and the API does not say by whom"
            return keep(
                name,
                generation,
                f"queued resource was SUSPENDED {who}; delete it or run `pulumi up --replace <urn>` "
                f"to request it again",
                warn=True,
            )
        cause = (
            Cause.FLEX_START_EXPIRED
            if live.provisioning_model == "FLEX_START"
            else Cause.PREEMPTED
            if live.spot
            else Cause.TERMINATED
        )
        why = {
            Cause.FLEX_START_EXPIRED: "its flex-start run reached its maxRunDuration",
            Cause.PREEMPTED: "its Spot VMs were taken back",
            Cause.TERMINATED: "the service deleted its VMs",
        }[cause]
        return replace(name, generation, f"queued resource is SUSPENDED: {why}", cause)
    if state == FAILED:
        error = f" ({live.failure_message})" if live.failure_message else ""
        # An expired wait is a stockout only when the API gave no other reason: a request it
        # refused (INVALID_ARGUMENT, ...) would be refused again, whenever it was made.
        expired = live.failure_code is None and _expired(live, now)
        if expired or live.failure_code in _CAPACITY_CODES:
            return replace(
                name, generation, f"queued resource FAILED for want of capacity{error}", Cause.STOCKOUT
            )
        return keep(
            name,
            generation,
            f"queued resource FAILED{error}; the API refused the request itself, so asking again "
            f"would fail again: fix it, then run `pulumi up --replace <urn>`",
            warn=True,
        )
    if state == DELETING:
        return keep(name, generation, f"queued resource is {state}; the next round requests it again")
    if state in ("", "STATE_UNSPECIFIED"):
        return keep(name, generation, "the API gave the queued resource no state", warn=True)
    return keep(
        name,
        generation,
        f"queued resource is in state {state!r}, which this version does not know",
        warn=True,
    )


def _decide_active(
    name: str,
    live: LiveQueuedResource,
    nodes: Sequence[LiveNode],
    *,
    now: datetime,
    grace: timedelta,
) -> Decision:
    generation = live.generation
    decisions = [decide(node.name, node, now=now, grace=grace) for node in nodes]
    for node, decision in zip(nodes, decisions, strict=True):
        if decision.action == "replace" and decision.cause is not None:
            # One lost slice loses the request: its nodes were made together and are asked for again together.
            return replace(name, generation, f"its node {node.name}: {decision.reason}", decision.cause)
    listed = {node.name for node in nodes}
    missing = [node_id for node_id in live.node_ids if node_id not in listed]
    if missing or not nodes:
        which = f"its nodes {', '.join(missing)} are" if missing else "none of its nodes is"
        return keep(
            name,
            generation,
            f"queued resource is ACTIVE but {which} not listed; kept until the API says more",
            warn=True,
        )
    worst = next((d for d in decisions if d.warn), None)
    if worst is not None:
        return keep(name, generation, f"queued resource is ACTIVE; {worst.reason}", warn=True)
    return keep(name, generation, "queued resource is ACTIVE and its nodes are working")


def _seconds(value: Any) -> Optional[int]:
    """A google-duration (``"3600s"``) in whole seconds; None for anything else."""
    if isinstance(value, str) and value.endswith("s"):
        try:
            return int(float(value[:-1]))
        except ValueError:
            return None
    return None


def read_queued_resource(item: Mapping[str, Any]) -> LiveQueuedResource:
    """A queued resource as the TPU API's REST JSON (v2 or v2alpha1) gives it. Fields of the wrong
    shape read as absent: the decision then keeps it (never replaces on what it cannot read)."""

    def obj(value: Any) -> Mapping[str, Any]:
        return value if isinstance(value, Mapping) else {}

    state = obj(item.get("state"))
    error = obj(obj(state.get("failedData")).get("error"))
    specs = obj(item.get("tpu")).get("nodeSpec")
    spec = obj(specs[0]) if isinstance(specs, list) and specs else {}
    labels = obj(obj(spec.get("node")).get("labels"))
    code = error.get("code")
    group = obj(spec.get("multisliceParams") or spec.get("multiNodeParams"))
    count, prefix = group.get("nodeCount"), group.get("nodeIdPrefix")
    # A group of one is never requested here, and how the API would name its node is not documented.
    if isinstance(count, int) and not isinstance(count, bool) and count > 1 and isinstance(prefix, str):
        asked_for = node_ids(prefix, count)
    elif isinstance(spec.get("nodeId"), str):
        asked_for = (spec["nodeId"],)
    else:
        asked_for = ()
    return LiveQueuedResource(
        name=str(item.get("name", "")).rsplit("/", 1)[-1],
        state=state.get("state", "") if isinstance(state.get("state"), str) else "",
        state_initiator=str(state.get("stateInitiator", "")),
        failure_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        failure_message=str(error.get("message", ""))[:300],
        create_time=zoned_time(item.get("createTime")),
        labels={k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)},
        provisioning_model=str(item.get("provisioningModel", "")),
        spot="spot" in item,
        valid_for_seconds=_seconds(obj(item.get("queueingPolicy")).get("validUntilDuration")),
        node_ids=asked_for,
    )
