"""Google Cloud naming rules for the names and labels this library creates. Pure Python."""

from __future__ import annotations

import hashlib
import ipaddress
import re

_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_SERVICE_ACCOUNT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]$")
_PROJECT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")

LABEL_KEY_RULE = "a lowercase letter, then up to 62 lowercase letters, digits, '_' or '-'"
LABEL_VALUE_RULE = "up to 63 lowercase letters, digits, '_' or '-'"
BUCKET_NAME_RULE = "3 to 63 lowercase letters, digits, '-' or '_', starting and ending with a letter or digit"
PROJECT_ID_RULE = "6 to 30 lowercase letters, digits or '-', starting with a letter and not ending with '-'"


MAX_LABELS = 64
"""Google Cloud: "Each resource can have multiple labels, up to a maximum of 64"
(https://cloud.google.com/resource-manager/docs/labels-overview#requirements)."""

STACK_LABEL_KEYS = ("managed-by", "pulumi-project", "pulumi-stack")
"""The labels the stack program puts on everything that takes labels (and the policy pack checks)."""


def label_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a label key on Google Cloud resources, or None."""
    if not _LABEL_KEY.match(key):
        return f"label key {key!r} must be {LABEL_KEY_RULE}"
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be a label value on Google Cloud resources, or None."""
    if not _LABEL_VALUE.match(value):
        return f"label value {value!r} must be {LABEL_VALUE_RULE}"
    return None


def label_problem(key: str, value: str) -> str | None:
    """Why a label is not valid on Google Cloud resources, or None when it is."""
    problem = label_key_problem(key)
    if problem:
        return problem
    problem = label_value_problem(value)
    return f"{problem} (key {key!r})" if problem else None


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
    if not _BUCKET_NAME.match(name):
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
    if not _PROJECT_ID.match(project):
        return f"project ID {project!r} must be {PROJECT_ID_RULE}"
    if "google" in project:
        return f"project ID {project!r} contains 'google', which Google Cloud does not allow"
    return None


def service_account_id_problem(account_id: str) -> str | None:
    """Why a service account id is not valid, or None when it is."""
    if not _SERVICE_ACCOUNT_ID.match(account_id):
        return (
            f"service account id {account_id!r} must be 6-30 lowercase letters, digits or '-', "
            f"starting with a letter and ending with a letter or digit"
        )
    return None


_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def dns_label_problem(what: str, name: str, limit: int) -> str | None:
    """Why ``name`` cannot name a ``what`` that must be a DNS label of at most ``limit``
    characters starting with a letter (GKE node pools, Kubernetes Jobs), or None."""
    if len(name) > limit or not _DNS_LABEL.match(name):
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
