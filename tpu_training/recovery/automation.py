"""The Pulumi CLI for the recover watcher, through the Automation API: the stack's decrypted
config, a preview of what is pending, and `pulumi up --refresh --yes`, targeted at what recovery
decided. Every CLI call has a deadline. Needs the Pulumi CLI on PATH; nothing else in the project
does."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

from tpu_training_components.domain.recovery_rounds import ROUND_ENV, RecoveryRound, RoundOutcome
from tpu_training_components.resources.reconcile import GENERATIONS_OUTPUT, JOB_GENERATIONS_OUTPUT

from tpu_training.recovery.pulumi_process import (
    _TAIL_LINES,
    KILL_WAIT_SECONDS,
    MIN_CLI_VERSION,
    STOP_GRACE_SECONDS,
    UP_TIMEOUT_SECONDS,
    DeadlineCommand,
    PulumiTimedOut,
    PulumiTryLater,
    PulumiUnavailable,
    _tail,
)
from tpu_training.recovery.stack_locks import (
    LockNotRemovable,
    LockVerdict,
    judge_locks,
    lock_holders,
    remove_lock,
    runs_pulumi,
)


class StackBusy(PulumiTryLater):
    """Another update holds the stack's lock, and it is not known to be dead."""


@dataclass(frozen=True)
class UpResult:
    status: RoundOutcome
    """What became of the update: ``SUCCEEDED``, ``FAILED`` or ``BUSY`` when the CLI ran it; a round
    that held it back says ``DRY_RUN``, ``STOPPED`` or ``BLOCKED``."""
    message: str
    """One line: the update's result, or the last lines of the CLI's error."""
    duration_seconds: float
    changes: dict[str, int] = field(default_factory=dict)
    """Resource operations the update performed (``{"create": 1, "same": 40}``)."""
    released_locks: tuple[str, ...] = ()
    """The locks of dead updates released before it could run, one line each saying whose and why."""


UP_MESSAGE = "tpu-training recover: recovery after preemption, maintenance or a failed Job"

UNCHANGED_OPS = frozenset({"same", "read", "refresh", "discard", "import"})
"""Preview steps that change nothing in the cloud (pkg/display/json.go ``PreviewStep.Op``)."""


@dataclass(frozen=True)
class PendingChange:
    """One step a full `pulumi preview` shows: a change to a resource the program declares."""

    urn: str
    op: str
    """``create``, ``update``, ``replace``, ``delete``, ... (the engine's step operation)."""
    keys: tuple[str, ...] = ()
    """The properties that cause it (``replaceReasons`` or ``diffReasons``)."""

    @property
    def shown(self) -> str:
        type_, name = _type_and_name(self.urn)
        because = f" ({', '.join(self.keys)})" if self.keys else ""
        return f"{type_} {name}: {self.op}{because}"


def _type_and_name(urn: str) -> tuple[str, str]:
    # urn:pulumi:STACK::PROJECT::PARENT$TYPE::NAME
    parts = urn.split("::")
    if len(parts) < 4:
        return "", urn
    return parts[2].rsplit("$", 1)[-1], "::".join(parts[3:])


class UpRunner(Protocol):
    """The CLI, as a round uses it; the seam the tests replace."""

    def __call__(
        self,
        stack: str,
        targets: Optional[Sequence[str]] = None,
        *,
        refresh: bool = True,
        recovery_round: Optional[RecoveryRound] = None,
    ) -> UpResult:
        """`pulumi up --yes` (with --refresh unless ``refresh`` is False), only for ``targets``
        (URNs) when given; the program learns of ``recovery_round`` through ``ROUND_ENV``."""
        ...

    def stack_outputs(self, stack: str) -> dict[str, Any]:
        """The stack's outputs as its last update wrote them (``PulumiTryLater``)."""
        ...

    def pending_changes(self, stack: str) -> list[PendingChange]:
        """What a full `pulumi up` would change now (a preview without refresh)."""
        ...

    def export_state(self, stack: str) -> dict[str, Any]:
        """The stack's state, as `pulumi stack export` prints it (``PulumiTryLater``)."""
        ...

    def import_state(self, stack: str, state: dict[str, Any]) -> tuple[str, ...]:
        """Writes the stack's state; returns the lines of the dead locks it released."""
        ...

    def refresh(self, stack: str, urns: Sequence[str]) -> tuple[str, ...]:
        """`pulumi refresh` of ``urns`` alone; returns the lines of the dead locks it released."""
        ...


def failure_message(text: str) -> str:
    """What a failed CLI call says, in one line: its ``error:`` lines (the cloud API's answer among
    them, each once), or else its last lines. The last lines alone are often a plugin's warning,
    and the API's answer scrolled away above them."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = list(dict.fromkeys(line for line in lines if line.startswith("error:")))
    if all(line.lower().startswith(_ENGINE_CLOSING) for line in errors):
        return _tail(text)  # no resource's own error line: the last lines are all there is
    # The engine's own closing lines ("update failed") say nothing of why; in the order the CLI
    # printed its diagnostics they may come first, so the resources' errors go before them.
    errors.sort(key=lambda line: line.lower().startswith(_ENGINE_CLOSING))
    return " | ".join(errors[:_TAIL_LINES])[:1000]


_ENGINE_CLOSING = ("error: update failed", "error: resource monitor has terminated", "error: preview failed")


def stack_urn(project: str, stack: str) -> str:
    """The URN of the stack's root resource, which holds its outputs."""
    return f"urn:pulumi:{stack}::{project}::pulumi:pulumi:Stack::{project}-{stack}"


class AutomationUp:
    """The real runner: the Automation API on the project in ``work_dir``, with the CLI's output
    handed line by line to ``on_output``."""

    def __init__(
        self,
        work_dir: Path,
        on_output: Callable[[str], None],
        *,
        up_timeout_seconds: float = UP_TIMEOUT_SECONDS,
        grace_seconds: float = STOP_GRACE_SECONDS,
    ) -> None:
        from pulumi import automation

        self._automation = automation
        self._work_dir = str(work_dir)
        self._on_output = on_output
        self._up_timeout = up_timeout_seconds
        self._grace = grace_seconds
        self.released: tuple[str, ...] = ()
        """The lines of the last ``unlocked`` call: whose dead locks it released."""

        self._command = DeadlineCommand(up_timeout_seconds=up_timeout_seconds, grace_seconds=grace_seconds)
        version = self._command.version
        if version is None or version.compare(MIN_CLI_VERSION) < 0:
            # PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK turns the SDK's own check off; not this one.
            raise PulumiUnavailable(
                f"the Pulumi CLI is version {version or 'unknown'}; recovery needs {MIN_CLI_VERSION} or "
                f"later (Pulumi.yaml: requiredPulumiVersion), whose `pulumi up` honours replacement triggers"
            )

    def _select(self, stack: str) -> Any:
        """The stack, selected (`pulumi stack select`). Raises ``PulumiUnavailable`` when it
        does not exist, ``PulumiTryLater`` when the CLI could not select it now (a backend that
        does not answer, output no one can read): nothing was changed."""
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
        except PulumiTimedOut:
            raise
        except Exception as exc:  # noqa: BLE001 - any other failure: the stack cannot be known now
            raise PulumiTryLater(
                f"`pulumi stack select` for stack {stack!r} failed: {_tail(str(exc))}"
            ) from None

    def read_config(self, stack: str) -> dict[str, tuple[str, bool]]:
        """The stack's config as `pulumi up` hands it to the program, secrets decrypted:
        ``{key: (value, secret)}`` (`pulumi config --show-secrets --json`; no lock taken).
        Raises ``PulumiTimedOut`` when the CLI does not answer in time."""
        try:
            config = self._select(stack).get_all_config()
        except (PulumiUnavailable, PulumiTryLater):
            raise
        except Exception as exc:  # noqa: BLE001 - any failure: the config cannot be known
            raise PulumiUnavailable(
                f"`pulumi config` for stack {stack!r} failed: {_tail(str(exc))}"
            ) from None
        return {key: (str(value.value), bool(value.secret)) for key, value in config.items()}

    def pending_changes(self, stack: str) -> list[PendingChange]:
        """Every change a full `pulumi up` would make now: `pulumi preview --json`, no refresh,
        no lock taken, nothing changed. Raises ``PulumiTryLater`` when the preview fails, runs
        past its deadline or prints no digest this version can read."""
        self._select(stack)
        try:
            result = self._command.run(
                ["preview", "--json", "--stack", stack], self._work_dir, {}, on_error=self._on_output
            )
        except PulumiTimedOut:
            raise
        except self._automation.errors.CommandError as exc:
            raise PulumiTryLater(f"`pulumi preview` for stack {stack!r} failed: {_tail(str(exc))}") from None
        try:
            digest = json.loads(result.stdout)
            steps = digest.get("steps") or []
            return [
                PendingChange(
                    str(step["urn"]),
                    str(step["op"]),
                    tuple(str(k) for k in (step.get("replaceReasons") or step.get("diffReasons") or ())),
                )
                for step in steps
                if step.get("op") not in UNCHANGED_OPS
            ]
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise PulumiTryLater(
                f"`pulumi preview --json` printed no digest this version can read: {type(exc).__name__}"
            ) from None

    def stack_outputs(self, stack: str) -> dict[str, Any]:
        """The stack's outputs (`pulumi stack output --json`): the generations say which VMs and
        Jobs it has deployed, and the recoveries of each Job within the restart budget's window.
        Raises ``PulumiTryLater`` when they cannot be read."""
        try:
            outputs = self._select(stack).outputs()
        except (PulumiUnavailable, PulumiTryLater):
            raise
        except Exception as exc:  # noqa: BLE001 - unreadable outputs say nothing
            raise PulumiTryLater(
                f"`pulumi stack output` for stack {stack!r} failed: {_tail(str(exc))}"
            ) from None
        return {key: output.value for key, output in outputs.items()}

    def __call__(
        self,
        stack: str,
        targets: Optional[Sequence[str]] = None,
        *,
        refresh: bool = True,
        recovery_round: Optional[RecoveryRound] = None,
    ) -> UpResult:
        automation = self._automation
        started = time.monotonic()

        def done(status: RoundOutcome, message: str, changes: Optional[dict[str, int]] = None) -> UpResult:
            return UpResult(status, message, round(time.monotonic() - started, 3), dict(changes or {}))

        selected = self._select(stack)
        # The update itself, run directly: its exit status is the result. (The SDK's Stack.up
        # also reads the stack's outputs and history afterwards, and would report a failure of
        # either as a failed update.)
        args = ["up", "--yes", "--skip-preview", "--color", "never", "--message", UP_MESSAGE]
        if refresh:
            args.append("--refresh")
        for urn in targets or ():
            # Only these are refreshed and changed; every other resource keeps its state as it
            # is, pending edits included (tpu_training/recovery/recovery_targets.py says why).
            args += ["--target", urn]
        # The program's outputs then say what the state holds after a targeted update.
        env = {ROUND_ENV: recovery_round.to_env()} if recovery_round is not None else {}

        def update() -> None:
            self._command.run(
                [*args, "--stack", stack], self._work_dir, env, self._on_output, self._on_output
            )

        try:
            self.unlocked(stack, update)
        except PulumiTimedOut as exc:
            return done(
                RoundOutcome.FAILED,
                f"{exc}; a stopped update can leave the stack locked; the next round releases it "
                f"(its process is gone), or run `pulumi cancel --stack {stack}`",
            )
        except StackBusy as exc:
            return done(RoundOutcome.BUSY, str(exc))
        except automation.errors.CommandError as exc:
            return dataclasses.replace(
                done(RoundOutcome.FAILED, failure_message(str(exc))), released_locks=self.released
            )
        try:
            (last,) = selected.history(page_size=1, page=1)
            result = done(RoundOutcome.SUCCEEDED, f"update {last.result}", last.resource_changes)
        except Exception as exc:  # noqa: BLE001 - the update succeeded; only its summary is missing
            result = done(
                RoundOutcome.SUCCEEDED,
                f"update succeeded (its summary could not be read: {type(exc).__name__})",
            )
        return dataclasses.replace(result, released_locks=self.released)

    # --- What a killed update left: its lock, and its state ----------------------------------

    def unlocked(self, stack: str, run: Callable[[], Any]) -> tuple[str, ...]:
        """Runs ``run`` (a CLI call that takes the stack's lock); when the lock is refused and
        every holder is gone (``tpu_training.recovery.stack_locks``), deletes those lock files and runs
        ``run`` once more. Returns the lines saying whose locks were released (none when the
        first run got the lock). Raises ``StackBusy`` when a holder may be alive."""
        automation = self._automation
        self.released = ()
        try:
            run()
            return ()
        except automation.errors.ConcurrentUpdateError as exc:
            refusal = str(exc)
            verdict = self.judge_locks(refusal)
        if not verdict.release:
            raise StackBusy(
                f"another update holds the stack: {_tail(refusal)}; {verdict.summary}; a later round "
                f"tries again (`pulumi cancel --stack {stack}` releases it, once you know no update runs)"
            )
        # Only the locks judged, never `pulumi cancel`: it deletes every lock of the stack, the one
        # another recoverer may have taken since it judged the same dead lock.
        for holder in lock_holders(refusal):
            try:
                remove_lock(holder.url, cwd=self._work_dir)
            except LockNotRemovable as exc:
                raise StackBusy(
                    f"a dead update's lock holds the stack: {verdict.summary}; {exc}: run "
                    f"`pulumi cancel --stack {stack}`"
                ) from None
            except Exception as exc:  # noqa: BLE001 - storage errors: the lock stays, a later round tries
                raise PulumiTryLater(
                    f"the dead update's lock {holder.url} could not be deleted: {exc}"
                ) from None
        released = self.released = tuple(
            f"released the lock of a dead update: {line}" for line in verdict.lines
        )
        try:
            run()
        except automation.errors.ConcurrentUpdateError as exc:
            raise StackBusy(
                f"another update took the stack as its dead lock was released: {_tail(str(exc))}"
            ) from None
        return released

    def judge_locks(self, refusal: str) -> LockVerdict:
        """Whether the locks a refusal names are all dead: held by a gone process on this host, or
        taken on another longer ago than this watcher's updates can run."""
        return judge_locks(
            lock_holders(refusal),
            this_host=socket.gethostname(),
            runs_pulumi=runs_pulumi,
            now=datetime.now(timezone.utc),
            stale_after=timedelta(seconds=self._up_timeout + self._grace + KILL_WAIT_SECONDS),
        )

    def export_state(self, stack: str) -> dict[str, Any]:
        """The stack's state (`pulumi stack export`; no lock taken, secrets stay encrypted).
        Raises ``PulumiTryLater`` when it cannot be read."""
        self._select(stack)
        try:
            result = self._command.run(["stack", "export", "--stack", stack], self._work_dir, {})
            state = json.loads(result.stdout)
        except PulumiTimedOut:
            raise
        except self._automation.errors.CommandError as exc:
            raise PulumiTryLater(
                f"`pulumi stack export` for stack {stack!r} failed: {_tail(str(exc))}"
            ) from None
        except ValueError:
            raise PulumiTryLater(f"`pulumi stack export` for stack {stack!r} printed no state") from None
        if not isinstance(state, dict):
            raise PulumiTryLater(f"`pulumi stack export` for stack {stack!r} printed no state")
        return state

    def import_state(self, stack: str, state: dict[str, Any]) -> tuple[str, ...]:
        """Writes ``state`` as the stack's (`pulumi stack import`, under the stack's lock, a dead
        update's released first). Returns the lines saying whose locks were released."""
        with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="settled-", delete=False) as file:
            json.dump(state, file)
        try:
            return self._locked(stack, "stack import", ["--file", file.name])
        finally:
            os.unlink(file.name)

    def refresh(self, stack: str, urns: Sequence[str]) -> tuple[str, ...]:
        """`pulumi refresh` of ``urns`` alone (their outputs read from the cloud), under the
        stack's lock, a dead update's released first. Returns the lines of the locks released."""
        args = ["--yes", "--skip-preview", "--color", "never"]
        for urn in urns:
            args += ["--target", urn]
        return self._locked(stack, "refresh", args, self._on_output)

    def _locked(
        self, stack: str, command: str, args: list[str], on_output: Optional[Callable[[str], None]] = None
    ) -> tuple[str, ...]:
        """`pulumi COMMAND ARGS --stack STACK`, a call that takes the stack's lock (``unlocked``);
        its failure is one a later round tries again (``PulumiTryLater``, saying what the CLI
        said). Returns the lines of the locks released."""
        full = [*command.split(), *args, "--stack", stack]
        try:
            return self.unlocked(
                stack, lambda: self._command.run(full, self._work_dir, {}, on_output, on_output)
            )
        except PulumiTryLater:
            raise
        except self._automation.errors.CommandError as exc:
            raise PulumiTryLater(
                f"`pulumi {command}` for stack {stack!r} failed: {failure_message(str(exc))}"
            ) from None


def deployed_names(outputs: dict[str, Any]) -> set[str]:
    """The VMs and Jobs a stack has deployed: the names in its generation outputs."""
    names: set[str] = set()
    for key in (GENERATIONS_OUTPUT, JOB_GENERATIONS_OUTPUT):
        value = outputs.get(key)
        if isinstance(value, dict):
            names.update(str(name) for name in value)
    return names
