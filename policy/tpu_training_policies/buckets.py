"""Checkpoint buckets: private, versioned, and not destroyed with their checkpoints."""

from __future__ import annotations

from .resources import (
    Resource,
    Violations,
    at,
    items,
    number,
)


def uniform_access(bucket: Resource, violation: Violations) -> None:
    if bucket.at("uniformBucketLevelAccess") is not True:
        violation("uniformBucketLevelAccess", bucket.at("uniformBucketLevelAccess"), "true")


def public_access_prevention(bucket: Resource, violation: Violations) -> None:
    if bucket.at("publicAccessPrevention") != "enforced":
        violation("publicAccessPrevention", bucket.at("publicAccessPrevention"), '"enforced"')


def versioning(bucket: Resource, violation: Violations) -> None:
    if bucket.at("versioning", "enabled") is not True:
        violation("versioning.enabled", bucket.at("versioning", "enabled"), "true")


def noncurrent_versions_expire(bucket: Resource, violation: Violations) -> None:
    if bucket.at("versioning", "enabled") is not True:
        return
    deletes = [rule for rule in items(bucket.at("lifecycleRules")) if at(rule, "action", "type") == "Delete"]
    for rule in deletes:
        for key in ("daysSinceNoncurrentTime", "numNewerVersions"):
            if (number(at(rule, "condition", key)) or 0) > 0:
                return
    violation(
        "lifecycleRules (Delete conditions)",
        [at(rule, "condition") for rule in deletes],
        "a Delete rule on noncurrent versions (daysSinceNoncurrentTime or numNewerVersions above 0)",
    )


def no_force_destroy(bucket: Resource, violation: Violations) -> None:
    if bucket.at("forceDestroy") is True:
        violation("forceDestroy", True, "false: destroying the stack must not delete the checkpoints in it")
