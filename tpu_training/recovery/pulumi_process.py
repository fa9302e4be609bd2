"""The Pulumi CLI as a process a recovery round can always stop: ``DeadlineCommand`` runs each
command in a process group of its own, under a deadline, streams its lines as they come, and
stops the group (SIGINT, a grace, then SIGKILL) when the deadline passes or the round is asked to
stop. ``automation`` runs its commands through it."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from typing import Any, Callable, Mapping, Optional, Sequence

from pulumi.automation import CommandResult, PulumiCommand
from pulumi.automation.errors import create_command_error
from semver import VersionInfo

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


class PulumiTimedOut(PulumiTryLater):
    """A CLI call ran past its deadline and was stopped: nothing is known of its result."""


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


def _tail(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-_TAIL_LINES:])[:600] or "(no output)"
