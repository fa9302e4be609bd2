"""The stack a recovery round reads, its config as `pulumi up` reads it, and the probe that reads
the live TPU nodes and training Jobs and decides, with the stack program's own reconcile
functions."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Optional

from tpu_training_components.domain.capacity_ladder import (
    zone_to_judge,
)
from tpu_training_components.domain.recovery import (
    Decision,
    utc_now,
)
from tpu_training_components.live import endpoints
from tpu_training_components.live.kube_api import LiveJobs, list_live_jobs
from tpu_training_components.live.kube_client import ClusterRef
from tpu_training_components.live.tpu_api import LiveNodes, list_live_nodes
from tpu_training_components.resources import reconcile
from tpu_training_components.resources.reconcile import QueuedVm

from tpu_training import offline, project_files, stack_config
from tpu_training.recovery.maintenance import NoticeStep


@dataclass(frozen=True)
class Target:
    """The stack a round recovers: its project, and its name as the CLI and the files know it."""

    project: project_files.Project
    stack: str
    """The stack's name: ``Pulumi.<stack>.yaml``."""
    qualified: str
    """As given on the command line (``org/project/name`` or ``name``): what `pulumi up` selects."""


Decrypt = Callable[[str], dict[str, tuple[str, bool]]]
"""The stack's config with its secrets decrypted, as the Pulumi CLI gives it (``read_config``)."""


class SecretsNeedTheCli(Exception):
    """The stack file holds `secure:` values, and no Pulumi CLI is there to decrypt them."""


@dataclass(frozen=True)
class LoadedStack:
    settings: stack_config.StackConfig
    warnings: list[str]
    config: dict[str, str]
    """The config as the program reads it (secrets decrypted)."""
    secret_keys: list[str]


def load_settings(target: Target, decrypt: Optional[Decrypt] = None) -> LoadedStack:
    """The stack's validated config as `pulumi up` would read it, and the warnings on the way.

    A stack file with `secure:` values is read through the Pulumi CLI (``decrypt``), never with
    the offline plan's stand-ins: a stand-in where a name, a zone or a cluster goes would make the
    probe look for a resource that does not exist, and recover it every round. Raises
    ``project_files.ProjectFileError``, ``stack_config.ConfigError`` or ``SecretsNeedTheCli``."""
    values, secret_keys, warnings = project_files.stack_config(target.project, target.stack)
    if secret_keys:
        if decrypt is None:
            raise SecretsNeedTheCli(
                f"Pulumi.{target.stack}.yaml holds secrets ({', '.join(sorted(secret_keys))}); reading them "
                f"needs the Pulumi CLI and the stack's secrets provider, which this run has not got"
            )
        decrypted = decrypt(target.qualified)
        values.update({key: value for key, (value, _) in decrypted.items()})
        secret_keys = [key for key, (_, secret) in decrypted.items() if secret]
        warnings = [
            w for w in warnings if not w.endswith(f"reads {project_files.SECRET_PLACEHOLDER!r} in its place")
        ]
    loaded: list[stack_config.StackConfig] = []
    run = offline.run(
        lambda: loaded.append(stack_config.load(target.stack, project_root=target.project.root)),
        project=target.project.name,
        stack=target.stack,
        config=values,
        secret_keys=secret_keys,
    )
    return LoadedStack(loaded[0], [*warnings, *loaded[0].warnings, *run.warnings], values, list(secret_keys))


@dataclass
class Probe:
    """Reads the live state and decides, with the stack program's own reconcile functions."""

    tpu_client: Any = None
    queued_api: Any = None
    """Reads queued resources (None: ``live.queued_api.QueuedResourcesApi``)."""
    read_jobs: Callable[[ClusterRef, set[str]], LiveJobs] = list_live_jobs
    read_progress: Optional[reconcile.ReadProgress] = None
    """Reads a run's progress records (None: a Cloud Storage client of the stack's project)."""
    clock: Callable[[], datetime] = utc_now
    """Now, for the maintenance grace and hang limits."""
    tpu_nodes: Optional[LiveNodes] = field(default=None, init=False)
    """The TPU nodes the last call listed: their maintenance notices are read from them
    (``tpu_training.recovery.maintenance``), with no call of their own."""

    def __call__(self, settings: stack_config.StackConfig) -> list[tuple[str, Decision]]:
        checks = stack_config.derived.hang_checks(settings)
        # One reader (one storage client, made when first needed) for the VMs' and the Jobs' records.
        read_progress = self.read_progress or reconcile.progress_reader(settings.gcp_project)
        now = self.clock()
        queued = _queued_rungs(settings)
        # The requests first: an ACTIVE request's nodes existed before it was ACTIVE, so a node
        # missing from a list made after it is not one being made.
        requests = (
            reconcile.list_queued_requests(
                settings.gcp_project,
                [QueuedVm(vm, zone, version) for vm, rungs in queued.items() for zone, version in rungs],
                api=self.queued_api,
            )
            if queued
            else reconcile.LiveRequests()
        )
        self.tpu_nodes = live = list_live_nodes(
            settings.gcp_project,
            {zone for vm in settings.tpu_vms for zone in vm.ladder_zones},
            client=self.tpu_client,
        )
        as_queued = _judged_as_queued(settings, queued, requests)
        decided = {
            d.name: d
            for d in reconcile.reconcile_tpu_vms(
                settings.gcp_project,
                # A VM with a capacity ladder is judged where it lives, on any of its rungs' zones.
                [
                    (vm.name, zone_to_judge(vm.name, vm.ladder_zones, live.nodes, live.failures))
                    for vm in settings.tpu_vms
                    if vm.name not in as_queued
                ],
                grace=timedelta(minutes=settings.recovery.maintenance_grace_minutes),
                live=self.tpu_nodes,
                hang_checks=checks,
                read_progress=read_progress,
                now=now,
            )
        }
        if as_queued:
            decided.update(
                (d.name, d)
                for d in reconcile.reconcile_queued_vms(
                    settings.gcp_project,
                    list(as_queued.values()),
                    grace=timedelta(minutes=settings.recovery.maintenance_grace_minutes),
                    requests=requests,
                    live=live,
                    hang_checks=checks,
                    read_progress=read_progress,
                    now=now,
                )
            )
        vms = [decided[vm.name] for vm in settings.tpu_vms]
        jobs = (
            reconcile.reconcile_jobs(
                ClusterRef(settings.gcp_project, settings.cluster.location, settings.cluster.name),
                [(job.name, job.namespace, job.kind) for job in settings.jobs],
                read=self.read_jobs,
                queued={
                    job.name for job in settings.jobs if stack_config.derived.job_pool(settings, job).queued
                },
                hang_checks=checks,
                read_progress=read_progress,
                project=settings.gcp_project,
                now=now,
            )
            if settings.cluster
            else []
        )
        return [*(("tpuVm", d) for d in vms), *(("job", d) for d in jobs)]


def _queued_rungs(settings: stack_config.StackConfig) -> dict[str, list[tuple[str, str]]]:
    """Per TPU VM with rungs requested from the queue: those rungs' (zone, API version)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for vm in settings.tpu_vms:
        for rung in vm.ladder:
            request = vm.request_on(rung.provisioning)
            if request is not None and (rung.zone, request.api_version) not in found.get(vm.name, []):
                found.setdefault(vm.name, []).append((rung.zone, request.api_version))
    return found


def _judged_as_queued(
    settings: stack_config.StackConfig,
    queued: dict[str, list[tuple[str, str]]],
    requests: reconcile.LiveRequests,
) -> dict[str, QueuedVm]:
    """The VMs judged by their queued resource, each in the zone it is judged in: where its
    request is, else where requests could not be read (kept, never replaced on unknown), else,
    when every rung is queued, the preferred (where it is not: requested). A VM with rungs
    created directly and no request anywhere is judged by its node."""
    found = {}
    for vm in settings.tpu_vms:
        rungs = queued.get(vm.name)
        if not rungs:
            continue
        zone = zone_to_judge(vm.name, [zone for zone, _ in rungs], requests.requests, requests.failures)
        every_rung_queued = all(vm.request_on(rung.provisioning) is not None for rung in vm.ladder)
        if (zone, vm.name) in requests.requests or zone in requests.failures or every_rung_queued:
            version = next(version for rung_zone, version in rungs if rung_zone == zone)
            found[vm.name] = QueuedVm(vm.name, zone, version)
    return found


def notice_step(probe: Callable[..., Any], *, write: bool) -> NoticeStep:
    """The notices of the nodes ``probe`` lists (a ``Probe``; another lists none of its own),
    with save requests written when ``write`` (not in a dry run)."""
    return NoticeStep(
        tpu_nodes=lambda: probe.tpu_nodes if isinstance(probe, Probe) else None,
        storage=lambda settings: endpoints.storage_client(settings.gcp_project),
        write=write,
    )
