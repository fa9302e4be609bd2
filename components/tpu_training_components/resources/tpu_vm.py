"""A preemptible / Spot TPU VM that trains in a retry loop and resumes from its checkpoints."""

from typing import Any, Mapping, Optional

import pulumi
import pulumi_gcp as gcp
from pydantic import with_config
from typing_extensions import NotRequired, TypedDict

from ..domain import catalogue
from ..domain.cost_estimate import Priced
from ..domain.gcp_locations import zone_problem
from ..domain.naming import (
    dns_label_problem,
    generation_problem,
    network_problem,
    runtime_version_problem,
    subnetwork_problem,
)
from ..domain.node_pool_plan import parse_duration
from ..domain.queued_resources import (
    QueuedRequest,
    queued_resource_body,
    request_problems,
    requested_from_queue,
)
from ..domain.recovery import CAUSE_LABEL, GENERATION_LABEL, cause_problem
from ..domain.startup_script import metadata_problem, vm_metadata
from ..validation import ARGUMENTS, Problems, check_arguments, checkpoint_places, count_problem, gcp_labels
from .queued_tpu_vm import QueuedTpuVm

PROVISIONING_MODELS: tuple[str, ...] = ("preemptible", "spot", "on-demand", "reserved", "flex-start")
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


@with_config(ARGUMENTS)
class QueuedVmArgs(TypedDict):
    valid_for: NotRequired[str]
    """How long the request may wait for capacity before the API fails it (``"6h"``; units s, m,
    h, d); it waits until capacity comes when omitted."""
    valid_after: NotRequired[str]
    """Not before this long after the request (``"30m"``)."""


@with_config(ARGUMENTS)
class PreemptibleTpuVmArgs(TypedDict):
    zone: str
    """Zone of the TPU VM, e.g. ``europe-west4-a``."""
    accelerator_type: str
    """TPU VM accelerator type, e.g. ``v3-8``."""
    runtime_version: str
    """TPU software image, e.g. ``tpu-vm-tf-2.16.1-pjrt``."""
    train_command: str
    """The training command; it must resume from the latest checkpoint in ``CHECKPOINT_DIR``."""
    checkpoint_dir: str
    """``gs://`` prefix for this VM's checkpoints; keep it stable across re-creations."""
    service_account_email: pulumi.Input[str]
    """Identity of the VM. Required: the default compute service account is never used."""
    # A plain str, not a Literal: the provider's schema analyzer (other languages) reads no Literal.
    provisioning: NotRequired[str]
    """``preemptible`` (the Preemptible TPUs page's ``--preemptible``), ``spot`` (default), ``on-demand``,
    ``reserved``, or ``flex-start`` (v5e and v6e, through the queue, with ``max_run_duration``)."""
    queued: NotRequired[QueuedVmArgs]
    """Request the VM from the Cloud TPU queue (a queued resource) instead of creating it: it
    waits for capacity rather than failing as a stockout. Implied by ``flex-start`` and by
    ``slices`` > 1. Needs ``project`` (or ``gcp:project``)."""
    max_run_duration: NotRequired[str]
    """Flex-start only: how long the VMs may run, at most ``7d`` (e.g. ``"72h"``)."""
    slices: NotRequired[int]
    """Slices requested together, as one multislice queued resource named ``NODE-0``,
    ``NODE-1``, ... (default 1)."""
    node_name: NotRequired[str]
    """TPU node name; the component's name when omitted."""
    setup_command: NotRequired[Optional[str]]
    """Run once per boot before training (e.g. install requirements)."""
    environment: NotRequired[Mapping[str, str]]
    """Variables for the trainer (``GLOBAL_BATCH_SIZE``, ``TRAIN_STEPS``, ...)."""
    recovery_generation: NotRequired[pulumi.Input[int]]
    """Bumped to re-create the VM (see ``recovery``); default 0."""
    recovery_cause: NotRequired[pulumi.Input[str]]
    """Why recovery last re-created the node (``TrainingRecovery.vm_cause``): written into its
    ``recovery-cause`` label; "" or omitted writes none. Labels update in place."""
    restart_generation: NotRequired[int]
    """Bump (any change) to re-create the VM on purpose, now: a fresh boot that runs the current
    startup script. A changed train or setup command, environment or scale otherwise patches the
    node's metadata in place and reaches the trainer only at the node's next boot. Default 0."""
    external_ip: NotRequired[bool]
    """Give the workers external IPs (default False: reach the internet through Cloud NAT)."""
    secret_metadata: NotRequired[bool]
    """The startup script holds a secret (an ``environment`` value from secret config): keep the
    node's metadata encrypted in the stack's state. Default False."""
    network: NotRequired[Optional[pulumi.Input[str]]]
    """VPC network (name or id, e.g. ``TrainingNetwork.network_id``); the project's ``default``
    network when omitted. Without external IPs, it must have Private Google Access (Cloud TPU API
    ``NetworkConfig``: "If set to false, the specified subnetwork or network should have Private
    Google Access enabled") and Cloud NAT to install packages."""
    subnetwork: NotRequired[Optional[pulumi.Input[str]]]
    """Subnetwork of ``network`` in the VM's region (e.g. ``TrainingNetwork.subnets[region].id``)."""
    labels: NotRequired[Mapping[str, str]]
    """Labels on the node, besides ``recovery-generation``."""
    project: NotRequired[pulumi.Input[str]]
    """Google Cloud project; the provider's when omitted."""


# The node's schedulingConfig per provisioning, in the engine's shape (its fields are one word, the
# same in the Pulumi and the REST spelling); on-demand has none.
SCHEDULING: dict[str, dict[str, bool]] = {
    "preemptible": {"preemptible": True},
    "spot": {"spot": True},
    "reserved": {"reserved": True},
}


def _scheduling(provisioning: str) -> Optional[gcp.tpu.V2VmSchedulingConfigArgs]:
    fields = SCHEDULING.get(provisioning)
    return gcp.tpu.V2VmSchedulingConfigArgs(**fields) if fields else None


def replacement_trigger(recovery_generation: int, restart_generation: int) -> int | str:
    """The V2Vm's replacement trigger: the recovery generation alone while the restart generation
    is 0, which is the trigger every running VM was deployed with (the engine replaces a node
    whose trigger changes, so one form for both would replace every running VM at its next `up`:
    tests/commands/test_change_impact.py); with a restart generation, both, so a change of either replaces
    the node, and only that node."""
    if restart_generation == 0:
        return recovery_generation
    return f"recovery {recovery_generation}, restart {restart_generation}"


def _check_values(problems: Problems, name: str, args: PreemptibleTpuVmArgs) -> Optional[QueuedRequest]:
    """Reports what is wrong with ``args``; returns how the VM is queued (None: created directly)."""
    zone = args["zone"]
    try:
        region: Optional[str] = catalogue.region_of_zone(zone)
        problems.check("zone", zone_problem(zone))
    except catalogue.CatalogueError as exc:
        region = None
        problems.add("zone", str(exc))
    try:
        catalogue.accelerator_type(args["accelerator_type"])
    except catalogue.CatalogueError as exc:
        problems.add("accelerator_type", str(exc))
    problems.check("runtime_version", runtime_version_problem(args["runtime_version"]))
    # The node name is the TPU API's node id, and it is written into the startup script.
    problems.check("node_name", dns_label_problem("TPU node name", args.get("node_name", name), 63))
    provisioning = args.get("provisioning", "spot")
    if provisioning not in PROVISIONING_MODELS:
        problems.add("provisioning", f"{provisioning!r} is not one of {', '.join(PROVISIONING_MODELS)}")
    request = queued_request(problems, args)
    if request is not None and region is not None:
        try:
            generation_name = catalogue.accelerator_type(args["accelerator_type"]).generation
        except catalogue.CatalogueError:
            generation_name = ""  # reported above
        if generation_name:
            for key, problem in request_problems(request, generation_name, zone):
                problems.add(key, problem)
    if not args["train_command"].strip():
        # A blank command "succeeds" at once: the script would mark training complete untrained.
        problems.add("train_command", "is blank; give the command that trains", args["train_command"])
    checkpoint_places(problems, args["checkpoint_dir"], args.get("environment", {}))
    generation = args.get("recovery_generation", 0)
    # An Output (or other awaitable) is checked by nobody: its value is not known yet.
    if isinstance(generation, int):
        problems.check("recovery_generation", count_problem(generation) or generation_problem(generation))
    cause = args.get("recovery_cause", "")
    if isinstance(cause, str):
        problems.check("recovery_cause", cause_problem(cause))
    problems.check("restart_generation", count_problem(args.get("restart_generation", 0)))
    # Outputs (a TrainingNetwork's ids) are checked by nobody: their values are not known yet.
    network, subnetwork = args.get("network"), args.get("subnetwork")
    if isinstance(network, str):
        problems.check("network", network_problem(network))
    if isinstance(subnetwork, str) and region is not None:
        problems.check("subnetwork", subnetwork_problem(subnetwork, region))
    # The recovery generation is a label of its own.
    gcp_labels(problems, args.get("labels", {}), added=2)
    return request


def queued_request(problems: Problems, args: PreemptibleTpuVmArgs) -> Optional[QueuedRequest]:
    """How the VM is requested from the queue, or None when it is created directly (no
    ``queued``, ``flex-start``, ``slices`` or ``max_run_duration``). A duration that cannot be
    read is a problem at its key."""
    provisioning = args.get("provisioning", "spot")
    queued = args.get("queued")
    slices = args.get("slices", 1)
    if not requested_from_queue(provisioning, queued is not None, slices) and "max_run_duration" not in args:
        return None
    seconds: dict[str, int] = {}
    for key, value in (
        ("max_run_duration", args.get("max_run_duration")),
        ("queued.valid_for", (queued or {}).get("valid_for")),
        ("queued.valid_after", (queued or {}).get("valid_after")),
    ):
        if value is not None:
            try:
                seconds[key] = parse_duration(value, key)
            except catalogue.CatalogueError as exc:
                problems.add(key, str(exc))
    return QueuedRequest(
        provisioning,
        slices,
        seconds.get("max_run_duration"),
        seconds.get("queued.valid_for"),
        seconds.get("queued.valid_after"),
    )


def _node(args: PreemptibleTpuVmArgs, shielded: bool, values: list[Any]) -> dict[str, Any]:
    """The ``Node`` a queued resource asks for, in the TPU API's REST JSON: what ``V2Vm`` is
    given below, field by field."""
    email, network, subnetwork, labels, metadata = values
    config: dict[str, Any] = {"enableExternalIps": args.get("external_ip", False)}
    config.update({k: v for k, v in (("network", network), ("subnetwork", subnetwork)) if v})
    return {
        "acceleratorType": args["accelerator_type"],
        "runtimeVersion": args["runtime_version"],
        "networkConfig": config,
        "serviceAccount": {"email": email, "scope": [CLOUD_PLATFORM]},
        **({"shieldedInstanceConfig": {"enableSecureBoot": True}} if shielded else {}),
        "labels": labels,
        "metadata": metadata,
    }


class PreemptibleTpuVm(pulumi.ComponentResource):
    """A TPU VM whose startup script trains until done, resuming from checkpoints after every
    preemption, maintenance event or crash; re-created by `pulumi up` when its recovery
    generation changes.

    Children: ``{name}-vm`` (``gcp.tpu.V2Vm``); or, requested from the queue (``queued``,
    ``flex-start``, ``slices``), ``{name}-queued`` (``QueuedTpuVm``, a queued resource).
    """

    node_name: pulumi.Output[str]
    """The TPU node's name."""
    zone: pulumi.Output[str]
    """The TPU node's zone."""
    state: pulumi.Output[str]
    """Node state as last read by Pulumi (READY, PREEMPTED, ...)."""
    health: pulumi.Output[str]
    """Node health as last read by Pulumi (HEALTHY, UNHEALTHY_MAINTENANCE, ...)."""
    checkpoint_uri: pulumi.Output[str]
    """Where the VM's checkpoints are (``gs://``); it outlives every re-creation."""
    recovery_generation: pulumi.Output[int]
    """The generation declared: it changes only when `pulumi up` re-creates the VM."""

    def __init__(
        self, name: str, args: PreemptibleTpuVmArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        problems = check_arguments("PreemptibleTpuVm", name, args, PreemptibleTpuVmArgs, opts)
        request = _check_values(problems, name, args)
        problems.raise_any()
        node_name = args.get("node_name", name)
        metadata = vm_metadata(
            vm_name=node_name,
            checkpoint_dir=args["checkpoint_dir"],
            train_command=args["train_command"],
            environment=args.get("environment", {}),
            setup_command=args.get("setup_command"),
        )
        # Compute Engine's limits, checked here rather than by the API half-way through an update.
        problems.check((), metadata_problem(metadata))
        problems.raise_any()
        accelerator = catalogue.accelerator_type(args["accelerator_type"])
        super().__init__("tpu-training:compute:PreemptibleTpuVm", name, {}, opts)

        generation = pulumi.Output.from_input(args.get("recovery_generation", 0))
        restart = args.get("restart_generation", 0)
        given: dict[str, Any] = dict(args.get("labels", {}))
        # The cause label only when there is one: a VM never recovered keeps the labels it had.
        labels = pulumi.Output.all(generation, args.get("recovery_cause", "")).apply(
            lambda values: {
                **given,
                GENERATION_LABEL: str(values[0]),
                **({CAUSE_LABEL: values[1]} if values[1] else {}),
            }
        )

        provisioning = args.get("provisioning", "spot")
        self.priced: list[Priced] = []
        """The billable resources declared, as ``cost_estimate.estimate`` prices them."""
        if request is not None:
            project = args.get("project") or gcp.config.project
            if project is None:
                problems.add("project", "a queued TPU VM needs it: give project, or set gcp:project")
                problems.raise_any()
            node = pulumi.Output.all(
                args["service_account_email"], args.get("network"), args.get("subnetwork"), labels, metadata
            ).apply(lambda values: _node(args, accelerator.family.shielded_vm, values))
            body = pulumi.Output.all(project, node).apply(
                lambda values: queued_resource_body(
                    request, project=values[0], zone=args["zone"], node_id=node_name, node=values[1]
                )
            )
            secret = bool(args.get("secret_metadata"))
            self.queued = QueuedTpuVm(
                f"{name}-queued",
                project=project,  # type: ignore[arg-type]
                zone=args["zone"],
                queued_resource_id=node_name,
                api_version=request.api_version,
                # A secret in the environment is in the startup script: kept encrypted in the state.
                body=pulumi.Output.secret(body) if secret else body,
                generation=generation.apply(lambda g: replacement_trigger(g, restart)),
                opts=pulumi.ResourceOptions(
                    parent=self, additional_secret_outputs=["body"] if secret else None
                ),
            )
            self.node_name = pulumi.Output.from_input(node_name)
            self.zone = pulumi.Output.from_input(args["zone"])
            self.state = self.queued.state
            self.health = pulumi.Output.from_input("")
            scheduling: dict[str, Any] = SCHEDULING.get(provisioning, {})
            self.priced = [
                Priced(
                    "gcp:tpu/v2Vm:V2Vm",
                    f"{name}-queued",
                    {
                        "acceleratorType": args["accelerator_type"],
                        "zone": args["zone"],
                        "schedulingConfig": scheduling,
                        "flexStart": request.flex_start,
                        "slices": request.slices,
                    },
                )
            ]
        else:
            self._declare_vm(name, args, node_name, accelerator, metadata, labels, generation, restart)
        self.checkpoint_uri = pulumi.Output.from_input(args["checkpoint_dir"])
        self.recovery_generation = generation
        self.register_outputs(
            {
                "node_name": self.node_name,
                "zone": self.zone,
                "state": self.state,
                "health": self.health,
                "checkpoint_uri": self.checkpoint_uri,
                "recovery_generation": self.recovery_generation,
            }
        )

    def _declare_vm(
        self,
        name: str,
        args: PreemptibleTpuVmArgs,
        node_name: str,
        accelerator: catalogue.AcceleratorType,
        metadata: dict[str, str],
        labels: pulumi.Output[dict[str, str]],
        generation: pulumi.Output[int],
        restart: int,
    ) -> None:
        """The VM created directly: a ``V2Vm``."""
        self.vm = gcp.tpu.V2Vm(
            f"{name}-vm",
            name=node_name,
            zone=args["zone"],
            project=args.get("project"),
            accelerator_type=args["accelerator_type"],
            runtime_version=args["runtime_version"],
            scheduling_config=_scheduling(args.get("provisioning", "spot")),
            # Never the default compute service account: it is an Editor of the whole project.
            service_account=gcp.tpu.V2VmServiceAccountArgs(
                email=args["service_account_email"],
                # Access is decided by the account's IAM roles, not by OAuth scopes.
                scopes=["https://www.googleapis.com/auth/cloud-platform"],
            ),
            network_config=gcp.tpu.V2VmNetworkConfigArgs(
                # No public address unless asked for: training reads from and writes to GCS only.
                enable_external_ips=args.get("external_ip", False),
                network=args.get("network"),
                subnetwork=args.get("subnetwork"),
            ),
            # Secure boot where the generation supports it (v4 and later).
            shielded_instance_config=(
                gcp.tpu.V2VmShieldedInstanceConfigArgs(enable_secure_boot=True)
                if accelerator.family.shielded_vm
                else None
            ),
            labels=labels,
            # A secret in the environment would otherwise sit in the state as plain text: the
            # engine encrypts only values the program marks secret.
            metadata=pulumi.Output.secret(metadata) if args.get("secret_metadata") else metadata,
            opts=pulumi.ResourceOptions(
                parent=self,
                # A new generation re-creates the node: that is how `pulumi up` recovers it, and
                # how a user restarts it on purpose (restart_generation), never implicitly.
                replacement_trigger=generation.apply(lambda g: replacement_trigger(g, restart)),
                # The node name is fixed, so the old node must go before the new one comes.
                delete_before_replace=True,
            ),
        )

        self.priced = [
            Priced(
                "gcp:tpu/v2Vm:V2Vm",
                f"{name}-vm",
                {
                    "acceleratorType": args["accelerator_type"],
                    "zone": args["zone"],
                    "schedulingConfig": SCHEDULING.get(args.get("provisioning", "spot"), {}),
                },
            )
        ]
        self.node_name = self.vm.name
        self.zone = self.vm.zone
        self.state = self.vm.state
        self.health = self.vm.health
