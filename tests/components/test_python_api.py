"""Issue 18, item 9: the Python API for importers gets the same care as the stack file.

Every component and public function exported by ``tpu_training_components`` is called with each
argument missing, ``None``, of a wrong type, ``'yes'`` for a boolean, and a negative, zero or
fractional count; each call must end in ``InvalidArgument`` naming the argument (never a
``KeyError``, ``TypeError`` or ``AttributeError``, never a value silently taken), or, for a value
that is valid, in a program that runs. The cases are generated from the ``TypedDict``
annotations and the functions' signatures, so an argument added later is covered the day it is
declared. Components run under mocks (``support.harness.program.run_components``).
"""

from __future__ import annotations

import collections.abc
import inspect
import subprocess
import sys
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import pulumi
import pulumi_kubernetes as k8s
import pytest
import tpu_training_components as api
from support.harness.program import run_components
from tpu_training_components import InvalidArgument

# --- Known-good arguments, one set per component --------------------------------------------


def _vm() -> dict[str, Any]:
    return {
        "zone": "europe-west4-a",
        "accelerator_type": "v3-8",
        "runtime_version": "tpu-vm-tf-2.16.1-pjrt",
        "train_command": "python3 train.py",
        "checkpoint_dir": "gs://bucket/checkpoints/vm",
        "service_account_email": "trainer@proj.iam.gserviceaccount.com",
        "provisioning": "spot",
        "node_name": "vm-1",
        "setup_command": "pip install -r requirements.txt",
        "environment": {"TRAIN_STEPS": "10"},
        "recovery_generation": 1,
        "external_ip": False,
        "network": "default",
        "subnetwork": "default",
        "labels": {"team": "ml"},
        "project": "proj-123",
    }


def _bucket() -> dict[str, Any]:
    return {
        "region": "europe-west4",
        "bucket_name": "proj-123-ckpt",
        "project": "proj-123",
        "labels": {"team": "ml"},
        "noncurrent_version_retention_days": 7,
        "noncurrent_versions_kept": 3,
        "protect": True,
        "retain_on_delete": True,
    }


def _cluster() -> dict[str, Any]:
    return {
        "location": "europe-west4",
        "project": "proj-123",
        "cluster_name": "tpu-dev",
        "release_channel": "REGULAR",
        "min_version": "1.34",
        "maintenance_window": {
            "start_time": "02:00",
            "end_time": "08:00",
            "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU",
        },
        "system_machine_type": "e2-standard-4",
        "system_max_nodes": 3,
        "upgrade_exclusion_scope": "NO_MINOR_UPGRADES",
        "upgrade_exclusion_start": "2025-12-01T00:00:00Z",
        "network": "default",
        "subnetwork": "default",
        "pods_range_name": "pods",
        "services_range_name": "services",
        "master_ipv4_cidr_block": "172.16.0.32/28",
        "node_account_id": "tpu-dev-nodes",
        "deletion_protection": True,
        "labels": {"team": "ml"},
    }


def _network() -> dict[str, Any]:
    return {
        "network_name": "training",
        "regions": ["europe-west4"],
        "gke_region": "europe-west4",
        "iap_ssh": True,
        "project": "proj-123",
    }


def _account() -> dict[str, Any]:
    return {
        "account_id": "tpu-train",
        "buckets": {"eu": "proj-123-ckpt"},
        "display_name": "Training",
        "project": "proj-123",
    }


def _recovery() -> dict[str, Any]:
    return {
        "project": "proj-123",
        "tpu_vms": [{"name": "vm-1", "zone": "europe-west4-a"}],
        "jobs": [{"name": "job-1", "namespace": "default"}],
        "cluster": {"project": "proj-123", "location": "europe-west4", "name": "tpu-dev"},
        "read_live_state": False,
        "maintenance_grace_minutes": 30,
    }


def _pool() -> dict[str, Any]:
    return {
        "cluster": "tpu-dev",
        "cluster_region": "europe-west4",
        "machine_type": "ct6e-standard-4t",
        "topology": "4x4",
        "node_locations": ["europe-west4-a"],
        "service_account_email": "nodes@proj-123.iam.gserviceaccount.com",
        "slices": 1,
        "flex_start": True,
        "spot": False,
        "reservation": None,
        "max_run_duration": "72h",
        "queued_provisioning": False,
        "node_pool_name": "v6e",
        "labels": {"team": "ml"},
        "project": "proj-123",
    }


def _job() -> dict[str, Any]:
    return {
        "provider": k8s.Provider("cluster", kubeconfig="{}"),
        "node_pool": {
            "node_pool_name": "v6e",
            "machine_type": "ct6e-standard-4t",
            "topology": "4x4",
            "node_locations": ["europe-west4-a"],
            "cluster_region": "europe-west4",
            "slices": 1,
            "flex_start": True,
            "spot": False,
            "reservation": None,
            "max_run_duration": "72h",
            "queued_provisioning": False,
        },
        "image": "trainer:1",
        "command": ["python3", "train.py"],
        "checkpoint_dir": "gs://bucket/checkpoints/job-1",
        "google_service_account": "trainer@proj-123.iam.gserviceaccount.com",
        "google_service_account_id": "projects/proj-123/serviceAccounts/trainer",
        "workload_pool": "proj-123.svc.id.goog",
        "namespace": "default",
        "job_name": "job-1",
        "environment": {"TRAIN_STEPS": "10"},
        "recovery_generation": 0,
        "privileged": False,
        "labels": {"team": "ml"},
    }


@dataclass(frozen=True)
class Component:
    cls: type[pulumi.ComponentResource]
    args_type: type
    baseline: Callable[[], dict[str, Any]]


def _jobset() -> dict[str, Any]:
    job = _job()
    return {
        **job,
        "node_pool": {**job["node_pool"], "slices": 2},
        "slices": 2,
        "max_restarts": 3,
        "queue_name": "tpu-queue",
    }


def _queue() -> dict[str, Any]:
    pool = _job()["node_pool"]
    return {
        "provider": k8s.Provider("cluster", kubeconfig="{}"),
        "node_pool": {**pool, "queued_provisioning": True},
        "namespaces": ["default", "research"],
        "labels": {"team": "ml"},
    }


def _compute_class() -> dict[str, Any]:
    pool = _job()["node_pool"]
    return {
        "provider": k8s.Provider("cluster", kubeconfig="{}"),
        "node_pool": {**pool, "flex_start": False, "ladder": ["spot", "flex-start"]},
        "labels": {"team": "ml"},
    }


def _apis() -> dict[str, Any]:
    return {"apis": ["tpu.googleapis.com", "storage.googleapis.com"], "project": "proj-123"}


def _monitoring() -> dict[str, Any]:
    return {
        "stack": "dev",
        "project": "proj-123",
        "notify": ["email:ops@example.com"],
        "restart_budget": 5,
        "restart_window_hours": 6.0,
        "checkpoint_interval_seconds": 600,
        "hourly_cost": "always on: $1.25 per hour",
        "cluster": "tpu-dev",
        "namespaces": ["default"],
        "tpu_vms": ["demo-tpu"],
    }


def _engines() -> dict[str, Any]:
    return {
        "provider": k8s.Provider("cluster", kubeconfig="{}"),
        "jobset": True,
        "kueue": False,
        "jobset_version": "0.12.0",
        "kueue_version": "0.19.2",
    }


COMPONENTS = {
    "PreemptibleTpuVm": Component(api.PreemptibleTpuVm, api.PreemptibleTpuVmArgs, _vm),
    "CheckpointBucket": Component(api.CheckpointBucket, api.CheckpointBucketArgs, _bucket),
    "GkeTpuCluster": Component(api.GkeTpuCluster, api.GkeTpuClusterArgs, _cluster),
    "TrainingNetwork": Component(api.TrainingNetwork, api.TrainingNetworkArgs, _network),
    "TrainingServiceAccount": Component(api.TrainingServiceAccount, api.TrainingServiceAccountArgs, _account),
    "TrainingRecovery": Component(api.TrainingRecovery, api.TrainingRecoveryArgs, _recovery),
    "FlexStartTpuNodePool": Component(api.FlexStartTpuNodePool, api.FlexStartTpuNodePoolArgs, _pool),
    "TpuTrainingJob": Component(api.TpuTrainingJob, api.TpuTrainingJobArgs, _job),
    "TpuTrainingJobSet": Component(api.TpuTrainingJobSet, api.TpuTrainingJobSetArgs, _jobset),
    "WorkloadEngines": Component(api.WorkloadEngines, api.WorkloadEnginesArgs, _engines),
    "QueuedProvisioning": Component(api.QueuedProvisioning, api.QueuedProvisioningArgs, _queue),
    "TpuComputeClass": Component(api.TpuComputeClass, api.TpuComputeClassArgs, _compute_class),
    "ProjectApis": Component(api.ProjectApis, api.ProjectApisArgs, _apis),
    "StackMonitoring": Component(api.StackMonitoring, api.StackMonitoringArgs, _monitoring),
}


def test_the_package_exports_what_all_lists_and_imports_each_only_when_first_used():
    assert sorted(api.__all__) == sorted(api._EXPORTS)
    assert set(api._EXPORTS) <= set(dir(api))
    for name in api.__all__:
        assert getattr(api, name).__name__ == name
    # A fresh interpreter: the domain alone (what tpu-training recover, tpu-training status and the engine
    # tier's provider doubles import) loads no Pulumi resource module and no pulumi-gcp.
    fresh = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, tpu_training_components.domain.change_impact, tpu_training_components as t\n"
            "heavy = ('pulumi_gcp', 'tpu_training_components.resources')\n"
            "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
            "t.CheckpointBucket\n"
            "print('pulumi_gcp.storage' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert fresh.stdout.split("\n")[:2] == ["[]", "True"], fresh.stdout + fresh.stderr


def test_every_exported_component_is_covered():
    exported = {
        name
        for name in api.__all__
        if isinstance(getattr(api, name), type) and issubclass(getattr(api, name), pulumi.ComponentResource)
    }
    assert exported == set(COMPONENTS)


# --- Generating the cases from the annotations ------------------------------------------------


def _strip(annotation: Any) -> Any:
    while typing.get_origin(annotation) in (typing.NotRequired, typing.Required, typing.Annotated):
        annotation = typing.get_args(annotation)[0]
    return annotation


def _members(annotation: Any) -> tuple[Any, ...]:
    annotation = _strip(annotation)
    if typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return (annotation,)


def _plain(annotation: Any) -> list[Any]:
    """The annotation's plain types: not None, not an Awaitable or an Output (pulumi.Input)."""
    return [
        m
        for m in _members(annotation)
        if m is not type(None)
        and typing.get_origin(m) is not collections.abc.Awaitable
        and not isinstance(m, typing.ForwardRef)
    ]


def _is_typed_dict(annotation: Any) -> bool:
    return isinstance(annotation, type) and hasattr(annotation, "__required_keys__")


def _wrong_values(annotation: Any) -> Iterator[tuple[str, Any]]:
    """Values no member of ``annotation`` takes, each with why it is wrong."""
    plain = _plain(annotation)
    kinds = {typing.get_origin(m) or m for m in plain}
    if str not in kinds:
        yield "text", "some text"
    if str in kinds:
        yield "a number for text", 5
        yield "a NUL byte", "a\0b"
    if bool in kinds:
        yield "'yes' for a boolean", "yes"
        yield "1 for a boolean", 1
    if int in kinds:
        yield "a negative count", -1
        yield "a fraction", 2.5
        yield "a whole float", 2.0
        yield "a boolean for a count", True
        yield "text for a count", "3"
    if kinds & {collections.abc.Mapping, dict} or any(_is_typed_dict(m) for m in plain):
        yield "a list for a mapping", ["a"]
    if kinds & {collections.abc.Sequence, list}:
        yield "a mapping for a list", {"a": 1}
        yield "text for a list", "abc"
    for member in plain:
        origin = typing.get_origin(member)
        # (A mapping of anything, such as TrainingRecovery's previous_outputs, takes numbers.)
        if origin in (collections.abc.Mapping, dict) and typing.get_args(member)[-1:] != (Any,):
            yield "a number as a mapping's value", {"k": 5}
        if origin is collections.abc.Sequence and typing.get_args(member)[0] is str:
            yield "a number as a list's item", [5]


def _cases(args_type: type, baseline: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple]:
    """(label, path, value or MISSING, must be refused): every argument, nested ones too."""
    hints = args_type.__annotations__  # pulumi.Input's forward reference to Output stays unresolved
    for key, annotation in hints.items():
        path = (*prefix, key)
        required = typing.get_origin(annotation) is not typing.NotRequired
        optional = type(None) in _members(annotation)
        if required:
            yield "missing", path, MISSING, True
        if not optional:
            yield "None", path, None, True
        for why, value in _wrong_values(annotation):
            yield why, path, value, True
        if int in _plain(annotation):
            yield "zero", path, 0, None  # a count may or may not take zero: refused cleanly or valid
        nested = [m for m in _plain(annotation) if _is_typed_dict(m)]
        if nested and isinstance(baseline.get(key), Mapping):
            yield from _cases(nested[0], baseline[key], path)
        sequence_of = [
            typing.get_args(m)[0]
            for m in _plain(annotation)
            if typing.get_origin(m) is collections.abc.Sequence and _is_typed_dict(typing.get_args(m)[0])
        ]
        if sequence_of and baseline.get(key):
            yield from _cases(sequence_of[0], baseline[key][0], (*path, 0))


MISSING = object()


def _with(args: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    target: Any = args
    for part in path[:-1]:
        target = target[part]
    if value is MISSING:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return args


def _component_cases() -> Iterator[Any]:
    for name, component in COMPONENTS.items():
        for label, path, value, refused in _cases(component.args_type, _shape_of(component)):
            yield pytest.param(name, path, value, refused, id=f"{name}-{'.'.join(map(str, path))}-{label}")


def _shape_of(component: Component) -> dict[str, Any]:
    """The baseline's nesting, to walk nested TypedDicts (values made outside a run are not used)."""
    if component.args_type is api.TpuTrainingJobArgs:
        return {"node_pool": {}}
    return component.baseline()


def _refusal_names(message: str, path: tuple) -> bool:
    key = str(path[-1]) if not isinstance(path[-1], int) else str(path[-2])
    return key in message


@pytest.mark.parametrize(("component", "path", "value", "refused"), list(_component_cases()))
def test_each_argument_of_each_component(component, path, value, refused):
    spec = COMPONENTS[component]

    def body() -> None:
        spec.cls("it", _with(spec.baseline(), path, value))

    if refused is None:
        try:
            run_components(body)
        except InvalidArgument as err:
            assert _refusal_names(str(err), path), str(err)
        return
    with pytest.raises(InvalidArgument) as err:
        run_components(body)
    assert _refusal_names(str(err.value), path), str(err.value)
    assert f"{component} 'it'" in str(err.value) or f"{component}Args" in str(err.value)


@pytest.mark.parametrize("component", COMPONENTS)
def test_each_baseline_is_valid(component):
    spec = COMPONENTS[component]
    run = run_components(lambda: spec.cls("it", spec.baseline()))
    assert any(r.name == "it" for r in run.registrations)


_SELF_CASES = (
    ("it", None, None, "args = None: Input should be a valid dictionary"),
    ("it", ["zone"], None, "args = ['zone']: Input should be a valid dictionary"),
    ("it", "BASELINE+typo", None, "unknown argument 'typo'"),
    (None, "BASELINE", None, "the resource name None must be non-empty text"),
    ("", "BASELINE", None, "the resource name '' must be non-empty text"),
    ("it", "BASELINE", {"protect": True}, "opts = {'protect': True} must be a pulumi.ResourceOptions"),
)


def _self_cases() -> Iterator[Any]:
    for component in COMPONENTS:
        for name, args, opts, fragment in _SELF_CASES:
            yield pytest.param(component, name, args, opts, fragment, id=f"{component}-{fragment}")


@pytest.mark.parametrize(("component", "name", "args", "opts", "fragment"), list(_self_cases()))
def test_the_component_itself_refuses_a_bad_name_args_or_opts(component, name, args, opts, fragment):
    spec = COMPONENTS[component]

    def body() -> None:
        given = args
        if args == "BASELINE":
            given = spec.baseline()
        elif args == "BASELINE+typo":
            given = {**spec.baseline(), "typo": 1}
        spec.cls(name, given, opts)  # type: ignore[arg-type]

    with pytest.raises(InvalidArgument) as err:
        run_components(body)
    assert fragment in str(err.value)


def test_a_boolean_is_never_taken_from_text():
    # The regression the issue names: `external_ip="yes"` was truthy, and gave the VM public IPs.
    with pytest.raises(InvalidArgument, match="external_ip = 'yes': Input should be a valid boolean"):
        run_components(lambda: api.PreemptibleTpuVm("it", {**_vm(), "external_ip": "yes"}))  # type: ignore[typeddict-item]


def test_every_wrong_type_is_refused_at_once_each_at_its_property_path():
    def body() -> None:
        api.PreemptibleTpuVm(
            "it",
            {**_vm(), "external_ip": "yes", "service_account_email": 5, "labels": {"team": 1}, "typo": 1},  # type: ignore[typeddict-item, typeddict-unknown-key]
        )

    with pytest.raises(InvalidArgument) as err:
        run_components(body)
    # Pulumi's own error for bad inputs, and a RunError, which the CLI prints without a traceback.
    assert isinstance(err.value, pulumi.InputPropertiesError) and isinstance(err.value, pulumi.RunError)
    # A pulumi.Input[str] is a union of text, an awaitable and an Output: one problem, at its own path.
    assert err.value.errors == [
        {"property_path": "service_account_email", "reason": "Input should be a valid string"},
        {"property_path": "external_ip", "reason": "Input should be a valid boolean"},
        {"property_path": "labels.team", "reason": "Input should be a valid string"},
    ]
    assert "unknown argument 'typo'" in str(err.value) and str(err.value).startswith(
        "PreemptibleTpuVm 'it': 4 problems with its arguments:\n"
    )


def test_an_output_where_a_plain_value_is_planned_with_is_refused_by_name():
    def body() -> None:
        api.PreemptibleTpuVm("it", {**_vm(), "zone": pulumi.Output.from_input("europe-west4-a")})  # type: ignore[typeddict-item]

    with pytest.raises(InvalidArgument, match="zone: is a pulumi.Output, but must be a value known when"):
        run_components(body)


def test_an_output_where_an_input_is_taken_is_left_to_the_engine():
    def body() -> None:
        api.PreemptibleTpuVm(
            "it",
            {
                **_vm(),
                "recovery_generation": pulumi.Output.from_input(3),
                "project": pulumi.Output.from_input("p"),
            },
        )

    run = run_components(body)
    assert run.one("gcp:tpu/v2Vm:V2Vm", "it-vm").inputs["labels"]["recovery-generation"] == "3"


# --- Public functions ---------------------------------------------------------------------------

FUNCTIONS: dict[str, dict[str, Any]] = {
    "accelerator_type": {"name": "v3-8"},
    "machine_type": {"name": "ct6e-standard-4t"},
    "region_of_zone": {"zone": "europe-west4-a"},
    "slice_shape": {"machine_type_name": "ct6e-standard-4t", "topology": "4x4"},
    "topology_chips": {"topology": "4x4"},
    "plan_training": {
        "per_core_batch_size": 128,
        "cores": 8,
        "total_examples": 1000,
        "base_learning_rate": 0.1,
        "learning_rate_scaling": "linear",
        "reference_cores": 8,
    },
    "plan_tpu_node_pool": {
        "name": "v6e",
        "machine_type": "ct6e-standard-4t",
        "topology": "4x4",
        "node_locations": ["europe-west4-a"],
        "cluster_region": "europe-west4",
        "slices": 1,
        "flex_start": True,
        "spot": False,
        "reservation": None,
        "max_run_duration": "72h",
        "queued_provisioning": False,
    },
}


def test_every_exported_function_is_covered():
    exported = {
        name
        for name in api.__all__
        if inspect.isfunction(getattr(api, name)) and not isinstance(getattr(api, name), type)
    }
    assert exported == set(FUNCTIONS)


def _function_cases() -> Iterator[Any]:
    for name, baseline in FUNCTIONS.items():
        func = getattr(api, name)
        hints = typing.get_type_hints(inspect.unwrap(func))
        for key, parameter in inspect.signature(func).parameters.items():
            annotation = hints[key]
            required = parameter.default is inspect.Parameter.empty
            cases: list[tuple[str, Any, Any]] = []
            if required:
                cases.append(("missing", MISSING, True))
            if type(None) not in _members(annotation):
                cases.append(("None", None, True))
            cases += [(why, value, True) for why, value in _wrong_values(annotation)]
            if int in _plain(annotation):
                cases.append(("zero", 0, None))
            for label, value, refused in cases:
                yield pytest.param(name, baseline, key, value, refused, id=f"{name}-{key}-{label}")


@pytest.mark.parametrize(("function", "baseline", "key", "value", "refused"), list(_function_cases()))
def test_each_argument_of_each_public_function(function, baseline, key, value, refused):
    func = getattr(api, function)
    kwargs = _with(dict(baseline), (key,), value)
    if refused is None:
        try:
            func(**kwargs)
        except InvalidArgument as err:
            assert key in str(err) or key.replace("_", " ") in str(err), str(err)
        return
    with pytest.raises(InvalidArgument) as err:
        func(**kwargs)
    assert str(err.value).startswith(function), str(err.value)
    assert key in str(err.value), str(err.value)


@pytest.mark.parametrize("function", FUNCTIONS)
def test_each_function_baseline_is_valid(function):
    assert getattr(api, function)(**FUNCTIONS[function]) is not None


def test_a_refused_domain_value_is_still_the_domains_own_error():
    # Code that caught CatalogueError (or ValueError) before keeps working.
    with pytest.raises(
        api.CatalogueError, match=r"accelerator_type\(name='v9-8'\): unknown accelerator type"
    ):
        api.accelerator_type("v9-8")
    with pytest.raises(ValueError):
        api.plan_training(per_core_batch_size=1, cores=8)
    with pytest.raises(InvalidArgument, match="give exactly one of total_examples and epochs"):
        api.plan_training(per_core_batch_size=1, cores=8)


def test_a_recovery_cause_is_a_cause_word_and_labels_the_vm():
    with pytest.raises(
        InvalidArgument, match=r"recovery_cause: 'oops' is no recovery cause; allowed: preempted, "
    ):
        run_components(lambda: api.PreemptibleTpuVm("it", {**_vm(), "recovery_cause": "oops"}))
    run = run_components(
        lambda: api.PreemptibleTpuVm("it", {**_vm(), "recovery_cause": pulumi.Output.from_input("hung")})
    )
    assert run.one("gcp:tpu/v2Vm:V2Vm", "it-vm").inputs["labels"]["recovery-cause"] == "hung"
    unlabelled = run_components(lambda: api.PreemptibleTpuVm("it", {**_vm(), "recovery_cause": ""}))
    assert "recovery-cause" not in unlabelled.one("gcp:tpu/v2Vm:V2Vm", "it-vm").inputs["labels"]
