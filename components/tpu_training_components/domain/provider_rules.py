"""The providers' rules for updating a resource in place or replacing it, per resource type, as
data: which input fields force a replacement, which blocks replace when they appear or vanish,
what an in-place change or a replacement means for a running training. Read by the generic
classifier (``change_impact``), which knows the engine's rules and none of these types.

Where a rule comes from (each table entry names its file):

- pulumi-gcp is the Terraform provider bridged: a field marked ``ForceNew`` in the Terraform
  schema makes the bridge answer "replace". Read in hashicorp/terraform-provider-google at
  e03b7622 (2026-08-21) and, for the TPU VM (a beta resource), terraform-provider-google-beta
  ``google-beta/services/tpuv2/resource_tpu_v2_vm.go`` at 049a8b9e. A ForceNew *block*
  (``node_config``, ``placement_policy``) replaces when it appears or disappears (the SDK checks
  the block's own ForceNew on its item count); a field inside it follows its own ForceNew.
- pulumi-kubernetes ``provider/pkg/provider/diff.go`` (94977969, 2026-07-01):
  ``metadataForceNewProperties`` (``.metadata.name``, ``.metadata.namespace`` for every kind) and
  the ``forceNew`` table per group/version/kind; its ``provider.go`` ``DiffConfig`` for the
  provider itself. tests/domain/test_provider_rules.py checks the Kubernetes tables against diff.go.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

_TF = "hashicorp/terraform-provider-google"
_TF_BETA = "hashicorp/terraform-provider-google-beta"
_K8S_DIFF = "pulumi/pulumi-kubernetes provider/pkg/provider/diff.go"


@dataclass(frozen=True)
class TypeRules:
    """How one resource type's provider decides between an update in place and a replacement."""

    source: str
    """Where the rules were read (repository, file, function)."""
    replace: tuple[str, ...] = ()
    """Field paths whose change, at or under the path, replaces the resource."""
    replace_if_added_or_removed: tuple[str, ...] = ()
    """ForceNew blocks: replacing when the block appears or disappears, not when a field inside
    it changes (that field's own rule decides)."""
    replace_any: bool = False
    """Every input forces replacement (the resource has no update at all)."""
    notes: Mapping[str, str] = field(default_factory=dict)
    """Field path -> what an in-place change of it means (when it takes effect, what it disturbs)."""
    effects: Mapping[str, str] = field(default_factory=dict)
    """Field path -> a marker for callers when an in-place change of it happens (``NEXT_BOOT``)."""
    replaced_means: str = ""
    """What a replacement does to a running training, when it does something; '' when it does not."""

    @property
    def replacement_restarts_training(self) -> bool:
        return TRAINING_RESTARTS in self.replaced_means


TRAINING_RESTARTS = "training restarts from its checkpoint"

NEXT_BOOT = "next-boot"
"""``ResourceChange.effects`` marker: the change reaches the machine only when it next boots."""

# The Terraform provider's ForceNew fields of google_tpu_v2_vm (resource_tpu_v2_vm.go, schema of
# ResourceTpuV2Vm): name, runtime_version, accelerator_config, accelerator_type, cidr_block,
# network_config(s), scheduling_config, service_account, shielded_instance_config, zone, project.
# Updatable: description, labels, metadata, tags, data_disks.
TPU_VM = TypeRules(
    source=f"{_TF_BETA} google-beta/services/tpuv2/resource_tpu_v2_vm.go, ForceNew in ResourceTpuV2Vm",
    replace=(
        "name",
        "zone",
        "project",
        "runtimeVersion",
        "acceleratorType",
        "acceleratorConfig",
        "cidrBlock",
        "networkConfig",
        "networkConfigs",
        "schedulingConfig",
        "serviceAccount",
        "shieldedInstanceConfig",
    ),
    notes={
        # Cloud TPU API: `startup-script` "runs at every boot" (shared/REFERENCE.md); the provider
        # patches the node's metadata without restarting it.
        "metadata": (
            "metadata updated in place: takes effect at the node's next boot (or restart it on purpose)"
        ),
    },
    effects={"metadata": NEXT_BOOT},
    replaced_means=TRAINING_RESTARTS,
)

_NODES_RECREATED = "GKE re-creates the pool's nodes with the new machine or disk: Pods on them restart"

# google_container_node_pool: top-level ForceNew fields in resource_container_node_pool.go
# (schemaNodePool and ResourceContainerNodePool), node_config's in node_config.go
# (schemaNodeConfig). node_config and placement_policy are ForceNew blocks.
NODE_POOL = TypeRules(
    source=(
        f"{_TF} google/services/container/resource_container_node_pool.go schemaNodePool and "
        f"node_config.go schemaNodeConfig, ForceNew"
    ),
    replace=(
        "project",
        "cluster",
        "location",
        "name",
        "namePrefix",
        "initialNodeCount",
        "maxPodsPerNode",
        "placementPolicy.policyName",
        "queuedProvisioning",
        "networkConfig.createPodRange",
        "networkConfig.podRange",
        "networkConfig.podIpv4CidrBlock",
        "networkConfig.additionalNodeNetworkConfigs",
        "networkConfig.additionalPodNetworkConfigs",
        "networkConfig.podCidrOverprovisionConfig",
        "networkConfig.acceleratorNetworkProfile",
        "networkConfig.subnetwork",
        "nodeConfig.guestAccelerators",
        "nodeConfig.localSsdCount",
        "nodeConfig.ephemeralStorageLocalSsdConfig",
        "nodeConfig.localNvmeSsdBlockConfig",
        "nodeConfig.secondaryBootDisks",
        "nodeConfig.metadata",
        "nodeConfig.minCpuPlatform",
        "nodeConfig.oauthScopes",
        "nodeConfig.preemptible",
        "nodeConfig.reservationAffinity",
        "nodeConfig.spot",
        "nodeConfig.serviceAccount",
        "nodeConfig.shieldedInstanceConfig",
        "nodeConfig.sandboxConfig",
        "nodeConfig.bootDiskKmsKey",
        "nodeConfig.nodeGroup",
        "nodeConfig.advancedMachineFeatures",
        "nodeConfig.soleTenantConfig",
        "nodeConfig.hostMaintenancePolicy",
        "nodeConfig.enableConfidentialStorage",
        "nodeConfig.localSsdEncryptionMode",
        "nodeConfig.maxRunDuration",
        "nodeConfig.flexStart",
    ),
    replace_if_added_or_removed=("nodeConfig", "placementPolicy"),
    notes={
        # nodePoolNodeConfigUpdate (node_config.go) sends these in one UpdateNodePool call; GKE
        # applies a new machine type or boot disk by re-creating the pool's nodes.
        "nodeConfig.machineType": _NODES_RECREATED,
        "nodeConfig.diskSizeGb": _NODES_RECREATED,
        "nodeConfig.diskType": _NODES_RECREATED,
        "nodeConfig.imageType": _NODES_RECREATED,
        # Updated in place (not ForceNew), but a zone taken away takes its nodes with it: a slice
        # there is deleted, and the training on it restarts from its checkpoint where it comes back.
        "nodeLocations": (
            "node locations are updated in place, but the nodes in a zone taken away are deleted: "
            f"a slice there goes, and {TRAINING_RESTARTS} on the new nodes"
        ),
        # Neither ForceNew nor read by nodePoolUpdate: the provider plans it and never applies it.
        "placementPolicy.tpuTopology": (
            "the provider does not change an existing pool's TPU topology (nodePoolUpdate has no "
            "placement_policy update): replace the pool by hand (`pulumi up --replace URN`)"
        ),
    },
    replaced_means=f"its nodes are deleted and re-created; {TRAINING_RESTARTS} on the new nodes",
)

# google_container_cluster: top-level ForceNew fields of ResourceContainerCluster.
CLUSTER = TypeRules(
    source=f"{_TF} google/services/container/resource_container_cluster.go, ForceNew",
    replace=(
        "name",
        "location",
        "project",
        "clusterIpv4Cidr",
        "description",
        "enableKubernetesAlpha",
        "enableTpu",
        "enableAutopilot",
        "initialNodeCount",
        "confidentialNodes",
        "network",
        "subnetwork",
        "nodePools",
        "ipAllocationPolicy",
        "networkingMode",
        "defaultMaxPodsPerNode",
        "datapathProvider",
        "dataplaneOptimizationMode",
    ),
    replaced_means=f"every node pool and Job on it goes with it; {TRAINING_RESTARTS} on the new cluster",
)

# google_storage_bucket: name, location, project, enable_object_retention and
# hierarchical_namespace are ForceNew; CustomizeDiff ForceNewIfChange("retention_policy.0.is_locked").
BUCKET = TypeRules(
    source=f"{_TF} google/services/storage/resource_storage_bucket.go, ForceNew",
    replace=(
        "name",
        "location",
        "project",
        "enableObjectRetention",
        "hierarchicalNamespace",
        "retentionPolicy.isLocked",
    ),
    replaced_means="a new, empty bucket: checkpoints in the old one are not copied",
)

# IAM members have no update: role, member, condition and the resource are all ForceNew
# (google/tpgiamresource/resource_iam_member.go; the bucket in storage/iam_storage_bucket.go).
IAM_MEMBER = TypeRules(
    source=f"{_TF} google/tpgiamresource/resource_iam_member.go, no update", replace_any=True
)

_COMPUTE = f"{_TF} google/services/compute"
GCP_RULES: Mapping[str, TypeRules] = {
    "gcp:tpu/v2Vm:V2Vm": TPU_VM,
    "gcp:container/nodePool:NodePool": NODE_POOL,
    "gcp:container/cluster:Cluster": CLUSTER,
    "gcp:storage/bucket:Bucket": BUCKET,
    "gcp:storage/bucketIAMMember:BucketIAMMember": IAM_MEMBER,
    "gcp:projects/iAMMember:IAMMember": IAM_MEMBER,
    "gcp:serviceaccount/iAMMember:IAMMember": IAM_MEMBER,
    # An API the stack enables (ProjectApis): the project and the API's name are the resource.
    "gcp:projects/service:Service": TypeRules(
        source=f"{_TF} google/services/resourcemanager/resource_google_project_service.go, ForceNew",
        replace=("project", "service"),
    ),
    # The trainer's code: a new object; VMs and Pods copy it when they next start.
    "gcp:storage/bucketObject:BucketObject": TypeRules(
        source=f"{_TF} google/services/storage/resource_storage_bucket_object.go, ForceNew",
        replace=(
            "bucket",
            "cacheControl",
            "contentDisposition",
            "contentEncoding",
            "contentLanguage",
            "contentType",
            "forceEmptyContentType",
            "kmsKeyName",
            "metadata",
            "name",
            "source",
            "storageClass",
        ),
    ),
    # Monitoring (docs/monitoring.md): only the project is ForceNew; everything the stack sets is
    # updated in place. A replacement re-creates a metric, chart or alert; training never notices.
    "gcp:logging/metric:Metric": TypeRules(
        source=f"{_TF} google/services/logging/resource_logging_metric.go, ForceNew",
        # A metric descriptor label's key and value type are ForceNew inside its set: adding a
        # label (the `run` one, say) re-creates the metric under the same name.
        replace=("project", "metricDescriptor.labels"),
    ),
    "gcp:monitoring/dashboard:Dashboard": TypeRules(
        source=f"{_TF} google/services/monitoring/resource_monitoring_dashboard.go, ForceNew",
        replace=("project",),
    ),
    "gcp:monitoring/alertPolicy:AlertPolicy": TypeRules(
        source=f"{_TF} google/services/monitoring/resource_monitoring_alert_policy.go, ForceNew",
        replace=("project",),
    ),
    "gcp:monitoring/notificationChannel:NotificationChannel": TypeRules(
        source=f"{_TF} google/services/monitoring/resource_monitoring_notification_channel.go, ForceNew",
        replace=("project",),
    ),
    "gcp:serviceaccount/account:Account": TypeRules(
        source=f"{_TF} google/services/resourcemanager/resource_google_service_account.go",
        replace=("accountId", "project"),
    ),
    "gcp:compute/network:Network": TypeRules(
        source=f"{_COMPUTE}/resource_compute_network.go",
        replace=(
            "name",
            "autoCreateSubnetworks",
            "description",
            "internalIpv6Range",
            "networkProfile",
            "params",
            "project",
        ),
        replaced_means=f"every subnetwork, TPU VM and cluster on it is re-created: {TRAINING_RESTARTS}",
    ),
    "gcp:compute/subnetwork:Subnetwork": TypeRules(
        source=f"{_COMPUTE}/resource_compute_subnetwork.go",
        replace=(
            "name",
            "network",
            "description",
            "externalIpv6Prefix",
            "internalIpv6Prefix",
            "params",
            "region",
            "reservedInternalRange",
            "resolveSubnetMask",
            "project",
        ),
        replaced_means=f"the TPU VMs and cluster in it are re-created: {TRAINING_RESTARTS}",
    ),
    "gcp:compute/firewall:Firewall": TypeRules(
        source=f"{_COMPUTE}/resource_compute_firewall.go",
        replace=("name", "direction", "params", "project"),
    ),
    "gcp:compute/router:Router": TypeRules(
        source=f"{_COMPUTE}/resource_compute_router.go",
        replace=(
            "name",
            "encryptedInterconnectRouter",
            "nccGateway",
            "network",
            "params",
            "region",
            "project",
        ),
    ),
    "gcp:compute/routerNat:RouterNat": TypeRules(
        source=f"{_COMPUTE}/resource_compute_router_nat.go",
        replace=("name", "router", "endpointTypes", "initialNatIps", "region", "type", "project"),
    ),
}

# diff.go: every kind replaces on a new name or namespace (metadataForceNewProperties).
KUBERNETES_METADATA = ("metadata.name", "metadata.namespace")

_CONFIG_READ_AT_START = (
    "running Pods keep the values they read when they started; they see the new ones when they next start"
)

KUBERNETES_RULES: Mapping[str, TypeRules] = {
    # diff.go `job`: .spec.completions, .spec.parallelism, .spec.selector, .spec.template: any
    # change in the Pod template (an env value, an image, an affinity term) re-creates the Job.
    "batch/v1/Job": TypeRules(
        source=f"{_K8S_DIFF}, forceNew: batch/v1 Job",
        replace=(
            *KUBERNETES_METADATA,
            "spec.completions",
            "spec.parallelism",
            "spec.selector",
            "spec.template",
        ),
        replaced_means=TRAINING_RESTARTS,
    ),
    # A custom resource: diff.go knows no field of it (metadataForceNewProperties only); a JobSet
    # is replaced only by what the program asks (the component's replaceOnChanges: spec).
    "jobset.x-k8s.io/v1alpha2/JobSet": TypeRules(
        source=f"{_K8S_DIFF}, metadataForceNewProperties (a custom resource)",
        replace=KUBERNETES_METADATA,
        replaced_means=TRAINING_RESTARTS,
    ),
    # A custom resource GKE's autoscaler reads when it next scales up (domain/compute_class): a
    # new order or new rules change no node that is up and no Pod on one (no active migration).
    "cloud.google.com/v1/ComputeClass": TypeRules(
        source=f"{_K8S_DIFF}, metadataForceNewProperties (a custom resource)",
        replace=KUBERNETES_METADATA,
        notes={
            "spec.priorities": (
                "GKE applies the new rungs and their order at its next scale-up; nodes already up, "
                "and the training on them, stay where they are (no active migration)"
            )
        },
    ),
    "v1/Service": TypeRules(
        source=f"{_K8S_DIFF}, forceNew: core/v1 Service",
        replace=(*KUBERNETES_METADATA, "spec.clusterIP"),
    ),
    # ConfigMap data replaces unless the provider sets enableConfigMapMutable (and the map is
    # not immutable): see `classify`. Running Pods keep what they read when they started.
    "v1/ConfigMap": TypeRules(
        source=f"{_K8S_DIFF}, forceNewProperties: ConfigMap .data, .binaryData unless enableConfigMapMutable",
        replace=KUBERNETES_METADATA,
        notes={"data": _CONFIG_READ_AT_START, "binaryData": _CONFIG_READ_AT_START},
        replaced_means=_CONFIG_READ_AT_START,
    ),
    "v1/Secret": TypeRules(
        source=f"{_K8S_DIFF}, forceNewProperties: Secret .type; .data, .stringData unless mutable",
        replace=(*KUBERNETES_METADATA, "type"),
    ),
}

# A Helm release is diffed by the provider's own Helm code: a new name or namespace replaces it
# (forceNewFields), the old one deleted after (DeleteBeforeReplace: false); a new chart version or
# values upgrade it in place.
HELM_RELEASE = TypeRules(
    source="pulumi/pulumi-kubernetes provider/pkg/provider/helm_release.go, helmReleaseProvider.Diff",
    replace=("name", "namespace"),
)
HELM_RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"

KUBERNETES_DEFAULT = TypeRules(source=f"{_K8S_DIFF}, metadataForceNewProperties", replace=KUBERNETES_METADATA)

KUBERNETES_PROVIDER = "pulumi:providers:kubernetes"


def kubernetes_kind(inputs: Mapping[str, Any]) -> str:
    """``apiVersion/kind`` of a Kubernetes object's inputs: ``batch/v1/Job``, ``v1/Service``."""
    return f"{inputs.get('apiVersion', '')}/{inputs.get('kind', '')}"


def rules_for(type_: str, inputs: Mapping[str, Any]) -> Optional[TypeRules]:
    """The rules for a resource type, or None when this module has none (the provider decides)."""
    if type_ == KUBERNETES_PROVIDER:
        return None  # its own rules: change_impact's provider_replaced (DiffConfig)
    if type_ == HELM_RELEASE_TYPE:
        return HELM_RELEASE
    if type_.startswith("kubernetes:"):
        return KUBERNETES_RULES.get(kubernetes_kind(inputs), KUBERNETES_DEFAULT)
    return GCP_RULES.get(type_)


def _active_cluster(kubeconfig: Any) -> Optional[tuple[Any, Any]]:
    """(server, CA) of the kubeconfig's current context, as DiffConfig's
    getActiveClusterFromConfig compares them; None when it cannot be read."""
    try:
        config = json.loads(kubeconfig) if isinstance(kubeconfig, str) else kubeconfig
        context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        return cluster.get("server"), cluster.get("certificate-authority-data")
    except (ValueError, TypeError, KeyError, StopIteration, AttributeError):
        return None


def kubernetes_provider_replaced(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Why pulumi-kubernetes' DiffConfig (provider/pkg/provider/provider.go) replaces the provider:
    a new clusterIdentifier; without an unchanged one, a new active cluster in the kubeconfig (or
    a kubeconfig it cannot compare); a new renderYamlToDirectory."""
    reasons = []
    old_id, new_id = old.get("clusterIdentifier"), new.get("clusterIdentifier")
    if old_id is not None and new_id is not None and old_id != new_id:
        reasons.append("clusterIdentifier changed")
    if old.get("renderYamlToDirectory") != new.get("renderYamlToDirectory"):
        reasons.append("renderYamlToDirectory changed")
    if new_id is not None and old_id == new_id:
        return reasons  # an unchanged identifier: DiffConfig drops every other replacement
    for key in ("kubeconfig", "context", "cluster"):
        if old.get(key) == new.get(key):
            continue
        before, after = _active_cluster(old.get("kubeconfig")), _active_cluster(new.get("kubeconfig"))
        if before is None or after is None or before != after or key != "kubeconfig":
            reasons.append(f"{key} changed: the active cluster is another one (or cannot be compared)")
    return [f"{reason} [{_K8S_DIFF.replace('diff.go', 'provider.go')}, DiffConfig]" for reason in reasons]


def _provider_flag(value: Any) -> bool:
    # A provider's inputs reach the engine as strings: `true` arrives as "true".
    return value is True or value == "true"


def plan_facts(providers: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Facts about a plan's Kubernetes providers that decide how objects on them are diffed:
    ``configMapMutable`` / ``secretMutable`` when every one sets enableConfigMapMutable /
    enableSecretMutable (the plan does not say which provider each object uses)."""
    return {
        "configMapMutable": bool(providers)
        and all(_provider_flag(p.get("enableConfigMapMutable")) for p in providers),
        "secretMutable": bool(providers)
        and all(_provider_flag(p.get("enableSecretMutable")) for p in providers),
    }


def content_replacements(
    type_: str, inputs: Mapping[str, Any], changed: Sequence[str], facts: Mapping[str, Any]
) -> list[str]:
    """The changed paths of a ConfigMap's or Secret's content that replace it: all of them unless
    its provider makes that kind mutable and the object is not ``immutable`` (diff.go
    forceNewProperties)."""
    kind = kubernetes_kind(inputs)
    if not type_.startswith("kubernetes:") or kind not in ("v1/ConfigMap", "v1/Secret"):
        return []
    mutable_key, content = (
        ("configMapMutable", ("data", "binaryData"))
        if kind == "v1/ConfigMap"
        else ("secretMutable", ("data", "stringData"))
    )
    if not inputs.get("immutable") and facts.get(mutable_key):
        return []
    return [path for path in changed if path.split(".", 1)[0].split("[", 1)[0] in content]
