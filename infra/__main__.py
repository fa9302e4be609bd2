"""The stack program: read the stack's config, then wire the components. `pulumi up` runs this.

The Pulumi language host runs this file with only `infra/` on `sys.path`; the components come
from the installed `tpu_training_components` package (see infra/requirements.txt).
"""

import pulumi
import stack_config
from tpu_training_components import CheckpointBucket

settings = stack_config.load()

checkpoint_buckets = {
    region: CheckpointBucket(
        f"checkpoints-{region}",
        {
            "region": region,
            "bucket_name": settings.bucket_name(region),
            "project": settings.gcp_project,
            "labels": settings.common_labels,
            "noncurrent_version_retention_days": settings.bucket.noncurrent_version_retention_days,
            "noncurrent_versions_kept": settings.bucket.noncurrent_versions_kept,
            "protect": settings.bucket.protect,
            "retain_on_delete": settings.bucket.retain_on_delete,
        },
    )
    for region in settings.regions
}

pulumi.export("checkpointBuckets", {region: b.url for region, b in checkpoint_buckets.items()})
pulumi.export(
    "trainingEnvironments",
    {vm.name: settings.training_environment(vm) for vm in settings.tpu_vms},
)
