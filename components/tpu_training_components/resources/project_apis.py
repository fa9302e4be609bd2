"""The Google Cloud APIs a stack's resources need, enabled in its project by the stack itself."""

from typing import Optional, Sequence

import pulumi
import pulumi_gcp as gcp
from pydantic import with_config
from typing_extensions import NotRequired, TypedDict

from ..domain.required_access import BOOTSTRAP_APIS
from ..validation import ARGUMENTS, check_arguments


@with_config(ARGUMENTS)
class ProjectApisArgs(TypedDict):
    apis: Sequence[str]
    """Service names to enable, e.g. ``tpu.googleapis.com``
    (``domain.required_access.apis_for_features`` says which a stack needs)."""
    project: NotRequired[pulumi.Input[str]]
    """Google Cloud project; the provider's project when omitted."""


class ProjectApis(pulumi.ComponentResource):
    """One ``gcp.projects.Service`` per API, never disabled by `pulumi destroy`: other stacks and
    tools in the project may use the same API, and disabling one deletes what it serves.

    Children: ``{name}-{api's first label}`` (``apis-tpu`` for ``tpu.googleapis.com``). Make the
    resources that call an API depend on this component.
    """

    def __init__(
        self, name: str, args: ProjectApisArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        problems = check_arguments("ProjectApis", name, args, ProjectApisArgs, opts)
        for index, api in enumerate(args["apis"]):
            if not api.endswith(".googleapis.com") or api in BOOTSTRAP_APIS:
                problems.add(
                    ("apis", index),
                    f"{api!r} cannot be enabled here: give Google API service names such as "
                    f"'tpu.googleapis.com', but not {' or '.join(BOOTSTRAP_APIS)}, which enabling any API "
                    f"needs on beforehand (`gcloud services enable`)",
                )
        problems.raise_any()
        apis = sorted(set(args["apis"]))
        super().__init__("tpu-training:project:ProjectApis", name, {}, opts)
        self.services = {
            api: gcp.projects.Service(
                f"{name}-{api.split('.')[0]}",
                service=api,
                project=args.get("project"),
                # Never off on destroy: a shared project keeps its APIs (and what they serve).
                disable_on_destroy=False,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for api in apis
        }
        self.register_outputs({"apis": apis})
