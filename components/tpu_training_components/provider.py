"""What the component provider (``provider/``) serves to other languages: every component of this
library, under the package name ``tpu-training``. Kept here so that tests and the provider's entry
point read one list."""

import inspect
import json
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Optional

# The Pulumi SDK vendors google.rpc.Status as "google/protobuf/status.proto"; googleapis-common-
# protos, which the TPU and GKE clients import, defines the same message as "google/rpc/status.proto".
# Protobuf's default pool refuses the second definition whichever loads first, so a provider that
# reads live state would fail on its first probe. Both are the same message: the SDK gets the
# canonical module. (Must run before anything imports pulumi.provider.)
import google.rpc.status_pb2 as _canonical_status
import typing_extensions

sys.modules.setdefault("pulumi.runtime.proto.status_pb2", _canonical_status)

import pulumi  # noqa: E402
from pulumi.errors import InputPropertyError  # noqa: E402
from pulumi.output import contains_unknowns  # noqa: E402
from pulumi.provider import main  # noqa: E402
from pulumi.provider.experimental.analyzer import (  # noqa: E402
    ComponentDefinition,
    PropertyDefinition,
    PropertyType,
)
from pulumi.provider.experimental.component import ComponentProvider  # noqa: E402
from pulumi.provider.experimental.util import camel_case  # noqa: E402
from pulumi.provider.server import ComponentInitError  # noqa: E402

from .errors import InvalidArgument, PropertyPath, format_path  # noqa: E402
from .library_internals import resolved_value  # noqa: E402
from .resources.checkpoint_bucket import CheckpointBucket  # noqa: E402
from .resources.compute_class import TpuComputeClass  # noqa: E402
from .resources.engines import WorkloadEngines  # noqa: E402
from .resources.gke_cluster import GkeTpuCluster  # noqa: E402
from .resources.identity import TrainingServiceAccount  # noqa: E402
from .resources.network import TrainingNetwork  # noqa: E402
from .resources.queued_provisioning import QueuedProvisioning  # noqa: E402
from .resources.tpu_node_pool import FlexStartTpuNodePool  # noqa: E402
from .resources.tpu_vm import PreemptibleTpuVm  # noqa: E402
from .resources.training_job import TpuTrainingJob  # noqa: E402
from .resources.training_jobset import TpuTrainingJobSet  # noqa: E402
from .resources.training_recovery import TrainingRecovery  # noqa: E402

PACKAGE_NAME = "tpu-training"
"""The package's name in other languages: tokens are ``tpu-training:index:<Component>``."""

COMPONENTS: tuple[type[pulumi.ComponentResource], ...] = (
    CheckpointBucket,
    PreemptibleTpuVm,
    TrainingServiceAccount,
    TrainingNetwork,
    GkeTpuCluster,
    FlexStartTpuNodePool,
    TpuTrainingJob,
    TpuTrainingJobSet,
    WorkloadEngines,
    QueuedProvisioning,
    TpuComputeClass,
    TrainingRecovery,
)


def _version() -> str:
    # Generated SDKs carry the library's version; an uninstalled checkout says 0.0.0, as the SDK does.
    try:
        return version("tpu-training-components")
    except PackageNotFoundError:
        return "0.0.0"


PACKAGE_VERSION = _version()


class TpuTrainingProvider(ComponentProvider):
    """The SDK's component provider, with three fixes on the way in and one on the way out.

    - Every number crosses the wire as a protobuf double, so ``recoveryGeneration: 2`` from
      TypeScript arrives as ``2.0`` and would label a node ``"2.0"``: values the schema types as
      integers become ints again (a number with a fraction stays as it came, and the component
      refuses it, naming the argument).
    - An integer that comes from another resource (``recovery.vmGenerations["x"]``) arrives as an
      Output, on which the SDK's own integer check fails with a TypeError: it is passed on as an
      Output of an int.
    - A plain input (``nodePool``, ``tpuVms``) written from another resource's known value, as a
      YAML ``${...}`` is, arrives wrapped in an Output with its dependencies: it is unwrapped to
      its value, or refused by name when the value is not known yet.
    - A component's refusal (``InvalidArgument``) reaches the engine as Pulumi's own
      ``InputPropertiesError``: each problem at its property path in the schema's names
      (``nodePool.machineType``), which the engine prints with the value it was given; any other
      failure of a component, a message without a Python traceback.
    """

    def __init__(self) -> None:
        super().__init__(list(COMPONENTS), PACKAGE_NAME, None, PACKAGE_VERSION)
        self.schema = json.dumps(_with_inherited_descriptions(json.loads(self.schema or "{}"), self.analyzer))
        # Each component's definition as ``map_inputs`` is handed it, before its constructor runs:
        # what ``construct`` names a refusal's properties by (the SDK keeps its own copy private).
        self.definitions: dict[str, ComponentDefinition] = {}

    def map_inputs(self, inputs: Any, component_def: ComponentDefinition) -> Any:
        self.definitions[component_def.name] = component_def
        prepared: dict[str, Any] = {}
        integer_outputs: dict[str, pulumi.Output[Any]] = {}
        for key, value in inputs.items():
            prop = component_def.inputs.get(key)
            if prop is not None and isinstance(value, pulumi.Output):
                if prop.plain:
                    value = _known_value(value, key, component_def.name)
                elif prop.type is PropertyType.INTEGER:
                    integer_outputs[component_def.inputs_mapping[key]] = value.apply(_whole_number)
                    continue
            prepared[key] = self._whole_numbers(value, prop)
        return {**super().map_inputs(prepared, component_def), **integer_outputs}

    def _whole_numbers(self, value: Any, prop: Optional[PropertyDefinition]) -> Any:
        if prop is None or isinstance(value, pulumi.Output):
            return value
        if prop.type is PropertyType.INTEGER:
            return _whole_number(value)
        if isinstance(value, list) and prop.items:
            return [self._whole_numbers(item, prop.items) for item in value]
        if isinstance(value, dict) and prop.additional_properties:
            return {k: self._whole_numbers(v, prop.additional_properties) for k, v in value.items()}
        if isinstance(value, dict) and prop.ref:
            type_def = self.get_type_definition(prop)
            if type_def is not None and not type_def.enum:
                return {k: self._whole_numbers(v, type_def.properties.get(k)) for k, v in value.items()}
        return value

    def construct(
        self, name: str, resource_type: str, inputs: Any, options: Optional[pulumi.ResourceOptions] = None
    ) -> Any:
        queued = _queued_vm_inputs(resource_type, inputs)
        if queued:
            # A queued TPU VM is a Python dynamic resource: its plugin runs `python -m pulumi.dynamic`
            # in the *program's* virtualenv, which a program in another language does not have.
            raise pulumi.InputPropertiesError(
                f"PreemptibleTpuVm {name!r}",
                [
                    {
                        "property_path": key,
                        "reason": "a queued TPU VM (flex-start, queued, slices, maxRunDuration) is "
                        "declared from Python programs only for now; from this language, use "
                        "provisioning spot, on-demand, preemptible or reserved",
                    }
                    for key in queued
                ],
            )
        try:
            return super().construct(name, resource_type, inputs, options)
        except ComponentInitError as failure:
            component_def = self.definitions[resource_type.rsplit(":", maxsplit=1)[-1]]
            inner = failure.inner
            if isinstance(inner, InvalidArgument) and inner.refusals:
                # Not a RunError: the provider server sends an InputPropertiesError with its details.
                message = "; ".join([inner.where, *(r.reason for r in inner.refusals if not r.path)])
                raise pulumi.InputPropertiesError(
                    message,
                    [
                        {
                            "property_path": format_path(self._schema_path(r.path, component_def)),
                            "reason": r.reason,
                        }
                        for r in inner.refusals
                        if r.path
                    ],
                ) from None
            if isinstance(inner, InvalidArgument):
                raise pulumi.RunError(str(inner)) from None
            # Not a refusal the component wrote: a failure it did not foresee.
            raise pulumi.RunError(f"{component_def.name} {name!r}: {type(inner).__name__}: {inner}") from None

    def _schema_path(self, path: PropertyPath, component_def: ComponentDefinition) -> PropertyPath:
        """``path`` (Python's names) in the schema's names, read from the schema's own
        definitions: a property's name at each level, list indices and map keys as they are."""
        named: Optional[tuple[dict[str, PropertyDefinition], dict[str, str]]] = (
            component_def.inputs,
            component_def.inputs_mapping,
        )
        prop: Optional[PropertyDefinition] = None
        schema_path: list[str | int] = []
        for part in path:
            if named is not None and isinstance(part, str):
                properties, mapping = named
                schema_name = next((key for key, python in mapping.items() if python == part), part)
                prop = properties.get(schema_name)
                schema_path.append(schema_name)
            else:
                if prop is not None:
                    prop = prop.items if isinstance(part, int) else prop.additional_properties
                schema_path.append(part)
            type_def = self.get_type_definition(prop) if prop is not None and prop.ref else None
            named = (type_def.properties, type_def.properties_mapping) if type_def is not None else None
        return tuple(schema_path)


def _queued_vm_inputs(resource_type: str, inputs: Any) -> list[str]:
    """The inputs of a ``PreemptibleTpuVm`` that would make it a queued TPU VM (schema names)."""
    if not resource_type.endswith(":PreemptibleTpuVm") or not isinstance(inputs, dict):
        return []
    found = [key for key in ("queued", "slices", "maxRunDuration") if inputs.get(key) not in (None, 1)]
    if inputs.get("provisioning") == "flex-start":
        found.insert(0, "provisioning")
    return found


def _declaring_classes(owner: Any) -> list[Any]:
    """``owner`` and the classes it inherits fields from: a class's MRO, or for a ``TypedDict``
    (whose MRO is only ``dict``, and which keeps no bases before Python 3.12) the TypedDicts its
    module sees whose fields it has: those it was declared from."""
    if typing_extensions.is_typeddict(owner):
        keys = owner.__annotations__.keys()
        seen = vars(sys.modules[owner.__module__]).values()
        return [
            owner,
            *(
                v
                for v in seen
                if typing_extensions.is_typeddict(v) and v is not owner and v.__annotations__.keys() <= keys
            ),
        ]
    return [cls for cls in owner.__mro__ if cls not in (object, pulumi.Resource, pulumi.ComponentResource)]


def _with_inherited_descriptions(schema: dict[str, Any], analyzer: Any) -> dict[str, Any]:
    """The schema with a description for every property a component inherits. The SDK's analyzer
    reads a property's docstring from the source of the class it analyses only, so a field of a
    base (``TpuTrainingJobSetArgs`` from ``TpuTrainingJobArgs``, the outputs of
    ``TrainingWorkload``) would have none: it is read here from the class that declares it, with
    the analyzer's own reader (``Analyzer.get_docstring``)."""
    for component in COMPONENTS:
        resource = schema.get("resources", {}).get(f"{PACKAGE_NAME}:index:{component.__name__}", {})
        args_type = inspect.signature(component.__init__).parameters["args"].annotation
        for section, owner in (("inputProperties", args_type), ("properties", component)):
            names = {
                camel_case(key): key
                for cls in _declaring_classes(owner)
                for key in inspect.get_annotations(cls)
            }
            for schema_name, prop in resource.get(section, {}).items():
                if prop.get("description") or schema_name not in names:
                    continue
                for cls in _declaring_classes(owner):
                    docstring = analyzer.get_docstring(cls, names[schema_name])
                    if docstring:
                        prop["description"] = docstring
                        break
    return schema


def _whole_number(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _known_value(value: pulumi.Output[Any], key: str, component: str) -> Any:
    """The value of a plain input that arrived as an Output because it came from another resource.
    The provider server makes such Outputs from values it already holds, so they are resolved."""
    resolved, known_value, known, secret = resolved_value(value)
    if resolved and known and not contains_unknowns(known_value) and not secret:
        return known_value
    raise InputPropertyError(
        key,
        f"{key} of {component} must be a value known when the component is declared (it decides which "
        f"resources the component declares): not a secret, and not an output unknown during preview",
    )


def serve() -> None:
    """Run the provider as the language host expects: print the gRPC port, serve until stopped.
    This is what the SDK's ``component_provider_host`` does, with ``TpuTrainingProvider`` in place
    of the plain ``ComponentProvider``."""
    main(TpuTrainingProvider(), sys.argv[1:])
