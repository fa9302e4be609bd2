"""Preview a Pulumi program that uses these components, offline: no cloud account, no Pulumi CLI.

    from tpu_training_components.preview import preview

    def program():
        CheckpointBucket("ckpt", {"region": "europe-west4", "bucket_name": "acme-ckpt"})

    planned = preview(program)
    print([(r.type, r.name) for r in planned.resources])

The program runs under the Pulumi SDK's own mocks (``pulumi.runtime.set_mocks``): every resource
it declares is recorded with the inputs the engine would receive, and nothing is created. Values
the cloud computes (a bucket's URL, a service account's email, a cluster's endpoint) are
stand-ins, so the program's ``apply`` callbacks run. A bad argument raises here as it would in
`pulumi preview` (``InvalidArgument``, naming the argument, the value and what is allowed).

The result also says what the stack's own plan says of the same resources: ``warnings`` (a TPU
VM's or node pool's zone our tables do not list for its generation; with
``checkpoint_cost_seconds``, a save that does not fit a preemptible VM's or Spot pool's stop notice,
or a Job's grace) and ``cost``, the hourly estimate from the pinned price table, judged by the
same domain functions (``domain/declared_warnings.py``, ``domain/cost_estimate.py``).

Give ``TrainingRecovery`` ``"read_live_state": False`` in a preview: with it on, the preview asks
the Cloud TPU and Kubernetes APIs what is live, with your credentials.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional

import pulumi

from .domain.cost_estimate import Estimate, estimate
from .domain.declared_warnings import declared_warnings

OFFLINE_CLUSTER_ENDPOINT = "192.0.2.1"
"""A documentation address (RFC 5737): nothing offline can reach it."""
OFFLINE_CA_CERTIFICATE = "b2ZmbGluZSBwbGFjZWhvbGRlcg=="  # base64 of "offline placeholder"


def computed_outputs(type_: str, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Plausible values for the outputs the cloud computes for the resource types these components
    declare, so a program's applies run offline."""
    project = inputs.get("project") or "mock-project"
    if type_ == "gcp:storage/bucket:Bucket":
        return {"url": f"gs://{inputs.get('name', name)}", "selfLink": f"mock://buckets/{name}"}
    if type_ == "gcp:serviceaccount/account:Account":
        account = inputs.get("accountId", name)
        email = f"{account}@{project}.iam.gserviceaccount.com"
        return {
            "email": email,
            "member": f"serviceAccount:{email}",
            "name": f"projects/{project}/serviceAccounts/{email}",
        }
    if type_ == "gcp:container/cluster:Cluster":
        master_auth = dict(inputs.get("masterAuth") or {}, clusterCaCertificate=OFFLINE_CA_CERTIFICATE)
        return {"endpoint": OFFLINE_CLUSTER_ENDPOINT, "masterAuth": master_auth}
    if type_ == "gcp:tpu/v2Vm:V2Vm":
        return {"state": "(unknown offline)", "health": "(unknown offline)"}
    if type_ == "gcp:monitoring/notificationChannel:NotificationChannel":
        # The API names a channel on creation; alert policies list these names.
        return {"name": f"projects/{project}/notificationChannels/{name}"}
    return {}


@dataclass(frozen=True)
class PreviewedResource:
    """One resource the program declared: a component (``custom`` False) or a cloud or cluster
    resource, with its inputs as the engine receives them (camelCase keys)."""

    type: str
    name: str
    inputs: dict[str, Any]
    custom: bool


@dataclass
class Preview:
    """Every resource the program declared, in the order it declared them, with the warnings and
    the hourly cost the stack's plan would show for them."""

    resources: list[PreviewedResource] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """Valid, but may not work: each starts with the resource's name (``declared_warnings``)."""
    cost: Estimate = field(default_factory=Estimate)
    """What the declared resources cost per hour: ``domain.cost_estimate.render(cost)`` for the
    plan's text, ``cost.to_json()`` for its JSON."""

    def of_type(self, type_: str) -> list[PreviewedResource]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str) -> PreviewedResource:
        (found,) = [r for r in self.resources if r.type == type_ and r.name == name]
        return found


class PreviewMocks(pulumi.runtime.Mocks):
    """Pulumi mocks for an offline preview: each resource gets its inputs back with stand-ins for
    what the cloud computes (``computed_outputs``), and a read of the stack's own outputs (how
    ``TrainingRecovery`` learns what was last deployed: a ``StackReference``, or the engine's
    ``pulumi:pulumi:readStackOutputs``) gets ``previous_outputs``. Records what was declared into
    ``found`` when given one."""

    def __init__(
        self, previous_outputs: Optional[Mapping[str, Any]] = None, found: Optional[Preview] = None
    ) -> None:
        self.previous_outputs = dict(previous_outputs or {})
        self.found = found

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[Optional[str], dict[Any, Any]]:
        if self.found is not None:
            self.found.resources.append(
                PreviewedResource(args.typ, args.name, dict(args.inputs), bool(args.custom))
            )
        if args.typ == "pulumi:pulumi:StackReference":
            name = args.inputs.get("name", args.name)
            return name, {"name": name, "outputs": self.previous_outputs, "secretOutputNames": []}
        return f"{args.name}-id", {**args.inputs, **computed_outputs(args.typ, args.name, args.inputs)}

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[Any, Any], Optional[list[tuple[str, str]]]]:
        if args.token == "pulumi:pulumi:readStackOutputs":
            # The engine's own read of a stack's outputs (pkg/resource/deploy/builtins.go). No
            # check failures: an empty list (the SDK's mock monitor cannot iterate None).
            name = args.args.get("name")
            return {"name": name, "outputs": self.previous_outputs, "secretOutputNames": []}, []
        return {}, None


def _ensure_an_event_loop() -> None:
    """The Pulumi SDK runs its coroutines on the thread's current event loop; a thread whose loop
    was closed or unset (by an earlier asyncio.run, say) gets a new one, as Python itself gave one
    before 3.12."""
    try:
        if not asyncio.get_event_loop_policy().get_event_loop().is_closed():
            return
    except RuntimeError:  # no current loop in this thread
        pass
    asyncio.set_event_loop(asyncio.new_event_loop())


def preview(
    program: Callable[[], object],
    *,
    project: str = "preview",
    stack: str = "preview",
    config: Optional[Mapping[str, Any]] = None,
    previous_outputs: Optional[Mapping[str, Any]] = None,
    checkpoint_cost_seconds: Optional[float] = None,
    acknowledged_zones: Iterable[str] = (),
) -> Preview:
    """Run ``program`` (a function that declares resources) under Pulumi's mocks and return what
    it declared. ``config`` holds the stack config it reads (``{"my-project:key": value}``;
    objects and lists as Python values); ``previous_outputs`` the stack's outputs as of its last
    update (``pulumi stack output --json``; default none: never deployed);
    ``checkpoint_cost_seconds`` what one save takes to be committed (the stack's
    ``checkpointing.costSeconds``), for the warnings about saves that do not fit;
    ``acknowledged_zones`` zones you checked against Google's list that our table lacks (the stack
    file's ``allowUnlistedZone``), whose warning is then not said. Raises whatever the program
    raises."""
    _ensure_an_event_loop()
    found = Preview()
    mocks = PreviewMocks(previous_outputs, found)
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False)
    encoded = {
        key: value if isinstance(value, str) else json.dumps(value) for key, value in (config or {}).items()
    }
    pulumi.runtime.set_all_config(encoded, [])
    try:
        # Pulumi's own test runner: runs the program and waits for every registration it started.
        pulumi.runtime.test(program)()
    finally:
        pulumi.runtime.set_all_config({}, [])
    found.warnings = declared_warnings(found.resources, checkpoint_cost_seconds, acknowledged_zones)
    found.cost = estimate(found.resources)
    return found
