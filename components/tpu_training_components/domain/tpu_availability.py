"""Where each TPU generation can be had, and which offer flex-start: data with its sources.

Pure Python with no Pulumi import. Google adds zones and generations over time, so these tables
go stale: a zone missing here is only a warning (users must never be blocked by our data), while
flex-start on a generation Google documents as unsupported is an error.

Read from:
- GKE "About flex-start provisioning" (https://cloud.google.com/kubernetes-engine/docs/concepts/dws,
  read 2026-11-21):
  "To run TPUs, use GKE version 1.33.0-gke.1712000 or later. Flex-start supports the following
  version and zones: [v6e] asia-northeast1-b, us-east5-a, and us-east5-b. [v5e] us-west4-a.
  [v5p] us-east5-a. TPU v3 and v4 are not supported." Cluster Toolkit has a TPU7x flex-start
  example (examples/gke-consumption-options/dws-flex-start/gke-tpu-7x) but no zone list.
- Cloud TPU "TPU regions and zones" (https://cloud.google.com/tpu/docs/regions-zones, re-read
  2026-12-03; the copies read show no date of their own, the last one dated says "Last updated
  2025-09-09 UTC"), for the zones of each generation: multi-tenant zones only (the zones the page
  marks single-tenant, e.g. v5e's us-east5-a/b/c, need an arrangement with Google). Its North
  America table, read whole: TPU7x us-central1-c; v6e us-central1-b, us-east1-d, us-east5-a,
  us-east5-b; v5p us-central1-a, us-east5-a; v5e us-central1-a, us-south1-a, us-west1-c, us-west4-a;
  v4 us-central2-b; v3-8 us-central1-a, us-central1-b; v2-8 us-central1-b, us-central1-c, v2-32
  and larger us-central1-a. Its Europe table lists v6e in europe-west4-a (read) and v5p, v5e, v3
  and v2 rows whose zones the copies available here cut off; its Asia Pacific table has v6e and v2
  rows (the copy read is cut off after them). Those rows' zones are taken from sources that agree
  with each other and with the page's North America rows: v5p and v5e europe-west4-b, v3 and v2
  europe-west4-a, v2-8 asia-east1-c (GoogleCloudPlatform/ml-auto-solutions
  dags/common/vm_resource.py at 00f382f: v5p-8 and reserved v5e capacity in europe-west4-b;
  skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv at 006059e, its TPU rows per zone), and
  v6e asia-northeast1-b from the flex-start list above. Zones Google added since, and AI zones
  (us-central1-ai1a ...), are not here: a stack acknowledges one with ``allowUnlistedZone: true``
  on its entry (the component preview: ``acknowledged_zones``).
"""

from __future__ import annotations

from typing import Optional

AS_OF = "2026-12-03"

# Generations on which GKE offers TPU flex-start. v2 and v3 are not GKE TPU generations at all;
# v4 is documented as unsupported.
FLEX_START_GENERATIONS = frozenset({"v5e", "v5p", "v6e", "tpu7x"})

# Zones with flex-start capacity, per generation (GKE "About flex-start provisioning").
FLEX_START_ZONES: dict[str, frozenset[str]] = {
    "v5e": frozenset({"us-west4-a"}),
    "v5p": frozenset({"us-east5-a"}),
    "v6e": frozenset({"asia-northeast1-b", "us-east5-a", "us-east5-b"}),
}

# Flex-start *TPU VMs* (through queued resources, not GKE): Cloud TPU "Request TPUs using
# Flex-start" (https://cloud.google.com/tpu/docs/request-using-flex-start, Preview): "You can only
# request Flex-start TPU v6e and v5e in the specified zones: TPU v6e for training and serving:
# asia-northeast1-b, us-east5-a / TPU v5e for training: us-west4-a / TPU v5e for serving:
# us-central1-a". This project trains, so v5e's serving zone is not listed. v5p and TPU7x are not
# offered (the Cloud TPU API "is not supported on TPU7x and later", "Manage queued resources").
VM_FLEX_START_GENERATIONS = frozenset({"v5e", "v6e"})
VM_FLEX_START_ZONES: dict[str, frozenset[str]] = {
    "v5e": frozenset({"us-west4-a"}),
    "v6e": frozenset({"asia-northeast1-b", "us-east5-a"}),
}

# Zones offering each generation, multi-tenant (Cloud TPU "TPU regions and zones"; sources above).
ZONES: dict[str, frozenset[str]] = {
    "v2": frozenset({"us-central1-a", "us-central1-b", "us-central1-c", "europe-west4-a", "asia-east1-c"}),
    "v3": frozenset({"us-central1-a", "us-central1-b", "europe-west4-a"}),
    "v4": frozenset({"us-central2-b"}),
    "v5e": frozenset({"us-central1-a", "us-south1-a", "us-west1-c", "us-west4-a", "europe-west4-b"}),
    "v5p": frozenset({"us-central1-a", "us-east5-a", "europe-west4-b"}),
    "v6e": frozenset(
        {"us-central1-b", "us-east1-d", "us-east5-a", "us-east5-b", "europe-west4-a", "asia-northeast1-b"}
    ),
    "tpu7x": frozenset({"us-central1-c"}),
}
REGIONS_AND_ZONES_PAGE = "https://cloud.google.com/tpu/docs/regions-zones"


def flex_start_problem(generation: str) -> Optional[str]:
    """Why flex-start cannot provision this TPU generation, or None when it can."""
    if generation in FLEX_START_GENERATIONS:
        return None
    offered = ", ".join(sorted(FLEX_START_GENERATIONS))
    return (
        f"flex-start does not provision TPU {generation} (GKE offers it for {offered}); "
        f"set flexStart: false and use spot or a reservation, or pick another machine type"
    )


def zone_warning(generation: str, zone: str, *, flex_start: bool = False) -> Optional[str]:
    """A warning when our tables do not list ``zone`` for the generation (or for its flex-start
    capacity), or None. Only a warning: the tables may be older than Google's offer."""
    listed = (FLEX_START_ZONES if flex_start else ZONES).get(generation, frozenset())
    if zone in listed:
        return None
    what = f"TPU {generation} flex-start" if flex_start else f"TPU {generation}"
    known = ", ".join(sorted(listed)) or "none listed"
    return (
        f"zone {zone} is not listed for {what} in our table of {AS_OF} ({known}); "
        f"check Google's current list ({REGIONS_AND_ZONES_PAGE}) before `pulumi up`"
    )
