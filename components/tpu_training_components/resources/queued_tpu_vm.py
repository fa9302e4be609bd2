"""A Cloud TPU queued resource as a Pulumi resource: a dynamic provider over the TPU API.

pulumi-gcp 10.x's ``gcp.tpu.V2QueuedResource`` cannot serve: its node spec takes a runtime
version, an accelerator type, a description and a network config, and the request nothing else
(no metadata, so no startup script; no tier, no queueing policy, no multislice, no flex-start).
So the request is made here, with the body ``domain.queued_resources`` builds, through
``live.queued_api`` (google-api-python-client).

What replaces, and what does not (``queued_diff``): a queued resource has no update method, so a
change of its project, zone, id, API version, recovery generation, or of anything in its request
but the nodes' ``metadata`` and ``labels`` deletes it and requests it anew (its id is fixed, so
the old one goes first). A changed startup script or label patches each node it made in place,
as a direct TPU VM's does: a tuning edit never restarts training.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

import pulumi
import pulumi.dynamic

from ..domain.queued_resources import ACTIVE, node_ids, requested_slices
from ..domain.wire_values import has_unknown

CREATE_SECONDS = 15 * 60.0
"""How long creating may wait for the API to take the request (not for it to be granted)."""
DELETE_SECONDS = 30 * 60.0
"""How long deleting may wait: with ``force``, the API deletes the nodes first."""
IN_PLACE = ("metadata", "labels")
"""Node fields changed in place on every node of a request (``nodes.patch``)."""
REPLACING = ("project", "zone", "queuedResourceId", "apiVersion", "generation")


def _without_in_place(body: Any) -> Any:
    if not isinstance(body, dict):
        return body
    body = copy.deepcopy(body)
    for spec in body.get("tpu", {}).get("nodeSpec", []):
        for key in IN_PLACE:
            spec.get("node", {}).pop(key, None)
    return body


def _in_place(body: Any) -> dict[str, Any]:
    specs = body.get("tpu", {}).get("nodeSpec", []) if isinstance(body, dict) else []
    node = specs[0].get("node", {}) if specs else {}
    return {key: node.get(key, {}) for key in IN_PLACE}


def queued_diff(olds: dict[str, Any], news: dict[str, Any]) -> tuple[list[str], Optional[bool]]:
    """(the properties whose change replaces the request, whether anything changed: None when
    the new request is not known yet, in a preview)."""
    replaces = [key for key in REPLACING if olds.get(key) != news.get(key)]
    if has_unknown(_without_in_place(news.get("body"))):
        # A preview that cannot see the whole request cannot say it will be replaced.
        return replaces, True if replaces else None
    if _without_in_place(olds.get("body")) != _without_in_place(news.get("body")):
        replaces.append("body")
    return replaces, bool(replaces) or _in_place(olds.get("body")) != _in_place(news.get("body"))


def first_difference(wanted: Any, found: Any, path: str = "") -> Optional[str]:
    """Where ``found`` (a queued resource as the API reads it) does not hold ``wanted`` (the body
    requested): the path of the first field that differs, or None when every requested field is
    there as requested (the API adds its own: name, state, createTime, ...)."""
    if isinstance(wanted, dict):
        if not isinstance(found, dict):
            return path or "."
        for key, value in wanted.items():
            where = first_difference(value, found.get(key), f"{path}.{key}" if path else key)
            if where is not None:
                return where
        return None
    if isinstance(wanted, list):
        if not isinstance(found, list) or len(found) != len(wanted):
            return path
        for index, (value, other) in enumerate(zip(wanted, found, strict=True)):
            where = first_difference(value, other, f"{path}[{index}]")
            if where is not None:
                return where
        return None
    return None if wanted == found else path


def _slices(body: dict[str, Any]) -> int:
    (spec,) = body["tpu"]["nodeSpec"]
    return requested_slices(spec)


def _name(props: dict[str, Any]) -> str:
    return (
        f"projects/{props['project']}/locations/{props['zone']}/queuedResources/{props['queuedResourceId']}"
    )


def _api() -> Any:
    from ..live.queued_api import QueuedResourcesApi

    return QueuedResourcesApi()


def _outs(props: dict[str, Any], found: Optional[dict[str, Any]]) -> dict[str, Any]:
    state = (found or {}).get("state", {}).get("state", "")
    ids = list(node_ids(props["queuedResourceId"], _slices(props["body"])))
    return {**props, "state": state, "node_ids": ids}


class QueuedTpuVmProvider(pulumi.dynamic.ResourceProvider):
    """Create, read, diff, update and delete one queued resource."""

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        from ..live.deadline import Deadline
        from ..live.queued_api import AlreadyExists

        parent = f"projects/{props['project']}/locations/{props['zone']}"
        api = _api()
        try:
            found = api.create(
                parent,
                props["queuedResourceId"],
                props["body"],
                props["apiVersion"],
                Deadline(CREATE_SECONDS, f"requesting {_name(props)}"),
            )
        except AlreadyExists:
            # An earlier update may have died after the API took this very request: adopt it
            # (it keeps its place in the queue). Anything else of that name is not ours to take.
            found = api.get(_name(props), props["apiVersion"])
            where = "it is gone again" if found is None else first_difference(props["body"], found)
            if where is not None:
                raise AlreadyExists(
                    f"{_name(props)} already exists and is not this request ({where} differs): delete it "
                    f"(`gcloud compute tpus queued-resources delete {props['queuedResourceId']} --zone "
                    f"{props['zone']} --force`) or give this VM another node name, then run `pulumi up` again"
                ) from None
        return pulumi.dynamic.CreateResult(id_=_name(props), outs=_outs(props, found))

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        found = _api().get(id_, props.get("apiVersion", "v2"))
        if found is None:
            return pulumi.dynamic.ReadResult(id_="", outs={})  # gone
        return pulumi.dynamic.ReadResult(id_=id_, outs=_outs(props, found))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        replaces, changes = queued_diff(olds, news)
        return pulumi.dynamic.DiffResult(
            changes=changes, replaces=replaces, stables=["queuedResourceId"], delete_before_replace=True
        )

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        from ..live.deadline import Deadline

        api = _api()
        found = api.get(id_, news["apiVersion"])
        if found is None or found.get("state", {}).get("state") != ACTIVE:
            # Its nodes are not there (not made yet, or taken back) and a request cannot be
            # changed: the old request is what stands, and the state says so, so that the next
            # `pulumi up` after it is ACTIVE changes its nodes (docs/tpu-vms-and-recovery.md).
            return pulumi.dynamic.UpdateResult(outs=_outs(olds, found))
        fields = _in_place(news["body"])
        for node_id in _outs(news, found)["node_ids"]:
            node = f"projects/{news['project']}/locations/{news['zone']}/nodes/{node_id}"
            api.patch_node(node, fields, Deadline(CREATE_SECONDS, f"updating {node}"))
        return pulumi.dynamic.UpdateResult(outs=_outs(news, found))

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        from ..live.deadline import Deadline

        _api().delete(id_, props.get("apiVersion", "v2"), Deadline(DELETE_SECONDS, f"deleting {id_}"))


class QueuedTpuVm(pulumi.dynamic.Resource):
    """One queued resource: a TPU VM, or a multislice group of them, requested from the queue."""

    state: pulumi.Output[str]
    """The request's state when Pulumi last read it (WAITING_FOR_RESOURCES, ACTIVE, ...)."""
    node_ids: pulumi.Output[list[str]]
    """The nodes it makes: its id, or ``id-0``, ``id-1``, ... for several slices."""

    def __init__(
        self,
        name: str,
        *,
        project: pulumi.Input[str],
        zone: str,
        queued_resource_id: str,
        api_version: str,
        body: pulumi.Input[dict[str, Any]],
        generation: pulumi.Input[int | str],
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        super().__init__(
            QueuedTpuVmProvider(),
            name,
            {
                "project": project,
                "zone": zone,
                "queuedResourceId": queued_resource_id,
                "apiVersion": api_version,
                "body": body,
                "generation": generation,
                "state": None,
                "node_ids": None,
            },
            opts,
        )
