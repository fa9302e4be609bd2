"""The stack program: read the stack's config, then wire the components. `pulumi up` runs this.

The Pulumi language host runs this file with only `infra/` on `sys.path`; the components come
from the installed `tpu_training_components` package (see infra/requirements.txt).
"""

import os
from datetime import timedelta

import pulumi
import stack_config
from tpu_training_components import CheckpointBucket, PreemptibleTpuVm, TrainingServiceAccount, reconcile

# `python -m infra.plan` sets this unless --live: an offline plan reads no live state.
OFFLINE = os.environ.get("TPU_TRAINING_OFFLINE") == "1"

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

trainer = (
    TrainingServiceAccount(
        "trainer",
        {
            "account_id": settings.service_account_id,
            "project": settings.gcp_project,
            "buckets": {region: b.bucket_name for region, b in checkpoint_buckets.items()},
        },
    )
    if settings.tpu_vms
    else None
)

# Recovery is a reconcile: read the live nodes (one call per zone), decide, say why.
decisions = reconcile.reconcile_tpu_vms(
    settings.gcp_project,
    [(vm.name, vm.zone) for vm in settings.tpu_vms],
    read_live_state=settings.recovery.read_live_state and not OFFLINE,
    grace=timedelta(minutes=settings.recovery.maintenance_grace_minutes),
)
reconcile.log_decisions(decisions)
previous_generations = reconcile.last_deployed_generations() if settings.tpu_vms else None

tpu_vms = {}
for vm, decision in zip(settings.tpu_vms, decisions, strict=True):
    assert trainer is not None and previous_generations is not None
    tpu_vms[vm.name] = PreemptibleTpuVm(
        vm.name,
        {
            "zone": vm.zone,
            "accelerator_type": vm.accelerator_type,
            "runtime_version": vm.runtime_version,
            "provisioning": vm.provisioning,
            "train_command": vm.train_command,
            "setup_command": vm.setup_command,
            "checkpoint_dir": settings.checkpoint_dir(vm),
            "environment": settings.training_environment(vm),
            "service_account_email": trainer.email,
            "recovery_generation": reconcile.generation_for(decision, previous_generations),
            "external_ip": vm.external_ip,
            "network": vm.network,
            "subnetwork": vm.subnetwork,
            "labels": settings.common_labels,
            "project": settings.gcp_project,
        },
        # The VM's identity must hold its bucket access before training starts.
        opts=pulumi.ResourceOptions(depends_on=[trainer]),
    )

pulumi.export("checkpointBuckets", {region: b.url for region, b in checkpoint_buckets.items()})
pulumi.export(
    "trainingEnvironments",
    {vm.name: settings.training_environment(vm) for vm in settings.tpu_vms},
)
pulumi.export(
    "tpuVms", {name: {"zone": v.zone, "state": v.state, "health": v.health} for name, v in tpu_vms.items()}
)
pulumi.export(reconcile.GENERATIONS_OUTPUT, {name: v.recovery_generation for name, v in tpu_vms.items()})
