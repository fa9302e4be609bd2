"""Stack config: the dev baseline is valid; each bad-input class is refused with a clear message
that names the key, shows the value and says what is allowed, before any resource is declared."""

from __future__ import annotations

import pytest
from conftest import refused as _refused
from conftest import run_stack

VMS = "tpu-training:tpuVms"


def _vms_only(config):
    """The dev config without its GKE part: the TPU VMs alone, in one region."""
    for key in ("tpu-training:cluster", "tpu-training:nodePools", "tpu-training:jobs"):
        config.pop(key)
    return config


def test_dev_baseline_is_valid(config):
    run = run_stack(config)
    declared = {r.type for r in run.registrations}
    assert {
        "gcp:tpu/v2Vm:V2Vm",
        "gcp:storage/bucket:Bucket",
        "gcp:container/cluster:Cluster",
        "gcp:container/nodePool:NodePool",
        "kubernetes:batch/v1:Job",
    } <= declared
    assert run.warnings == []


def test_unknown_accelerator_type(config):
    config[VMS][0]["acceleratorType"] = "v3-9"
    message = _refused(config)
    assert 'tpu-training:tpuVms[0].acceleratorType = "v3-9"' in message
    assert "must be one of 8, 32, 64" in message


def test_zone_that_is_not_a_zone(config):
    config[VMS][0]["zone"] = "europe-west4"
    message = _refused(config)
    assert 'tpu-training:tpuVms[0].zone = "europe-west4"' in message
    assert "such as 'europe-west4-a'" in message


def test_bucket_location_outside_the_tpu_region(config):
    _vms_only(config)
    config["tpu-training:bucket"] = {"location": "us-central1"}
    message = _refused(config)
    assert "bucket.location 'us-central1' differs from the TPUs' region europe-west4" in message


def test_bucket_location_in_the_tpu_region_is_fine(config):
    _vms_only(config)
    config["tpu-training:bucket"] = {"location": "europe-west4"}
    run_stack(config)


def test_explicit_bucket_name_with_two_regions(config):
    _vms_only(config)
    second = dict(config[VMS][0], name="other", zone="us-central2-b")
    config[VMS].append(second)
    config["tpu-training:bucket"] = {"name": "my-checkpoints"}
    message = _refused(config)
    assert "names one bucket, but the TPUs use 2 regions (europe-west4, us-central2)" in message


@pytest.mark.parametrize("bad", [-4, 0, 12.5, "128", True])
def test_negative_zero_or_non_integer_sizes(config, bad):
    config["tpu-training:training"]["perCoreBatchSize"] = bad
    message = _refused(config)
    assert "tpu-training:training.perCoreBatchSize = " in message


def test_unknown_nested_key_suggests_the_right_one(config):
    config[VMS][0]["acceleratorTyp"] = "v3-8"
    message = _refused(config)
    assert "tpu-training:tpuVms[0].acceleratorTyp: unknown key (did you mean 'acceleratorType'?)" in message
    assert "allowed in tpu-training:tpuVms[0]:" in message


def test_unknown_top_level_key_suggests_the_right_one(config):
    config["tpu-training:tpuVm"] = []
    message = _refused(config)
    assert "tpu-training:tpuVm: unknown key (did you mean 'tpuVms'?)" in message


def test_provisioning_lists_the_choices(config):
    config[VMS][0]["provisioning"] = "cheap"
    message = _refused(config)
    assert "'preemptible', 'spot', 'on-demand' or 'reserved'" in message


def test_duplicate_vm_names(config):
    config[VMS].append(dict(config[VMS][0]))
    assert "TPU VM names must be unique; repeated: demo-tpu" in _refused(config)


def test_both_or_neither_of_examples_and_epochs(config):
    config["tpu-training:training"]["epochs"] = 3
    assert "set exactly one of totalExamples and epochs" in _refused(config)


def test_scaling_without_a_base_learning_rate(config):
    del config["tpu-training:training"]["baseLearningRate"]
    assert "learningRateScaling 'linear' needs baseLearningRate" in _refused(config)


def test_bad_labels(config):
    config["tpu-training:labels"] = {"Team": "ML"}
    assert "label key 'Team' must be a lowercase letter" in _refused(config)


def test_missing_gcp_project(config):
    del config["gcp:project"]
    assert "gcp:project: required but not set" in _refused(config)


def test_every_problem_is_reported_at_once(config):
    config[VMS][0]["zone"] = "nowhere"
    config["tpu-training:training"]["perCoreBatchSize"] = -1
    message = _refused(config)
    assert "tpuVms[0].zone" in message and "perCoreBatchSize" in message


def test_a_plain_string_where_an_object_belongs(config):
    config["tpu-training:training"] = "fast please"
    assert "expected a structured value" in _refused(config)
