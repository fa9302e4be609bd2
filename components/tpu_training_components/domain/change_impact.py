"""What `pulumi up` does to each resource when its declared inputs change, by the providers' own
rules: create, delete, update in place or replace; and what that means for a running training.

Pure Python (no Pulumi): it compares two plans in the shape ``python -m infra.plan --json``
writes (``resources: [{urn, type, name, inputs, options}]``), so a plan written from the deployed
commit tells what the next `pulumi up` of this commit would replace. Field paths are the
engine's camelCase inputs (``nodeConfig.maxRunDuration``, ``spec.template``), with list items
matched whatever their index: a rule knows fields, not this stack's resources, so it holds for
any program that declares these resource types.

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
  provider itself.
- The Pulumi engine: a resource whose ``replacement_trigger`` value differs from the stored one
  is replaced (a trigger that appears where there was none does not replace), and every resource
  of a provider that is replaced is replaced with it (shared/REFERENCE.md, "Pulumi").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping, Optional, Sequence

Action = Literal["create", "delete", "update", "replace", "same"]

_INDEX = re.compile(r"\[\d+\]")

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
    replaced_means: str = ""
    """What a replacement does to a running training, when it does something; '' when it does not."""


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

KUBERNETES_DEFAULT = TypeRules(source=f"{_K8S_DIFF}, metadataForceNewProperties", replace=KUBERNETES_METADATA)

KUBERNETES_PROVIDER = "pulumi:providers:kubernetes"


@dataclass(frozen=True)
class ResourceChange:
    """What `pulumi up` does to one resource, and why."""

    urn: str
    type: str
    name: str
    action: Action
    changed: tuple[str, ...] = ()
    """The input paths that differ (``metadata.startup-script``, ``spec.template...image``)."""
    because: tuple[str, ...] = ()
    """Why it is replaced: the paths or trigger that force it, each with its rule's source."""
    notes: tuple[str, ...] = ()
    """What an in-place change means for the running thing (when it takes effect)."""
    effects: tuple[str, ...] = ()
    """Markers for callers (``NEXT_BOOT``)."""
    replaced_means: str = ""

    @property
    def restarts_training(self) -> bool:
        return self.action == "replace" and TRAINING_RESTARTS in self.replaced_means

    def to_json(self) -> dict[str, Any]:
        return {
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "action": self.action,
            "changed": list(self.changed),
            "because": list(self.because),
            "notes": list(self.notes),
            "effects": list(self.effects),
            "restartsTraining": self.restarts_training,
        }


def changed_paths(old: Any, new: Any, path: str = "") -> list[str]:
    """Every path at which ``new`` differs from ``old``: dicts key by key, lists of equal length
    item by item (``containers[0].image``), anything else as a whole."""
    if isinstance(old, dict) and isinstance(new, dict):
        paths: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in old or key not in new:
                if old.get(key) != new.get(key):
                    paths.append(sub)
                continue
            paths.extend(changed_paths(old[key], new[key], sub))
        return paths
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            p
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for p in changed_paths(a, b, f"{path}[{i}]")
        ]
    return [] if _same(old, new) else [path]


def _same(old: Any, new: Any) -> bool:
    # JSON has one number type: 3 and 3.0 are the same input (and True is not 1).
    if isinstance(old, bool) or isinstance(new, bool):
        return old is new
    return bool(old == new)


def _components(path: str) -> list[str]:
    return [part for part in _INDEX.sub("", path).split(".") if part]


def _at_or_under(path: str, rule: str) -> bool:
    """``path`` is ``rule`` or lies under it (list indices aside)."""
    parts, rule_parts = _components(path), _components(rule)
    return parts[: len(rule_parts)] == rule_parts


def _covers(path: str, rule: str) -> bool:
    """The change at ``path`` includes ``rule``'s field: at, under, or a whole block above it."""
    return _at_or_under(path, rule) or _at_or_under(rule, path)


def kubernetes_kind(inputs: Mapping[str, Any]) -> str:
    """``apiVersion/kind`` of a Kubernetes object's inputs: ``batch/v1/Job``, ``v1/Service``."""
    return f"{inputs.get('apiVersion', '')}/{inputs.get('kind', '')}"


def rules_for(type_: str, inputs: Mapping[str, Any]) -> Optional[TypeRules]:
    """The rules for a resource type, or None when this module has none (the provider decides)."""
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
    except (ValueError, TypeError, KeyError, StopIteration):
        return None


def _kubernetes_provider_replaced(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
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
    return reasons


def classify(
    urn: str,
    type_: str,
    name: str,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    context: Optional[Mapping[str, Any]] = None,
) -> ResourceChange:
    """What `pulumi up` does to a resource declared with ``old`` before and ``new`` now; each a
    plan resource ``{inputs, options}``. ``context`` holds facts about the whole plan:
    ``configMapMutable`` (every Kubernetes provider sets enableConfigMapMutable) and
    ``replacedProviders`` (provider types replaced in this plan)."""
    context = context or {}
    old_inputs, new_inputs = old.get("inputs") or {}, new.get("inputs") or {}
    changed = tuple(changed_paths(old_inputs, new_inputs))
    because: list[str] = []
    notes: list[str] = []
    effects: list[str] = []

    old_trigger = (old.get("options") or {}).get("replacementTrigger")
    new_trigger = (new.get("options") or {}).get("replacementTrigger")
    # The engine replaces on a trigger that differs from the stored one; one that appears where
    # there was none is not a change (REFERENCE.md, "Pulumi").
    if old_trigger is not None and new_trigger is not None and not _same(old_trigger, new_trigger):
        because.append(
            f"replacement trigger {json.dumps(old_trigger)} -> {json.dumps(new_trigger)} [Pulumi engine]"
        )

    rules = rules_for(type_, new_inputs)
    if type_ == KUBERNETES_PROVIDER:
        because.extend(
            f"{reason} [{_K8S_DIFF.replace('diff.go', 'provider.go')}, DiffConfig]"
            for reason in _kubernetes_provider_replaced(old_inputs, new_inputs)
        )
    elif type_.startswith("kubernetes:") and KUBERNETES_PROVIDER in context.get("replacedProviders", ()):
        # The plan does not record which provider each object uses; this stack's objects all use
        # its cluster's provider, so all are said to go with it (never fewer than do).
        because.append(
            "its Kubernetes provider is replaced, and every resource on it with it [Pulumi engine]"
        )
    if rules is not None and changed:
        for path in changed:
            if rules.replace_any:
                because.append(f"{path} changed [{rules.source}]")
                continue
            hit = next((rule for rule in rules.replace if _covers(path, rule)), None)
            whole = next(
                (
                    rule
                    for rule in rules.replace_if_added_or_removed
                    if _components(path) == _components(rule)
                ),
                None,
            )
            if hit or whole:
                because.append(f"{path} changed [{rules.source}]")
        if type_.startswith("kubernetes:") and kubernetes_kind(new_inputs) in ("v1/ConfigMap", "v1/Secret"):
            mutable_key = "configMapMutable" if new_inputs.get("kind") == "ConfigMap" else "secretMutable"
            content = ("data", "binaryData") if mutable_key == "configMapMutable" else ("data", "stringData")
            if new_inputs.get("immutable") or not context.get(mutable_key):
                because.extend(
                    f"{path} changed [{rules.source}]"
                    for path in changed
                    if any(_at_or_under(path, key) for key in content)
                )
        for path in changed:
            for rule, note in rules.notes.items():
                if _covers(path, rule) and note not in notes:
                    notes.append(note)
                    if type_ == "gcp:tpu/v2Vm:V2Vm" and rule == "metadata":
                        effects.append(NEXT_BOOT)
    if rules is None and changed and type_ != KUBERNETES_PROVIDER:
        notes.append("no rule here for this type: `pulumi preview` shows whether the provider replaces it")

    if because:
        action: Action = "replace"
        effects = []  # a replaced VM boots fresh: nothing waits for a next boot
    elif changed:
        action = "update"
    else:
        action = "same"
    return ResourceChange(
        urn=urn,
        type=type_,
        name=name,
        action=action,
        changed=changed,
        because=tuple(dict.fromkeys(because)),
        notes=tuple(notes) if action == "update" else (),
        effects=tuple(effects),
        replaced_means=rules.replaced_means if rules and action == "replace" else "",
    )


def _provider_flag(value: Any) -> bool:
    # A provider's inputs reach the engine as strings: `true` arrives as "true".
    return value is True or value == "true"


def _context(resources: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    providers = [r.get("inputs") or {} for r in resources if r.get("type") == KUBERNETES_PROVIDER]
    return {
        "configMapMutable": bool(providers)
        and all(_provider_flag(p.get("enableConfigMapMutable")) for p in providers),
        "secretMutable": bool(providers)
        and all(_provider_flag(p.get("enableSecretMutable")) for p in providers),
    }


def compare_plans(
    base: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]
) -> list[ResourceChange]:
    """Every resource of ``base`` (what is deployed) and ``new`` (what `pulumi up` would declare),
    matched by URN, with what happens to it. New resources first in ``new``'s order, then the
    deleted ones in ``base``'s. Component resources (``custom: false``) are left out: the engine
    creates nothing for them in the cloud."""
    before = {r["urn"]: r for r in base if r.get("custom", True)}
    after = {r["urn"]: r for r in new if r.get("custom", True)}
    context = _context(after.values())
    # Providers first: what they do decides what happens to every resource on them.
    replaced_providers = set()
    for urn, resource in after.items():
        if resource["type"].startswith("pulumi:providers:") and urn in before:
            change = classify(urn, resource["type"], resource["name"], before[urn], resource, context=context)
            if change.action == "replace":
                replaced_providers.add(resource["type"])
    context["replacedProviders"] = tuple(sorted(replaced_providers))

    changes = []
    for urn, resource in after.items():
        if urn not in before:
            changes.append(ResourceChange(urn, resource["type"], resource["name"], "create"))
            continue
        changes.append(
            classify(urn, resource["type"], resource["name"], before[urn], resource, context=context)
        )
    for urn, resource in before.items():
        if urn not in after:
            changes.append(ResourceChange(urn, resource["type"], resource["name"], "delete"))
    return _moves_noted(changes)


def _moves_noted(changes: list[ResourceChange]) -> list[ResourceChange]:
    """A resource whose URN changed (a new parent or type, a rename) is, to the engine, one
    resource deleted and another created, unless the program gives the old URN as an alias."""
    created = {(c.type, c.name) for c in changes if c.action == "create"}
    deleted = {(c.type, c.name) for c in changes if c.action == "delete"}
    moved = created & deleted
    if not moved:
        return changes
    note = (
        "its URN changed (a new parent?): without `aliases` Pulumi deletes the old one and creates this one"
    )
    return [
        ResourceChange(c.urn, c.type, c.name, c.action, notes=(note,))
        if c.action in ("create", "delete") and (c.type, c.name) in moved
        else c
        for c in changes
    ]
