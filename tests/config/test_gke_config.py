"""GKE config: a known-good baseline (the dev stack) and one mutation per rule. Every refusal
names the key, shows the value and says what is allowed, before any resource is declared."""

from __future__ import annotations

import json

import pytest
from support.harness.program import refused as _refused
from support.harness.program import run_stack

POOLS = "tpu-training:nodePools"
JOBS = "tpu-training:jobs"
CLUSTER = "tpu-training:cluster"


def test_topology_not_offered_for_the_generation(config):
    config[POOLS][0]["topology"] = "2x2x2"
    message = _refused(config)
    assert "tpu-training:nodePools[0] (v6e-4x4)" in message
    assert "'2x2x2' has 3 dimensions but v6e (ct6e-standard-4t) slices have 2" in message
    assert "valid: 1x1, 2x2, 2x4, 4x4" in message


def test_topology_of_the_right_shape_but_not_offered(config):
    config[POOLS][0]["topology"] = "4x2"
    assert "topology '4x2' is not offered for v6e" in _refused(config)


def test_chips_not_divisible_into_whole_vms(config):
    config[POOLS][0]["machineType"] = "ct5p-hightpu-4t"
    config[POOLS][0]["topology"] = "1x1x1"
    assert "1 chips, which ct5p-hightpu-4t (4 chips per VM) cannot divide into whole VMs" in _refused(config)


def test_eight_chip_machine_type_is_single_host_only(config):
    config[POOLS][0]["machineType"] = "ct6e-standard-8t"
    assert "ct6e-standard-8t has 8 chips per VM and is single-host only" in _refused(config)


def test_unknown_machine_type_lists_the_known_ones(config):
    config[POOLS][0]["machineType"] = "ct6e-standard-2t"
    message = _refused(config)
    assert 'tpu-training:nodePools[0].machineType = "ct6e-standard-2t"' in message
    assert "allowed: ct4p-hightpu-4t" in message


ALLOWED = "allowed: flex-start, flex-start-queued, spot, reserved, on-demand"


@pytest.mark.parametrize(
    ("old", "instead"),
    [
        ({"spot": True}, "write provisioning: spot;"),
        ({"flexStart": False}, "write provisioning: spot, reserved (with reservation) or on-demand;"),
        ({"flexStart": True}, "write provisioning: flex-start, the default (or just remove flexStart);"),
        ({"queuedProvisioning": True}, "write provisioning: flex-start-queued;"),
        ({"spot": False}, "write provisioning (or remove spot: the default is flex-start);"),
    ],
)
def test_the_capacity_keys_before_provisioning_are_refused_with_what_to_write(config, old, instead):
    config[POOLS][0].update(old)
    ((key, value),) = old.items()
    message = _refused(config)
    key_value = f"tpu-training:nodePools[0].{key} = {json.dumps(value)}"
    assert f"{key_value}: replaced by provisioning: {instead}" in message
    assert ALLOWED in message


def test_a_reservation_is_for_reserved_capacity_only(config):
    config[POOLS][0]["reservation"] = "my-reservation"
    assert (
        "tpu-training:nodePools[0].provisioning = \"flex-start\": reservation 'my-reservation' is consumed "
        "only with provisioning: reserved" in _refused(config)
    )
    config[POOLS][0]["provisioning"] = "spot"
    assert 'tpu-training:nodePools[0].provisioning = "spot": reservation' in _refused(config)


@pytest.mark.parametrize(
    ("provisioning", "says"),
    [
        ("reserved", "give the name of the reservation the pool consumes in reservation"),
        (
            "preemptible",
            "must be one of flex-start, flex-start-queued, spot, reserved, on-demand",
        ),
    ],
    ids=["reserved-without-a-reservation", "a-vm-value"],
)
def test_a_capacity_the_pool_cannot_have_is_refused_at_its_key(config, provisioning, says):
    config[POOLS][0]["provisioning"] = provisioning
    assert f'tpu-training:nodePools[0].provisioning = "{provisioning}": {says}' in _refused(config)


def test_spot_capacity(config):
    config[POOLS][0]["provisioning"] = "spot"
    run = run_stack(config)
    pool = run.one("gcp:container/nodePool:NodePool", "v6e-4x4-pool")
    assert pool.inputs["nodeConfig"]["spot"] is True
    assert "flexStart" not in pool.inputs["nodeConfig"]


def test_a_reservation_is_consumed_by_name(config):
    config[POOLS][0].update(provisioning="reserved", reservation="my-reservation")
    pool = run_stack(config).one("gcp:container/nodePool:NodePool", "v6e-4x4-pool")
    assert pool.inputs["nodeConfig"]["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["my-reservation"],
    }


def test_node_location_outside_the_cluster_region(config):
    config[POOLS][0]["nodeLocations"] = ["europe-west4-a"]
    message = _refused(config)
    assert "node location 'europe-west4-a' is outside the cluster's region 'us-east5'" in message


def test_multi_host_slice_in_two_zones(config):
    config[POOLS][0]["nodeLocations"] = ["us-east5-a", "us-east5-b"]
    assert "must sit in one zone" in _refused(config)


def test_single_host_pool_may_span_zones_without_multiplying_its_cap(config):
    """GKE applies min/max_node_count in each zone: over two zones, 3 slices would become 6
    nodes. The pool states its totals instead."""
    config[POOLS][0].update(topology="2x2", slices=3, nodeLocations=["us-east5-a", "us-east5-b"])
    pool = run_stack(config).one("gcp:container/nodePool:NodePool", "v6e-4x4-pool")
    assert pool.inputs["nodeLocations"] == ["us-east5-a", "us-east5-b"]
    assert pool.inputs["autoscaling"] == {
        "locationPolicy": "ANY",
        "totalMinNodeCount": 0,
        "totalMaxNodeCount": 3,
    }


def test_single_host_pool_in_one_zone_keeps_per_zone_limits(config):
    config[POOLS][0].update(topology="2x2", slices=3)
    pool = run_stack(config).one("gcp:container/nodePool:NodePool", "v6e-4x4-pool")
    assert pool.inputs["autoscaling"] == {"locationPolicy": "ANY", "minNodeCount": 0, "maxNodeCount": 3}


@pytest.mark.parametrize("value", ["8d", "1w", "forever", "0h"])
def test_max_run_duration_beyond_seven_days_or_malformed(config, value):
    config[POOLS][0]["maxRunDuration"] = value
    message = _refused(config)
    assert f"maxRunDuration {value!r}" in message


def test_max_run_duration_is_passed_in_seconds(config):
    config[POOLS][0]["maxRunDuration"] = "72h"
    pool = run_stack(config).one("gcp:container/nodePool:NodePool", "v6e-4x4-pool")
    assert pool.inputs["nodeConfig"]["maxRunDuration"] == "259200s"


def test_cluster_location_must_be_a_region(config):
    config[CLUSTER]["location"] = "europe-west4-a"
    message = _refused(config)
    assert 'tpu-training:cluster.location = "europe-west4-a": must be a region' in message


def test_cluster_version_too_old_for_tpu_flex_start(config):
    config[CLUSTER]["minVersion"] = "1.33.0-gke.1000"
    message = _refused(config)
    assert "older than 1.33.0-gke.1712000, the first with TPU flex-start" in message


@pytest.mark.parametrize("version", ["1.34", "1.33.0-gke.1712000", "1.33.5"])
def test_cluster_versions_new_enough(config, version):
    config[CLUSTER]["minVersion"] = version
    cluster = run_stack(config).one("gcp:container/cluster:Cluster", "tpu-dev-cluster")
    assert cluster.inputs["minMasterVersion"] == version


def test_release_channel_lists_the_choices(config):
    config[CLUSTER]["releaseChannel"] = "FAST"
    assert "must be one of RAPID, REGULAR, STABLE" in _refused(config)


def test_pools_without_a_cluster(config):
    del config[CLUSTER]
    assert "nodePools and tpu-training:jobs need tpu-training:cluster" in _refused(config)


def test_job_on_an_unknown_pool_suggests_the_right_one(config):
    config[JOBS][0]["nodePool"] = "v6e-4x"
    message = _refused(config)
    assert "tpu-training:jobs[0].nodePool = 'v6e-4x': no such node pool (did you mean 'v6e-4x4'?)" in message


def test_job_and_vm_may_not_share_a_name(config):
    config[JOBS][0]["name"] = "demo-tpu"
    assert "'demo-tpu' also names a TPU VM" in _refused(config)


def test_duplicate_pool_and_job_names(config):
    config[POOLS].append(dict(config[POOLS][0]))
    config[JOBS].append(dict(config[JOBS][0]))
    message = _refused(config)
    assert "node pool names must be unique; repeated: v6e-4x4" in message
    assert "job names must be unique; repeated: train-v6e" in message


def test_job_name_too_long_for_pod_hostnames(config):
    config[JOBS][0]["name"] = "a" * 53
    assert "must be 1-52 lowercase letters" in _refused(config)


def test_job_command_must_be_a_list(config):
    config[JOBS][0]["command"] = "python3 train.py"
    assert "tpu-training:jobs[0].command" in _refused(config)


def test_job_env_names_are_checked(config):
    config[JOBS][0]["env"] = {"1BAD": "x"}
    assert "tpu-training:jobs[0].env" in _refused(config)


def test_unknown_pool_key_suggests_the_right_one(config):
    config[POOLS][0]["topolgy"] = "4x4"
    message = _refused(config)
    assert "tpu-training:nodePools[0].topolgy: unknown key (did you mean 'topology'?)" in message


def test_empty_cluster_object_means_no_cluster(config):
    config[CLUSTER] = {}
    config[POOLS] = []
    config[JOBS] = []
    run = run_stack(config)
    assert not run.by_type("gcp:container/cluster:Cluster")


# --- capacity types, slices and flex-start availability (conformance issue) -----------------------

JOB = "kubernetes:batch/v1:Job"
POOL = "gcp:container/nodePool:NodePool"


def _pod_spec(run) -> dict:
    return run.one(JOB, "train-v6e-job").inputs["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("capacity", "selected"),
    [
        ({}, {"cloud.google.com/gke-flex-start": "true"}),
        ({"provisioning": "spot"}, {"cloud.google.com/gke-spot": "true"}),
        (
            {"provisioning": "reserved", "reservation": "v6e-res"},
            {"cloud.google.com/reservation-name": "v6e-res"},
        ),
        ({"provisioning": "on-demand"}, {}),  # on-demand nodes carry no capacity label
    ],
    ids=["flex-start", "spot", "reservation", "on-demand"],
)
def test_pods_select_the_capacity_their_pool_was_provisioned_with(config, capacity, selected):
    """Every Job selected gke-flex-start, so Pods on Spot, reserved or on-demand pools never
    scheduled."""
    config[POOLS][0].update(capacity)
    pod = _pod_spec(run_stack(config))
    assert pod["nodeSelector"] == {
        **selected,
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
        "tpu-training/node-pool": "v6e-4x4",
    }


def test_multi_host_slices_are_one_node_pool_each(config):
    """A multi-host node pool holds exactly one slice: slices: 3 is three pools of 4 nodes, not
    one pool of 12."""
    config[POOLS][0]["slices"] = 3
    run = run_stack(config)
    pools = {r.name: r.inputs for r in run.by_type(POOL) if r.name.startswith("v6e-4x4")}
    assert sorted(pools) == ["v6e-4x4-pool", "v6e-4x4-pool-1", "v6e-4x4-pool-2"]
    assert [pools[n]["name"] for n in sorted(pools)] == ["v6e-4x4", "v6e-4x4-1", "v6e-4x4-2"]
    for inputs in pools.values():
        assert inputs["autoscaling"] == {"locationPolicy": "ANY", "minNodeCount": 0, "maxNodeCount": 4}
        assert inputs["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "4x4"}
    assert run.outputs["nodePools"]["v6e-4x4"]["maxNodes"] == 12
    # The Job may take any of the three slices, by the label they all carry (so the number of
    # slices is nowhere in its template), but all its Pods take the same one.
    assert {inputs["nodeConfig"]["labels"]["tpu-training/node-pool"] for inputs in pools.values()} == {
        "v6e-4x4"
    }
    pod = _pod_spec(run)
    assert pod["nodeSelector"]["tpu-training/node-pool"] == "v6e-4x4"
    affinity = pod["affinity"]
    assert "nodeAffinity" not in affinity
    (together,) = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert together == {
        "labelSelector": {"matchLabels": {"job-name": "train-v6e", "recovery-generation": "0"}},
        "topologyKey": "cloud.google.com/gke-nodepool",
    }


def test_going_from_one_slice_to_two_leaves_the_running_pool_alone(config):
    before = run_stack(config).one(POOL, "v6e-4x4-pool")
    config[POOLS][0]["slices"] = 2
    after = run_stack(config).one(POOL, "v6e-4x4-pool")
    assert (before.inputs, before.options) == (after.inputs, after.options)


def test_a_slice_pool_may_not_take_another_pools_name(config):
    config[POOLS][0]["slices"] = 2
    config[POOLS].append(dict(config[POOLS][0], name="v6e-4x4-1", slices=1))
    message = _refused(config)
    assert "tpu-training:nodePools[1].name = 'v6e-4x4-1': its GKE node pool 'v6e-4x4-1' is also" in message


def test_a_pool_may_not_be_named_like_the_system_pool(config):
    config[POOLS][0]["name"] = "system"
    config[JOBS][0]["nodePool"] = "system"
    message = _refused(config)
    assert "tpu-training:nodePools[0].name = 'system'" in message and "system pool" in message


def test_slice_pool_names_stay_within_gke_limits(config):
    config[POOLS][0].update(name="a" * 39, slices=2)
    config[JOBS][0]["nodePool"] = "a" * 39
    message = _refused(config)
    assert f"node pool name '{'a' * 39}-1' must be 1-40" in message and "(the pool of slice 1)" in message


def test_flex_start_on_a_generation_without_it_is_refused(config):
    """ct4p (v4) with flex-start, the default, was accepted; GKE: "TPU v3 and v4 are not
    supported" for flex-start."""
    config[POOLS][0].update(machineType="ct4p-hightpu-4t", topology="2x2x4")
    message = _refused(config)
    assert (
        'tpu-training:nodePools[0].provisioning = "flex-start": flex-start does not provision '
        "ct4p-hightpu-4t (TPU v4;" in message
    )
    assert "allowed for it: spot, reserved or on-demand" in message
    config[POOLS][0]["provisioning"] = "spot"
    run_stack(config)


def test_a_zone_missing_from_the_availability_table_is_a_warning_not_an_error(config):
    config[CLUSTER]["location"] = "europe-west4"
    config[POOLS][0]["nodeLocations"] = ["europe-west4-a"]
    run = run_stack(config)
    assert any(
        w.startswith(
            "tpu-training:nodePools[0].nodeLocations: zone europe-west4-a is not listed for TPU v6e "
            "flex-start"
        )
        for w in run.warnings
    )


def test_the_dev_stack_pool_is_in_a_zone_listed_for_its_flex_start(config):
    run = run_stack(config)
    assert not [w for w in run.warnings if "not listed" in w]


# --- upgrades and maintenance windows -------------------------------------------------------------


def _maintenance(run) -> dict:
    return run.one("gcp:container/cluster:Cluster", "tpu-dev-cluster").inputs["maintenancePolicy"]


def test_node_upgrades_are_excluded_until_end_of_support_by_default(config):
    (exclusion,) = _maintenance(run_stack(config))["maintenanceExclusions"]
    assert exclusion == {
        "exclusionName": "training-slices",
        "startTime": "2025-12-01T00:00:00Z",
        "exclusionOptions": {"scope": "NO_MINOR_OR_NODE_UPGRADES", "endTimeBehavior": "UNTIL_END_OF_SUPPORT"},
    }


def test_the_upgrade_exclusion_is_configurable(config):
    config[CLUSTER]["upgradeExclusionScope"] = "NONE"
    assert "maintenanceExclusions" not in _maintenance(run_stack(config))
    config[CLUSTER]["upgradeExclusionScope"] = "NO_UPGRADES"
    message = _refused(config)
    assert 'tpu-training:cluster.upgradeExclusionScope = "NO_UPGRADES"' in message
    assert "must be one of NO_MINOR_OR_NODE_UPGRADES, NO_MINOR_UPGRADES, NONE" in message


def test_a_window_across_midnight_ends_the_next_day(config):
    """It ended before it started, which GKE refuses at `pulumi up`."""
    config[CLUSTER]["maintenanceWindow"] = {"startTime": "22:00", "endTime": "04:00"}
    window = _maintenance(run_stack(config))["recurringWindow"]
    assert (window["startTime"], window["endTime"]) == ("2025-01-04T22:00:00Z", "2025-01-05T04:00:00Z")


@pytest.mark.parametrize(
    ("window", "message"),
    [
        ({"startTime": "02:00", "endTime": "06:00"}, "leaves 32 h of maintenance in some 32-day period"),
        ({"startTime": "02:00", "endTime": "05:00", "recurrence": "FREQ=DAILY"}, "leaves 0 h"),
        ({"recurrence": "FREQ=MONTHLY;BYMONTHDAY=1"}, "leaves 6 h"),
        ({"recurrence": "FREQ=WEEKLY;BYDAY=SA,SU;COUNT=4"}, "ends (COUNT or UNTIL)"),
        ({"recurrence": "FREQ=DAILY;UNTIL=20260301T000000Z"}, "ends (COUNT or UNTIL)"),
        (
            {"recurrence": "FREQ=SECONDLY;BYHOUR=2;BYMINUTE=0;BYSECOND=0"},
            "FREQ must be DAILY, WEEKLY, MONTHLY",
        ),
        ({"recurrence": "FREQ=DAILY;INTERVAL=-1"}, "INTERVAL must be a whole number from 1 to 9999"),
        ({"recurrence": "FREQ=WEEKLY;BYDAY=SATURDAY"}, "is not a valid RFC 5545 RRULE"),
        ({"recurrence": "every weekend"}, "must be one RFC 5545 RRULE starting with FREQ="),
        ({"endTime": "8:00"}, "endTime '8:00' must be HH:MM in UTC"),
    ],
)
def test_windows_gke_would_refuse_are_refused_naming_the_key(config, window, message):
    config[CLUSTER]["maintenanceWindow"] = window
    refusal = _refused(config)
    assert "tpu-training:cluster.maintenanceWindow = " in refusal
    assert message in refusal


@pytest.mark.parametrize("start", ["2025-13-01T00:00:00Z", "2025-12-01", "2025-12-01T00:00:00+01:00"])
def test_upgrade_exclusion_start_must_be_an_rfc3339_utc_time(config, start):
    config[CLUSTER]["upgradeExclusionStart"] = start
    assert f'tpu-training:cluster.upgradeExclusionStart = "{start}"' in _refused(config)


def test_a_replaced_jobs_pods_are_not_held_to_the_old_slice(config):
    """Pods of the failed generation may still be terminating in the old slice's pool; the new
    Job's Pods only follow Pods of their own generation."""
    config[POOLS][0]["slices"] = 2
    run = run_stack(config, previous_outputs={"jobRecoveryGenerations": {"train-v6e": 3}})
    (term,) = _pod_spec(run)["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"] == {"job-name": "train-v6e", "recovery-generation": "3"}


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ({"masterIpv4CidrBlock": "172.16.0.0/24"}, "must be a private IPv4 /28 range"),
        ({"masterIpv4CidrBlock": "8.8.8.0/28"}, "must be a private IPv4 /28 range"),
        ({"masterIpv4CidrBlock": "172.16.0.1/28"}, "(host bits are set); did you mean '172.16.0.0/28'"),
        ({"masterIpv4CidrBlock": "10.128.0.0/28"}, "overlaps the network's gke-pods range 10.128.0.0/14"),
        ({"upgradeExclusionStart": "2025-02-30T00:00:00Z"}, "there is no such day"),
    ],
)
def test_control_plane_range_and_exclusion_start_are_checked(config, cluster, message):
    config[CLUSTER].update(cluster)
    refusal = _refused(config)
    assert f"tpu-training:cluster.{next(iter(cluster))}" in refusal and message in refusal


def test_control_plane_range_outside_the_network_is_fine(config):
    config[CLUSTER]["masterIpv4CidrBlock"] = "172.16.0.32/28"
    cluster = run_stack(config).one("gcp:container/cluster:Cluster", "tpu-dev-cluster").inputs
    assert cluster["privateClusterConfig"]["masterIpv4CidrBlock"] == "172.16.0.32/28"


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        ({"slices": 101}, "tpu-training:nodePools[0].slices = 101"),
        ({"provisioning": "reserved", "reservation": "projects/p/reservations/r"}, "shared reservations"),
        ({"provisioning": "reserved", "reservation": "Bad Name"}, "1-63 lowercase letters"),
    ],
)
def test_slices_and_reservation_names_are_bounded(config, pool, message):
    config[POOLS][0].update(pool)
    assert message in _refused(config)
