"""Which Google Cloud regions and zones exist: dated data with its source. Pure Python.

Read on 2026-11-21 from the output of `gcloud compute zones list` as recorded on 2026-09-21
(`gcloud compute zones list --format=json | jq -r '.[].name' | sort`, kept in
log2timeline/dftimewolf's `dftimewolf/lib/collectors/gcp_zone.py`), checked against Google's
"Regions and zones" (https://cloud.google.com/compute/docs/regions-zones) for the zone letters that
are not a, b, c. us-central2, us-east7, us-west8 and europe-west15 are listed by gcloud but not in
Google's public table: they are open to some projects only (us-central2 holds TPU v4).

A region or zone missing here is refused, naming this table's date: a typo (`europe-west44`,
`us-central1-e`) would otherwise reach `pulumi up` and fail there, after other resources were made.
When Google opens a region, add it here.
"""

from __future__ import annotations

import difflib
from typing import Optional

AS_OF = "2026-09-21"

_ABC = ("a", "b", "c")

REGION_ZONES: dict[str, tuple[str, ...]] = {
    "africa-south1": _ABC,
    "asia-east1": _ABC,
    "asia-east2": _ABC,
    "asia-northeast1": _ABC,
    "asia-northeast2": _ABC,
    "asia-northeast3": _ABC,
    "asia-south1": _ABC,
    "asia-south2": _ABC,
    "asia-southeast1": _ABC,
    "asia-southeast2": _ABC,
    "asia-southeast3": _ABC,
    "australia-southeast1": _ABC,
    "australia-southeast2": _ABC,
    "europe-central2": _ABC,
    "europe-north1": _ABC,
    "europe-north2": _ABC,
    "europe-southwest1": _ABC,
    "europe-west1": ("b", "c", "d"),
    "europe-west2": _ABC,
    "europe-west3": _ABC,
    "europe-west4": _ABC,
    "europe-west6": _ABC,
    "europe-west8": _ABC,
    "europe-west9": _ABC,
    "europe-west10": _ABC,
    "europe-west12": _ABC,
    "europe-west15": _ABC,
    "me-central1": _ABC,
    "me-central2": _ABC,
    "me-west1": _ABC,
    "northamerica-northeast1": _ABC,
    "northamerica-northeast2": _ABC,
    "northamerica-south1": _ABC,
    "southamerica-east1": _ABC,
    "southamerica-west1": _ABC,
    "us-central1": ("a", "b", "c", "f"),
    "us-central2": ("a", "b", "c", "d"),
    "us-east1": ("b", "c", "d"),
    "us-east4": _ABC,
    "us-east5": _ABC,
    "us-east7": _ABC,
    "us-south1": _ABC,
    "us-west1": _ABC,
    "us-west2": _ABC,
    "us-west3": _ABC,
    "us-west4": _ABC,
    "us-west8": _ABC,
}


def _unknown(what: str, name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (
        f"{what} {name!r} is not a Google Cloud {what} in our table of {AS_OF}; {hint}"
        f"if Google opened it since, add it to components/tpu_training_components/domain/gcp_locations.py"
    )


def region_problem(region: str) -> Optional[str]:
    """Why ``region`` names no Google Cloud region, or None."""
    if region in REGION_ZONES:
        return None
    return _unknown("region", region, sorted(REGION_ZONES))


def zone_problem(zone: str) -> Optional[str]:
    """Why ``zone`` (REGION-LETTER) names no Google Cloud zone, or None."""
    region, _, letter = zone.rpartition("-")
    if region in REGION_ZONES and letter in REGION_ZONES[region]:
        return None
    if region in REGION_ZONES:
        zones = ", ".join(f"{region}-{z}" for z in REGION_ZONES[region])
        return f"zone {zone!r} does not exist; {region}'s zones are {zones} (our table of {AS_OF})"
    return _unknown("zone", zone, [f"{r}-{z}" for r, letters in REGION_ZONES.items() for z in letters])
