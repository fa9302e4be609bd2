"""Reading the stack's config: the only reader of ``pulumi.Config``. Every check runs before the
program declares a single resource, so bad input never leaves a half-applied change behind; every
problem found is reported at once, each naming its key."""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Optional

import pulumi
from pydantic import (
    BaseModel,
    ValidationError,
)
from tpu_training_components.errors import suggestion
from tpu_training_components.validation import shown

from . import messages
from .fields import PROJECT, Model
from .gke import ClusterConfig, JobConfig, MaintenanceWindowConfig, NodePoolConfig
from .monitoring import MonitoringConfig
from .network import NetworkConfig
from .stack import StackConfig
from .storage import PROJECT_ROOT_CONTEXT, BucketConfig, TrainerCodeConfig
from .tpu_vms import TpuVmConfig
from .training import CheckpointingConfig, RecoveryConfig, RestartBudgetConfig, TrainingConfig

# Keys of the project namespace this program reads.
PROJECT_KEYS = (
    "enableApis",
    "labels",
    "network",
    "tpuVms",
    "bucket",
    "training",
    "checkpointing",
    "recovery",
    "cluster",
    "nodePools",
    "jobs",
    "trainerCode",
    "monitoring",
)
# Object keys whose declared default `{}` means "not set".
_EMPTY_MEANS_UNSET = ("training", "checkpointing", "cluster", "trainerCode")


class ConfigError(pulumi.RunError):
    """The stack configuration is invalid. A ``pulumi.RunError``, so the CLI shows the message
    without a traceback; ``tpu-training plan`` exits with status 2."""


def _configured_keys() -> set[str]:
    """Every config key set for this run. The SDK has no public listing, so read both places it
    keeps config: values set by the language host and the ``PULUMI_CONFIG`` environment."""
    from pulumi.runtime import config as runtime_config

    return set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())


def _key_path(loc: tuple[Any, ...]) -> str:
    head, *rest = loc
    path = "gcp:project" if head == "gcpProject" else f"{PROJECT}:{head}"
    for part in rest:
        if part != "[key]":  # pydantic's mark for an error in a mapping's key, named just before
            path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _format_error(error: Any, parts: dict[str, type[Model]]) -> str:
    loc = tuple(error["loc"])
    if not loc:
        return str(error["msg"]).removeprefix("Value error, ")
    path = _key_path(loc)
    message = messages.plain(error)
    if error["type"] == "extra_forbidden":
        parent = _key_path(loc[:-1]) if len(loc) > 1 else PROJECT
        part = parts.get(_shape(loc[:-1]))
        replaced = part.replaced_keys.get(str(loc[-1])) if part else None
        if replaced is not None:
            return f"{path} = {_shown(error['input'])}: {replaced(str(loc[-1]), error['input'])}"
        allowed = _aliases(part) if part else []
        return (
            f"{path}: unknown key{suggestion(str(loc[-1]), allowed)}; "
            f"allowed in {parent}: {', '.join(allowed)}"
        )
    if error["type"] == "missing":
        return f"{path}: required but not set"
    if loc[-1] == "[key]":
        return f"{path}: {message}"
    value = error["input"]
    key, named, rest = message.partition(": ")
    part = parts.get(_shape(loc))
    across = error["type"] == "value_error" and isinstance(value, dict) and named
    if across and part and key in _aliases(part):
        # A check across keys that names the one at fault ("maxRunDuration: ..."): said at that key.
        return f"{path}.{key}" + (f" = {_shown(value[key])}" if key in value else "") + f": {rest}"
    if error["type"] in ("tuple_type", "list_type"):
        # pydantic says "tuple"; the stack file holds a YAML list.
        example = _as_yaml_list(value) if isinstance(value, (str, int, float)) else "[a, b]"
        message = f"should be a list (in YAML, for example {example})"
    if error["type"] == "string_type" and isinstance(value, (bool, int, float)):
        # YAML reads `5` and `true` as a number and a boolean: the value wants quotes.
        message += f'; write it in quotes ("{json.dumps(value)}") so YAML reads it as text'
    return f"{path} = {_shown(value)}: {message}"


def _shown(value: Any) -> str:
    """``value`` as the stack file wrote it (JSON), or, for an integer of hundreds of digits (which
    Python refuses to print past 4,300), its size."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return shown(value)
    return json.dumps(value, default=str, ensure_ascii=False)


def _as_yaml_list(value: str | int | float) -> str:
    """``value`` as the YAML list it was meant to be: a command line split into its words as a
    shell would (``python3 train.py`` -> ``[python3, train.py]``), each quoted where YAML needs it."""
    try:
        words = shlex.split(value) if isinstance(value, str) else [str(value)]
    except ValueError:  # an unbalanced quote: leave the text as one item
        words = [str(value)]
    plain = re.compile(r"[A-Za-z_./$][A-Za-z0-9_./$=+@%-]*|--?[A-Za-z][A-Za-z0-9_=-]*")
    typed = {"true", "false", "null", "yes", "no", "on", "off"}  # YAML would not read these as text
    return (
        "["
        + ", ".join(w if plain.fullmatch(w) and w.lower() not in typed else json.dumps(w) for w in words)
        + "]"
    )


def _shape(loc: tuple[Any, ...]) -> str:
    return ".".join("[]" if isinstance(p, int) else str(p) for p in loc)


def _parts() -> dict[str, type[Model]]:
    """The model of each object in the config, by its place (``_shape``)."""
    return {
        "tpuVms.[]": TpuVmConfig,
        "bucket": BucketConfig,
        "training": TrainingConfig,
        "checkpointing": CheckpointingConfig,
        "network": NetworkConfig,
        "recovery": RecoveryConfig,
        "recovery.restartBudget": RestartBudgetConfig,
        "cluster": ClusterConfig,
        "cluster.maintenanceWindow": MaintenanceWindowConfig,
        "nodePools.[]": NodePoolConfig,
        "jobs.[]": JobConfig,
        "trainerCode": TrainerCodeConfig,
        "monitoring": MonitoringConfig,
    }


def _aliases(model: type[BaseModel]) -> list[str]:
    return sorted(f.alias or n for n, f in model.model_fields.items())


OFFLINE_SECRET = "offline-secret"
"""What a `secure:` value reads as in an offline plan (``tpu_training/offline.py``), where there is no key
to decrypt it: a stand-in that is also a valid project ID, label value, name or image, so a secret
where one of those goes is a warning, not an error."""


def is_config_secret(key: str) -> bool:
    from pulumi.runtime import config as runtime_config

    return runtime_config.is_config_secret(key)


class _HugeNumber(ValueError):
    def __init__(self, digits: int) -> None:
        super().__init__(digits)
        self.digits = digits


def _bounded_int(text: str) -> int:
    # Python's int() refuses more digits than this (4,300 by default) with a bare ValueError; up
    # to it, the number reaches the model, whose own limits name its exact key.
    if len(text.lstrip("-")) > sys.get_int_max_str_digits():
        raise _HugeNumber(len(text.lstrip("-")))
    return int(text)


def _not_structured(key: str, text: str) -> str:
    if text == "":
        return (
            f"{PROJECT}:{key} is empty (null in the stack file?); give it a YAML object or list, "
            f"or remove the key"
        )
    return (
        f"{PROJECT}:{key} = {text!r}: expected a structured value (a YAML object or list in "
        f"Pulumi.<stack>.yaml, or JSON), not a plain string"
    )


@functools.cache
def gcp_provider_keys() -> frozenset[str]:
    """Every `gcp:` config key the installed pulumi-gcp reads (its generated ``config/vars.py``);
    `pulumi up` refuses any other key in that namespace before it starts."""
    # Read, not imported: importing it alone trips pulumi-gcp's lazy module loading.
    spec = importlib.util.find_spec("pulumi_gcp")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    source = Path(next(iter(spec.submodule_search_locations)), "config", "vars.py")
    try:
        text = source.read_text(encoding="utf-8")
    except OSError:
        return frozenset()
    return frozenset(re.findall(r"__config__\.get\w*\('(\w+)'\)", text))


def _unknown_key_problems(keys: list[str]) -> list[str]:
    """Keys of this project's namespace it does not read, `gcp:` keys the provider does not know,
    and namespaces that look like a misspelt `tpu-training`."""
    allowed_top = sorted(PROJECT_KEYS)
    known_gcp = gcp_provider_keys()
    problems = []
    for key in keys:
        namespace, _, short = key.partition(":")
        if namespace == PROJECT and short not in PROJECT_KEYS:
            problems.append(
                f"{key}: unknown key{suggestion(short, allowed_top)}; allowed: "
                + ", ".join(f"{PROJECT}:{k}" for k in allowed_top)
            )
        elif namespace == "gcp" and known_gcp and short not in known_gcp:
            problems.append(
                f"{key}: the gcp provider has no such key{suggestion(short, sorted(known_gcp))}; "
                f"`pulumi up` would refuse it"
            )
        elif namespace != PROJECT and difflib.get_close_matches(namespace, [PROJECT], cutoff=0.8):
            problems.append(
                f"{key}: unknown namespace {namespace!r} (did you mean '{PROJECT}:{short}'?); this "
                f"program reads {PROJECT}: and gcp: keys"
            )
    return problems


_LISTS = ("tpuVms", "nodePools", "jobs")


def _stands_in_for_a_secret(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return OFFLINE_SECRET in value
    return value == OFFLINE_SECRET


def _leave_out_secrets(raw: dict[str, Any], places: list[tuple[Any, ...]]) -> bool:
    """Offline, a secret reads as a stand-in (``OFFLINE_SECRET``); where the stack needs the real
    value (a zone, a machine type, a number), leave out of the plan the item or the key that holds
    it, and what depends on it, with a warning (`pulumi up` decrypts and uses it). Whether
    anything was left out."""
    left_out: dict[str, set[int]] = {key: set() for key in _LISTS}
    dropped_keys = set()
    for place in places:
        key = place[0]
        if key in _LISTS and len(place) >= 2 and isinstance(place[1], int):
            left_out[key].add(place[1])
        elif key in raw and key != "gcpProject":
            dropped_keys.add(key)
        else:
            continue
        pulumi.log.warn(
            f"{_key_path(place)} is a secret the offline plan cannot decrypt, and the plan needs its "
            f"value: it leaves out {_key_path(place[:2] if key in _LISTS else place[:1])} (`pulumi up` "
            f"decrypts and uses it)"
        )
    for key in dropped_keys:
        raw.pop(key)
    if "cluster" in dropped_keys:
        for key in ("nodePools", "jobs"):
            if raw.pop(key, None):
                pulumi.log.warn(f"{PROJECT}:{key} is left out of the offline plan with {PROJECT}:cluster")
    pools: list[Any] = raw["nodePools"] if isinstance(raw.get("nodePools"), list) else []
    jobs: list[Any] = raw["jobs"] if isinstance(raw.get("jobs"), list) else []
    gone_pools = {
        pool.get("name")
        for index, pool in enumerate(pools)
        if index in left_out["nodePools"] and isinstance(pool, dict)
    }
    for index, job in enumerate(jobs):
        if isinstance(job, dict) and job.get("nodePool") in gone_pools and index not in left_out["jobs"]:
            left_out["jobs"].add(index)
            pulumi.log.warn(f"{PROJECT}:jobs[{index}] is left out of the offline plan with its node pool")
    for key, indexes in left_out.items():
        if indexes and isinstance(raw.get(key), list):
            raw[key] = [item for index, item in enumerate(raw[key]) if index not in indexes]
    return bool(dropped_keys or any(left_out.values()))


def _nul_problems(value: Any, loc: tuple[Any, ...]) -> list[str]:
    """Every text of the config holding a NUL byte: no Google API, shell or environment takes
    one (bash drops it, a C string ends at it), so the run would get other text than written."""
    if isinstance(value, str):
        return (
            [f"{_key_path(loc)} = {json.dumps(value, ensure_ascii=False)}: contains a NUL byte (\\u0000)"]
            if "\x00" in value
            else []
        )
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in _nul_problems(item, (*loc, index))]
    if isinstance(value, dict):
        problems = []
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                problems.append(f"{_key_path((*loc, key))}: the key contains a NUL byte (\\u0000)")
            problems.extend(_nul_problems(item, (*loc, key)))
        return problems
    return []


def load(stack: str | None = None, *, project_root: Path) -> StackConfig:
    """Read and validate the stack's configuration, or raise ``ConfigError`` listing every
    problem found. ``project_root`` is the project's folder (Pulumi.yaml's): the files the
    config names (``trainerCode``) are read from there."""
    stack = stack or pulumi.get_stack()
    problems: list[str] = []

    project_config = pulumi.Config(PROJECT)
    problems.extend(_unknown_key_problems(sorted(_configured_keys())))

    raw: dict[str, Any] = {"stack": stack}
    gcp_project = pulumi.Config("gcp").get("project")
    if gcp_project is not None:
        raw["gcpProject"] = gcp_project
    for key in PROJECT_KEYS:
        text = project_config.get(key)
        # Pulumi.yaml declares `training: {}` as the default: an empty object means "not set".
        if text is None or (key in _EMPTY_MEANS_UNSET and text.strip() == "{}"):
            continue
        if text == OFFLINE_SECRET and is_config_secret(f"{PROJECT}:{key}"):
            # A secret object: the offline plan cannot decrypt it (`pulumi up` can).
            pulumi.log.warn(
                f"{PROJECT}:{key} is a secret the offline plan cannot decrypt; the plan leaves it at "
                f"its default (`pulumi up` decrypts and uses it)"
            )
            continue
        try:
            raw[key] = json.loads(text, parse_int=_bounded_int)
        except _HugeNumber as exc:
            problems.append(
                f"{PROJECT}:{key} holds a number of {exc.digits} digits; no setting takes one that long"
            )
        except json.JSONDecodeError:
            problems.append(_not_structured(key, text))

    for key, value in raw.items():
        if key != "stack":
            problems.extend(_nul_problems(value, (key,)))

    config: Optional[StackConfig] = None
    for _ in range(len(PROJECT_KEYS) + 1):  # each round leaves out at least one key or item
        try:
            config = StackConfig.model_validate(raw, context={PROJECT_ROOT_CONTEXT: project_root})
            break
        except ValidationError as exc:
            secret_places = [tuple(e["loc"]) for e in exc.errors() if _stands_in_for_a_secret(e.get("input"))]
            if not secret_places or not _leave_out_secrets(raw, secret_places):
                parts = _parts()
                problems.extend(
                    _format_error(e, parts) for e in messages.merged([dict(e) for e in exc.errors()])
                )
                break

    if problems or config is None:
        raise ConfigError(
            f"invalid configuration for stack {stack!r}:\n" + "\n".join(f"  - {p}" for p in problems)
        )
    return config
