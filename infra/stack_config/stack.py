"""The whole stack's config, validated as a whole: every check that spans keys, and the values
derived from them (names, checkpoint directories, each run's environment)."""

from __future__ import annotations

import re
from typing import Annotated, Optional

from pydantic import (
    AfterValidator,
    Field,
    StrictBool,
    StrictStr,
    model_validator,
)
from tpu_training_components.domain import catalogue, naming
from tpu_training_components.domain.goodput import (
    CheckpointPlan,
    GoodputError,
    InterruptionModel,
    mean_seconds_between_interruptions,
    plan_checkpoints,
)
from tpu_training_components.domain.node_pool_plan import (
    TpuNodePoolPlan,
)
from tpu_training_components.domain.recovery import GENERATION_LABEL
from tpu_training_components.domain.startup_script import metadata_problem, vm_metadata
from tpu_training_components.domain.termination_grace import (
    PREEMPTIBLE_TPU_VM,
    SPOT_GKE_POOL,
    pod_grace_seconds,
    save_fit_problem,
)
from tpu_training_components.domain.tpu_availability import zone_warning
from tpu_training_components.domain.tpu_software import runtime_version_warning

from .fields import (
    PROJECT,
    LabelKey,
    LabelValue,
    Model,
    no_problem,
    repeated,
)
from .gke import ClusterConfig, JobConfig, NodePoolConfig, gke_problems
from .network import NetworkConfig
from .storage import TRAINER_CODE_VARIABLE, BucketConfig, TrainerCodeConfig
from .tpu_vms import TpuVmConfig
from .training import CheckpointingConfig, RecoveryConfig, TrainingConfig

DEV_PROJECT = "tpu-training-dev"
"""The dev stack's project (Pulumi.dev.yaml): another stack naming it was copied and not edited."""

_GS_BUCKET = re.compile(r"gs://([a-z0-9][a-z0-9._-]{1,220}[a-z0-9])")


class StackConfig(Model):
    """Everything the stack program needs, validated as a whole."""

    stack: StrictStr
    gcp_project: Annotated[StrictStr, AfterValidator(no_problem(naming.project_id_problem))]
    # On by default: a new project has most APIs off, and the first `pulumi up` would fail on each.
    enable_apis: StrictBool = True
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    network: NetworkConfig = NetworkConfig()
    tpu_vms: tuple[TpuVmConfig, ...] = ()
    bucket: BucketConfig = BucketConfig()
    training: Optional[TrainingConfig] = None
    checkpointing: Optional[CheckpointingConfig] = None
    recovery: RecoveryConfig = RecoveryConfig()
    cluster: Optional[ClusterConfig] = None
    node_pools: tuple[NodePoolConfig, ...] = ()
    jobs: tuple[JobConfig, ...] = ()
    trainer_code: Optional[TrainerCodeConfig] = None

    @model_validator(mode="after")
    def _consistent(self) -> StackConfig:
        problems = [
            f"{PROJECT}:tpuVms: TPU VM names must be unique; repeated: {name}"
            for name in repeated([vm.name for vm in self.tpu_vms])
        ]
        planned = self._plan_pools()
        problems += gke_problems(self, planned)
        problems += self._label_count_problems()
        problems += self._metadata_problems()
        problems += self._training_problems(planned)
        problems += self._checkpointing_problems(planned)
        regions = self.regions
        if len(regions) > 1 and self.bucket.name:
            problems.append(
                f"{PROJECT}:bucket.name = {self.bucket.name!r} names one bucket, but the TPUs use "
                f"{len(regions)} regions ({', '.join(regions)}), each with its own bucket; "
                f"remove bucket.name to get one generated name per region"
            )
        if self.bucket.location is not None and regions and regions != (self.bucket.location,):
            problems.append(
                f"{PROJECT}:bucket.location = {self.bucket.location!r} differs from the TPUs' region "
                f"{', '.join(regions)}: checkpoints must live in the region of the TPUs that use "
                f"them (Google's Training on TPU Pods page); remove bucket.location or set it to "
                f"{regions[0]!r}"
            )
        if not self.bucket.name:
            problems += self._derived_name_problems()
        if problems:
            raise ValueError("\n  - ".join(problems))
        return self

    def _metadata_problems(self) -> list[str]:
        """Each VM's startup and shutdown scripts within Compute Engine's metadata limits; the
        training command, setup command and env are what make them grow."""
        problems = []
        for index, vm in enumerate(self.tpu_vms):
            try:
                metadata = vm_metadata(
                    vm_name=vm.name,
                    checkpoint_dir=self.checkpoint_dir(vm),
                    train_command=vm.train_command,
                    environment=self.training_environment(vm),
                    setup_command=vm.setup_command,
                )
            except ValueError:
                continue  # a training or checkpointing problem, reported by its own key
            problem = metadata_problem(metadata)
            if problem:
                problems.append(f"{PROJECT}:tpuVms[{index}] ({vm.name}): {problem}")
        return problems

    def _label_count_problems(self) -> list[str]:
        # Every resource carries the project's own labels and the user's; TPU VMs also carry
        # their recovery generation, and pulumi-gcp adds its attribution label
        # (goog-pulumi-provisioned) to each. Google Cloud allows 64 labels per resource.
        most = len(self.common_labels) + 1 + naming.PROVIDER_LABELS
        if most <= naming.MAX_LABELS:
            return []
        own = len(self.common_labels) - len(self.labels) + 1
        return [
            f"{PROJECT}:labels has {len(self.labels)} labels; with the {own} the stack adds (managed-by, "
            f"pulumi-project, pulumi-stack, and {GENERATION_LABEL} on TPU VMs) and pulumi-gcp's own "
            f"goog-pulumi-provisioned a resource would carry {most}, above Google Cloud's limit of "
            f"{naming.MAX_LABELS} per resource; remove {most - naming.MAX_LABELS}"
        ]

    def _plan_pools(self) -> list[TpuNodePoolPlan | catalogue.CatalogueError]:
        """Each nodePools entry's plan, or why it has none; planned once for all the checks."""
        if self.cluster is None:
            return []
        planned: list[TpuNodePoolPlan | catalogue.CatalogueError] = []
        for pool in self.node_pools:
            try:
                planned.append(pool.plan(self.cluster.location))
            except catalogue.CatalogueError as exc:
                planned.append(exc)
        return planned

    def _checkpointing_problems(self, planned: list[TpuNodePoolPlan | catalogue.CatalogueError]) -> list[str]:
        """Every VM and Job must have an interval worth checkpointing at."""
        if self.checkpointing is None:
            return []
        # No plans without a cluster (a problem reported on its own): then no Job is checked here.
        pools = dict(zip((p.name for p in self.node_pools), planned, strict=False))
        problems = []
        for index, vm in enumerate(self.tpu_vms):
            try:
                self._vm_checkpoints(vm)
            except GoodputError as exc:
                problems.append(
                    f"{PROJECT}:checkpointing, for tpuVms[{index}] ({vm.name}, {vm.provisioning}): {exc}"
                )
        for index, job in enumerate(self.jobs):
            plan = pools.get(job.node_pool)
            if not isinstance(plan, TpuNodePoolPlan):
                continue  # the pool's own problem is reported
            try:
                self._job_checkpoints(plan, job.slices)
            except GoodputError as exc:
                problems.append(f"{PROJECT}:checkpointing, for jobs[{index}] ({job.name}): {exc}")
        return problems

    def _training_problems(self, planned: list[TpuNodePoolPlan | catalogue.CatalogueError]) -> list[str]:
        """The scaling rules must give a plan for every VM and every Job's slice."""
        if self.training is None:
            return []
        training = self.training
        runs = [
            (f"tpuVms[{index}] ({vm.name})", vm.accelerator.cores) for index, vm in enumerate(self.tpu_vms)
        ]
        # Without a cluster nothing is planned (and the pools are reported as needing one).
        plans = {pool.name: plan for pool, plan in zip(self.node_pools, planned, strict=False)}
        for index, job in enumerate(self.jobs):
            plan = plans.get(job.node_pool)
            if isinstance(plan, TpuNodePoolPlan):  # otherwise reported by the pool's and the Job's keys
                runs.append((f"jobs[{index}] ({job.name})", plan.shape.cores * job.slices))
        problems = []
        for run, cores in runs:
            try:
                training.plan_for(cores)
            except ValueError as exc:
                problems.append(f"{PROJECT}:training: {exc}, for {PROJECT}:{run} on {cores} cores")
        return problems

    def _derived_name_problems(self) -> list[str]:
        """Names made from gcp:project and the stack name, checked here so the error says what to
        change rather than failing inside a component after others were declared."""
        source = f"made from gcp:project {self.gcp_project!r} and the stack name {self.stack!r}"
        problems = []
        for region in self.regions:
            problem = naming.bucket_name_problem(self.bucket_name(region))
            if problem:
                fix = "set tpu-training:bucket.name" if len(self.regions) == 1 else "use another stack name"
                problems.append(f"{PROJECT}:bucket.name: the generated {problem} ({source}); {fix}")
        for account_id in (
            self.service_account_id,
            self.gke_service_account_id,
            self.node_service_account_id,
        ):
            problem = naming.service_account_id_problem(account_id)
            if problem:
                problems.append(
                    f"gcp:project: the stack's {problem} (made from the stack name {self.stack!r})"
                )
        return problems

    @property
    def network_name(self) -> str:
        """The VPC the stack declares: ``tpu-training-<stack>`` unless named."""
        return self.network.name or naming.bounded_name(PROJECT, naming.name_part(self.stack))

    @property
    def network_regions(self) -> tuple[str, ...]:
        """Regions with TPU VMs or the cluster: one subnet, router and NAT each."""
        regions = {vm.region for vm in self.tpu_vms}
        if self.cluster is not None:
            regions.add(self.cluster.location)
        return tuple(sorted(regions))

    @property
    def warnings(self) -> tuple[str, ...]:
        """What is valid but may not work, for the plan and `pulumi preview` to show."""
        found: list[str] = []
        for index, vm in enumerate(self.tpu_vms):
            warning = zone_warning(vm.accelerator.generation, vm.zone)
            if warning:
                found.append(f"{PROJECT}:tpuVms[{index}].zone: {warning}")
            runtime = runtime_version_warning(
                vm.runtime_version, vm.accelerator.generation, multi_host=vm.accelerator.multi_host
            )
            if runtime:
                found.append(f"{PROJECT}:tpuVms[{index}].runtimeVersion: {runtime}")
        if self.gcp_project == DEV_PROJECT and self.stack != "dev":
            found.append(
                f"gcp:project = {DEV_PROJECT!r} is the dev stack's project, copied from Pulumi.dev.yaml: "
                f"put your own project in Pulumi.{self.stack}.yaml (`pulumi config set gcp:project "
                f"MY_PROJECT --stack {self.stack}`)"
            )
        if self.cluster is not None:
            for index, pool in enumerate(self.node_pools):
                plan = self.pool_plan(pool)
                found.extend(f"{PROJECT}:nodePools[{index}].nodeLocations: {w}" for w in plan.zone_warnings)
                found.extend(f"{PROJECT}:nodePools[{index}].topology: {w}" for w in plan.size_warnings)
        if not self.network.create and (self.network.name is not None or not self.network.iap_ssh):
            found.append(
                f"{PROJECT}:network.name and iapSsh apply only to the network the stack declares; "
                f"with network.create false they are ignored"
            )
        found.extend(self._foreign_bucket_warnings())
        found.extend(self._save_fit_warnings())
        if not self.network.create and self.network_regions:
            found.append(
                f"{PROJECT}:network.create is false: the TPU VMs and the cluster use your network "
                f"(or the project's default one), which must give them Private Google Access (to "
                f"reach gs:// without external IPs) and Cloud NAT (to install packages and pull "
                f"images from outside Google), or training never starts"
            )
        return tuple(found)

    def _save_fit_warnings(self) -> list[str]:
        # A preempted run saves once when told to stop; the capacity decides how long it may.
        if self.checkpointing is None:
            return []
        cost = self.checkpointing.cost_seconds
        found = []
        for index, vm in enumerate(self.tpu_vms):
            if vm.provisioning in ("preemptible", "spot"):
                plan = self.vm_checkpoints(vm)
                problem = save_fit_problem(cost, PREEMPTIBLE_TPU_VM, plan and plan.interval_seconds)
                if problem:
                    found.append(f"{PROJECT}:tpuVms[{index}] ({vm.name}): {problem}")
        for index, job in enumerate(self.jobs):
            if self.pool_plan(self.job_pool(job)).spot:
                plan = self.job_checkpoints(job)
                problem = save_fit_problem(cost, SPOT_GKE_POOL, plan and plan.interval_seconds)
                if problem:
                    found.append(f"{PROJECT}:jobs[{index}] ({job.name}): {problem}")
        return found

    def job_termination_grace_seconds(self) -> Optional[int]:
        """The Pods' ``terminationGracePeriodSeconds``: the checkpoint's time with a margin
        (``termination_grace.pod_grace_seconds``), or None (Kubernetes' 30 s) without
        ``checkpointing``."""
        return pod_grace_seconds(self.checkpointing.cost_seconds) if self.checkpointing else None

    def _foreign_bucket_warnings(self) -> list[str]:
        # A command that names a bucket by hand stops working, or reads someone else's data,
        # once the stack moves to another project; $TRAINER_CODE and $CHECKPOINT_DIR move with it.
        own = {self.bucket_name(region) for region in self.regions}
        commands = [
            *(
                (f"tpuVms[{i}].{key}", text)
                for i, vm in enumerate(self.tpu_vms)
                for key, text in (("setupCommand", vm.setup_command), ("trainCommand", vm.train_command))
                if text
            ),
            *((f"jobs[{i}].command", " ".join(job.command)) for i, job in enumerate(self.jobs)),
        ]
        found = []
        for where, text in commands:
            for bucket in sorted(set(_GS_BUCKET.findall(text)) - own):
                found.append(
                    f"{PROJECT}:{where} names gs://{bucket}, which is not one of this stack's buckets "
                    f"({', '.join(sorted(own)) or 'none'}): in another project it reads someone else's "
                    f"bucket, or nothing; use $TRAINER_CODE (trainerCode) or $CHECKPOINT_DIR"
                )
        return found

    @property
    def regions(self) -> tuple[str, ...]:
        """Regions with TPUs (VMs, and the cluster's), sorted: one checkpoint bucket each."""
        regions = {vm.region for vm in self.tpu_vms}
        if self.cluster is not None and self.node_pools:
            regions.add(self.cluster.location)
        return tuple(sorted(regions))

    def bucket_name(self, region: str) -> str:
        if self.bucket.name:
            return self.bucket.name
        return naming.bounded_name(self.gcp_project, naming.name_part(self.stack), "ckpt", region)

    def _checkpoint_dir(self, region: str, run: str) -> str:
        # Named after the run (a VM or a Job), not after any one instance of it, so one re-created
        # after preemption or failure finds the checkpoints of the one before.
        return f"gs://{self.bucket_name(region)}/checkpoints/{run}"

    def _environment(
        self, checkpoint_dir: str, cores: int, checkpoints: Optional[CheckpointPlan], env: dict[str, str]
    ) -> dict[str, str]:
        # Where and how often to checkpoint, the run's scale, then the user's own variables (which win).
        plan = self.training.plan_for(cores) if self.training else None
        code = (
            {TRAINER_CODE_VARIABLE: f"{checkpoint_dir.split('/checkpoints/')[0]}/code"}
            if self.trainer_code
            else {}
        )
        return {
            "CHECKPOINT_DIR": checkpoint_dir,
            **code,
            **(checkpoints.environment() if checkpoints else {}),
            **(plan.environment() if plan else {}),
            **env,
        }

    def _vm_checkpoints(self, vm: TpuVmConfig) -> CheckpointPlan:
        assert self.checkpointing is not None
        model: InterruptionModel = "onDemand" if vm.provisioning == "on-demand" else vm.provisioning
        # One TPU node resource is preempted, stopped or maintained as a whole: hosts=1.
        mean = mean_seconds_between_interruptions(
            model, overrides_hours=self.checkpointing.mean_hours_between_interruptions
        )
        return plan_checkpoints(
            self.checkpointing.cost_seconds, mean, restart_seconds=self.checkpointing.restart_seconds
        )

    def _job_checkpoints(self, pool: TpuNodePoolPlan, slices: int = 1) -> CheckpointPlan:
        assert self.checkpointing is not None
        model: InterruptionModel = (
            "flexStart"
            if pool.flex_start
            else "spot"
            if pool.spot
            else "reserved"
            if pool.reservation
            else "onDemand"
        )
        mean = mean_seconds_between_interruptions(
            model,
            overrides_hours=self.checkpointing.mean_hours_between_interruptions,
            run_limit_seconds=pool.max_run_seconds,
            # Every host of every slice: losing any one restarts them all.
            hosts=pool.shape.vms * slices,
        )
        return plan_checkpoints(
            self.checkpointing.cost_seconds, mean, restart_seconds=self.checkpointing.restart_seconds
        )

    def vm_checkpoints(self, vm: TpuVmConfig) -> Optional[CheckpointPlan]:
        """When the VM's run checkpoints (Young's interval), or None without ``checkpointing``."""
        return self._vm_checkpoints(vm) if self.checkpointing else None

    def job_checkpoints(self, job: JobConfig) -> Optional[CheckpointPlan]:
        """When the Job's run checkpoints (Young's interval), or None without ``checkpointing``."""
        if self.checkpointing is None:
            return None
        return self._job_checkpoints(self.pool_plan(self.job_pool(job)), job.slices)

    def checkpoint_dir(self, vm: TpuVmConfig) -> str:
        """Where a VM's run keeps its checkpoints, in the bucket of the VM's region."""
        return self._checkpoint_dir(vm.region, vm.name)

    def training_environment(self, vm: TpuVmConfig) -> dict[str, str]:
        """The environment every training process of the VM receives."""
        return self._environment(
            self.checkpoint_dir(vm), vm.accelerator.cores, self.vm_checkpoints(vm), vm.env
        )

    # GKE ------------------------------------------------------------------------------------

    def pool_plan(self, pool: NodePoolConfig) -> TpuNodePoolPlan:
        assert self.cluster is not None  # validated: pools need a cluster
        return pool.plan(self.cluster.location)

    def job_pool(self, job: JobConfig) -> NodePoolConfig:
        return next(pool for pool in self.node_pools if pool.name == job.node_pool)

    def job_checkpoint_dir(self, job: JobConfig) -> str:
        """Where a Job's run keeps its checkpoints, in the bucket of the cluster's region."""
        assert self.cluster is not None
        return self._checkpoint_dir(self.cluster.location, job.name)

    def job_environment(self, job: JobConfig) -> dict[str, str]:
        """The environment of every Pod of the Job, scaled to all the slices it spans."""
        cores = self.pool_plan(self.job_pool(job)).shape.cores * job.slices
        return self._environment(self.job_checkpoint_dir(job), cores, self.job_checkpoints(job), job.env)

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Namespaces of the Jobs, other than ``default``: the stack creates them."""
        return tuple(sorted({job.namespace for job in self.jobs} - {"default"}))

    @property
    def gke_service_account_id(self) -> str:
        """The Google identity of the stack's training Pods (Workload Identity)."""
        return self._account_id("tpu-gke")

    @property
    def node_service_account_id(self) -> str:
        """The Google identity of the cluster's nodes."""
        return self._account_id("gke-nodes")

    @property
    def service_account_id(self) -> str:
        """One training identity per stack."""
        return self._account_id("tpu-train")

    def _account_id(self, prefix: str) -> str:
        return naming.bounded_name(prefix, naming.name_part(self.stack), limit=30)

    @property
    def common_labels(self) -> dict[str, str]:
        """The project's own labels, then the user's (which win)."""
        managed_by, project, stack = naming.STACK_LABEL_KEYS
        return {
            managed_by: "pulumi",
            project: PROJECT,
            stack: naming.label_value(self.stack),
            **self.labels,
        }
