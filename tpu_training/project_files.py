"""The project's files, read the way the Pulumi CLI reads them: ``Pulumi.yaml`` (the project, its
runtime and its config declarations) and ``Pulumi.<stack>.yaml`` (the stack's config: project
defaults, namespacing, value encoding, secrets left out), as YAML 1.2 with duplicate keys refused.
``offline`` runs the program with what they hold."""

from __future__ import annotations

import codecs
import copy
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from ruamel.yaml import YAML, YAMLError
from ruamel.yaml.constructor import SafeConstructor
from semver import VersionInfo

from tpu_training.stack_config import OFFLINE_SECRET

REPO_ROOT = Path(__file__).resolve().parent.parent


class ProjectFileError(Exception):
    """Pulumi.yaml or a stack file is missing or malformed."""


@dataclass(frozen=True)
class Project:
    name: str
    root: Path
    program_dir: Path
    declarations: dict[str, Any]
    stack_config_dir: Optional[Path] = None
    """Where the stack files are (``stackConfigDir``); beside Pulumi.yaml when None."""

    def stack_file(self, stack: str) -> Path:
        """The stack's settings file, where the CLI looks for it: ``Pulumi.<stack>.yaml`` in
        ``stackConfigDir`` (relative to Pulumi.yaml's folder), or beside Pulumi.yaml; a stack
        named ``org/project/stack`` in ``Pulumi.org-project-stack.yaml`` (pulumi/pulumi
        ``sdk/go/common/workspace/paths.go``, ``ProjectStackPath`` and ``qnameFileName``)."""
        folder = self.stack_config_dir or self.root
        return folder / f"Pulumi.{stack.replace('/', '-')}.yaml"


def find_project_root(start: Path | None = None) -> Path:
    """The nearest folder from ``start`` (default: the working directory) upwards that holds a
    Pulumi.yaml, as the CLI finds its project; this repository when there is none."""
    here = (start or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        if (folder / "Pulumi.yaml").is_file():
            return folder
    return REPO_ROOT


def load_project(root: Path | None = None) -> Project:
    root = root or find_project_root()
    path = root / "Pulumi.yaml"
    document = _read_yaml(path)
    if not isinstance(document, dict) or not document.get("name"):
        raise ProjectFileError(f"{path}: not a Pulumi project file (no 'name')")
    problem = _runtime_problem(document.get("runtime")) or _version_range_problem(
        document.get("requiredPulumiVersion")
    )
    if problem:
        raise ProjectFileError(f"{path}: {problem}")
    main = document.get("main") or "."
    if not isinstance(main, str):
        raise ProjectFileError(f"{path}: 'main' must be the program's folder, not a {type(main).__name__}")
    program_dir = (root / main).absolute()
    if not (program_dir / "__main__.py").is_file():
        raise ProjectFileError(f"{path}: 'main' is {main!r}, but {program_dir} holds no __main__.py")
    # `config: <folder>` is the older spelling of `stackConfigDir`, which the CLI still takes,
    # but not both (pulumi/pulumi sdk/go/common/workspace/project.go,
    # RewriteConfigPathIntoStackConfigDir).
    declarations = document.get("config")
    stack_config_dir = document.get("stackConfigDir")
    if isinstance(declarations, str):
        if stack_config_dir is not None:
            raise ProjectFileError(
                f"{path}: Should not use both config and stackConfigDir to define the stack "
                f"directory. Use only stackConfigDir instead."
            )
        stack_config_dir, declarations = declarations, None
    if stack_config_dir is not None and not isinstance(stack_config_dir, str):
        raise ProjectFileError(
            f"{path}: 'stackConfigDir' must be a folder, not a {type(stack_config_dir).__name__}"
        )
    return Project(
        name=str(document["name"]),
        root=root,
        program_dir=program_dir,
        declarations=_mapping(path, "'config'", declarations),
        # Joined to Pulumi.yaml's folder, as the CLI's filepath.Join does (an absolute folder
        # included: Go's Join does not restart at one).
        stack_config_dir=root / stack_config_dir.lstrip("/") if stack_config_dir else None,
    )


def _runtime_problem(runtime: Any) -> Optional[str]:
    """Why ``runtime`` is not this project's (its program is Python: ``main``'s __main__.py)."""
    name = runtime.get("name") if isinstance(runtime, dict) else runtime
    if name == "python":
        return None
    shown = json.dumps(runtime, default=str)[:80]
    return (
        f"runtime = {shown}: this project's program is Python (infra/__main__.py, run by the Python "
        f"language host); allowed: python, or {{name: python, options: ...}}"
    )


# blang/semver v4 ``ParseRange``, which the CLI checks requiredPulumiVersion with (pulumi/pulumi
# sdk/go/common/resource/plugin/plugin.go ``ValidatePulumiVersionRange``): ranges joined by `||`,
# each of space-separated comparisons `OP VERSION` (a space after < > = is dropped), OP one of
# < <= > >= = == ! != or none, VERSION a whole semantic version or one with `x` wildcards.
_COMPARISON = re.compile(r"(<=|>=|<|>|==|=|!=|!)?(.+)")


_WILDCARD = re.compile(r"(0|[1-9][0-9]*)\.(x|(0|[1-9][0-9]*)\.x)")


def _version_range_problem(text: Any) -> Optional[str]:
    """Why ``requiredPulumiVersion`` is no version range the CLI can read (None: absent, or one)."""
    if text is None:
        return None
    allowed = 'a semantic version range such as ">=3.226.0" or ">=3.226.0 <4.0.0"'
    if not isinstance(text, str) or not text.strip():
        return f"requiredPulumiVersion = {json.dumps(text, default=str)[:80]}: allowed: {allowed}"
    for part in text.split("||"):
        comparisons = re.sub(r"([<>=])\s+", r"\1", part).split()
        for comparison in comparisons or [""]:
            match = _COMPARISON.fullmatch(comparison)
            version = match.group(2) if match else ""
            if not (VersionInfo.is_valid(version) or _WILDCARD.fullmatch(version)):
                return (
                    f"requiredPulumiVersion = {json.dumps(text)[:80]}: {comparison!r} is no comparison "
                    f"with a version; allowed: {allowed} (the CLI refuses any other)"
                )
    return None


class _TimestampsAsText(SafeConstructor):
    """The CLI (Go's yaml.v3) hands an unquoted `2025-12-01T00:00:00Z` to the program as the text
    it is; ruamel would make a datetime of it."""


_TimestampsAsText.add_constructor("tag:yaml.org,2002:timestamp", SafeConstructor.construct_yaml_str)


def _yaml_1_2() -> YAML:
    # The Pulumi CLI reads project and stack files with a YAML 1.2 parser that refuses duplicate
    # keys; PyYAML is YAML 1.1, where `12:30` is 750, `on` is true and a repeated key silently
    # wins. ruamel.yaml's safe loader is YAML 1.2 and refuses duplicate keys by default.
    loader = YAML(typ="safe", pure=True)
    loader.Constructor = _TimestampsAsText
    return loader


@functools.lru_cache(maxsize=64)
def _parsed_yaml_1_2(text: str) -> Any:
    return _yaml_1_2().load(text)


def _load_yaml_1_2(text: str) -> Any:
    """The single document in ``text``, as the Pulumi CLI reads it (see ``_yaml_1_2``). Parsed
    once per text (the pure-Python parser took about 20 ms of every plan, and a watch's rounds and
    repeated plans read the same files); each caller gets its own copy to change."""
    return copy.deepcopy(_parsed_yaml_1_2(text))


def _read_yaml(path: Path) -> Any:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ProjectFileError(f"{path} does not exist") from None
    except OSError as exc:
        raise ProjectFileError(f"{path} cannot be read: {exc.strerror or exc}") from None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise ProjectFileError(
            f"{path} is UTF-16; Pulumi reads project and stack files as UTF-8: save it as UTF-8"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ProjectFileError(
            f"{path}: line {line} is not UTF-8 (byte 0x{data[exc.start]:02x}); Pulumi reads project and "
            f"stack files as UTF-8: save it as UTF-8"
        ) from None
    try:
        document = _load_yaml_1_2(text)
    except YAMLError as exc:
        # ruamel adds a paragraph on how to switch its check off; the error itself is enough.
        reason = str(exc).split("\n\nTo suppress this check", 1)[0].strip()
        # ruamel shows a duplicate key's values as its parser's stand-ins ("{}" for any mapping),
        # and the text it read as "<unicode string>": name the file, and leave the values out.
        reason = re.sub(r' with value "[^"]*" \(original value: "[^"]*"\)', "", reason)
        reason = reason.replace('"<unicode string>"', f'"{path.name}"')
        raise ProjectFileError(f"{path} is not valid YAML 1.2 (as Pulumi reads it): {reason}") from None
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        # What ruamel's constructors raise on values they cannot build: `!!int abc`, an integer
        # of thousands of digits, nesting deeper than Python's stack.
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        raise ProjectFileError(f"{path} is not valid YAML 1.2 (as Pulumi reads it): {reason}") from None
    _check_size(path, document)
    return document


MAX_VALUES = 100_000
"""More values than any stack file needs: a file past it is an alias bomb (a few lines that
expand to billions of values), which the CLI's parser refuses too ("excessive aliasing")."""


def _check_size(path: Path, document: Any) -> None:
    pending, counted = [document], 0
    while pending:
        value = pending.pop()
        counted += 1
        if counted > MAX_VALUES:
            raise ProjectFileError(
                f"{path} expands to more than {MAX_VALUES} values (aliases that repeat aliases?); "
                f"Pulumi refuses such files too"
            )
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)


def _mapping(path: Path, what: str, value: Any) -> dict[str, Any]:
    """A mapping with string keys, as Pulumi's files hold; a clear error for anything else."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProjectFileError(
            f"{path}: {what} must be a mapping of keys to values, not a {type(value).__name__}"
        )
    for key in value:
        if not isinstance(key, str):
            raise ProjectFileError(
                f"{path}: {what} has the key {key!r} ({type(key).__name__}); keys must be strings "
                f"such as 'tpu-training:tpuVms' (quote it)"
            )
    return dict(value)


# What a `secure:` value reads as offline, where there is no key to decrypt it. One literal with
# the stack config, which recognises it to leave out what it cannot plan without the real value.
SECRET_PLACEHOLDER = OFFLINE_SECRET


def _encode(value: Any) -> str:
    """How the CLI hands a config value to the program: plain text for scalars, JSON for
    objects and lists (which ``Config.get_object`` parses back), and an empty string for a
    top-level `null` (pulumi/pulumi sdk/go/common/workspace/loaders.go, since 3.173.0)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _encode_value(path: Path, key: str, value: Any, secrets_found: list[bool]) -> str:
    try:
        return _encode(_strip_secrets(value, secrets_found))
    except (TypeError, ValueError, RecursionError) as exc:
        # A key that is a list or a map (`? [a, b] : c`), or nesting too deep for JSON.
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        raise ProjectFileError(f"{path}: {key} cannot be handed to the program as JSON ({reason})") from None


def _strip_secrets(value: Any, found: list[bool]) -> Any:
    # Offline there is no key to decrypt `secure:` values; stand in a placeholder, remember it.
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            found.append(True)
            return SECRET_PLACEHOLDER
        return {k: _strip_secrets(v, found) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_secrets(v, found) for v in value]
    return value


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool) or v in ("true", "false"),
    "array": lambda v: isinstance(v, list),
}


def _qualify(project: str, key: str) -> str:
    return key if ":" in key else f"{project}:{key}"


def stack_config(project: Project, stack: str) -> tuple[dict[str, str], list[str], list[str]]:
    """The config map the CLI would give the program: (values, secret keys, warnings)."""
    path = project.stack_file(stack)
    document = _mapping(path, "the stack file", _read_yaml(path))
    stack_values = {
        _qualify(project.name, k): v for k, v in _mapping(path, "'config'", document.get("config")).items()
    }

    merged: dict[str, Any] = {}
    for key, declaration in project.declarations.items():
        qualified = _qualify(project.name, key)
        namespaced_by_project = qualified.startswith(project.name + ":")
        if not isinstance(declaration, dict):
            merged[qualified] = declaration  # shorthand: a default (or a value, other namespaces)
            continue
        if "default" in declaration or "value" in declaration:
            merged[qualified] = declaration.get("default", declaration.get("value"))
        elif namespaced_by_project and qualified not in stack_values:
            raise ProjectFileError(f"Stack '{stack}' is missing configuration value '{key}'")
        declared_type = declaration.get("type")
        if declared_type and qualified in stack_values:
            check = _TYPE_CHECKS.get(declared_type, lambda v: True)
            if not check(stack_values[qualified]):
                raise ProjectFileError(
                    f"Stack '{stack}' with configuration key '{key}' must be of type '{declared_type}'"
                )
    merged.update(stack_values)

    values: dict[str, str] = {}
    secret_keys: list[str] = []
    warnings: list[str] = []
    for key, value in merged.items():
        if value is None:
            # The CLI's own warning, word for word but for the key.
            warnings.append(
                f"No value for configuration key {key!r}. This is currently treated as an empty "
                f'string "", but will be treated as `null` in a future version of pulumi.'
            )
        found: list[bool] = []
        values[key] = _encode_value(path, key, value, found)
        if found:
            secret_keys.append(key)
            warnings.append(
                f"{key} holds a secret, which the offline plan cannot decrypt; "
                f"it reads {SECRET_PLACEHOLDER!r} in its place"
            )
    return values, secret_keys, warnings
