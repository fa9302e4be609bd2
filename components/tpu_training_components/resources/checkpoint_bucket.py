"""A regional Cloud Storage bucket for datasets and checkpoints, in the TPUs' own region."""

from typing import Mapping, Optional

import pulumi
import pulumi_gcp as gcp
from pydantic import with_config
from typing_extensions import NotRequired, TypedDict

from ..domain.catalogue import is_region
from ..domain.gcp_locations import region_problem
from ..domain.naming import bucket_name_problem
from ..validation import ARGUMENTS, Problems, check_arguments, count_problem, gcp_labels


@with_config(ARGUMENTS)
class CheckpointBucketArgs(TypedDict):
    region: str
    """Region of the TPUs that read and write this bucket (e.g. ``europe-west4``); the bucket is
    created there, because Google's Training on TPU Pods page asks for same-region storage for
    transfer speed."""
    bucket_name: str
    """Globally unique bucket name."""
    project: NotRequired[pulumi.Input[str]]
    """Google Cloud project; the provider's project when omitted."""
    labels: NotRequired[Mapping[str, str]]
    """Labels on the bucket."""
    noncurrent_version_retention_days: NotRequired[int]
    """Days a replaced or deleted checkpoint object is kept as a noncurrent version (default 7)."""
    noncurrent_versions_kept: NotRequired[int]
    """Noncurrent versions kept per object at most, whatever their age (default 3)."""
    protect: NotRequired[bool]
    """Pulumi refuses to delete the bucket while set (default True)."""
    retain_on_delete: NotRequired[bool]
    """When the bucket leaves the program or the stack is destroyed, keep it in the cloud
    (default True): checkpoints outlive the infrastructure that wrote them."""


def _check_values(problems: Problems, args: CheckpointBucketArgs) -> None:
    region = args["region"]
    if not is_region(region):
        problems.add(
            "region",
            f"{region!r} is not a region name such as 'europe-west4' (a zone such as 'europe-west4-a' "
            f"is not accepted here)",
        )
    problems.check("region", region_problem(region))
    problems.check("bucket_name", bucket_name_problem(args["bucket_name"]))
    gcp_labels(problems, args.get("labels", {}))
    for key in ("noncurrent_version_retention_days", "noncurrent_versions_kept"):
        if key in args:
            problems.check(key, count_problem(args[key], least=1))


class CheckpointBucket(pulumi.ComponentResource):
    """A regional, private, versioned bucket that keeps training checkpoints safe.

    Children: ``{name}-bucket`` (``gcp.storage.Bucket``).
    """

    bucket_name: pulumi.Output[str]
    """The bucket's name."""
    url: pulumi.Output[str]
    """``gs://`` URL of the bucket."""
    region: pulumi.Output[str]
    """Region the bucket lives in."""

    def __init__(
        self,
        name: str,
        args: CheckpointBucketArgs,
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        problems = check_arguments("CheckpointBucket", name, args, CheckpointBucketArgs, opts)
        _check_values(problems, args)
        problems.raise_any()
        super().__init__("tpu-training:storage:CheckpointBucket", name, {}, opts)

        retention_days = args.get("noncurrent_version_retention_days", 7)
        versions_kept = args.get("noncurrent_versions_kept", 3)
        self.bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            name=args["bucket_name"],
            project=args.get("project"),
            # Regional and upper-case: the API reports locations in upper case, so a lower-case
            # value would show a diff on every refresh.
            location=args["region"].upper(),
            storage_class="STANDARD",
            # IAM alone decides access; object ACLs are a second, easily-forgotten path.
            uniform_bucket_level_access=True,
            # Checkpoints and datasets are never public, whatever IAM a later change adds.
            public_access_prevention="enforced",
            # An overwritten or deleted checkpoint survives as a noncurrent version.
            versioning=gcp.storage.BucketVersioningArgs(enabled=True),
            # ... but noncurrent versions are trimmed so the bucket does not grow without bound.
            lifecycle_rules=[
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(
                        with_state="ARCHIVED", days_since_noncurrent_time=retention_days
                    ),
                ),
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(
                        with_state="ARCHIVED", num_newer_versions=versions_kept
                    ),
                ),
            ],
            # Never delete a bucket that still holds checkpoints.
            force_destroy=False,
            labels=dict(args.get("labels", {})),
            opts=pulumi.ResourceOptions(
                parent=self,
                protect=args.get("protect", True),
                retain_on_delete=args.get("retain_on_delete", True),
            ),
        )

        self.bucket_name = self.bucket.name
        self.url = self.bucket.url
        self.region = pulumi.Output.from_input(args["region"])
        self.register_outputs({"bucket_name": self.bucket_name, "url": self.url, "region": self.region})
