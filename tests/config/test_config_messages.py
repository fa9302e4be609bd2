"""Every config message in the stack file's words (issue 52, item 3): each field of each config
model, given a value of the wrong type, an empty one and one out of range, is refused with a line
that names the key and the value and says what is allowed, never in pydantic's words (``Input
should``, ``literal[``, ``tuple[``, ``after validation``) nor with a Python type name."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
import yaml
from support.harness.program import REPO

from tpu_training import offline, stack_config
from tpu_training.stack_config import loading

DEV = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())["config"]
PREFIX = "tpu-training:"
JARGON = re.compile(r"literal\[|tuple\[|Input should|after validation|\b(str|int|dict|NoneType|bool|float)\b")
BAD_VALUES: list[Any] = [3, -1, 10**12, True, "", [], {}, "not-a-value", [3], {"x": 1}]
"""Wrong types (a number, a boolean, text, a list, an object), empty values and values out of any
field's range; each field meets every one of them."""


def problems(config: dict[str, Any]) -> list[str]:
    """The loader's problem lines for ``config`` (the dev stack's keys), none when it is valid."""
    encoded = {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}
    try:
        offline.run(
            lambda: stack_config.load("dev", project_root=REPO),
            project="tpu-training",
            stack="dev",
            config=encoded,
        )
    except stack_config.ConfigError as exc:
        return [line.strip().removeprefix("- ") for line in str(exc).splitlines()[1:]]
    return []


def with_field(shape: str, alias: str, value: Any) -> dict[str, Any]:
    """The dev stack with ``alias`` of the object at ``shape`` (``tpuVms.[]``: its first item) set."""
    config = copy.deepcopy(DEV)
    head, *rest = shape.split(".")
    key = PREFIX + head
    if rest and rest[0] == "[]":
        config[key] = config.get(key) or [{}]
        target = config[key][0]
        rest = rest[1:]
    else:
        if not isinstance(config.get(key), dict):
            config[key] = {}
        target = config[key]
    for part in rest:
        target = target.setdefault(part, {})
    target[alias] = value
    return config


FIELDS = [
    (shape, field.alias or name)
    for shape, model in loading._parts().items()
    for name, field in model.model_fields.items()
]


def test_the_walk_covers_every_config_model():
    assert {shape for shape, _ in FIELDS} == set(loading._parts())
    assert len(FIELDS) > 80


@pytest.mark.parametrize(("shape", "alias"), FIELDS, ids=[f"{s}.{a}" for s, a in FIELDS])
def test_every_field_refuses_bad_values_in_the_stack_files_words(shape, alias):
    refused = 0
    for value in BAD_VALUES:
        lines = problems(with_field(shape, alias, value))
        refused += bool(lines)
        for line in lines:
            assert not JARGON.search(line), f"{shape}.{alias} = {value!r}: {line}"
            assert line.startswith(("tpu-training:", "gcp:")), line
    assert refused, f"{shape}.{alias} took every bad value"


@pytest.mark.parametrize(
    ("shape", "alias", "value", "said"),
    [
        (
            "tpuVms.[]",
            "provisioning",
            3,
            "tpu-training:tpuVms[0].provisioning = 3: must be one of preemptible, spot, on-demand, reserved, "
            "flex-start, or a list of them",
        ),
        (
            "tpuVms.[]",
            "provisioning",
            ["spot", "preemptble"],
            'tpu-training:tpuVms[0].provisioning[1] = "preemptble": must be one of preemptible, spot, '
            "on-demand, reserved, flex-start (did you mean 'preemptible'?)",
        ),
        (
            "jobs.[]",
            "command",
            [],
            "tpu-training:jobs[0].command = []: must hold at least 1 item; it holds 0",
        ),
        ("training", "epochs", -1, "tpu-training:training.epochs = -1: must be at least 1"),
        (
            "training",
            "learningRateScaling",
            "lin",
            'tpu-training:training.learningRateScaling = "lin": must be one of none, linear, sqrt '
            "(did you mean 'linear'?)",
        ),
        (
            "tpuVms.[]",
            "zone",
            3,
            'tpu-training:tpuVms[0].zone = 3: must be text; write it in quotes ("3") so YAML reads it '
            "as text",
        ),
        (
            "cluster",
            "maintenanceWindow",
            3,
            "tpu-training:cluster.maintenanceWindow = 3: must be an object (in YAML, `key: value` lines "
            "under it)",
        ),
    ],
    ids=[
        "one-of-or-list",
        "typo-in-a-list",
        "empty-command",
        "below-range",
        "typo",
        "number-as-text",
        "object",
    ],
)
def test_the_messages_the_trial_met_read_plainly(shape, alias, value, said):
    assert said in problems(with_field(shape, alias, value))


@pytest.mark.parametrize(
    ("machine", "topology", "fix"),
    [
        ("ct6e-standard-4t", "2x2", "machineType: ct6e-standard-4t with topology: 2x4 (2 VMs a slice)"),
        ("ct6e-standard-8t", "2x4", "machineType: ct6e-standard-4t with topology: 2x4 (2 VMs a slice)"),
        ("ct5lp-hightpu-1t", "1x1", "machineType: ct5lp-hightpu-4t with topology: 2x4 (2 VMs a slice)"),
    ],
)
def test_a_jobset_on_single_host_slices_names_the_multi_host_shape_that_fixes_it(machine, topology, fix):
    # GKE's TPU topologies (catalogue.py): a 4-chip VM type is the one of a generation that forms
    # multi-host slices; the smallest of them with at least the pool's chips is named.
    config = with_field("nodePools.[]", "machineType", machine)
    config[PREFIX + "nodePools"][0]["topology"] = topology
    config[PREFIX + "jobs"][0]["workload"] = "jobset"
    (line,) = [p for p in problems(config) if "needs multi-host slices" in p]
    assert f"use a multi-host shape such as {fix}, or one slice with a plain Job" in line


@pytest.mark.parametrize(
    ("shape", "value", "said"),
    [
        ("nodePools.[]", "flexstart", "(did you mean 'flex-start'?)"),
        (
            "nodePools.[]",
            ["flexstart", "spot"],
            "rung 0 ('flexstart') is not a capacity (did you mean 'flex-start'?)",
        ),
        ("tpuVms.[]", "flexstart", "(did you mean 'flex-start'?)"),
        ("tpuVms.[]", ["spot", "flex-start-queued"], "flex-start-queued is a capacity of GKE node pools"),
    ],
    ids=["pool-typo", "pool-rung-typo", "vm-typo-of-a-pool-capacity", "vm-rung-of-a-pool-capacity"],
)
def test_a_capacity_typo_gets_a_did_you_mean_and_a_pool_capacity_on_a_vm_says_where_it_goes(
    shape, value, said
):
    (line,) = [p for p in problems(with_field(shape, "provisioning", value)) if ".provisioning" in p]
    assert said in line
