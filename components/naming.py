"""Google Cloud naming rules for the names and labels this library creates. Pure Python."""

from __future__ import annotations

import hashlib
import re

_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_SERVICE_ACCOUNT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]$")

LABEL_KEY_RULE = "a lowercase letter, then up to 62 lowercase letters, digits, '_' or '-'"
LABEL_VALUE_RULE = "up to 63 lowercase letters, digits, '_' or '-'"
BUCKET_NAME_RULE = (
    "3 to 63 lowercase letters, digits, '-', '_' or '.', starting and ending with a letter or "
    "digit, and not containing 'goog'"
)


def label_problem(key: str, value: str) -> str | None:
    """Why a label is not valid on Google Cloud resources, or None when it is."""
    if not _LABEL_KEY.match(key):
        return f"label key {key!r} must be {LABEL_KEY_RULE}"
    if not _LABEL_VALUE.match(value):
        return f"label value {value!r} (key {key!r}) must be {LABEL_VALUE_RULE}"
    return None


def bucket_name_problem(name: str) -> str | None:
    """Why a Cloud Storage bucket name is not valid, or None when it is."""
    if not _BUCKET_NAME.match(name) or "goog" in name or ".." in name:
        return f"bucket name {name!r} must be {BUCKET_NAME_RULE}"
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
