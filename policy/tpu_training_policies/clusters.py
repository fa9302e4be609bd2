"""GKE clusters and node pools: private nodes, Workload Identity, shielded nodes, their own
identity, a release channel."""

from __future__ import annotations

from .resources import (
    CLUSTER,
    NODE_POOL,
    Resource,
    Violations,
    at,
    is_default_account,
    items,
)


def private_nodes(resource: Resource, violation: Violations) -> None:
    if resource.type == CLUSTER:
        if resource.at("privateClusterConfig", "enablePrivateNodes") is not True:
            found = resource.at("privateClusterConfig", "enablePrivateNodes")
            violation("privateClusterConfig.enablePrivateNodes", found, "true")
    elif resource.at("networkConfig", "enablePrivateNodes") is False:
        # Unset, a pool takes the cluster's setting; false gives its nodes public addresses.
        violation("networkConfig.enablePrivateNodes", False, "true or not set (the cluster's private nodes)")


def workload_identity(resource: Resource, violation: Violations) -> None:
    if resource.type == CLUSTER:
        pool = resource.at("workloadIdentityConfig", "workloadPool")
        if not (isinstance(pool, str) and pool.endswith(".svc.id.goog")):
            violation("workloadIdentityConfig.workloadPool", pool, '"PROJECT.svc.id.goog"')
        return
    mode = resource.at("nodeConfig", "workloadMetadataConfig", "mode")
    if mode is not None and mode != "GKE_METADATA":
        violation(
            "nodeConfig.workloadMetadataConfig.mode", mode, '"GKE_METADATA" or not set (the cluster\'s)'
        )


def shielded_nodes(cluster: Resource, violation: Violations) -> None:
    # Unset is the provider's default, true.
    if cluster.at("enableShieldedNodes") is False:
        violation("enableShieldedNodes", False, "true or not set (the provider's default, true)")


def no_legacy_abac(cluster: Resource, violation: Violations) -> None:
    if cluster.at("enableLegacyAbac") is True:
        violation("enableLegacyAbac", True, "false or not set")


def node_service_account(resource: Resource, violation: Violations) -> None:
    required = "a dedicated service account, not the default compute one"
    if resource.type == NODE_POOL:
        accounts = [("nodeConfig.serviceAccount", resource.at("nodeConfig", "serviceAccount"))]
    else:
        accounts = [
            (f"nodePools[{i}].nodeConfig.serviceAccount", at(pool, "nodeConfig", "serviceAccount"))
            for i, pool in enumerate(items(resource.at("nodePools")))
        ]
        if not items(resource.at("nodePools")):
            # The default pool is made from nodeConfig, even with removeDefaultNodePool: it runs
            # while the cluster is created, and a node that ever ran as Editor of the project
            # may have left that credential's tokens behind.
            accounts.append(("nodeConfig.serviceAccount", resource.at("nodeConfig", "serviceAccount")))
        if resource.at("clusterAutoscaling", "enabled") is True:
            defaults = resource.at("clusterAutoscaling", "autoProvisioningDefaults", "serviceAccount")
            accounts.append(("clusterAutoscaling.autoProvisioningDefaults.serviceAccount", defaults))
    for prop, email in accounts:
        if is_default_account(email):
            violation(prop, email, required)


def release_channel(cluster: Resource, violation: Violations) -> None:
    channel = cluster.at("releaseChannel", "channel")
    if channel not in ("REGULAR", "STABLE"):
        violation("releaseChannel.channel", channel, '"REGULAR" or "STABLE"')
