"""What the commands' command lines share: the parser that exits 64, the stack name's rule, the
project a stack belongs to, the output paths checked before any work, and a quick exit."""

from __future__ import annotations

import argparse
import gc
import math
import os
import re
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Callable, NoReturn, Optional

from tpu_training.exit_codes import EXIT_CANNOT_WRITE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    # Imported when a command loads its project: the config package brings the SDK.
    from tpu_training import project_files


def interrupted(signum: int, frame: Optional[FrameType]) -> None:
    # One line and out, wherever the interrupt lands: in the middle of an SDK's import it would
    # otherwise end in a traceback of whatever was importing (SystemExit prints none). Nothing
    # the plan writes is half-done in a way a re-run does not redo.
    os.write(2, b"interrupted\n")
    raise SystemExit(EXIT_INTERRUPTED)


def exit_quickly(status: int) -> NoReturn:
    """End a command by the interpreter's own exit, once its output is out, without the
    collector's last passes over every object the SDKs made (``gc.freeze``: the objects are left
    to the teardown, which frees them anyway). Measured with benchmarks/plan_speed.py's method
    (fresh processes, interleaved, 7 rounds, median CPU time, 2026-11-26): a plain exit costs the
    dev plan 3.72 -> 4.72 s and the 256-VM plan 7.81 -> 9.13 s; with the freeze 3.93 s and
    7.57 s, within noise of leaving without any teardown."""
    try:
        if sys.stdout is not None:  # None: started with standard output closed
            sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`... | head`): Python would complain again when it flushes
        # standard output at exit, so point it at nothing first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    gc.freeze()
    sys.exit(status)


# The Pulumi CLI's rule for stack names (pkg/backend: "^[A-Za-z0-9_.-]{1,100}$").
_STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


def start(*, one_shot: bool) -> None:
    """Before a command imports its libraries: a Ctrl-C ends it with 130 and one line (a watch
    installs its own handlers once it runs), and, for a ``one_shot`` command, the collector is
    off. The collector would walk the SDKs' hundreds of thousands of
    objects, again and again while they import, to free almost nothing (the process ends in
    seconds). Measured as for exit_quickly: with the collector on, the dev plan takes 4.46 s of
    CPU instead of 3.86 s, the 256-VM plan 10.64 instead of 7.60 s, for 9 MiB less at its peak
    (benchmarks/plan_speed.py's machine, busy). Never for a watch, which runs for days."""
    signal.signal(signal.SIGINT, interrupted)
    if one_shot:
        gc.disable()


def printing(main: Callable[[], int], what: str) -> int:
    """``main``'s status, with its printing's failures said in one line: a reader that went away
    (`... | head`) is no error; a standard output that takes no more (a full disk) is 73."""
    try:
        status = main()
        if sys.stdout is not None:  # None: started with standard output closed; print() skips it
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                raise
            except OSError as exc:
                return stdout_failed(exc, what)
        return status
    except BrokenPipeError:
        # Python would complain again when it flushes stdout at exit: point it at nothing first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:  # run as a function, where ``interrupted`` is not installed
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


class UsageError(Exception):
    """The command line cannot be carried out; exit with ``EXIT_USAGE``."""


class CommandLineParser(argparse.ArgumentParser):
    """argparse, with exit status 64 for a bad command line (every command's parser)."""

    def error(self, message: str) -> NoReturn:
        # argparse exits 2 on a bad argument, which is this tool's status for bad config.
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"error: {message}\n")


def stack_name(stack: str) -> tuple[str, Optional[str]]:
    """``[org/][project/]name`` as the CLI takes it: (name, project or None)."""
    parts = stack.split("/")
    if len(parts) > 3 or not all(_STACK_NAME.match(part) and part not in (".", "..") for part in parts):
        raise UsageError(
            f"--stack {stack!r}: a stack name is 1 to 100 letters, digits, '-', '_' or '.' (Pulumi's "
            f"rule), optionally after ORG/ or ORG/PROJECT/; the plan reads Pulumi.<name>.yaml"
        )
    return parts[-1], parts[1] if len(parts) == 3 else None


def load_project_for(stack: str, stack_project: Optional[str]) -> project_files.Project:
    """The project found from the working directory, which ``--stack`` (its project part
    ``stack_project``) must not contradict. Raises ``project_files.ProjectFileError`` (a broken
    file) or ``UsageError`` (``--stack`` names another project)."""
    from tpu_training import project_files

    project = project_files.load_project()
    if stack_project not in (None, project.name):
        raise UsageError(f"--stack {stack!r} names project {stack_project!r}; this is {project.name!r}")
    return project


def _writable_folder(folder: Path, option: str, shown: str) -> None:
    """``folder`` exists (or can be made under its nearest existing ancestor) and is writable."""
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{option} {shown}: {existing} is a file, not a folder")
    if existing == folder and not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {shown}: no permission to write in {folder}")
    if existing != folder and not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {shown}: cannot create {folder}: no permission to write in {existing}")


def _checking_paths(option: str) -> Callable[[Callable[[str], None]], Callable[[str], None]]:
    """A path check that reports the operating system's refusals (a name too long, say) as
    usage errors too."""

    def wrap(check: Callable[[str], None]) -> Callable[[str], None]:
        def checked(target: str) -> None:
            try:
                check(target)
            except OSError as exc:
                raise UsageError(f"{option} {target}: {exc.strerror or exc}") from None

        return checked

    return wrap


@_checking_paths("--json")
def check_json_target(target: str) -> None:
    """``--json PATH`` names a file that can be written: not a folder, in a folder that exists."""
    if target == "-":
        return
    if not target:
        raise UsageError("--json: give a file name, or '-' for standard output")
    path = Path(target).absolute()
    if path.is_dir():
        raise UsageError(f"--json {target}: is a folder; give a file name such as {path / 'plan.json'}")
    if not path.parent.is_dir():
        what = "is a file" if path.parent.exists() else "does not exist"
        raise UsageError(f"--json {target}: the folder {path.parent} {what}")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"--json {target}: no permission to write it")
    if not path.exists() and not os.access(path.parent, os.W_OK | os.X_OK):
        raise UsageError(f"--json {target}: no permission to write in {path.parent}")


@_checking_paths("--manifests")
def check_manifest_folder(target: str) -> None:
    """``--manifests DIR`` is a folder, or can be made as one."""
    if not target:
        raise UsageError("--manifests: give a folder")
    path = Path(target).absolute()
    if path.exists() and not path.is_dir():
        raise UsageError(f"--manifests {target}: is a file, not a folder")
    _writable_folder(path, "--manifests", target)


def stdout_failed(exc: OSError, what: str) -> int:
    """Standard output took no more of ``what`` (``/dev/full``, a full disk): say so, and point it
    at nothing so that Python's own flush at exit does not fail again with a traceback."""
    print(f"error: cannot write {what} to standard output: {exc.strerror or exc}", file=sys.stderr)
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_CANNOT_WRITE


def seconds(what: str, least: float, most: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            seconds = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not math.isfinite(seconds) or not least <= seconds <= most:
            raise argparse.ArgumentTypeError(f"{text!r}: give the seconds {what}, from {least:g} to {most:g}")
        return seconds

    return parse
