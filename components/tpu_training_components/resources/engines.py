"""The workload engines a stack's JobSets need, installed into the cluster by the stack itself:
the JobSet controller and, for queued provisioning, Kueue, each from its project's own Helm chart
at a pinned version.

Both projects publish their charts as OCI artifacts on registry.k8s.io: JobSet's
``charts/jobset/README.md`` at v0.12.0 (``helm install [RELEASE_NAME]
oci://registry.k8s.io/jobset/charts/jobset --version 0.12.0``) and Kueue's ``charts/kueue/README.md``
at v0.19.2 (``helm install kueue oci://registry.k8s.io/kueue/charts/kueue --version="0.19.2"
--create-namespace --namespace=kueue-system``). Upgrading is a change of the version (the
component's ``jobset_version`` or ``kueue_version``, or these constants): `pulumi up` upgrades
the release in place. The two charts carry their CRDs differently:

- JobSet's in ``crds/``, which Helm installs before the controller and never upgrades (nor
  deletes) once installed: read JobSet's release notes and apply a changed CRD yourself;
- Kueue's as templates (``charts/kueue/templates/crd/`` at v0.19.2), which Helm upgrades with the
  release, and deletes with it: removing the Kueue release removes its CRDs, and with them every
  queue and workload object of the cluster.
"""

import re
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s
from pydantic import with_config
from typing_extensions import NotRequired, TypedDict

from ..validation import ARGUMENTS, check_arguments

JOBSET_CHART = "oci://registry.k8s.io/jobset/charts/jobset"
JOBSET_VERSION = "0.12.0"
JOBSET_NAMESPACE = "jobset-system"
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_VERSION = "0.19.2"
KUEUE_NAMESPACE = "kueue-system"


@with_config(ARGUMENTS)
class WorkloadEnginesArgs(TypedDict):
    provider: k8s.Provider
    """Kubernetes provider of the cluster (``GkeTpuCluster.provider``)."""
    jobset: NotRequired[bool]
    """Install the JobSet controller (default True)."""
    kueue: NotRequired[bool]
    """Install Kueue (default False): only for queued provisioning (``QueuedProvisioning``),
    which queues Jobs and JobSets alike."""
    jobset_version: NotRequired[str]
    """Version of JobSet's Helm chart (default the version this package was tested with)."""
    kueue_version: NotRequired[str]
    """Version of Kueue's Helm chart (default the version this package was tested with)."""


def _version_problem(value: str) -> Optional[str]:
    # ASCII digits only: str.isdigit() also takes '٣' or '³', which no chart version has.
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", value):
        return (
            f"{value!r} is not a chart version; give MAJOR.MINOR.PATCH without a 'v', e.g. "
            f"{JOBSET_VERSION!r}: a pinned version, never a range"
        )
    return None


class WorkloadEngines(pulumi.ComponentResource):
    """The JobSet controller and Kueue as Helm releases of their upstream charts, pinned.

    Children: ``{name}-jobset`` and ``{name}-kueue`` (``kubernetes:helm.sh/v3:Release``). Declare
    JobSets and ``QueuedProvisioning`` with ``depends_on`` this component: their CRDs and
    admission webhooks must be up first.
    """

    jobset_version: pulumi.Output[str]
    """The JobSet chart version installed, or "" when JobSet is not installed."""
    kueue_version: pulumi.Output[str]
    """The Kueue chart version installed, or "" when Kueue is not installed."""

    def __init__(
        self, name: str, args: WorkloadEnginesArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        problems = check_arguments("WorkloadEngines", name, args, WorkloadEnginesArgs, opts)
        jobset_version = args.get("jobset_version", JOBSET_VERSION)
        kueue_version = args.get("kueue_version", KUEUE_VERSION)
        problems.check("jobset_version", _version_problem(jobset_version))
        problems.check("kueue_version", _version_problem(kueue_version))
        problems.raise_any()
        install_jobset, install_kueue = args.get("jobset", True), args.get("kueue", False)
        super().__init__("tpu-training:gke:WorkloadEngines", name, {}, opts)
        on_cluster = pulumi.ResourceOptions(parent=self, provider=args["provider"])
        self.jobset = (
            k8s.helm.v3.Release(
                f"{name}-jobset",
                # Fixed release name, as the chart's README installs it: one per cluster.
                name="jobset",
                chart=JOBSET_CHART,
                version=jobset_version,
                namespace=JOBSET_NAMESPACE,
                create_namespace=True,
                opts=on_cluster,
            )
            if install_jobset
            else None
        )
        self.kueue = (
            k8s.helm.v3.Release(
                f"{name}-kueue",
                name="kueue",
                chart=KUEUE_CHART,
                version=kueue_version,
                namespace=KUEUE_NAMESPACE,
                create_namespace=True,
                # Kueue's chart turns on its batch/v1 Job and JobSet integrations; one whose CRD
                # is missing at start waits for it (pkg/controller/jobframework/setup.go
                # WaitForAPI, v0.19.2), so Kueue runs without JobSet too. With both, JobSet
                # comes first all the same: its webhook is up before Kueue resumes a JobSet.
                opts=pulumi.ResourceOptions.merge(
                    on_cluster, pulumi.ResourceOptions(depends_on=[self.jobset] if self.jobset else [])
                ),
            )
            if install_kueue
            else None
        )
        self.jobset_version = pulumi.Output.from_input(jobset_version if install_jobset else "")
        self.kueue_version = pulumi.Output.from_input(kueue_version if install_kueue else "")
        self.register_outputs({"jobset_version": self.jobset_version, "kueue_version": self.kueue_version})
