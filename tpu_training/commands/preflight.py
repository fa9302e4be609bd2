"""Check a Google Cloud project is ready for a stack before `pulumi up` fails half-way.

    tpu-training preflight --stack NAME [--json PATH|-] [--timeout SECONDS]

Runs the stack program offline (as `tpu-training plan` does) to learn what it declares, then asks the
project, with the real client libraries and your Application Default Credentials:

1. credentials: are there Application Default Credentials, and do they get a token;
2. project: does the project exist and is it active (Resource Manager);
3. APIs: is every API the declared resources need enabled (Service Usage);
4. permissions: does the identity hold every permission the declared resources need
   (``testIamPermissions`` on the project, with the list from
   ``tpu_training_components.domain.required_access``);
5. TPU VMs: does each VM's zone offer its accelerator type and runtime version (Cloud TPU API);
6. GKE: does the cluster's release channel offer a version with the features its node pools use
   (flex-start, queued provisioning), at or above ``cluster.minVersion`` (GKE ``serverConfig``).

Each miss comes with the `gcloud` command that fixes it. TPU quota is not checked: no API this
tool reads gives it per TPU type and zone (docs/preflight.md says where to look).

Endpoints: TPU_API_ENDPOINT, GKE_API_ENDPOINT, SERVICE_USAGE_API_ENDPOINT and
RESOURCE_MANAGER_API_ENDPOINT override Google's (``live/endpoints.py``).

Exit status (see EXIT_*): 0 every check passed; 1 something must be fixed (each fix is printed);
2 invalid configuration or project file; 64 invalid command line; 75 nothing failed, but some
checks could not be made (an API did not answer, or the time budget ran out): try again.
Every call has a deadline, and the whole run at most --timeout seconds of them.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional, Sequence, TypeVar

import pulumi
from tpu_training_components.domain.gke_cluster_plan import gke_version_problem
from tpu_training_components.domain.node_pool_plan import (
    FLEX_START_MIN_GKE_VERSION,
    QUEUED_PROVISIONING_MIN_GKE_VERSION,
)
from tpu_training_components.domain.queued_resources import (
    QUEUED_TPU_VM_TYPE,
    is_queued_tpu_vm,
    requested_node,
)
from tpu_training_components.domain.recovery import failure_summary
from tpu_training_components.domain.required_access import BOOTSTRAP_APIS, StackAccess, stack_access
from tpu_training_components.live import endpoints, project_api
from tpu_training_components.live.deadline import Deadline

from tpu_training import offline, project_files
from tpu_training.command_line import (
    CommandLineParser,
    UsageError,
    load_project_for,
    stack_name,
)
from tpu_training.exit_codes import EXIT_CONFIG_ERROR, EXIT_USAGE

T = TypeVar("T")

EXIT_READY = 0
EXIT_NOT_READY = 1
"""At least one check failed; its fix is printed."""
EXIT_UNCHECKED = 75
"""No check failed, but some could not be made (sysexits.h EX_TEMPFAIL: try again later)."""

DEFAULT_TIMEOUT_SECONDS = 60.0
"""The budget of all calls together; a project that answers takes a few seconds."""
CALL_SECONDS = 15.0
"""One call's deadline (one list, one permission test), within the budget."""

Status = Literal["ok", "missing", "unchecked"]
_SHOWN: dict[Status, str] = {"ok": "ok", "missing": "FIX", "unchecked": "??"}


@dataclass(frozen=True)
class Check:
    """One line of the checklist."""

    name: str
    status: Status
    detail: str
    fix: tuple[str, ...] = ()
    """Commands that fix it (for ``missing``)."""
    missing: tuple[str, ...] = ()
    """What is missing, one item each (the permissions not held, the APIs not enabled)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "detail": self.detail,
            "fix": list(self.fix),
            "missing": list(self.missing),
        }


@dataclass(frozen=True)
class Declared:
    """What the stack declares, as preflight needs it (read from the offline plan)."""

    project: str
    access: StackAccess
    enables_apis: bool
    tpu_vms: tuple[tuple[str, str, str, str], ...]
    """(name, zone, accelerator type, runtime version) of each TPU VM."""
    cluster: Optional[tuple[str, str, Optional[str]]]
    """(location, release channel, minimum version) of the cluster, if any."""
    needs: tuple[tuple[str, str], ...]
    """(minimum GKE version, feature) the node pools need."""


def _queued_vms(result: offline.ProgramRun) -> list[tuple[str, str, str, str]]:
    """The TPU VMs requested from the queue, as ``declared`` lists a VM: what their request asks
    for is what preflight checks (one node spec: every slice of a request is the same)."""
    found = []
    for r in result.by_type(QUEUED_TPU_VM_TYPE):
        if is_queued_tpu_vm(r.type, r.inputs):
            node = requested_node(r.inputs)
            found.append(
                (
                    str(r.inputs["queuedResourceId"]),
                    str(r.inputs.get("zone")),
                    str(node.get("acceleratorType")),
                    str(node.get("runtimeVersion")),
                )
            )
    return found


def declared(result: offline.ProgramRun, project: str) -> Declared:
    """Read what preflight checks from the resources the program registered."""
    vms = tuple(
        (
            str(r.inputs.get("name")),
            str(r.inputs.get("zone")),
            str(r.inputs.get("acceleratorType")),
            str(r.inputs.get("runtimeVersion")),
        )
        for r in result.by_type("gcp:tpu/v2Vm:V2Vm")
    ) + tuple(_queued_vms(result))
    clusters = result.by_type("gcp:container/cluster:Cluster")
    cluster = None
    if clusters:
        inputs = clusters[0].inputs
        channel = (inputs.get("releaseChannel") or {}).get("channel") or "REGULAR"
        cluster = (str(inputs.get("location")), str(channel), inputs.get("minMasterVersion"))
    needs: set[tuple[str, str]] = set()
    for pool in result.by_type("gcp:container/nodePool:NodePool"):
        if (pool.inputs.get("nodeConfig") or {}).get("flexStart"):
            needs.add((FLEX_START_MIN_GKE_VERSION, "TPU flex-start"))
        if (pool.inputs.get("queuedProvisioning") or {}).get("enabled"):
            needs.add((QUEUED_PROVISIONING_MIN_GKE_VERSION, "queued provisioning"))
    return Declared(
        project=project,
        access=stack_access(r.type for r in result.registrations),
        enables_apis=bool(result.by_type("gcp:projects/service:Service")),
        tpu_vms=vms,
        cluster=cluster,
        needs=tuple(sorted(needs)),
    )


class Budget:
    """The time left for calls: each gets ``CALL_SECONDS`` or what is left, whichever is less."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._ends = clock() + seconds

    def call(self, what: str, call: Callable[[Deadline], T]) -> T:
        """``call(deadline)``, its deadline ``CALL_SECONDS`` or what is left from now."""
        left = self._ends - self._clock()
        if left <= 0:
            raise TimeoutError("the time budget (--timeout) ran out before this check")
        return call(Deadline(min(CALL_SECONDS, left), what))


def _unchecked(name: str, why: str) -> Check:
    return Check(name, "unchecked", why)


class _NoAnswer(Exception):
    """A check's call failed; ``check`` is its result."""

    def __init__(self, check: Check) -> None:
        super().__init__(check.detail)
        self.check = check


def _answering(check: Callable[..., Check]) -> Callable[..., Check]:
    """A check whose failed call (``_NoAnswer``) is its result."""

    @functools.wraps(check)
    def answered(*args: Any, **kwargs: Any) -> Check:
        try:
            return check(*args, **kwargs)
        except _NoAnswer as unanswered:
            return unanswered.check

    return answered


class Preflight:
    """Runs the checks for one stack, in order, each within ``budget``. The clients are made by
    ``live.endpoints`` with the credentials the first check found, at the endpoints the
    environment names (tests point them at loopback servers, as a user points them at an
    emulator)."""

    def __init__(self, stack: Declared, budget: Budget) -> None:
        self.stack = stack
        self.budget = budget
        self.identity: Optional[project_api.Identity] = None

    def run(self) -> list[Check]:
        checks = [self.credentials()]
        if self.identity is None:
            reason = "needs working Application Default Credentials (see above)"
            names = ["project", "apis", "permissions"]
            names += [f"tpu-vm {name}" for name, *_ in self.stack.tpu_vms]
            names += ["gke-versions"] if self.stack.cluster else []
            return checks + [_unchecked(name, reason) for name in names]
        project = self.project()
        checks.append(project)
        if project.status == "missing":
            reason = "needs the project (see above)"
            return checks + [_unchecked(name, reason) for name in ("apis", "permissions")]
        checks += [self.apis(), self.permissions()]
        checks += [self.tpu_vm(*vm) for vm in self.stack.tpu_vms]
        if self.stack.cluster:
            checks.append(self.gke_versions(*self.stack.cluster))
        return checks

    # --- each check -------------------------------------------------------------------------

    def credentials(self) -> Check:
        try:
            self.identity = self.budget.call(
                "getting a token with the Application Default Credentials",
                project_api.application_default_credentials,
            )
        except Exception as exc:  # noqa: BLE001 - any failure: no usable credentials
            return Check(
                "credentials",
                "missing",
                f"no working Application Default Credentials: {failure_summary(exc)}",
                ("gcloud auth application-default login",),
            )
        detail = self.identity.kind
        if self.identity.member is None and self.identity.quota_project is None:
            # User credentials bill API calls to a quota project; without one some APIs refuse.
            setting = f"gcloud auth application-default set-quota-project {self.stack.project}"
            detail += f"; no quota project set (`{setting}`)"
        return Check("credentials", "ok", detail)

    def _client(self, make: Callable[..., Any]) -> Any:
        assert self.identity is not None
        return make(credentials=self.identity.credentials)

    def _ask(
        self,
        check: str,
        what: str,
        client: Callable[..., Any],
        read: Callable[[Any, Deadline], T],
        fixes: tuple[str, ...] = (),
    ) -> T:
        """``read(client, deadline)``, within the budget; a failure raises ``_NoAnswer`` with the
        check's result (``_refused``)."""
        try:
            return self.budget.call(what, lambda deadline: read(self._client(client), deadline))
        except Exception as exc:  # noqa: BLE001 - reported as the check's result
            raise _NoAnswer(self._refused(check, exc, what, fixes)) from None

    @_answering
    def project(self) -> Check:
        project = self.stack.project
        state = self._ask(
            "project",
            f"reading project {project}",
            endpoints.projects_client,
            lambda client, deadline: project_api.project_state(client, project, deadline),
            (f"gcloud projects describe {project}", "gcloud projects list"),
        )
        if state != "ACTIVE":
            return Check(
                "project",
                "missing",
                f"project {project!r} is {state}, not ACTIVE",
                (f"gcloud projects undelete {project}",),
            )
        return Check("project", "ok", f"{project} is ACTIVE")

    @_answering
    def apis(self) -> Check:
        project, wanted = self.stack.project, self.stack.access.apis
        states = self._ask(
            "apis",
            f"reading the enabled APIs of {project}",
            endpoints.service_usage_client,
            lambda client, deadline: project_api.api_states(client, project, wanted, deadline),
            (f"gcloud services enable {' '.join(BOOTSTRAP_APIS)} --project={project}",),
        )
        off = [api for api in wanted if states.get(api) != "ENABLED"]
        # The stack enables what it needs itself (enableApis), except the APIs it enables them with.
        must = [api for api in off if api in BOOTSTRAP_APIS or not self.stack.enables_apis]
        later = [api for api in off if api not in must]
        note = f"; `pulumi up` enables {', '.join(later)} (enableApis)" if later else ""
        if must:
            return Check(
                "apis",
                "missing",
                f"not enabled: {', '.join(must)}{note}",
                (f"gcloud services enable {' '.join(must)} --project={project}",),
                missing=tuple(must),
            )
        return Check("apis", "ok", f"{len(wanted) - len(off)} of {len(wanted)} enabled{note}")

    @_answering
    def permissions(self) -> Check:
        project, access = self.stack.project, self.stack.access
        granted = self._ask(
            "permissions",
            f"testing permissions on {project}",
            endpoints.projects_client,
            lambda client, deadline: project_api.granted_permissions(
                client, project, access.permissions, deadline
            ),
        )
        lacking = [p for p in access.permissions if p not in granted]
        unknown = (
            f"; not checked (types preflight does not know): {', '.join(access.unknown_types)}"
            if access.unknown_types
            else ""
        )
        if not lacking:
            return Check("permissions", "ok", f"all {len(access.permissions)} held{unknown}")
        assert self.identity is not None
        member = self.identity.member or 'user:"$(gcloud config get-value account)"'
        by_role: dict[str, list[str]] = {}
        for permission in lacking:
            for role in access.roles.get(permission, ()):
                by_role.setdefault(role, []).append(permission)
        kubernetes = (
            "; the container.* ones on Kubernetes objects may come from RBAC in the cluster instead"
            if any(p.startswith("container.") and not p.startswith("container.clusters.") for p in lacking)
            else ""
        )
        return Check(
            "permissions",
            "missing",
            f"{len(lacking)} of {len(access.permissions)} not held{kubernetes}{unknown}",
            tuple(
                f"gcloud projects add-iam-policy-binding {project} --member={member} --role={role}"
                f"   # {', '.join(held)}"
                for role, held in sorted(by_role.items())
            ),
            missing=tuple(lacking),
        )

    @_answering
    def tpu_vm(self, name: str, zone: str, accelerator_type: str, runtime_version: str) -> Check:
        project = self.stack.project
        check = f"tpu-vm {name}"
        offering = self._ask(
            check,
            f"listing the TPU types and versions of {zone}",
            endpoints.tpu_client,
            lambda client, deadline: project_api.tpu_offering(client, project, zone, deadline),
        )
        problems, fixes = [], []
        if accelerator_type not in offering.accelerator_types:
            problems.append(f"{zone} offers no {accelerator_type} to this project")
            fixes.append(f"gcloud compute tpus accelerator-types list --zone={zone} --project={project}")
        if runtime_version not in offering.runtime_versions:
            problems.append(f"{zone} has no TPU software version {runtime_version!r}")
            fixes.append(f"gcloud compute tpus tpu-vm versions list --zone={zone} --project={project}")
        if problems:
            return Check(check, "missing", "; ".join(problems), tuple(fixes))
        return Check(check, "ok", f"{zone} offers {accelerator_type} with {runtime_version}")

    @_answering
    def gke_versions(self, location: str, channel: str, minimum: Optional[str]) -> Check:
        project = self.stack.project
        channels = self._ask(
            "gke-versions",
            f"reading the GKE versions of {location}",
            endpoints.container_client,
            lambda client, deadline: project_api.gke_channel_versions(client, project, location, deadline),
        )
        needs = list(self.stack.needs) + (
            [(minimum, "cluster.minVersion")] if minimum and minimum != "latest" else []
        )
        offered = channels.get(channel, ())
        fitting = [
            v for v in offered if all(gke_version_problem(v, least, what) is None for least, what in needs)
        ]
        if fitting:
            return Check("gke-versions", "ok", f"the {channel} channel in {location} offers {fitting[0]}")
        wanted = ", ".join(f"{what} (>= {least})" for least, what in needs) or "any version"
        better = [
            c
            for c, versions in sorted(channels.items())
            if any(
                all(gke_version_problem(v, least, what) is None for least, what in needs) for v in versions
            )
        ]
        hint = f"; set cluster.releaseChannel to {better[0]}" if better else ""
        return Check(
            "gke-versions",
            "missing",
            f"the {channel} channel in {location} offers no version for {wanted}{hint}",
            (
                f"gcloud container get-server-config --location={location} --project={project} "
                f'--flatten=channels --format="table(channels.channel,channels.validVersions)"',
            ),
        )

    @staticmethod
    def _refused(name: str, exc: BaseException, what: str, fixes: tuple[str, ...]) -> Check:
        """A call that failed: an answer of "no" (403, 404) is something to fix; anything else
        (a time-out, a refused connection, a 5xx) leaves the check unanswered."""
        code = getattr(exc, "code", None)
        summary = failure_summary(exc)
        if code in (403, 404):
            return Check(name, "missing", f"{what}: {summary}", fixes)
        return _unchecked(name, f"{what}: {summary}")


def exit_status(checks: Sequence[Check]) -> int:
    if any(c.status == "missing" for c in checks):
        return EXIT_NOT_READY
    if any(c.status == "unchecked" for c in checks):
        return EXIT_UNCHECKED
    return EXIT_READY


def render(stack: str, project: str, checks: Sequence[Check]) -> str:
    lines = [f"Preflight for stack {stack} in project {project}:"]
    for check in checks:
        lines.append(f"  {_SHOWN[check.status]:<3} {check.name}: {check.detail}")
        lines.extend(f"        fix: {command}" for command in check.fix)
    missing = sum(c.status == "missing" for c in checks)
    unchecked = sum(c.status == "unchecked" for c in checks)
    if missing:
        lines.append(
            f"{missing} to fix before `pulumi up`" + (f", {unchecked} not checked" if unchecked else "")
        )
    elif unchecked:
        lines.append(f"nothing to fix found, but {unchecked} not checked: run it again")
    else:
        lines.append("ready for `pulumi up`")
    return "\n".join(lines)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 5 <= value <= 600:
        raise argparse.ArgumentTypeError(f"{text} s: give between 5 and 600 seconds")
    return value


def parser() -> argparse.ArgumentParser:
    """``tpu-training preflight``'s command line."""
    parser = CommandLineParser(
        prog="tpu-training preflight",
        description="Check a Google Cloud project is ready for a stack: credentials, project, APIs, "
        "permissions, TPU types and versions, GKE versions.",
        epilog="Exit status: 0 ready; 1 something to fix (each fix printed); 2 invalid configuration; "
        "64 invalid command line; 75 some checks could not be made (try again).",
    )
    parser.add_argument("--stack", default="dev", help="stack name: reads Pulumi.<stack>.yaml (default: dev)")
    parser.add_argument(
        "--json", metavar="PATH", help="also write the checks as JSON to PATH ('-' for standard output)"
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help=f"the most all calls may take together (default {DEFAULT_TIMEOUT_SECONDS:g})",
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        stack, stack_project = stack_name(args.stack)
        project = load_project_for(args.stack, stack_project)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except project_files.ProjectFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    # What the stack declares, not what is live: the program must not read live state here.
    os.environ["TPU_TRAINING_OFFLINE"] = "1"
    try:
        config, _, _ = project_files.stack_config(project, stack)
        result = offline.run_program(project, stack)
    except project_files.ProjectFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except pulumi.RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    gcp_project = config.get("gcp:project", "")
    checks = Preflight(declared(result, gcp_project), Budget(args.timeout)).run()
    status = exit_status(checks)
    document = {
        "stack": stack,
        "project": gcp_project,
        "checks": [c.to_json() for c in checks],
        "exitStatus": status,
    }
    if args.json == "-":
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return status
    print(render(stack, gcp_project, checks))
    if args.json:
        try:
            with open(args.json, "w") as file:
                json.dump(document, file, indent=2)
                file.write("\n")
        except OSError as exc:
            print(f"error: cannot write {args.json}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_USAGE
    return status
