"""The Pulumi CLI for the recover watcher, through the Automation API: the stack's decrypted
config, a preview of what is pending, and `pulumi up --refresh --yes`, targeted at what recovery
decided. Every CLI call has a deadline. Needs the Pulumi CLI on PATH; nothing else in the project
does."""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

from pulumi.automation import CommandResult, PulumiCommand
from pulumi.automation.errors import create_command_error
from semver import VersionInfo
from tpu_training_components.domain.recovery_rounds import ROUND_ENV, RecoveryRound, RoundOutcome
from tpu_training_components.resources.reconcile import GENERATIONS_OUTPUT, JOB_GENERATIONS_OUTPUT

from infra.stack_locks import (
    LockNotRemovable,
    LockVerdict,
    judge_locks,
    lock_holders,
    remove_lock,
    runs_pulumi,
)

_TAIL_LINES = 5

MIN_CLI_VERSION = "3.226.0"
"""Pulumi.yaml's `requiredPulumiVersion`: older CLIs ignore the replacement triggers recovery
relies on, so an `up` by them would report success and recover nothing."""

UP_TIMEOUT_SECONDS = 4 * 3600.0
"""Longest a `pulumi up` may take before the watcher stops it: creating a cluster and a few
slices takes well under an hour; a CLI that has stopped answering would hold the watch for ever."""
PREVIEW_TIMEOUT_SECONDS = 30 * 60.0
"""Longest a `pulumi preview` may take: it changes nothing and calls no cloud API but the reads."""
CLI_TIMEOUT_SECONDS = 60.0
"""Longest any other CLI call may take (`stack select`, `config`, `stack output`, `stack
history`): each reads a file or the backend (a secrets provider for `config --show-secrets`) and
answers in seconds."""
VERSION_TIMEOUT_SECONDS = 30.0
"""Longest `pulumi version` may take: it reads nothing, so a CLI that does not answer it at
once does not answer."""
STOP_GRACE_SECONDS = 60.0
"""After its deadline `pulumi up` gets SIGINT, with which it stops starting operations and waits
for those in flight, and this long to end before SIGKILL."""
READ_GRACE_SECONDS = 5.0
"""The same for every other call: it changes nothing, so it has nothing to finish."""


class PulumiUnavailable(Exception):
    """The Pulumi CLI is missing or unusable, or the stack does not exist: no round can recover."""


class PulumiTryLater(Exception):
    """The CLI could not say now (a preview failed): nothing was changed; a later round tries."""


class StackBusy(PulumiTryLater):
    """Another update holds the stack's lock, and it is not known to be dead."""


class PulumiTimedOut(PulumiTryLater):
    """A CLI call ran past its deadline and was stopped: nothing is known of its result."""


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


UP_MESSAGE = "python -m infra.recover: recovery after preemption, maintenance or a failed Job"

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


def _tail(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-_TAIL_LINES:])[:600] or "(no output)"


def _timeout_for(args: Sequence[str], up_timeout_seconds: float) -> float:
    words = [a for a in args if not a.startswith("-")]
    if words[:1] == ["up"]:
        return up_timeout_seconds
    if words[:1] == ["preview"]:
        return min(PREVIEW_TIMEOUT_SECONDS, up_timeout_seconds)
    if words[:1] == ["version"]:
        return VERSION_TIMEOUT_SECONDS
    return CLI_TIMEOUT_SECONDS


def _grace_for(args: Sequence[str], up_grace_seconds: float) -> float:
    words = [a for a in args if not a.startswith("-")]
    return up_grace_seconds if words[:1] == ["up"] else min(up_grace_seconds, READ_GRACE_SECONDS)


class DeadlineCommand(PulumiCommand):
    """The Automation API's `PulumiCommand`, with a deadline on every call: past it the CLI gets
    SIGINT (its own graceful stop), then SIGKILL after ``STOP_GRACE_SECONDS``, and the call raises
    ``PulumiTimedOut``. Its output is read as bytes and decoded leniently, so output that is not
    UTF-8 is shown, never a crash. The SDK's own version has no deadline at all."""

    def __init__(
        self,
        *,
        up_timeout_seconds: float = UP_TIMEOUT_SECONDS,
        grace_seconds: float = STOP_GRACE_SECONDS,
    ) -> None:
        # PulumiCommand.__init__ runs `pulumi version` with no deadline; this one does it itself.
        self.command = "pulumi"
        self._up_timeout = up_timeout_seconds
        self._grace = grace_seconds
        try:
            text = self.run(["version"], os.getcwd(), {}).stdout.strip()
        except PulumiTimedOut as exc:
            raise PulumiUnavailable(f"the Pulumi CLI does not answer: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - missing, not executable, failing: unusable
            raise PulumiUnavailable(
                f"the Pulumi CLI cannot be run: {_tail(str(exc))}; install it (version {MIN_CLI_VERSION} or "
                f"later): curl -fsSL https://get.pulumi.com | sh, or see https://www.pulumi.com/docs/install/"
            ) from None
        try:
            self.version: Optional[VersionInfo] = VersionInfo.parse(text.removeprefix("v"))
        except ValueError:
            raise PulumiUnavailable(
                f"`pulumi version` printed {text[:80]!r}, which is not a version"
            ) from None

    def run(
        self,
        args: list[str],
        cwd: str,
        additional_env: Mapping[str, str],
        on_output: Optional[Callable[[str], Any]] = None,
        on_error: Optional[Callable[[str], Any]] = None,
    ) -> CommandResult:
        head = args[: args.index("--")] if "--" in args else args
        full = args if "--non-interactive" in head else ["--non-interactive", *args]
        env = {
            **os.environ,
            **additional_env,
            "PULUMI_AUTOMATION_API": "true",
            "PULUMI_SKIP_UPDATE_CHECK": "true",
        }
        seconds = _timeout_for(full, self._up_timeout)
        deadline = time.monotonic() + seconds
        # A process group of its own, so that what it leaves behind can be stopped with it. (The
        # CLI starts each plugin in a group of the plugin's own, and stops them itself.)
        process = subprocess.Popen(
            [self.command, *full],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        assert process.stdout is not None and process.stderr is not None
        lines = _Lines((process.stdout.fileno(), on_output), (process.stderr.fileno(), on_error))
        timed_out = not lines.read_until(deadline, exited=process.poll)
        if timed_out:
            self._stop(process, _grace_for(full, self._grace))
        else:
            process.wait()
        # Read on a moment at most once the CLI is gone: a process it left behind may hold the
        # pipes open for ever. Then stop whatever is left of its group, and close the pipes.
        lines.read_until(time.monotonic() + _DRAIN_SECONDS, exited=lambda: 0)
        _kill_group(process.pid)
        process.stdout.close()
        process.stderr.close()
        if timed_out:
            shown = " ".join(a for a in full if a != "--non-interactive")[:200]
            raise PulumiTimedOut(f"`pulumi {shown}` did not finish within {seconds:g} s and was stopped")
        result = CommandResult(
            stdout="\n".join(lines.out), stderr="\n".join(lines.err), code=process.returncode
        )
        if result.code != 0:
            raise create_command_error(result)
        return result

    @staticmethod
    def _stop(process: subprocess.Popen, grace: float) -> None:
        for number, wait in ((signal.SIGINT, grace), (signal.SIGKILL, KILL_WAIT_SECONDS)):
            try:
                os.killpg(process.pid, number)
            except ProcessLookupError:
                return
            try:
                process.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


KILL_WAIT_SECONDS = 10.0
"""How long a stopped CLI gets after SIGKILL (``DeadlineCommand._stop``)."""

_DRAIN_SECONDS = 2.0
"""How long to read what is left in the pipes once the CLI has ended."""


def _kill_group(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _Lines:
    """A child's stdout and stderr, line by line, read without threads against a deadline: no
    read is ever left blocked on a pipe that a process left behind holds open."""

    def __init__(
        self,
        out: tuple[int, Optional[Callable[[str], Any]]],
        err: tuple[int, Optional[Callable[[str], Any]]],
    ) -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        self._selector = selectors.DefaultSelector()
        self._streams = {out[0]: (out[1], self.out), err[0]: (err[1], self.err)}
        self._partial = {out[0]: b"", err[0]: b""}
        for fd in self._streams:
            os.set_blocking(fd, False)
            self._selector.register(fd, selectors.EVENT_READ)

    def read_until(self, deadline: float, *, exited: Callable[[], Optional[int]]) -> bool:
        """Read until both pipes are closed or, once ``exited()`` says the child is gone, until
        nothing more comes (True); or until ``deadline`` passes (False)."""
        while self._selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            gone = exited() is not None
            events = self._selector.select(min(left, 0.1 if gone else 1.0))
            if not events and gone:
                return True
            for key, _ in events:
                self._read(key.fd)
        return True

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        if not chunk:
            self._selector.unregister(fd)
            if self._partial[fd]:
                self._emit(fd, self._partial[fd])
                self._partial[fd] = b""
            return
        *complete, self._partial[fd] = (self._partial[fd] + chunk).split(b"\n")
        for raw in complete:
            self._emit(fd, raw)

    def _emit(self, fd: int, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip()
        callback, into = self._streams[fd]
        into.append(line)
        if callback is not None:
            callback(line)


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
            # is, pending edits included (infra/recovery_targets.py says why).
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
        every holder is gone (``infra.stack_locks``), deletes those lock files and runs
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
