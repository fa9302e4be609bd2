"""The ``ForceNew`` fields of a Terraform provider's resource schema, read from its Go source: the
rule table pulumi-gcp (the Terraform provider bridged) replaces by.

``force_new(source, anchor)`` reads the first ``map[string]*schema.Schema{`` after ``anchor`` (a
resource's constructor, a schema variable) and sorts its top-level fields into ForceNew ones,
updatable ones and ones whose schema another function returns (not read here). Run as a script
against checkouts of the providers to regenerate ``tests/fixtures/terraform-force-new.json``::

    python tests/support/harness/terraform_schema.py TERRAFORM_PROVIDER_GOOGLE TERRAFORM_PROVIDER_GOOGLE_BETA

(each a git directory; the commits are the ones below, which ``provider_rules`` cites).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

GOOGLE_COMMIT = "e03b7622a2"
GOOGLE_BETA_COMMIT = "049a8b9e"
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "terraform-force-new.json"

# Pulumi type -> (beta?, file, anchor of its schema map): what provider_rules says it read.
SOURCES: dict[str, tuple[bool, str, str]] = {
    "gcp:tpu/v2Vm:V2Vm": (True, "google-beta/services/tpuv2/resource_tpu_v2_vm.go", "func ResourceTpuV2Vm("),
    "gcp:container/nodePool:NodePool": (
        False,
        "google/services/container/resource_container_node_pool.go",
        "var schemaNodePool =",
    ),
    "gcp:container/nodePool:NodePool#resource": (
        False,
        "google/services/container/resource_container_node_pool.go",
        "func ResourceContainerNodePool(",
    ),
    "gcp:container/nodePool:NodePool#nodeConfig": (
        False,
        "google/services/container/node_config.go",
        "func schemaNodeConfig(",
    ),
    # Monitoring declared by the stack (docs/monitoring.md).
    "gcp:logging/metric:Metric": (
        False,
        "google/services/logging/resource_logging_metric.go",
        "func ResourceLoggingMetric(",
    ),
    "gcp:monitoring/dashboard:Dashboard": (
        False,
        "google/services/monitoring/resource_monitoring_dashboard.go",
        "func ResourceMonitoringDashboard(",
    ),
    "gcp:monitoring/alertPolicy:AlertPolicy": (
        False,
        "google/services/monitoring/resource_monitoring_alert_policy.go",
        "func ResourceMonitoringAlertPolicy(",
    ),
    "gcp:monitoring/notificationChannel:NotificationChannel": (
        False,
        "google/services/monitoring/resource_monitoring_notification_channel.go",
        "func ResourceMonitoringNotificationChannel(",
    ),
    "gcp:container/cluster:Cluster": (
        False,
        "google/services/container/resource_container_cluster.go",
        "func ResourceContainerCluster(",
    ),
    "gcp:storage/bucket:Bucket": (
        False,
        "google/services/storage/resource_storage_bucket.go",
        "func ResourceStorageBucket(",
    ),
    "gcp:storage/bucketObject:BucketObject": (
        False,
        "google/services/storage/resource_storage_bucket_object.go",
        "func ResourceStorageBucketObject(",
    ),
    "gcp:serviceaccount/account:Account": (
        False,
        "google/services/resourcemanager/resource_google_service_account.go",
        "func ResourceGoogleServiceAccount(",
    ),
    "gcp:compute/network:Network": (
        False,
        "google/services/compute/resource_compute_network.go",
        "func ResourceComputeNetwork(",
    ),
    "gcp:compute/subnetwork:Subnetwork": (
        False,
        "google/services/compute/resource_compute_subnetwork.go",
        "func ResourceComputeSubnetwork(",
    ),
    "gcp:compute/firewall:Firewall": (
        False,
        "google/services/compute/resource_compute_firewall.go",
        "func ResourceComputeFirewall(",
    ),
    "gcp:compute/router:Router": (
        False,
        "google/services/compute/resource_compute_router.go",
        "func ResourceComputeRouter(",
    ),
    "gcp:compute/routerNat:RouterNat": (
        False,
        "google/services/compute/resource_compute_router_nat.go",
        "func ResourceComputeRouterNat(",
    ),
    "gcp:projects/service:Service": (
        False,
        "google/services/resourcemanager/resource_google_project_service.go",
        "func ResourceGoogleProjectService(",
    ),
    "gcp:iam/member#base": (
        False,
        "google/tpgiamresource/resource_iam_member.go",
        "var IamMemberBaseSchema =",
    ),
}

_MAP = "map[string]*schema.Schema{"
_ENTRY = re.compile(r'\s*"([a-z0-9_]+)":\s*')
_FORCE_NEW = re.compile(r"\bForceNew:\s*true\b")


class Fields(NamedTuple):
    force_new: list[str]
    updatable: list[str]
    elsewhere: list[str]
    """Fields whose schema a function returns (``"node_config": schemaNodeConfig(),``)."""


def _closing(text: str, start: int) -> int:
    """The index of the brace that closes the one at ``start`` (strings and comments skipped)."""
    depth, i = 0, start
    while i < len(text):
        char = text[i]
        if char == '"' or char == "`":
            end = text.index(char, i + 1) if char == "`" else _string_end(text, i)
            i = end + 1
            continue
        if text.startswith("//", i):
            i = text.index("\n", i)
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError("unbalanced braces")


def _string_end(text: str, start: int) -> int:
    i = start + 1
    while text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i


def _top_level(body: str) -> str:
    """``body`` with every nested ``{...}`` blanked: what is at the entry's own level."""
    out, i = [], 0
    while i < len(body):
        if body[i] == "{":
            end = _closing(body, i)
            out.append(" ")
            i = end + 1
            continue
        out.append(body[i])
        i += 1
    return "".join(out)


def force_new(source: str, anchor: str) -> Fields:
    """The top-level fields of the first schema map after ``anchor`` in ``source``: for a
    resource's constructor, its ``Schema:`` (not its import identity's)."""
    after = source.index(anchor)
    if anchor.startswith("func Resource"):
        # `Schema: map...{` or `Schema: tpgresource.MergeSchemas(schemaX, map...{`.
        after = source.index("\t\tSchema: ", after)
    start = source.index(_MAP, after) + len(_MAP) - 1
    end = _closing(source, start)
    i, forced, updatable, elsewhere = start + 1, [], [], []
    while i < end:
        match = _ENTRY.match(source, i)
        if not match:
            i += 1
            continue
        name, i = match.group(1), match.end()
        if source[i] == "{":
            close = _closing(source, i)
            (forced if _FORCE_NEW.search(_top_level(source[i + 1 : close])) else updatable).append(name)
            i = close + 1
        else:
            elsewhere.append(name)
            i = source.index("\n", i)
    return Fields(sorted(forced), sorted(updatable), sorted(elsewhere))


def main(google: str, google_beta: str) -> None:
    tables = {}
    for key, (beta, path, anchor) in SOURCES.items():
        repo, commit = (google_beta, GOOGLE_BETA_COMMIT) if beta else (google, GOOGLE_COMMIT)
        source = subprocess.run(
            ["git", "--git-dir", repo, "show", f"{commit}:{path}"], capture_output=True, text=True, check=True
        ).stdout
        fields = force_new(source, anchor)
        tables[key] = {"source": f"{path} at {commit}", **fields._asdict()}
    FIXTURE.write_text(json.dumps(tables, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
