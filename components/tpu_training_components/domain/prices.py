"""What the stack's resources cost per hour: a pinned price table, each price with its source and
the date it was read. Pure Python with no Pulumi import.

List prices in US dollars, before discounts, taxes and credits; they go stale (Google changes Spot
prices up to once a month), so every estimate says when its prices were read. A price this table
does not hold is unknown, never 0: the plan says so. docs/cost.md says how to refresh the table.

Sources, read on 2026-11-26:

- ``SKYPILOT``: SkyPilot's Google Cloud catalogue, ``catalogs/v7/gcp/vms.csv`` of
  https://github.com/skypilot-org/skypilot-catalog at commit 017e2502fb63c7a28757acd94002b2d6099d3e3d,
  which SkyPilot generates from Google's Cloud Billing Catalog API: a ``Price`` (on-demand) and a
  ``SpotPrice`` per type and zone. TPU rows are per accelerator type (``tpu-v6e-16``); for v4 and
  later every row is the type's chips times one rate, which is the rate kept here. v2 and v3 are
  priced per device (``-8``, four chips) and, for Pod slices, per eight cores.
- ``GKE_FEE``: GKE's cluster management fee, $0.10 per cluster-hour for Standard clusters
  (https://cloud.google.com/kubernetes-engine/pricing), as quoted by
  https://github.com/murphye/cheap-gke-cluster ("$74.40 per month for each control plane": 744 h
  x $0.10). The monthly free-tier credit covers one zonal or Autopilot cluster, not a regional one.
- ``NAT``: Cloud NAT, $0.0014 per VM-hour for up to 32 VMs, and $0.005 per hour for each external
  IP address it uses (https://cloud.google.com/nat/pricing and
  https://cloud.google.com/vpc/network-pricing), as read from those pages on 2026-10-16 by
  https://github.com/ChiefGyk3D/Clouds-Against-Humanity/wiki/Provider-GCP-Cost-Lesson. Its $0.045
  per GiB processed depends on traffic and is not counted.
- Flex-start: no price per TPU chip-hour for flex-start (Dynamic Workload Scheduler) is in the
  sources above, and none was found in Google's pages as stored here on 2026-11-28 (Cloud TPU
  pricing, cloud.google.com/tpu/pricing, and "Request Cloud TPUs using Flex-start",
  cloud.google.com/tpu/docs/request-using-flex-start, which points to the pricing page; the
  Billing Catalog rows SkyPilot keeps have on-demand and Spot only). Google describes flex-start
  as cost-effective ("a flexible and cost-effective way to access TPU resources"), never above
  on-demand: so a flex-start TPU is shown at its on-demand price as an upper bound
  (``Price.upper_bound``), and the plan says "at most".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

AS_OF = "2026-11-26"

SKYPILOT = (
    "skypilot-org/skypilot-catalog catalogs/v7/gcp/vms.csv @017e2502 (from Google's Cloud Billing "
    "Catalog API), read 2026-11-26"
)
GKE_FEE = (
    "cloud.google.com/kubernetes-engine/pricing (cluster management fee), as quoted by "
    "github.com/murphye/cheap-gke-cluster, read 2026-11-26"
)
NAT = "cloud.google.com/nat/pricing and /vpc/network-pricing, as read 2026-10-16"

Model = Literal["on-demand", "spot", "flex-start", "reserved"]
"""How the capacity is bought. Preemptible TPU VMs are billed at the Spot price (the catalogue's
``SpotPrice`` column is the preemptible and Spot SKU)."""


@dataclass(frozen=True)
class Price:
    """An hourly price, or why there is none."""

    usd_per_hour: Optional[float]
    """None: unknown."""
    source: str
    """Where the price comes from (with the date read), or why it is unknown."""
    upper_bound: bool = False
    """The price is at most this (flex-start at the on-demand price), not the price itself."""

    @property
    def known(self) -> bool:
        return self.usd_per_hour is not None

    def times(self, count: float) -> Price:
        return Price(
            None if self.usd_per_hour is None else self.usd_per_hour * count, self.source, self.upper_bound
        )


def unknown(why: str) -> Price:
    return Price(None, why)


# Per chip-hour, (on-demand, Spot), for generations priced by chip (v4 and later).
TPU_CHIP_HOUR: dict[tuple[str, str], tuple[float, float]] = {
    ("v4", "us-central2"): (3.22, 0.9215),
    ("v5e", "europe-west4"): (1.56, 0.44261),
    ("v5e", "us-central1"): (1.2, 0.21298),
    ("v5e", "us-east1"): (1.2, 0.21298),
    ("v5e", "us-east5"): (1.2, 0.6),
    ("v5e", "us-south1"): (1.416, 0.5664),
    ("v5e", "us-west1"): (1.2, 0.21298),
    ("v5e", "us-west4"): (1.2, 0.4692),
    ("v5p", "europe-west4"): (4.2525, 1.34849),
    ("v5p", "us-central1"): (4.2, 1.68),
    ("v5p", "us-east1"): (4.2, 1.68),
    ("v5p", "us-east5"): (4.2, 1.56009),
    ("v6e", "asia-northeast1"): (3.24, 1.07681),
    ("v6e", "europe-west4"): (2.97, 0.71316),
    ("v6e", "us-central1"): (2.7, 0.64833),
    ("v6e", "us-east1"): (2.7, 0.64833),
    ("v6e", "us-east4"): (2.7, 0.85833),
    ("v6e", "us-east5"): (2.7, 1.08),
    ("v6e", "us-south1"): (2.7, 1.89),
    ("v6e", "us-west1"): (2.7, 0.64833),
}

# v2 and v3 single devices (the -8 types): per device-hour, (on-demand, Spot).
TPU_DEVICE_HOUR: dict[tuple[str, str], tuple[float, float]] = {
    ("v2", "asia-east1"): (5.22, 1.566),
    ("v2", "europe-west4"): (4.95, 1.26225),
    ("v2", "us-central1"): (4.5, 1.35),
    ("v3", "europe-west4"): (8.8, 2.244),
    ("v3", "us-central1"): (8.0, 2.04),
}

# v2 and v3 Pod slices (32 cores and up): per eight cores, (on-demand, Spot).
TPU_POD_EIGHT_CORES_HOUR: dict[tuple[str, str], tuple[float, float]] = {
    ("v2", "europe-west4"): (6.0, 1.53),
    ("v2", "us-central1"): (6.0, 1.53),
    ("v3", "europe-west4"): (8.0, 2.64),
    ("v3", "us-east1"): (8.0, 2.4),
}

# e2-standard-2 per hour (on-demand); the other e2-standard shapes are priced in proportion to
# their vCPUs (e2-standard-16 is eight times e2-standard-2 in every region of the source).
E2_STANDARD_2_HOUR: dict[str, float] = {
    "asia-east1": 0.07759,
    "asia-northeast1": 0.08597,
    "europe-west4": 0.07377,
    "us-central1": 0.06701,
    "us-east1": 0.06701,
    "us-east4": 0.07547,
    "us-east5": 0.06701,
    "us-south1": 0.07907,
    "us-west1": 0.06701,
    "us-west4": 0.07547,
}

GKE_CLUSTER_HOUR = Price(0.10, GKE_FEE)
NAT_VM_HOUR = Price(0.0014, NAT)
NAT_ADDRESS_HOUR = Price(0.005, NAT)

_NOT_BY_THE_HOUR = {
    "reserved": "reserved capacity is billed by its reservation's contract",
}
FLEX_START_BOUND = (
    "at most: flex-start's own price is not published in the sources read (2026-11-28), so its "
    "on-demand price bounds it (docs/cost.md)"
)


def _pick(rates: tuple[float, float], model: Model) -> Price:
    on_demand, spot = rates
    return Price(on_demand if model == "on-demand" else spot, SKYPILOT)


def tpu_vm_hour(generation: str, region: str, chips: int, cores: int, model: Model) -> Price:
    """A TPU VM (or slice) of ``chips`` chips and ``cores`` TensorCores, per hour. Flex-start is
    its on-demand price as an upper bound (``FLEX_START_BOUND``)."""
    if model in _NOT_BY_THE_HOUR:
        return unknown(_NOT_BY_THE_HOUR[model])
    if model == "flex-start":
        on_demand = tpu_vm_hour(generation, region, chips, cores, "on-demand")
        if not on_demand.known:
            return on_demand
        return Price(on_demand.usd_per_hour, f"{FLEX_START_BOUND}; on-demand from {on_demand.source}", True)
    what = f"TPU {generation} in {region}"
    if generation in ("v2", "v3"):
        if cores == 8:
            rates = TPU_DEVICE_HOUR.get((generation, region))
            return _pick(rates, model) if rates else unknown(f"no {what} device price in the table")
        rates = TPU_POD_EIGHT_CORES_HOUR.get((generation, region))
        return _pick(rates, model).times(cores / 8) if rates else unknown(f"no {what} Pod price in the table")
    rates = TPU_CHIP_HOUR.get((generation, region))
    return _pick(rates, model).times(chips) if rates else unknown(f"no {what} price in the table")


def machine_hour(machine_type: str, region: str) -> Price:
    """A Compute Engine VM (a GKE system node) per hour, on demand."""
    prefix = "e2-standard-"
    base = E2_STANDARD_2_HOUR.get(region)
    if machine_type.startswith(prefix) and machine_type[len(prefix) :].isdigit() and base is not None:
        return Price(base * int(machine_type[len(prefix) :]) / 2, SKYPILOT)
    return unknown(f"no {machine_type} price in {region} in the table")
