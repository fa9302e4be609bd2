"""The checks that span keys, run by ``StackConfig`` once every key is valid on its own:
``problems`` (errors, each naming its key) and ``warnings`` (valid, but may not work)."""

from __future__ import annotations

import ipaddress
import re

from tpu_training_components.domain import catalogue, naming
from tpu_training_components.domain.goodput import GoodputError
from tpu_training_components.domain.network_plan import NetworkPlanError, plan_network
from tpu_training_components.domain.node_pool_plan import TpuNodePoolPlan
from tpu_training_components.domain.recovery import CAUSE_LABEL, GENERATION_LABEL
from tpu_training_components.domain.startup_script import metadata_problem, vm_metadata
from tpu_training_components.domain.termination_grace import (
    PREEMPTIBLE_TPU_VM,
    SPOT_GKE_POOL,
    grace_fit_problem,
    save_fit_problem,
)
from tpu_training_components.domain.tpu_availability import zone_warning
from tpu_training_components.domain.tpu_software import runtime_version_warning

from . import derived
from .fields import PROJECT, repeated
from .gke import ClusterConfig
from .gke_checks import PoolPlans, gke_problems
from .keys import StackKeys

DEV_PROJECT = "tpu-training-dev"
"""The dev stack's project (Pulumi.dev.yaml): another stack naming it was copied and not edited."""

_GS_BUCKET = re.compile(r"gs://([a-z0-9][a-z0-9._-]{1,220}[a-z0-9])")


def problems(config: StackKeys) -> list[str]:
    """Every problem of the keys together, each naming its key."""
    found = [
        f"{PROJECT}:tpuVms: TPU VM names must be unique; repeated: {name}"
        for name in repeated([vm.name for vm in config.tpu_vms])
    ]
    planned = _plan_pools(config)
    found += _network_problems(config)
    found += gke_problems(config, planned)
    found += _label_count_problems(config)
    found += _metadata_problems(config)
    found += _training_problems(config, planned)
    found += _checkpointing_problems(config, planned)
    found += _bucket_problems(config)
    return found


def _plan_pools(config: StackKeys) -> PoolPlans:
    """Each nodePools entry's plan, or why it has none; planned once for all the checks."""
    if config.cluster is None:
        return []
    planned: PoolPlans = []
    for pool in config.node_pools:
        try:
            planned.append(pool.plan(config.cluster.location))
        except catalogue.CatalogueError as exc:
            planned.append(exc)
    return planned


def _network_problems(config: StackKeys) -> list[str]:
    """Per-resource networks only when the stack does not declare its own."""
    if not config.network.create:
        return []
    keys = [
        f"{PROJECT}:tpuVms[{index}].{key}"
        for index, vm in enumerate(config.tpu_vms)
        for key in ("network", "subnetwork")
        if getattr(vm, key) is not None
    ]
    if config.cluster is not None:
        cluster = config.cluster
        keys += [
            f"{PROJECT}:cluster.{key}"
            for key in ("network", "subnetwork")
            if getattr(cluster, key) is not None
        ]
    found = [
        f"{key} is set, but {PROJECT}:network.create is true (the default), so the stack declares "
        f"the network itself; set {PROJECT}:network.create: false to bring your own"
        for key in keys
    ]
    if config.cluster is not None:
        found.extend(_control_plane_overlaps(config, config.cluster))
    return found


def _control_plane_overlaps(config: StackKeys, cluster: ClusterConfig) -> list[str]:
    block = cluster.master_ipv4_cidr_block
    if block is None:
        return []
    try:
        plan = plan_network(derived.network_regions(config), cluster.location)
    except NetworkPlanError:
        return []  # the regions are reported by their own keys
    control_plane = ipaddress.IPv4Network(block)
    return [
        f"{PROJECT}:cluster.masterIpv4CidrBlock = {block!r} overlaps the network's {name} range "
        f"{cidr}; pick a /28 outside 10.0.0.0/8, e.g. '172.16.0.32/28'"
        for name, cidr in plan.named_ranges().items()
        if control_plane.overlaps(cidr)
    ]


def _metadata_problems(config: StackKeys) -> list[str]:
    """Each VM's startup and shutdown scripts within Compute Engine's metadata limits; the
    training command, setup command and env are what make them grow."""
    found = []
    for index, vm in enumerate(config.tpu_vms):
        try:
            metadata = vm_metadata(
                vm_name=vm.name,
                checkpoint_dir=derived.vm_checkpoint_dir(config, vm),
                train_command=vm.train_command,
                environment=derived.vm_environment(config, vm),
                setup_command=vm.setup_command,
            )
        except ValueError:
            continue  # a training or checkpointing problem, reported by its own key
        problem = metadata_problem(metadata)
        if problem:
            found.append(f"{PROJECT}:tpuVms[{index}] ({vm.name}): {problem}")
    return found


def _label_count_problems(config: StackKeys) -> list[str]:
    # Every resource carries the project's own labels and the user's; TPU VMs also carry
    # their recovery generation and, once recovered, its cause, and pulumi-gcp adds its
    # attribution label (goog-pulumi-provisioned) to each. Google Cloud allows 64 per resource.
    common = derived.common_labels(config)
    most = len(common) + 2 + naming.PROVIDER_LABELS
    if most <= naming.MAX_LABELS:
        return []
    own = len(common) - len(config.labels) + 2
    return [
        f"{PROJECT}:labels has {len(config.labels)} labels; with the {own} the stack adds (managed-by, "
        f"pulumi-project, pulumi-stack, and {GENERATION_LABEL} and {CAUSE_LABEL} on TPU VMs) and "
        f"pulumi-gcp's own "
        f"goog-pulumi-provisioned a resource would carry {most}, above Google Cloud's limit of "
        f"{naming.MAX_LABELS} per resource; remove {most - naming.MAX_LABELS}"
    ]


def _checkpointing_problems(config: StackKeys, planned: PoolPlans) -> list[str]:
    """Every VM and Job must have an interval worth checkpointing at."""
    if config.checkpointing is None:
        return []
    # No plans without a cluster (a problem reported on its own): then no Job is checked here.
    pools = dict(zip((p.name for p in config.node_pools), planned, strict=False))
    found = []
    for index, vm in enumerate(config.tpu_vms):
        try:
            derived.plan_vm_checkpoints(config.checkpointing, vm)
        except GoodputError as exc:
            found.append(
                f"{PROJECT}:checkpointing, for tpuVms[{index}] ({vm.name}, {vm.provisioning}): {exc}"
            )
    for index, job in enumerate(config.jobs):
        plan = pools.get(job.node_pool)
        if not isinstance(plan, TpuNodePoolPlan):
            continue  # the pool's own problem is reported
        try:
            derived.plan_job_checkpoints(config.checkpointing, plan, job.slices)
        except GoodputError as exc:
            found.append(f"{PROJECT}:checkpointing, for jobs[{index}] ({job.name}): {exc}")
    return found


def _training_problems(config: StackKeys, planned: PoolPlans) -> list[str]:
    """The scaling rules must give a plan for every VM and every Job's slice."""
    if config.training is None:
        return []
    training = config.training
    runs = [(f"tpuVms[{index}] ({vm.name})", vm.accelerator.cores) for index, vm in enumerate(config.tpu_vms)]
    # Without a cluster nothing is planned (and the pools are reported as needing one).
    plans = {pool.name: plan for pool, plan in zip(config.node_pools, planned, strict=False)}
    for index, job in enumerate(config.jobs):
        plan = plans.get(job.node_pool)
        if isinstance(plan, TpuNodePoolPlan):  # otherwise reported by the pool's and the Job's keys
            runs.append((f"jobs[{index}] ({job.name})", plan.shape.cores * job.slices))
    found = []
    for run, cores in runs:
        try:
            training.plan_for(cores)
        except ValueError as exc:
            found.append(f"{PROJECT}:training: {exc}, for {PROJECT}:{run} on {cores} cores")
    return found


def _bucket_problems(config: StackKeys) -> list[str]:
    regions = derived.regions(config)
    found = []
    if len(regions) > 1 and config.bucket.name:
        found.append(
            f"{PROJECT}:bucket.name = {config.bucket.name!r} names one bucket, but the TPUs use "
            f"{len(regions)} regions ({', '.join(regions)}), each with its own bucket; "
            f"remove bucket.name to get one generated name per region"
        )
    if config.bucket.location is not None and regions and regions != (config.bucket.location,):
        found.append(
            f"{PROJECT}:bucket.location = {config.bucket.location!r} differs from the TPUs' region "
            f"{', '.join(regions)}: checkpoints must live in the region of the TPUs that use "
            f"them (Google's Training on TPU Pods page); remove bucket.location or set it to "
            f"{regions[0]!r}"
        )
    if not config.bucket.name:
        found += _derived_name_problems(config, regions)
    return found


def _derived_name_problems(config: StackKeys, regions: tuple[str, ...]) -> list[str]:
    """Names made from gcp:project and the stack name, checked here so the error says what to
    change rather than failing inside a component after others were declared."""
    source = f"made from gcp:project {config.gcp_project!r} and the stack name {config.stack!r}"
    found = []
    for region in regions:
        problem = naming.bucket_name_problem(derived.bucket_name(config, region))
        if problem:
            fix = "set tpu-training:bucket.name" if len(regions) == 1 else "use another stack name"
            found.append(f"{PROJECT}:bucket.name: the generated {problem} ({source}); {fix}")
    for account_id in derived.account_ids(config):
        problem = naming.service_account_id_problem(account_id)
        if problem:
            found.append(f"gcp:project: the stack's {problem} (made from the stack name {config.stack!r})")
    return found


def warnings(config: StackKeys) -> tuple[str, ...]:
    """What is valid but may not work, for the plan and `pulumi preview` to show."""
    found: list[str] = []
    for index, vm in enumerate(config.tpu_vms):
        if not vm.allow_unlisted_zone:
            key = f"{PROJECT}:tpuVms[{index}].{'zones' if vm.zones else 'zone'}"
            zones = [zone_warning(vm.accelerator.generation, zone) for zone in vm.ladder_zones]
            found.extend(
                _unlisted(key, f"tpuVms[{index}]", warning)
                for warning in [*zones, *vm.flex_start_warnings()]
                if warning
            )
        runtime = runtime_version_warning(
            vm.runtime_version, vm.accelerator.generation, multi_host=vm.accelerator.multi_host
        )
        if runtime:
            found.append(f"{PROJECT}:tpuVms[{index}].runtimeVersion: {runtime}")
    if config.gcp_project == DEV_PROJECT and config.stack != "dev":
        found.append(
            f"gcp:project = {DEV_PROJECT!r} is the dev stack's project, copied from Pulumi.dev.yaml: "
            f"put your own project in Pulumi.{config.stack}.yaml (`pulumi config set gcp:project "
            f"MY_PROJECT --stack {config.stack}`)"
        )
    if config.cluster is not None:
        for index, pool in enumerate(config.node_pools):
            plan = pool.plan(config.cluster.location)
            if not pool.allow_unlisted_zone:
                key = f"{PROJECT}:nodePools[{index}].nodeLocations"
                found.extend(_unlisted(key, f"nodePools[{index}]", w) for w in plan.zone_warnings)
            found.extend(f"{PROJECT}:nodePools[{index}].topology: {w}" for w in plan.size_warnings)
    if not config.network.create and (config.network.name is not None or not config.network.iap_ssh):
        found.append(
            f"{PROJECT}:network.name and iapSsh apply only to the network the stack declares; "
            f"with network.create false they are ignored"
        )
    found.extend(_foreign_bucket_warnings(config))
    found.extend(_save_fit_warnings(config))
    if not config.network.create and derived.network_regions(config):
        found.append(
            f"{PROJECT}:network.create is false: the TPU VMs and the cluster use your network "
            f"(or the project's default one), which must give them Private Google Access (to "
            f"reach gs:// without external IPs) and Cloud NAT (to install packages and pull "
            f"images from outside Google), or training never starts"
        )
    return tuple(found)


def _unlisted(key: str, entry: str, warning: str) -> str:
    """A zone warning at its key, with how to acknowledge a zone Google lists and our table lacks."""
    return (
        f"{key}: {warning}; where Google offers it, set {PROJECT}:{entry}.allowUnlistedZone: true "
        f"to say so and silence this warning"
    )


def _save_fit_warnings(config: StackKeys) -> list[str]:
    # A preempted run saves once when told to stop; the capacity decides how long it may.
    if config.checkpointing is None:
        return []
    cost = config.checkpointing.cost_seconds
    found = []
    for index, vm in enumerate(config.tpu_vms):
        if vm.preferred_provisioning in ("preemptible", "spot"):
            plan = derived.vm_checkpoints(config, vm)
            problem = save_fit_problem(cost, PREEMPTIBLE_TPU_VM, plan.interval_seconds if plan else None)
            if problem:
                found.append(f"{PROJECT}:tpuVms[{index}] ({vm.name}): {problem}")
    for index, job in enumerate(config.jobs):
        if derived.pool_plan(config, derived.job_pool(config, job)).spot:
            plan = derived.job_checkpoints(config, job)
            problem = save_fit_problem(cost, SPOT_GKE_POOL, plan.interval_seconds if plan else None)
            if problem:
                found.append(f"{PROJECT}:jobs[{index}] ({job.name}): {problem}")
    # A drain or a maintenance event gives the Pods their grace, whatever the capacity.
    grace_problem = grace_fit_problem(cost, config.checkpointing.pod_grace_seconds)
    if grace_problem and config.jobs:
        names = ", ".join(job.name for job in config.jobs)
        found.append(f"{PROJECT}:checkpointing.podGraceSeconds ({names}): {grace_problem}")
    return found


def _foreign_bucket_warnings(config: StackKeys) -> list[str]:
    # A command that names a bucket by hand stops working, or reads someone else's data,
    # once the stack moves to another project; $TRAINER_CODE and $CHECKPOINT_DIR move with it.
    own = {derived.bucket_name(config, region) for region in derived.regions(config)}
    commands = [
        *(
            (f"tpuVms[{i}].{key}", text)
            for i, vm in enumerate(config.tpu_vms)
            for key, text in (("setupCommand", vm.setup_command), ("trainCommand", vm.train_command))
            if text
        ),
        *((f"jobs[{i}].command", " ".join(job.command)) for i, job in enumerate(config.jobs)),
    ]
    found = []
    for where, text in commands:
        for bucket in sorted(set(_GS_BUCKET.findall(text)) - own):
            found.append(
                f"{PROJECT}:{where} names gs://{bucket}, which is not one of this stack's buckets "
                f"({', '.join(sorted(own)) or 'none'}): in another project it reads someone else's "
                f"bucket, or nothing; use $TRAINER_CODE (trainerCode) or $CHECKPOINT_DIR"
            )
    return found
