"""`pulumi up --refresh --yes` for one stack through the Pulumi Automation API, its outcome
sorted into what the recover watcher acts on: succeeded, failed (retry later), busy (another
update holds the stack). Needs the Pulumi CLI on PATH; nothing else in the project does."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

from semver import VersionInfo
from tpu_training_components.deadline import DeadlineExceeded, call_with_deadline
from tpu_training_components.recovery_rounds import UpStatus

_TAIL_LINES = 5

MIN_CLI_VERSION = "3.226.0"
"""Pulumi.yaml's `requiredPulumiVersion`: older CLIs ignore the replacement triggers recovery
relies on, so an `up` by them would report success and recover nothing."""


UP_TIMEOUT_SECONDS = 4 * 3600.0
"""Longest a `pulumi up` may take before the watcher stops waiting for it: creating a cluster and
a few slices takes well under an hour; a CLI that has stopped answering would hold the watch for
ever."""


class PulumiUnavailable(Exception):
    """The Pulumi CLI is missing or unusable, or the stack does not exist: no round can recover."""


@dataclass(frozen=True)
class UpResult:
    status: UpStatus
    message: str
    """One line: the update's result, or the last lines of the CLI's error."""
    duration_seconds: float
    changes: dict[str, int] = field(default_factory=dict)
    """Resource operations the update performed (``{"create": 1, "same": 40}``)."""


class UpRunner(Protocol):
    """Runs `pulumi up --refresh --yes` for a stack; the seam the tests replace."""

    def __call__(self, stack: str) -> UpResult: ...


def _tail(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-_TAIL_LINES:])[:600] or "(no output)"


class AutomationUp:
    """The real runner: the Automation API's `Stack.up(refresh=True)` on the project in
    ``work_dir``, with the CLI's output handed line by line to ``on_output``."""

    def __init__(
        self,
        work_dir: Path,
        on_output: Callable[[str], None],
        *,
        up_timeout_seconds: float = UP_TIMEOUT_SECONDS,
    ) -> None:
        from pulumi import automation

        self._automation = automation
        self._work_dir = str(work_dir)
        self._on_output = on_output
        self._up_timeout = up_timeout_seconds
        minimum = VersionInfo.parse(MIN_CLI_VERSION)
        try:
            # Runs `pulumi version` once and checks it against the minimum.
            self._command = automation.PulumiCommand(version=minimum)
        except (
            OSError,
            ValueError,  # output that is not UTF-8
            subprocess.CalledProcessError,
            automation.errors.InvalidVersionError,
        ) as exc:
            raise PulumiUnavailable(f"the Pulumi CLI cannot be run: {exc}") from None
        version = self._command.version
        if version is None or version.compare(MIN_CLI_VERSION) < 0:
            # PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK turns the SDK's own check off; not this one.
            raise PulumiUnavailable(
                f"the Pulumi CLI is version {version or 'unknown'}; recovery needs {MIN_CLI_VERSION} or "
                f"later (Pulumi.yaml: requiredPulumiVersion), whose `pulumi up` honours replacement triggers"
            )

    def _select(self, stack: str) -> Any:
        automation = self._automation
        try:
            return automation.select_stack(
                stack_name=stack,
                work_dir=self._work_dir,
                opts=automation.LocalWorkspaceOptions(pulumi_command=self._command),
            )
        except automation.errors.StackNotFoundError:
            raise PulumiUnavailable(
                f"stack {stack!r} does not exist in the selected backend; create it with "
                f"`pulumi stack init {stack}` and deploy it once with `pulumi up`"
            ) from None

    def read_config(self, stack: str) -> dict[str, tuple[str, bool]]:
        """The stack's config as `pulumi up` hands it to the program, secrets decrypted:
        ``{key: (value, secret)}`` (`pulumi config --show-secrets --json`; no lock taken)."""
        try:
            config = self._select(stack).get_all_config()
        except PulumiUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure: the config cannot be known
            raise PulumiUnavailable(
                f"`pulumi config` for stack {stack!r} failed: {_tail(str(exc))}"
            ) from None
        return {key: (str(value.value), bool(value.secret)) for key, value in config.items()}

    def __call__(self, stack: str) -> UpResult:
        automation = self._automation
        started = time.monotonic()

        def done(status: UpStatus, message: str, changes: Optional[dict[str, int]] = None) -> UpResult:
            return UpResult(status, message, round(time.monotonic() - started, 3), dict(changes or {}))

        def update() -> Any:
            return self._select(stack).up(
                refresh=True,
                color="never",
                on_output=self._on_output,
                on_error=self._on_output,
                message="python -m infra.recover: recovery after preemption, maintenance or a failed Job",
            )

        try:
            result = call_with_deadline(update, self._up_timeout, f"pulumi up --stack {stack}")
        except DeadlineExceeded:
            # The CLI may still be running and hold the stack: later rounds see `busy` until it ends.
            return done(
                "failed",
                f"pulumi up did not finish within {self._up_timeout:g} s; it may still be running "
                f"(`pulumi cancel --stack {stack}` stops it)",
            )
        except automation.errors.ConcurrentUpdateError as exc:
            return done(
                "busy",
                f"another update holds the stack: {_tail(str(exc))}; if none is running, a killed one "
                f"left its lock: `pulumi cancel --stack {stack}`",
            )
        except automation.errors.CommandError as exc:
            return done("failed", _tail(str(exc)))
        except PulumiUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - output the SDK could not read: report, never crash the watch
            return done(
                "failed", f"pulumi up ran, but its result could not be read: {type(exc).__name__}: {exc}"
            )
        summary = result.summary
        return done("succeeded", f"update {summary.result}", summary.resource_changes)
