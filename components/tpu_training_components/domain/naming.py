"""Google Cloud naming rules for the names and labels this library creates. Pure Python."""

from __future__ import annotations

import hashlib
import ipaddress
import re
import unicodedata
from typing import Callable, Optional

from .catalogue import MACHINE_TYPES

_SERVICE_ACCOUNT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]$")
_PROJECT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")

LABEL_KEY_RULE = (
    "a lowercase letter (international letters too), then up to 62 lowercase letters, digits, '_' or '-'"
)
LABEL_VALUE_RULE = "up to 63 lowercase letters (international ones too), digits, '_' or '-'"
BUCKET_NAME_RULE = "3 to 63 lowercase letters, digits, '-' or '_', starting and ending with a letter or digit"
PROJECT_ID_RULE = "6 to 30 lowercase letters, digits or '-', starting with a letter and not ending with '-'"


MAX_LABELS = 64
"""Google Cloud: "Each resource can have multiple labels, up to a maximum of 64"
(https://cloud.google.com/resource-manager/docs/labels-overview#requirements)."""

PROVIDER_LABELS = 1
"""Labels pulumi-gcp adds itself to a resource it creates: ``goog-pulumi-provisioned``, its
patched copy of the Terraform provider's attribution label (``add_terraform_attribution_label``,
on by default; shared/REFERENCE.md, "Change safety and engine facts"). It counts against
``MAX_LABELS``, so a resource takes at most 63 labels from the stack."""

STACK_LABEL_KEYS = ("managed-by", "pulumi-project", "pulumi-stack")
"""The labels the stack program puts on everything that takes labels (and the policy pack checks)."""

MAX_LABEL_CHARACTERS = 63
MAX_LABEL_BYTES = 128
"""Google Cloud's label rules, as the Resource Manager's "Requirements for labels" states them
(https://cloud.google.com/resource-manager/docs/labels-overview#requirements): keys 1-63 and
values 0-63 characters; "Keys and values can contain only lowercase letters, numeric
characters, underscores, and dashes. All characters must use UTF-8 encoding, and international
characters are allowed"; "Keys must start with a lowercase letter or international character".
The APIs give the same rule as PCRE: keys ``[\\p{Ll}\\p{Lo}][\\p{Ll}\\p{Lo}\\p{N}_-]{0,62}``,
values ``[\\p{Ll}\\p{Lo}\\p{N}_-]{0,63}``, "Keys and values must both be under 128 bytes"
(Bigtable Admin API, ``Instance.labels``). Python's ``re`` has no ``\\p{..}``: the categories
are read with ``unicodedata``."""


def _label_letter(char: str) -> bool:
    # Ll: lowercase letters (a, é, ß); Lo: letters without case (Chinese, Japanese, Hebrew...).
    return unicodedata.category(char) in ("Ll", "Lo")


def _label_char(char: str) -> bool:
    # N: numbers in any script (Nd, Nl, No), as \p{N} reads them.
    return _label_letter(char) or unicodedata.category(char).startswith("N") or char in "_-"


def label_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a label key on Google Cloud resources, or None."""
    if (
        not key
        or len(key) > MAX_LABEL_CHARACTERS
        or len(key.encode("utf-8")) >= MAX_LABEL_BYTES
        or not _label_letter(key[0])
        or not all(_label_char(c) for c in key)
    ):
        return f"label key {key!r} must be {LABEL_KEY_RULE}"
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be a label value on Google Cloud resources, or None."""
    if (
        len(value) > MAX_LABEL_CHARACTERS
        or len(value.encode("utf-8")) >= MAX_LABEL_BYTES
        or not all(_label_char(c) for c in value)
    ):
        return f"label value {value!r} must be {LABEL_VALUE_RULE}"
    return None


MAX_RECOVERY_GENERATION = 10**15 - 2
"""The largest recovery generation a resource may be declared at. The generation is the value of
its ``recovery-generation`` label, which recovery reads back only as up to 15 decimal digits
(``recovery.parse_generation``); the next generation, one more, must still be readable. A
generation also travels as a replacement trigger, and every number crosses gRPC as a double,
exact to 2**53 (16 digits): 15 digits keep "one more" a different number. (New generations are
YYYYMMDDhhmmss, 14 digits.)"""


def generation_problem(generation: object) -> str | None:
    """Why ``generation`` cannot be a recovery generation, or None."""
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        return f"{generation!r} is no recovery generation: a whole number from 0 to {MAX_RECOVERY_GENERATION}"
    if generation > MAX_RECOVERY_GENERATION:
        return (
            f"{generation} is above the largest recovery generation, {MAX_RECOVERY_GENERATION}: the "
            f"generation is a label value recovery reads back as at most 15 digits"
        )
    return None


def label_problem(key: str, value: str) -> str | None:
    """Why a label is not valid on Google Cloud resources, or None when it is."""
    problem = label_key_problem(key)
    if problem:
        return problem
    problem = label_value_problem(value)
    return f"{problem} (key {key!r})" if problem else None


# Kubernetes label syntax (k8s.io/apimachinery pkg/util/validation/validation.go
# IsQualifiedName, IsValidLabelValue, IsDNS1123Subdomain): ASCII only, unlike Google Cloud's labels.
_KUBE_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", re.ASCII)
_KUBE_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", re.ASCII)
KUBERNETES_LABEL_RULE = (
    "a key is [PREFIX/]NAME, NAME up to 63 ASCII letters, digits, '-', '_' or '.', starting and "
    "ending with a letter or digit, PREFIX a DNS subdomain of up to 253 characters; a value is empty "
    "or up to 63 such characters, starting and ending with a letter or digit"
)


def kubernetes_label_problem(key: object, value: object) -> str | None:
    """Why the API server would refuse the label ``key: value`` on an object, or None."""
    if not isinstance(key, str) or not isinstance(value, str):
        return f"label {key!r}: {value!r}: keys and values are text; {KUBERNETES_LABEL_RULE}"
    prefix, _, name = key.rpartition("/")
    if (
        ("/" in key and not (prefix and len(prefix) <= 253 and _KUBE_PREFIX.fullmatch(prefix)))
        or len(name) > MAX_LABEL_CHARACTERS
        or not _KUBE_NAME.fullmatch(name)
    ):
        return f"Kubernetes label key {key!r} is not valid: {KUBERNETES_LABEL_RULE}"
    if len(value) > MAX_LABEL_CHARACTERS or (value and not _KUBE_NAME.fullmatch(value)):
        return f"Kubernetes label value {value!r} (key {key!r}) is not valid: {KUBERNETES_LABEL_RULE}"
    return None


# Cloud Storage, "Bucket naming requirements" (https://cloud.google.com/storage/docs/buckets#naming):
# "Bucket names cannot begin with the goog prefix"; "cannot contain google or close misspellings,
# such as g00gle"; "cannot be represented as an IP address in dotted-decimal notation"; names with
# dots "require verification" of the domain they name, which a generated stack cannot give.
_LOOKALIKE_DIGITS = str.maketrans({"0": "o", "1": "l", "3": "e", "9": "g", "6": "g"})


def bucket_name_problem(name: str) -> str | None:
    """Why a Cloud Storage bucket name is not valid, or None when it is."""
    try:
        ipaddress.IPv4Address(name)
        return f"bucket name {name!r} is an IP address, which Cloud Storage refuses"
    except ValueError:
        pass
    if "." in name:
        return (
            f"bucket name {name!r} has a dot: Cloud Storage takes dotted names only after you verify "
            f"the domain they name; use {BUCKET_NAME_RULE}"
        )
    if not _BUCKET_NAME.fullmatch(name):
        return f"bucket name {name!r} must be {BUCKET_NAME_RULE}"
    if name.startswith("goog"):
        return f"bucket name {name!r} begins with 'goog', which Cloud Storage reserves"
    if "google" in name.translate(_LOOKALIKE_DIGITS).replace("_", "").replace("-", ""):
        return f"bucket name {name!r} contains 'google' or a look-alike of it, which Cloud Storage refuses"
    return None


def project_id_problem(project: str) -> str | None:
    """Why ``project`` is not a Google Cloud project ID, or None. Resource Manager: "6 to 30
    lowercase ASCII letters, digits, or hyphens. It must start with a letter. Trailing hyphens are
    prohibited"; "Cannot contain restricted strings, such as google"
    (https://cloud.google.com/resource-manager/docs/creating-managing-projects). Only `google` is
    checked: the other restricted strings are not listed in full, and an existing project passed
    Google's own check anyway; this one catches a project number, a typo or a placeholder."""
    if project.isdigit():
        return (
            f"{project!r} is a project number; give the project ID "
            f"(`gcloud projects describe {project} --format='value(projectId)'`)"
        )
    if re.fullmatch(r"[a-z0-9.-]+\.[a-z]+:[a-z][-a-z0-9]*", project):
        return (
            f"{project!r} is a domain-scoped project ID, which this stack does not support: bucket, "
            f"service-account and Workload Identity names are made from the project ID and cannot hold ':'"
        )
    if not _PROJECT_ID.fullmatch(project):
        return f"project ID {project!r} must be {PROJECT_ID_RULE}"
    if "google" in project:
        return f"project ID {project!r} contains 'google', which Google Cloud does not allow"
    return None


def service_account_id_problem(account_id: str) -> str | None:
    """Why a service account id is not valid, or None when it is."""
    if not _SERVICE_ACCOUNT_ID.fullmatch(account_id):
        return (
            f"service account id {account_id!r} must be 6-30 lowercase letters, digits or '-', "
            f"starting with a letter and ending with a letter or digit"
        )
    return None


_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def dns_label_problem(what: str, name: str, limit: int) -> str | None:
    """Why ``name`` cannot name a ``what`` that must be a DNS label of at most ``limit``
    characters starting with a letter (GKE node pools, Kubernetes Jobs), or None."""
    if len(name) > limit or not _DNS_LABEL.fullmatch(name):
        return (
            f"{what} {name!r} must be 1-{limit} lowercase letters, digits or '-', "
            f"starting with a letter and ending with a letter or digit"
        )
    return None


def name_part(text: str) -> str:
    """``text`` (a stack name, say) as a part of a resource name: lowercase letters, digits and
    single '-', no '-' at either end. When that changes the text, a short hash of the original
    follows, so two stacks whose names differ only in case or punctuation (``dev_eu``, ``dev-eu``,
    ``Dev-EU``) still get names of their own."""
    cleaned = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")
    if cleaned == text:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{cleaned}-{digest}" if cleaned else digest


def label_value(text: str) -> str:
    """Turn free text (a stack name, say) into a valid label value."""
    cleaned = re.sub(r"[^a-z0-9_-]", "-", text.lower())
    return cleaned[:63]


def bounded_name(*parts: str, limit: int = 63) -> str:
    """Join parts with '-'; when too long, keep a stable hash suffix so names stay unique."""
    name = "-".join(p for p in parts if p)
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-._')}-{digest}"


# --- Names of things brought from outside the stack ---------------------------------------------

_RESOURCE_NAME = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
# A path's project as the provider takes it: an id (domain-scoped too, for a shared VPC) or a number;
# whether that project exists is for the API to say.
_PATH_PROJECT = r"(?:[a-z0-9.-]+\.[a-z]+:)?[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_API_PREFIX = r"(?:https://(?:www|compute)\.googleapis\.com/compute/(?:v1|beta)/)?"
_NETWORK = re.compile(
    rf"^(?:{_RESOURCE_NAME}|{_API_PREFIX}projects/{_PATH_PROJECT}/global/networks/{_RESOURCE_NAME})$"
)
_SUBNETWORK = re.compile(
    rf"^(?:{_RESOURCE_NAME}|{_API_PREFIX}projects/{_PATH_PROJECT}/regions/(?P<region>[a-z]+-[a-z]+[0-9]+)"
    rf"/subnetworks/{_RESOURCE_NAME})$"
)
RESOURCE_NAME_RULE = "1-63 lowercase letters, digits or '-', starting with a letter and not ending with '-'"


def network_problem(network: str) -> str | None:
    """Why ``network`` names no VPC network, or None. Compute Engine names a network by its name
    (RFC 1035: "1-63 characters long and match the regular expression
    `[a-z]([-a-z0-9]*[a-z0-9])?`", https://cloud.google.com/compute/docs/naming-resources), its
    path ``projects/P/global/networks/N`` or that path's URL."""
    if _NETWORK.fullmatch(network):
        return None
    return (
        f"network {network!r} must be a network's name ({RESOURCE_NAME_RULE}) or its path "
        f"projects/PROJECT/global/networks/NAME"
    )


def subnetwork_problem(subnetwork: str, region: str | None = None) -> str | None:
    """Why ``subnetwork`` names no subnetwork (of ``region``, when given), or None: a name, a
    path ``projects/P/regions/R/subnetworks/S`` or its URL."""
    match = _SUBNETWORK.fullmatch(subnetwork)
    if match is None:
        return (
            f"subnetwork {subnetwork!r} must be a subnetwork's name ({RESOURCE_NAME_RULE}) or its "
            f"path projects/PROJECT/regions/REGION/subnetworks/NAME"
        )
    if region is not None and match.group("region") not in (None, region):
        return (
            f"subnetwork {subnetwork!r} is in region {match.group('region')}, but it must be in "
            f"{region}, where it is used"
        )
    return None


_MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)+$")


def machine_type_problem(machine_type: str) -> str | None:
    """Why ``machine_type`` is no Compute Engine machine type name, or None. Names are the
    series, the type and the size joined by '-' (``e2-standard-4``, ``n2-highmem-8``,
    ``e2-micro``) or a custom type (``custom-4-16384``, ``n2-custom-4-16384``); lowercase
    (https://cloud.google.com/compute/docs/machine-resource). Whether the zone offers it is for
    the API to say; the form is checked here, and the size of the predefined types of
    ``PREDEFINED_VCPUS`` (``e2-standard-3`` does not exist)."""
    if not (len(machine_type) <= 63 and _MACHINE_TYPE.fullmatch(machine_type)):
        return (
            f"machine type {machine_type!r} is not a Compute Engine machine type: lowercase letters "
            f"and digits joined by '-', such as 'e2-standard-4', 'n2-highmem-8' or 'custom-4-16384'"
        )
    series, _, size = machine_type.rpartition("-")
    sizes = PREDEFINED_VCPUS.get(series)
    if sizes is not None and size not in sizes:
        return (
            f"machine type {machine_type!r} does not exist: {series} comes with "
            f"{', '.join(sizes)} vCPUs ({', '.join(f'{series}-{n}' for n in sizes[:2])}, ...)"
        )
    return None


PREDEFINED_VCPUS: dict[str, tuple[str, ...]] = {
    "e2-standard": ("2", "4", "8", "16", "32"),
    "e2-highmem": ("2", "4", "8", "16"),
    "e2-highcpu": ("2", "4", "8", "16", "32"),
    "n1-standard": ("1", "2", "4", "8", "16", "32", "64", "96"),
    "n2-standard": ("2", "4", "8", "16", "32", "48", "64", "80", "96", "128"),
}
"""The vCPU counts of the predefined machine types the system pool is usually given (Compute Engine
docs, general-purpose machine family: E2, N1 and N2 machine types). A series not listed is checked
for its form only; the API says whether the zone offers it."""


_RUNTIME_VERSION = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def runtime_version_problem(version: str) -> str | None:
    """Why ``version`` is no TPU software version, or None. Versions are single lowercase tokens
    such as ``tpu-ubuntu2204-base``, ``v2-alpha-tpuv6e`` or ``tpu-vm-tf-2.16.1-pjrt``
    (https://cloud.google.com/tpu/docs/runtimes); blank or several words is a typo."""
    if len(version) <= 128 and _RUNTIME_VERSION.fullmatch(version):
        return None
    return (
        f"runtime version {version!r} must be one TPU software version: lowercase letters, digits, "
        f"'.', '_' or '-', such as 'tpu-ubuntu2204-base' or 'v2-alpha-tpuv6e'"
    )


LATEST_GKE_VERSION = "latest"
"""GKE's alias for the highest version it offers. The API's ``Cluster.initialClusterVersion``:
"Users may specify either explicit versions offered by Kubernetes Engine or version aliases ...
"latest": picks the highest valid Kubernetes version"
(https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters).
The highest version is always new enough for TPU flex-start."""


def min_version_problem(version: str, version_problem: Callable[[str], str | None]) -> str | None:
    """Why ``version`` cannot be a cluster's minimum version, or None: ``latest``, or a version
    ``version_problem`` (``gke_cluster_plan.gke_version_problem``) takes."""
    if version == LATEST_GKE_VERSION:
        return None
    if version != version.strip():
        return f"{version!r} has spaces or a line break around the version; write it alone, e.g. '1.34'"
    return version_problem(version)


def system_machine_type_problem(machine_type: str) -> Optional[str]:
    """Why ``machine_type`` cannot run the cluster's CPU system pool, or None."""
    if machine_type in MACHINE_TYPES:
        return (
            f"{machine_type!r} is a TPU machine type; the system pool runs GKE's own Pods on CPU "
            f"machines such as 'e2-standard-4' (TPU slices go in node pools)"
        )
    return machine_type_problem(machine_type)
