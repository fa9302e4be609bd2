"""What we declare, checked against references nobody on this project wrote.

- xpk 1.16.0, Google's own tool for TPU training on GKE. Its ``--dry-run`` output for the same TPU
  shapes is in tests/fixtures/xpk-1.16.0 (how it was made: the README there). Node pools are
  compared flag by flag and Pods node selector by node selector. Where we differ on purpose, the
  difference and its reason are listed below. Any other difference fails, and so does a listed
  difference that is no longer there.
- Google's documentation and Cluster Toolkit: ``FACTS``, each with its source, each checked by the
  tests marked ``@checks(key)``.
"""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, TypeVar

import pulumi_kubernetes as k8s
import pytest
from support.harness.program import dev_config, run_components, run_stack
from support.harness.xpk import XPK, xpk_jobset
from tpu_training_components import (
    FlexStartTpuNodePool,
    GkeTpuCluster,
    TpuNodePoolPlan,
    TpuNodePoolSelection,
    TpuTrainingJob,
    plan_tpu_node_pool,
    region_of_zone,
    slice_shape,
)
from tpu_training_components.domain.maintenance_window import (
    MIN_AVAILABILITY,
    MIN_CONTIGUOUS,
    ROLLING_PERIOD,
    MaintenanceWindowError,
    recurring_window,
)
from tpu_training_components.domain.node_pool_plan import NODE_POOL_LABEL, POOL_NODE_LABEL, NodePoolError

POOL = "gcp:container/nodePool:NodePool"

# --- facts from Google's documentation and Cluster Toolkit -------------------------------------

CLUSTER_TOOLKIT = "GoogleCloudPlatform/cluster-toolkit @1047080375afbb44da4b596be314634e7486af4a"


@dataclass(frozen=True)
class Fact:
    says: str
    source: str


FACTS = {
    "maintenance-window": Fact(
        '"at least 48 hours of maintenance availability in a 32-day rolling window. Only contiguous '
        'availability windows of at least four hours are considered"',
        "https://cloud.google.com/kubernetes-engine/docs/maintenance-window",
    ),
    "node-upgrade-exclusion": Fact(
        "the TPU v6e flex-start cluster is on `release_channel: REGULAR` with a maintenance exclusion "
        '`start_time: "2025-12-01T00:00:00Z"`, `exclusion_scope: NO_MINOR_OR_NODE_UPGRADES`, '
        "`exclusion_end_time_behavior: UNTIL_END_OF_SUPPORT`",
        f"{CLUSTER_TOOLKIT}, examples/gke-consumption-options/dws-flex-start/gke-tpu-v6e/"
        "gke-tpu-v6e.yaml:185-190",
    ),
    "release-channel-auto-upgrade": Fact(
        '"When a cluster is subscribed to a release channel, Google maintains both the master version '
        'and the node version. Node auto-upgrade defaults to true and cannot be disabled."',
        "https://cloud.google.com/kubernetes-engine/docs/reference/rest/Shared.Types/ReleaseChannel",
    ),
    "tpu-private-google-access": Fact(
        'NetworkConfig.enable_external_ips: "If set to false, the specified subnetwork or network should '
        'have Private Google Access enabled."',
        "https://cloud.google.com/python/docs/reference/tpu/latest/google.cloud.tpu_v2.types.NetworkConfig",
    ),
    "no-external-ip-needs-nat": Fact(
        '"If no external IP address is configured on the instance, Cloud NAT can be used for IPv4 traffic."',
        "https://cloud.google.com/compute/docs/ip-addresses",
    ),
    "flex-start-generations": Fact(
        '"TPU v3 and v4 are not supported." (v3 has no GKE machine type at all, so only v4 can be tried)',
        "https://cloud.google.com/kubernetes-engine/docs/concepts/dws",
    ),
    "flex-start-node-label": Fact(
        'flex-start nodes carry `cloud.google.com/gke-flex-start: "true"`: GKE selects it for flex-start '
        "Pods, and Cluster Toolkit's TPU flex-start test finds the TPU nodes with "
        "`kubectl get nodes -l cloud.google.com/gke-flex-start=true`",
        'GKE docs "Run a small batch workload with GPUs and flex-start VMs"; '
        f"{CLUSTER_TOOLKIT}, tools/cloud-build/daily-tests/ansible_playbooks/test-validation/"
        "test-gke-tpu-flex-autoscaling.yml:75",
    ),
    "reservation-key": Fact(
        'ReservationAffinity.key: "To target a SPECIFIC_RESERVATION by name, specify '
        '"compute.googleapis.com/reservation-name" as the key and specify the name of your reservation '
        'as its value."',
        "GKE v1 API, https://cloud.google.com/dotnet/docs/reference/Google.Cloud.Container.V1/latest/"
        "Google.Cloud.Container.V1.ReservationAffinity",
    ),
    "spot-no-reservations": Fact(
        "a reservation cannot be consumed to create Spot VMs or preemptible instances",
        "https://cloud.google.com/compute/docs/instances/reservations-consume (Limitations)",
    ),
}

Test = TypeVar("Test", bound=Callable[..., Any])


def checks(*keys: str) -> Callable[[Test], Test]:
    """Mark a test as the check of these ``FACTS``."""
    unknown = set(keys) - set(FACTS)
    assert not unknown, f"no such fact: {sorted(unknown)}"

    def mark(test: Test) -> Test:
        test.checks_facts = keys  # type: ignore[attr-defined]
        return test

    return mark


def test_every_fact_has_a_source_and_a_test_that_checks_it():
    checked = {key for item in list(globals().values()) for key in getattr(item, "checks_facts", ())}
    assert checked == set(FACTS)
    assert all(fact.says and fact.source for fact in FACTS.values())


# --- xpk 1.16.0: the fixtures -------------------------------------------------------------------

NODE_POOL_CREATE = ("gcloud", "beta", "container", "node-pools", "create")
# xpk was run with these (each fixture's first line); our pools get the same.
CLUSTER, REGION, ZONE, PROJECT = "tpu-dev", "europe-west4", "europe-west4-a", "tpu-training-dev"
RESERVATION = "my-reservation"


def _gcloud_flags(command: str) -> dict[str, Any]:
    """``{flag: value}`` of one node-pool create command; a flag without a value is True."""
    words = shlex.split(command)
    assert tuple(words[: len(NODE_POOL_CREATE)]) == NODE_POOL_CREATE, command
    flags: dict[str, Any] = {"NAME": words[len(NODE_POOL_CREATE)]}
    rest = words[len(NODE_POOL_CREATE) + 1 :]
    while rest:
        word = rest.pop(0)
        key, has_value, value = word.partition("=")
        if not has_value and rest and not rest[0].startswith("--"):
            value, has_value = rest.pop(0), "="  # `--max-pods-per-node 15`
        assert key not in flags, f"{key} given twice in {command}"
        flags[key] = value if has_value else True
    return flags


@functools.cache
def _xpk_node_pools(fixture: str) -> tuple[dict[str, Any], ...]:
    """The flags of every node pool xpk creates in one `cluster create` run, in order."""
    marker = " ".join(NODE_POOL_CREATE)
    lines = (XPK / fixture).read_text().splitlines()
    pools = tuple(_gcloud_flags(line[line.index(marker) :]) for line in lines if marker in line)
    assert pools, f"{fixture} has no `{marker}` line"
    return pools


def xpk_node_pools(fixture: str) -> list[dict[str, Any]]:
    return [dict(pool) for pool in _xpk_node_pools(fixture)]


def xpk_system(fixture: str) -> dict[str, str]:
    """The TPU system xpk assumed: its `SystemCharacteristics(...)` line."""
    text = (XPK / fixture).read_text()
    line = re.search(r"SystemCharacteristics\((.*)\)$", text, flags=re.M)
    assert line, f"{fixture} has no SystemCharacteristics line"
    return dict(re.findall(r"(\w+)='?([^,')]*)'?", line.group(1)))


def xpk_pod_spec(jobset: dict[str, Any]) -> dict[str, Any]:
    (replicated,) = jobset["spec"]["replicatedJobs"]
    return replicated["template"]["spec"]["template"]["spec"]


# --- the node pools, flag by flag -----------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """One xpk `cluster create` run, and how we declare a pool of the same slice."""

    fixture: str
    machine_type: str
    topology: str
    args: dict[str, Any] = field(default_factory=dict)
    """FlexStartTpuNodePool arguments beyond the common ones."""


SHAPES = {
    "v6e-16-flex": Shape("cluster-create-v6e-16-flex.txt", "ct6e-standard-4t", "4x4"),
    "v5p-32-flex": Shape("cluster-create-v5p-32-flex.txt", "ct5p-hightpu-4t", "2x2x4"),
    "v5litepod-16-spot": Shape(
        "cluster-create-v5litepod-16-spot.txt", "ct5lp-hightpu-4t", "4x4", {"flex_start": False, "spot": True}
    ),
    "v6e-16-reservation": Shape(
        "cluster-create-v6e-16-reservation.txt",
        "ct6e-standard-4t",
        "4x4",
        {"flex_start": False, "reservation": RESERVATION},
    ),
    "v6e-4-flex": Shape("cluster-create-v6e-4-flex.txt", "ct6e-standard-4t", "2x2"),
    "v6e-16-flex-2slices": Shape(
        "cluster-create-v6e-16-flex-2slices.txt", "ct6e-standard-4t", "4x4", {"slices": 2}
    ),
}
FLEX_SHAPES = [name for name, shape in SHAPES.items() if shape.args.get("flex_start", True)]


@dataclass(frozen=True)
class Declared:
    plan: TpuNodePoolPlan
    selection: TpuNodePoolSelection
    pools: tuple[dict[str, Any], ...]
    """Inputs of the declared NodePools, the first slice's first."""


@functools.cache
def declared(shape_name: str) -> Declared:
    """Our FlexStartTpuNodePool for the shape, declared under mocks. europe-west4-a is outside our
    flex-start zone table: that may warn, and must not refuse."""
    shape = SHAPES[shape_name]
    made: list[FlexStartTpuNodePool] = []

    def body() -> None:
        args: Any = {
            "cluster": CLUSTER,
            "cluster_region": REGION,
            "machine_type": shape.machine_type,
            "topology": shape.topology,
            "node_locations": [ZONE],
            "service_account_email": f"tpu-dev-nodes@{PROJECT}.iam.gserviceaccount.com",
            "project": PROJECT,
            **shape.args,
        }
        made.append(FlexStartTpuNodePool("tpu-dev-np", args))

    run = run_components(body)
    pools = sorted(run.by_type(POOL), key=lambda registration: registration.name)
    return Declared(made[0].plan, made[0].selection, tuple(registration.inputs for registration in pools))


RESERVATION_AFFINITY_FLAG = {
    "NO_RESERVATION": "none",
    "ANY_RESERVATION": "any",
    "SPECIFIC_RESERVATION": "specific",
}


def as_gcloud_flags(pool: dict[str, Any]) -> dict[str, Any]:
    """Our declared NodePool in xpk's terms: the gcloud flags that say the same thing."""
    node = pool["nodeConfig"]
    flags: dict[str, Any] = {
        "--location": pool["location"],
        "--cluster": pool["cluster"],
        "--project": pool["project"],
        "--node-locations": ",".join(pool["nodeLocations"]),
        "--machine-type": node["machineType"],
        "--num-nodes": str(pool["initialNodeCount"]),
    }
    if node.get("flexStart"):
        flags["--flex-start"] = True
    if node.get("spot"):
        flags["--spot"] = True
    affinity = node.get("reservationAffinity", {})
    if "consumeReservationType" in affinity:
        flags["--reservation-affinity"] = RESERVATION_AFFINITY_FLAG[affinity["consumeReservationType"]]
    if affinity.get("consumeReservationType") == "SPECIFIC_RESERVATION":
        # gcloud's --reservation=NAME is the key GKE names (FACTS["reservation-key"]) with one value.
        by_name = affinity.get("key") == "compute.googleapis.com/reservation-name"
        flags["--reservation"] = (
            affinity["values"][0] if by_name and len(affinity["values"]) == 1 else affinity
        )
    if pool["management"]["autoRepair"] is False:
        flags["--no-enable-autorepair"] = True
    autoscaling = pool.get("autoscaling")
    if autoscaling:
        flags["--enable-autoscaling"] = True
        flags["--location-policy"] = autoscaling["locationPolicy"]
        # gcloud's --max-nodes is the per-zone limit, maxNodeCount.
        if "maxNodeCount" in autoscaling:
            flags["--max-nodes"] = str(autoscaling["maxNodeCount"])
    placement = pool.get("placementPolicy")
    if placement:
        flags["--placement-type"] = placement["type"]
        flags["--tpu-topology"] = placement.get("tpuTopology")
    return flags


# The flags whose meaning our pools carry, compared with xpk's one by one.
MIRRORED = (
    "--location",  # the cluster's region: xpk's clusters are regional, as ours are
    "--cluster",
    "--project",
    "--node-locations",
    "--machine-type",
    "--flex-start",
    "--spot",
    "--reservation-affinity",
    "--reservation",
    "--no-enable-autorepair",
    "--enable-autoscaling",
    "--location-policy",
    "--max-nodes",
    "--num-nodes",
    "--placement-type",
    "--tpu-topology",
)
# The flags xpk prints that we deliberately do not mirror, and why.
NOT_MIRRORED = {
    "NAME": "pool names are ours. The first slice's pool keeps the plain name and later slices add "
    "-1, -2 (xpk: {cluster}-np-{i}). A name carries no setting.",
    "--host-maintenance-interval": "AS_NEEDED is the default of xpk's own flag (src/xpk/parser/cluster.py). "
    "We set no host maintenance policy and leave it to GKE. The cluster's maintenance window and "
    "exclusion, and Jobs that resume from checkpoints, are how we deal with maintenance.",
    "--enable-gvnic": "a NIC performance option, neither capacity nor placement; left to GKE.",
    "--accelerator-network-profile": "v6e only in xpk (src/xpk/core/nodepool.py:343-347), whose "
    "clusters are created with --enable-multi-networking. Ours have one network and no such profile.",
    "--node-labels": "only cloud.google.com/gke-networking-dra-driver=true, which belongs to "
    "--accelerator-network-profile.",
    "--node-version": "0 is a dry-run placeholder (xpk reads the cluster's version, and dry-run answers "
    "'0'). Our pools follow the cluster's version on its release channel.",
    "--scopes": "xpk adds storage-full and gke-default to cloud-platform. We give cloud-platform only: "
    "the node service account's IAM roles decide access.",
    "--max-pods-per-node": "xpk's 15 on multi-host pools saves Pod IPs. Ours keep GKE's default; the "
    "network plan's /14 Pod range is sized for it.",
}

# Where our pool says something other than xpk's for the same shape, on purpose. Any other
# difference fails, and so does a listed difference that is no longer there (update this table).
_FIXED_SIZE = (
    "known, documented difference: xpk's spot and reservation pools are fixed-size, "
    "--num-nodes=VMs and no autoscaling (src/xpk/core/nodepool.py:353). Ours autoscale from 0 to "
    "one slice's VMs like the flex-start pools, so an idle pool costs nothing."
)
_MULTI_HOST_REPAIR = (
    "seed 002 turns auto-repair off on every multi-host slice, because repairing one node re-creates "
    "the whole slice under a running job. xpk passes no autorepair flag outside flex-start, so "
    "GKE's default (on) applies."
)
_NO_RESERVATION = (
    "we state NO_RESERVATION on every pool without a reservation, while xpk's Spot pool passes no "
    "--reservation-affinity (gcloud's default, any). Spot VMs cannot consume reservations "
    "(FACTS['spot-no-reservations']), so the two mean the same."
)
KNOWN_DIFFERENCES: dict[str, dict[str, str]] = {
    "v5litepod-16-spot": {
        "--num-nodes": _FIXED_SIZE,
        "--enable-autoscaling": _FIXED_SIZE,
        "--location-policy": _FIXED_SIZE,
        "--max-nodes": _FIXED_SIZE,
        "--no-enable-autorepair": _MULTI_HOST_REPAIR,
        "--reservation-affinity": _NO_RESERVATION,
    },
    "v6e-16-reservation": {
        "--num-nodes": _FIXED_SIZE,
        "--enable-autoscaling": _FIXED_SIZE,
        "--location-policy": _FIXED_SIZE,
        "--max-nodes": _FIXED_SIZE,
        "--no-enable-autorepair": _MULTI_HOST_REPAIR,
    },
}


@pytest.mark.parametrize("shape", SHAPES)
def test_our_slice_is_the_tpu_system_xpk_assumes(shape):
    system = xpk_system(SHAPES[shape].fixture)
    ours = slice_shape(SHAPES[shape].machine_type, SHAPES[shape].topology)
    assert {
        "gce_machine_type": ours.machine_type.name,
        "topology": ours.topology,
        "vms_per_slice": str(ours.vms),
        "chips_per_vm": str(ours.machine_type.chips_per_vm),
        "gke_accelerator": ours.accelerator_label,
    } == {
        key: system[key]
        for key in ("gce_machine_type", "topology", "vms_per_slice", "chips_per_vm", "gke_accelerator")
    }


def test_every_flag_xpk_prints_is_mirrored_or_set_aside_with_a_reason():
    printed = {flag for shape in SHAPES.values() for pool in xpk_node_pools(shape.fixture) for flag in pool}
    assert printed - set(MIRRORED) - set(NOT_MIRRORED) == set()


@pytest.mark.parametrize("shape", SHAPES)
def test_node_pool_matches_xpk_flag_by_flag(shape):
    theirs = xpk_node_pools(SHAPES[shape].fixture)
    ours = [as_gcloud_flags(pool) for pool in declared(shape).pools]
    known = KNOWN_DIFFERENCES.get(shape, {})
    for xpk, mine in zip(theirs, ours, strict=True):
        differences = {
            flag: (xpk.get(flag), mine.get(flag)) for flag in MIRRORED if xpk.get(flag) != mine.get(flag)
        }
        assert {flag: d for flag, d in differences.items() if flag not in known} == {}
        assert set(known) - set(differences) == set(), "a known difference is gone: update KNOWN_DIFFERENCES"


@pytest.mark.parametrize("shape", FLEX_SHAPES)
def test_auto_repair_is_off_on_every_flex_start_pool_as_xpk_turns_it_off(shape):
    """xpk 1.16.0 src/xpk/core/capacity.py:141 passes --no-enable-autorepair on every flex-start
    pool, single-host v6e-4 included."""
    assert all(pool["--no-enable-autorepair"] is True for pool in xpk_node_pools(SHAPES[shape].fixture))
    pools = declared(shape).pools
    assert pools and all(pool["management"]["autoRepair"] is False for pool in pools)


@pytest.mark.parametrize("shape", ["v5litepod-16-spot", "v6e-16-reservation"])
def test_spot_and_reservation_pools_autoscale_from_zero_to_one_slice_unlike_xpks_fixed_size(shape):
    (xpk,) = xpk_node_pools(SHAPES[shape].fixture)
    (pool,) = declared(shape).pools
    assert xpk["--num-nodes"] == "4" and "--enable-autoscaling" not in xpk
    assert pool["initialNodeCount"] == 0
    assert pool["autoscaling"] == {"locationPolicy": "ANY", "minNodeCount": 0, "maxNodeCount": 4}


def test_two_slices_are_two_identical_pools_of_one_slice_each_as_in_xpk():
    theirs = xpk_node_pools(SHAPES["v6e-16-flex-2slices"].fixture)
    assert [pool.pop("NAME") for pool in theirs] == ["tpu-dev-np-0", "tpu-dev-np-1"]
    assert theirs[0] == theirs[1] and theirs[0]["--max-nodes"] == "4"

    ours = declared("v6e-16-flex-2slices").pools
    assert len(ours) == 2
    assert [{k: v for k, v in pool.items() if k != "name"} for pool in ours[1:]] == [
        {k: v for k, v in ours[0].items() if k != "name"}
    ]
    vms_per_slice = declared("v6e-16-flex-2slices").plan.shape.vms
    assert [pool["autoscaling"]["maxNodeCount"] for pool in ours] == [vms_per_slice, vms_per_slice] == [4, 4]


@checks("reservation-key")
def test_reservation_pool_consumes_the_named_reservation_by_gkes_key():
    (pool,) = declared("v6e-16-reservation").pools
    assert xpk_node_pools(SHAPES["v6e-16-reservation"].fixture)[0]["--reservation"] == RESERVATION
    assert pool["nodeConfig"]["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": [RESERVATION],
    }


@checks("spot-no-reservations")
def test_spot_pool_with_a_reservation_is_refused():
    with pytest.raises(NodePoolError, match="spot nodes cannot consume reservation 'my-reservation'"):
        plan_tpu_node_pool(
            name="spot",
            machine_type="ct5lp-hightpu-4t",
            topology="4x4",
            node_locations=[ZONE],
            cluster_region=REGION,
            flex_start=False,
            spot=True,
            reservation=RESERVATION,
        )


# --- the Pods' node selectors ---------------------------------------------------------------------

FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
QUEUED_LABEL = "cloud.google.com/gke-queued"
# xpk's default workload, with no capacity label (no node auto-provisioning): accelerator and topology.
XPK_DEFAULT_WORKLOAD = "workload-create-v6e-16-flex-2slices.txt"


@pytest.mark.parametrize(
    ("fixture", "shape"),
    [
        # xpk 1.16.0 src/xpk/core/capacity.py:184 `cloud.google.com/gke-spot: "true"`
        ("workload-create-v5litepod-16-spot-NAPsim.txt", "v5litepod-16-spot"),
        # src/xpk/core/capacity.py:188 `cloud.google.com/reservation-name: NAME`
        ("workload-create-v6e-16-reservation-NAPsim.txt", "v6e-16-reservation"),
    ],
    ids=["spot", "reservation"],
)
def test_pods_select_the_same_capacity_as_xpk(fixture, shape):
    assert declared(shape).plan.node_selector == xpk_pod_spec(xpk_jobset(fixture))["nodeSelector"]


@checks("flex-start-node-label")
def test_flex_start_pods_select_gke_flex_start_where_xpk_selects_gke_queued():
    """Deliberate: xpk selects `cloud.google.com/gke-queued` (src/xpk/core/capacity.py:182), the
    label of queued provisioning, which xpk itself never enables for TPU
    (src/xpk/utils/kueue.py:24: GPU only), as its flex pools below show. We select the label
    flex-start nodes carry."""
    theirs = dict(xpk_pod_spec(xpk_jobset("workload-create-v6e-16-flex-NAPsim.txt"))["nodeSelector"])
    assert theirs.pop(QUEUED_LABEL) == "true"
    ours = dict(declared("v6e-16-flex").plan.node_selector)
    assert ours.pop(FLEX_START_LABEL) == "true"
    assert ours == theirs
    flex_pools = [pool for shape in FLEX_SHAPES for pool in xpk_node_pools(SHAPES[shape].fixture)]
    assert not any("--enable-queued-provisioning" in pool for pool in flex_pools)
    assert not any("queuedProvisioning" in pool for shape in FLEX_SHAPES for pool in declared(shape).pools)


def test_pods_select_the_accelerator_and_topology_of_xpks_default_workload_and_on_demand_nothing_more():
    default = xpk_pod_spec(xpk_jobset(XPK_DEFAULT_WORKLOAD))["nodeSelector"]
    assert default == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
    }
    for shape in ("v6e-16-flex", "v6e-16-reservation", "v6e-16-flex-2slices"):
        assert default.items() <= declared(shape).plan.node_selector.items()
    on_demand = plan_tpu_node_pool(
        name="on-demand",
        machine_type="ct6e-standard-4t",
        topology="4x4",
        node_locations=[ZONE],
        cluster_region=REGION,
        flex_start=False,
    )
    assert on_demand.node_selector == default


# --- the Job's Pods on those pools ------------------------------------------------------------------


@functools.cache
def declared_job(shape: str) -> dict[str, Any]:
    """The Job our TpuTrainingJob declares on the shape's pools, under mocks."""
    selection = declared(shape).selection

    def body() -> None:
        TpuTrainingJob(
            "train",
            {
                "provider": k8s.Provider("cluster", kubeconfig="{}"),
                "node_pool": selection,
                "image": "trainer:1",
                "command": ["python3", "train.py"],
                "checkpoint_dir": "gs://bucket/checkpoints/train",
                "google_service_account": f"trainer@{PROJECT}.iam.gserviceaccount.com",
                "google_service_account_id": f"projects/{PROJECT}/serviceAccounts/trainer",
                "workload_pool": f"{PROJECT}.svc.id.goog",
            },
        )

    return run_components(body).one("kubernetes:batch/v1:Job", "train-job").inputs


@pytest.mark.parametrize(
    "shape", ["v6e-16-flex-2slices", "v5litepod-16-spot", "v6e-16-reservation", "v6e-4-flex"]
)
def test_job_pods_select_exactly_the_pools_node_selector_and_pools(shape):
    """The Pods select the pool's shape and capacity as xpk does, and the pool itself by the label
    all its slices' nodes carry, instead of xpk's list of GKE pool names: a list would change the
    Pod template, and pulumi-kubernetes replace the running Job, whenever a slice is added."""
    plan = declared(shape).plan
    pod = declared_job(shape)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {**plan.node_selector, POOL_NODE_LABEL: plan.name}
    assert "nodeAffinity" not in pod.get("affinity", {})
    # Every slice's nodes, and only they, carry the label the Pods select.
    assert [pool["nodeConfig"]["labels"] for pool in declared(shape).pools] == [
        {POOL_NODE_LABEL: plan.name}
    ] * len(plan.pool_names)


def test_two_slice_job_keeps_its_pods_in_one_node_pool_as_xpks_exclusive_topology():
    """xpk's JobSet annotation `alpha.jobset.sigs.k8s.io/exclusive-topology:
    cloud.google.com/gke-nodepool` (src/xpk/core/scheduling.py:58-59) gives each slice a node pool
    of its own. Our Job does it with a pod affinity on the same topology key."""
    jobset = xpk_jobset("workload-create-v6e-16-flex-2slices.txt")
    topology_key = jobset["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"]
    assert topology_key == NODE_POOL_LABEL == "cloud.google.com/gke-nodepool"
    (replicated,) = jobset["spec"]["replicatedJobs"]
    plan = declared("v6e-16-flex-2slices").plan
    assert replicated["replicas"] == len(plan.pool_names) == 2

    job = declared_job("v6e-16-flex-2slices")
    pod = job["spec"]["template"]["spec"]
    assert pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {
            "labelSelector": {"matchLabels": {"job-name": "train", "recovery-generation": "0"}},
            "topologyKey": topology_key,
        }
    ]
    # One slice: as many Pods as xpk's slice job, each with as many chips.
    xpk_job = replicated["template"]["spec"]
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (
        xpk_job["parallelism"],
        xpk_job["completions"],
    )
    (xpk_container,) = xpk_job["template"]["spec"]["containers"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == xpk_container["resources"]["limits"] == {"google.com/tpu": 4}


def test_one_slice_and_two_slices_give_the_job_the_same_pod_template():
    """The pod affinity to one node pool is there with one slice too (where it holds anyway), so
    going from one slice to two, or back, leaves a running Job's template as it was."""
    one, two = declared_job("v6e-16-flex")["spec"], declared_job("v6e-16-flex-2slices")["spec"]
    assert len(declared("v6e-16-flex").pools) == 1 and len(declared("v6e-16-flex-2slices").pools) == 2
    assert one == two


# --- the cluster, the network and the TPU generations ----------------------------------------------


@checks("maintenance-window")
def test_maintenance_window_rule_has_gkes_numbers():
    assert (MIN_AVAILABILITY, ROLLING_PERIOD, MIN_CONTIGUOUS) == (
        timedelta(hours=48),
        timedelta(days=32),
        timedelta(hours=4),
    )


@checks("maintenance-window")
@pytest.mark.parametrize(
    ("start", "end", "recurrence", "accepted"),
    [
        ("02:00", "06:00", "FREQ=DAILY", True),  # 4 h a day: 128 h in any 32 days
        ("02:00", "06:00", "FREQ=WEEKLY;BYDAY=SA,SU", False),  # 4 h on weekends: 32 h in some 32 days
        ("02:00", "05:00", "FREQ=DAILY", False),  # 96 h, but no stretch of 4 h, so none counts
    ],
    ids=["4h-daily", "4h-weekends", "3h-daily"],
)
def test_maintenance_window_is_accepted_only_as_gke_would(start, end, recurrence, accepted):
    if accepted:
        assert recurring_window(start, end, recurrence).length == timedelta(hours=4)
    else:
        with pytest.raises(MaintenanceWindowError, match="GKE requires at least 48 h in every 32 days"):
            recurring_window(start, end, recurrence)


@checks("node-upgrade-exclusion")
def test_cluster_excludes_minor_and_node_upgrades_by_default_as_cluster_toolkit_does():
    def body() -> None:
        GkeTpuCluster(CLUSTER, {"location": REGION, "project": PROJECT})

    cluster = run_components(body).one("gcp:container/cluster:Cluster", f"{CLUSTER}-cluster").inputs
    assert cluster["releaseChannel"] == {"channel": "REGULAR"}
    (exclusion,) = cluster["maintenancePolicy"]["maintenanceExclusions"]
    assert exclusion["exclusionOptions"] == {
        "scope": "NO_MINOR_OR_NODE_UPGRADES",
        "endTimeBehavior": "UNTIL_END_OF_SUPPORT",
    }
    assert exclusion["startTime"] == "2025-12-01T00:00:00Z"


@pytest.fixture(scope="module")
def dev_stack() -> Any:
    """The dev stack, declared once under the offline plan's mocks."""
    return run_stack(dev_config())


@checks("release-channel-auto-upgrade")
def test_tpu_pools_keep_auto_upgrade_on_as_a_release_channel_requires(dev_stack):
    (cluster,) = dev_stack.by_type("gcp:container/cluster:Cluster")
    assert cluster.inputs["releaseChannel"]["channel"] in ("RAPID", "REGULAR", "STABLE")
    pools = [r.inputs for r in dev_stack.by_type(POOL)] + [pool for s in SHAPES for pool in declared(s).pools]
    assert len(pools) > len(SHAPES)
    assert [pool["management"]["autoUpgrade"] for pool in pools] == [True] * len(pools)


def _mock_id(registration: Any) -> str:
    # The offline plan's mocks give every resource the id `{resource name}-id` (tpu_training/offline.py).
    return f"{registration.name}-id"


@checks("tpu-private-google-access", "no-external-ip-needs-nat")
def test_dev_tpu_vm_without_external_ip_has_private_google_access_and_cloud_nat(dev_stack):
    subnets = {_mock_id(r): r.inputs for r in dev_stack.by_type("gcp:compute/subnetwork:Subnetwork")}
    routers = {r.inputs["name"]: r.inputs for r in dev_stack.by_type("gcp:compute/router:Router")}
    nats = [r.inputs for r in dev_stack.by_type("gcp:compute/routerNat:RouterNat")]
    vms = dev_stack.by_type("gcp:tpu/v2Vm:V2Vm")
    assert vms
    for vm in vms:
        network = vm.inputs["networkConfig"]
        assert network["enableExternalIps"] is False
        subnet = subnets[network["subnetwork"]]
        region = region_of_zone(vm.inputs["zone"])
        assert (subnet["region"], subnet["network"]) == (region, network["network"])
        assert subnet["privateIpGoogleAccess"] is True
        nat_of_subnet = [
            nat
            for nat in nats
            if routers[nat["router"]]["network"] == network["network"]
            and nat["region"] == routers[nat["router"]]["region"] == region
            and _nat_covers(nat, network["subnetwork"])
        ]
        assert len(nat_of_subnet) == 1


def _nat_covers(nat: dict[str, Any], subnet_id: str) -> bool:
    """Whether a Cloud NAT translates the primary range of this subnet (of its router's region)."""
    if nat["sourceSubnetworkIpRangesToNat"] in (
        "ALL_SUBNETWORKS_ALL_IP_RANGES",
        "ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES",
    ):
        return True
    return any(
        entry["name"] == subnet_id
        and {"ALL_IP_RANGES", "PRIMARY_IP_RANGE"} & set(entry["sourceIpRangesToNats"])
        for entry in nat.get("subnetworks") or []
    )


@checks("flex-start-generations")
def test_flex_start_refuses_tpu_v4_which_spot_accepts():
    v4 = {
        "name": "v4",
        "machine_type": "ct4p-hightpu-4t",
        "topology": "2x2x1",
        "node_locations": ["us-central2-b"],
        "cluster_region": "us-central2",
    }
    with pytest.raises(NodePoolError, match="flex-start does not provision TPU v4"):
        plan_tpu_node_pool(**v4)
    assert plan_tpu_node_pool(**v4, flex_start=False, spot=True).capacity == "spot"
