"""The CheckpointBucket component, under mocks."""

from __future__ import annotations

import pytest
from support.harness.program import run_components
from tpu_training_components import CheckpointBucket, InvalidArgument

BUCKET = "gcp:storage/bucket:Bucket"


def _bucket(name: str = "ckpt", **extra):
    args = {"region": "europe-west4", "bucket_name": "my-proj-dev-ckpt-europe-west4", **extra}
    return CheckpointBucket(name, args)


def test_secure_regional_defaults():
    run = run_components(lambda: _bucket())
    bucket = run.one(BUCKET, "ckpt-bucket")
    assert bucket.inputs["location"] == "EUROPE-WEST4"
    assert bucket.inputs["name"] == "my-proj-dev-ckpt-europe-west4"
    assert bucket.inputs["uniformBucketLevelAccess"] is True
    assert bucket.inputs["publicAccessPrevention"] == "enforced"
    assert bucket.inputs["versioning"] == {"enabled": True}
    assert bucket.inputs["forceDestroy"] is False
    conditions = [rule["condition"] for rule in bucket.inputs["lifecycleRules"]]
    assert {"withState": "ARCHIVED", "daysSinceNoncurrentTime": 7} in conditions
    assert {"withState": "ARCHIVED", "numNewerVersions": 3} in conditions
    assert all(rule["action"] == {"type": "Delete"} for rule in bucket.inputs["lifecycleRules"])
    assert bucket.options["protect"] is True
    assert bucket.options["retainOnDelete"] is True


def test_bucket_is_a_child_of_the_component():
    run = run_components(lambda: _bucket())
    component = run.one("tpu-training:storage:CheckpointBucket", "ckpt")
    assert run.one(BUCKET, "ckpt-bucket").parent == component.urn


def test_protection_and_retention_are_configurable():
    run = run_components(
        lambda: _bucket(
            protect=False,
            retain_on_delete=False,
            noncurrent_version_retention_days=30,
            noncurrent_versions_kept=1,
        )
    )
    bucket = run.one(BUCKET, "ckpt-bucket")
    assert bucket.options["protect"] is False and bucket.options["retainOnDelete"] is False
    conditions = [rule["condition"] for rule in bucket.inputs["lifecycleRules"]]
    assert {"withState": "ARCHIVED", "daysSinceNoncurrentTime": 30} in conditions
    assert {"withState": "ARCHIVED", "numNewerVersions": 1} in conditions


def test_two_instances_do_not_collide():
    def body():
        CheckpointBucket("a", {"region": "europe-west4", "bucket_name": "bucket-a"})
        CheckpointBucket("b", {"region": "us-central2", "bucket_name": "bucket-b"})

    run = run_components(body)
    assert sorted(r.name for r in run.by_type(BUCKET)) == ["a-bucket", "b-bucket"]


def test_outputs_name_url_region():
    captured = {}

    def body():
        b = _bucket()
        b.url.apply(lambda v: captured.__setitem__("url", v))
        b.region.apply(lambda v: captured.__setitem__("region", v))
        b.bucket_name.apply(lambda v: captured.__setitem__("name", v))

    run_components(body)
    assert captured == {
        "url": "gs://my-proj-dev-ckpt-europe-west4",
        "region": "europe-west4",
        "name": "my-proj-dev-ckpt-europe-west4",
    }


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"region": "europe-west4-a"}, "region: 'europe-west4-a' is not a region"),
        ({"bucket_name": "My_Bucket"}, "bucket_name: bucket name 'My_Bucket'"),
        ({"bucket_name": "googbucket"}, "begins with 'goog'"),
        ({"labels": {"Team": "x"}}, "label key 'Team'"),
        ({"noncurrent_versions_kept": 0}, "noncurrent_versions_kept: 0 is out of range; allowed: 1 or more"),
        ({"regoin": "europe-west4"}, "unknown argument 'regoin' (did you mean 'region'?)"),
    ],
)
def test_bad_arguments_fail_before_any_resource(extra, fragment):
    with pytest.raises(InvalidArgument) as err:
        run_components(lambda: _bucket(**extra))
    assert fragment in str(err.value)
