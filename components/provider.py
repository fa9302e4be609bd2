"""What the component provider (``provider/``) serves to other languages: every component of this
library, under the package name ``tpu-training``. Kept here so that tests and the provider's entry
point read one list."""

import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Optional

# The Pulumi SDK vendors google.rpc.Status as "google/protobuf/status.proto"; googleapis-common-
# protos, which the TPU and GKE clients import, defines the same message as "google/rpc/status.proto".
# Protobuf's default pool refuses the second definition whichever loads first, so a provider that
# reads live state would fail on its first probe. Both are the same message: the SDK gets the
# canonical module. (Must run before anything imports pulumi.provider.)
import google.rpc.status_pb2 as _canonical_status

sys.modules.setdefault("pulumi.runtime.proto.status_pb2", _canonical_status)

import pulumi  # noqa: E402
from pulumi.provider import main  # noqa: E402
from pulumi.provider.experimental.analyzer import (  # noqa: E402
    ComponentDefinition,
    PropertyDefinition,
    PropertyType,
)
from pulumi.provider.experimental.component import ComponentProvider  # noqa: E402

from .checkpoint_bucket import CheckpointBucket  # noqa: E402
from .gke_cluster import GkeTpuCluster  # noqa: E402
from .identity import TrainingServiceAccount  # noqa: E402
from .network import TrainingNetwork  # noqa: E402
from .tpu_node_pool import FlexStartTpuNodePool  # noqa: E402
from .tpu_vm import PreemptibleTpuVm  # noqa: E402
from .training_job import TpuTrainingJob  # noqa: E402
from .training_recovery import TrainingRecovery  # noqa: E402

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
    """The SDK's component provider, with one fix on the way in: every number crosses the wire as
    a protobuf double, so ``recovery_generation: 2`` from TypeScript arrives as ``2.0`` and would
    label a node ``"2.0"``. Values the schema types as integers become ints again; a number with
    a fraction stays as it came and is refused by the component, naming the argument."""

    def __init__(self) -> None:
        super().__init__(list(COMPONENTS), PACKAGE_NAME, None, PACKAGE_VERSION)

    def map_inputs(self, inputs: Any, component_def: ComponentDefinition) -> Any:
        whole = {
            key: self._whole_numbers(value, component_def.inputs[key])
            if key in component_def.inputs
            else value
            for key, value in inputs.items()
        }
        return super().map_inputs(whole, component_def)

    def _whole_numbers(self, value: Any, prop: Optional[PropertyDefinition]) -> Any:
        if prop is None:
            return value
        if isinstance(value, pulumi.Output):
            return value.apply(lambda known: self._whole_numbers(known, prop))
        if prop.type is PropertyType.INTEGER and isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, list) and prop.items:
            return [self._whole_numbers(item, prop.items) for item in value]
        if isinstance(value, dict) and prop.additional_properties:
            return {k: self._whole_numbers(v, prop.additional_properties) for k, v in value.items()}
        if isinstance(value, dict) and prop.ref:
            type_def = self.get_type_definition(prop)
            if type_def is not None and not type_def.enum:
                return {k: self._whole_numbers(v, type_def.properties.get(k)) for k, v in value.items()}
        return value


def serve() -> None:
    """Run the provider as the language host expects: print the gRPC port, serve until stopped.
    This is what the SDK's ``component_provider_host`` does, with ``TpuTrainingProvider`` in place
    of the plain ``ComponentProvider``."""
    main(TpuTrainingProvider(), sys.argv[1:])
