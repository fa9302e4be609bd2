"""The network address plan, and the TrainingNetwork component under mocks."""

from __future__ import annotations

import ipaddress
from itertools import combinations
from string import ascii_lowercase

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.harness.program import run_components
from tpu_training_components import InvalidArgument
from tpu_training_components.domain import network_plan as network_plan_module
from tpu_training_components.domain.network_plan import (
    NetworkPlan,
    NetworkPlanError,
    SubnetPlan,
    home_slot,
    plan_network,
    slot_cidr,
)
from tpu_training_components.resources.network import TrainingNetwork

# Importing pulumi_gcp.compute warns about that package's own deprecated aliases; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_gcp.compute")

COMPONENT = "tpu-training:network:TrainingNetwork"
NETWORK = "gcp:compute/network:Network"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
ROUTER = "gcp:compute/router:Router"
NAT = "gcp:compute/routerNat:RouterNat"
FIREWALL = "gcp:compute/firewall:Firewall"

REGIONS = ["us-central2", "europe-west4"]


def _network(name: str = "net", **extra):
    args = {"network_name": "training", "regions": REGIONS, **extra}
    return TrainingNetwork(name, args)


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------

region_names = st.builds(
    lambda a, b, n: f"{a}-{b}{n}",
    st.text(ascii_lowercase, min_size=1, max_size=6),
    st.text(ascii_lowercase, min_size=1, max_size=6),
    st.integers(min_value=1, max_value=99),
)


def test_each_region_gets_a_slash_20_inside_10_0_0_0_9_at_its_home_slot():
    plan = plan_network(REGIONS)
    assert plan.regions == ("europe-west4", "us-central2")
    for subnet in plan.subnets:
        network = ipaddress.IPv4Network(subnet.cidr)
        assert network.prefixlen == 20
        assert network.subnet_of(ipaddress.IPv4Network("10.0.0.0/9"))
        assert subnet.cidr == slot_cidr(home_slot(subnet.region))


def test_planned_ranges_are_pinned():
    # A change to the hash or the slot arithmetic would move, and so replace, every deployed
    # subnet: these values must never change.
    assert plan_network(REGIONS).cidrs == {"europe-west4": "10.27.208.0/20", "us-central2": "10.83.160.0/20"}
    assert slot_cidr(0) == "10.0.0.0/20"
    assert slot_cidr(1) == "10.0.16.0/20"
    assert slot_cidr(2047) == "10.127.240.0/20"


def test_duplicates_are_planned_once_and_gke_region_is_added():
    plan = plan_network(["europe-west4", "europe-west4"], gke_region="us-central2")
    assert plan.regions == ("europe-west4", "us-central2")
    assert plan_network([], gke_region="us-central2").regions == ("us-central2",)


def test_gke_ranges_only_with_a_gke_region():
    plain = plan_network(REGIONS)
    assert (plain.gke_region, plain.pods_range_name, plain.pods_cidr) == (None, None, None)
    assert (plain.services_range_name, plain.services_cidr) == (None, None)
    assert all(plain.secondary_ranges(region) == () for region in REGIONS)

    gke = plan_network(REGIONS, gke_region="us-central2")
    assert gke.secondary_ranges("us-central2") == (
        ("gke-pods", "10.128.0.0/14"),
        ("gke-services", "10.132.0.0/20"),
    )
    assert gke.secondary_ranges("europe-west4") == ()


def test_internal_ranges_are_the_primaries_and_the_pods():
    plan = plan_network(REGIONS, gke_region="us-central2")
    assert plan.internal_ranges == (*(s.cidr for s in plan.subnets), "10.128.0.0/14")
    assert plan_network(REGIONS).internal_ranges == tuple(s.cidr for s in plan_network(REGIONS).subnets)


def test_a_shared_home_slot_goes_to_the_first_region_in_sorted_order():
    assert home_slot("aa-west29") == home_slot("aa-west75") == 568
    cidrs = plan_network(["aa-west75", "aa-west29"]).cidrs
    assert cidrs == {"aa-west29": slot_cidr(568), "aa-west75": slot_cidr(569)}


def test_a_probing_region_never_takes_another_regions_home_slot():
    # zz-east1250 sorts after aa-west75, whose probe would land on its home slot if regions
    # were placed in one pass.
    assert home_slot("zz-east1250") == 569
    cidrs = plan_network(["aa-west29", "aa-west75", "zz-east1250"]).cidrs
    assert cidrs == {"aa-west29": slot_cidr(568), "zz-east1250": slot_cidr(569), "aa-west75": slot_cidr(570)}


def test_probing_wraps_at_the_top_of_the_block(monkeypatch):
    monkeypatch.setattr(network_plan_module, "home_slot", lambda region: 2047)
    cidrs = plan_network(["aa-west1", "aa-west2", "aa-west3"]).cidrs
    assert cidrs == {"aa-west1": slot_cidr(2047), "aa-west2": slot_cidr(0), "aa-west3": slot_cidr(1)}


@settings(max_examples=50, deadline=None)
@given(st.sets(region_names, min_size=1, max_size=12), region_names)
def test_adding_a_region_moves_no_region_that_keeps_its_home_slot(regions, added):
    before = plan_network(sorted(regions)).cidrs
    after = plan_network(sorted(regions | {added})).cidrs
    homes = [home_slot(r) for r in regions | {added}]
    for region in regions:
        if homes.count(home_slot(region)) == 1:
            assert before[region] == after[region] == slot_cidr(home_slot(region))


@settings(max_examples=50, deadline=None)
@given(st.sets(region_names, min_size=1, max_size=40), st.one_of(st.none(), region_names))
def test_no_two_planned_ranges_overlap(regions, gke_region):
    plan = plan_network(sorted(regions), gke_region=gke_region)
    ranges = [ipaddress.IPv4Network(s.cidr) for s in plan.subnets]
    ranges += [ipaddress.IPv4Network(c) for c in (plan.pods_cidr, plan.services_cidr) if c]
    assert len(plan.subnets) == len(regions | ({gke_region} if gke_region else set()))
    assert not any(a.overlaps(b) for a, b in combinations(ranges, 2))


def test_a_plan_with_overlapping_ranges_is_refused():
    with pytest.raises(NetworkPlanError, match="overlaps"):
        NetworkPlan((SubnetPlan("aa-west1", "10.0.0.0/20"), SubnetPlan("aa-west2", "10.0.8.0/21")))
    with pytest.raises(NetworkPlanError, match="aa-west1 range 10.128.0.0/20 overlaps gke-pods"):
        NetworkPlan((SubnetPlan("aa-west1", "10.128.0.0/20"),), pods_cidr="10.128.0.0/14")


@pytest.mark.parametrize(
    ("regions", "gke_region", "fragment"),
    [
        ([], None, "regions: at least one region is needed"),
        (["europe-west4-a"], None, "regions: 'europe-west4-a' is not a region name"),
        ("europe-west4", None, "regions: expected a list of region names, got the string 'europe-west4'"),
        (["europe-west4"], "us-central2-b", "gke_region: 'us-central2-b' is not a region name"),
    ],
)
def test_bad_regions_are_refused_naming_the_value(regions, gke_region, fragment):
    with pytest.raises(NetworkPlanError) as err:
        plan_network(regions, gke_region=gke_region)
    assert fragment in str(err.value)


# --------------------------------------------------------------------------------------------
# The component
# --------------------------------------------------------------------------------------------


def test_custom_mode_regional_vpc():
    vpc = run_components(lambda: _network()).one(NETWORK, "net-vpc")
    assert vpc.inputs["name"] == "training"
    assert vpc.inputs["autoCreateSubnetworks"] is False
    assert vpc.inputs["routingMode"] == "REGIONAL"


def test_every_region_gets_a_subnet_with_private_google_access_at_the_planned_range():
    run = run_components(lambda: _network())
    plan = plan_network(REGIONS)
    names = sorted(r.name for r in run.by_type(SUBNET))
    assert names == ["net-subnet-europe-west4", "net-subnet-us-central2"]
    for region in REGIONS:
        subnet = run.one(SUBNET, f"net-subnet-{region}")
        assert subnet.inputs["name"] == f"training-{region}"
        assert subnet.inputs["region"] == region
        assert subnet.inputs["network"] == "net-vpc-id"
        assert subnet.inputs["ipCidrRange"] == plan.cidrs[region]
        assert subnet.inputs["privateIpGoogleAccess"] is True


def test_every_region_gets_a_router_and_a_nat_covering_its_subnet():
    run = run_components(lambda: _network())
    assert len(run.by_type(ROUTER)) == len(run.by_type(NAT)) == len(REGIONS)
    for region in REGIONS:
        router = run.one(ROUTER, f"net-router-{region}")
        assert (router.inputs["region"], router.inputs["network"]) == (region, "net-vpc-id")
        nat = run.one(NAT, f"net-nat-{region}")
        assert nat.inputs["router"] == router.inputs["name"]
        assert nat.inputs["region"] == region
        assert nat.inputs["natIpAllocateOption"] == "AUTO_ONLY"
        assert nat.inputs["sourceSubnetworkIpRangesToNat"] == "LIST_OF_SUBNETWORKS"
        assert nat.inputs["subnetworks"] == [
            {"name": f"net-subnet-{region}-id", "sourceIpRangesToNats": ["ALL_IP_RANGES"]}
        ]
        assert nat.inputs["logConfig"] == {"enable": True, "filter": "ERRORS_ONLY"}


def test_internal_rule_admits_exactly_the_planned_ranges_on_all_ports():
    run = run_components(lambda: _network(gke_region="us-central2"))
    rule = run.one(FIREWALL, "net-internal")
    assert rule.inputs["name"] == "training-internal"
    assert rule.inputs["network"] == "net-vpc-id"
    assert rule.inputs["direction"] == "INGRESS"
    assert rule.inputs["sourceRanges"] == list(plan_network(REGIONS, "us-central2").internal_ranges)
    assert "10.128.0.0/14" in rule.inputs["sourceRanges"]
    assert rule.inputs["allows"] == [
        {"protocol": "tcp", "ports": ["0-65535"]},
        {"protocol": "udp", "ports": ["0-65535"]},
        {"protocol": "icmp"},
    ]


def test_iap_ssh_is_allowed_by_default_and_can_be_turned_off():
    rule = run_components(lambda: _network()).one(FIREWALL, "net-iap-ssh")
    assert rule.inputs["sourceRanges"] == ["35.235.240.0/20"]
    assert rule.inputs["allows"] == [{"protocol": "tcp", "ports": ["22"]}]
    assert rule.inputs["direction"] == "INGRESS"
    names = [r.name for r in run_components(lambda: _network(iap_ssh=False)).by_type(FIREWALL)]
    assert names == ["net-internal"]


def test_gke_secondary_ranges_only_on_the_gke_regions_subnet():
    run = run_components(lambda: _network(gke_region="us-central2"))
    assert run.one(SUBNET, "net-subnet-us-central2").inputs["secondaryIpRanges"] == [
        {"rangeName": "gke-pods", "ipCidrRange": "10.128.0.0/14"},
        {"rangeName": "gke-services", "ipCidrRange": "10.132.0.0/20"},
    ]
    assert not run.one(SUBNET, "net-subnet-europe-west4").inputs.get("secondaryIpRanges")


def test_gke_region_missing_from_regions_gets_a_subnet_too():
    run = run_components(lambda: _network(regions=["europe-west4"], gke_region="us-central2"))
    assert run.one(SUBNET, "net-subnet-us-central2").inputs["secondaryIpRanges"]
    run.one(NAT, "net-nat-us-central2")


def test_children_are_parented_to_the_component():
    run = run_components(lambda: _network(gke_region="us-central2"))
    component = run.one(COMPONENT, "net")
    children = [r for r in run.registrations if r.urn != component.urn]
    assert len(children) == 1 + 3 * len(REGIONS) + 2
    assert all(r.parent == component.urn for r in children)
    assert all(r.name.startswith("net-") for r in children)


def test_two_instances_do_not_collide():
    def body():
        TrainingNetwork("a", {"network_name": "net-a", "regions": REGIONS})
        TrainingNetwork("b", {"network_name": "net-b", "regions": REGIONS})

    run = run_components(body)
    assert sorted(r.name for r in run.by_type(NETWORK)) == ["a-vpc", "b-vpc"]


def test_long_names_are_bounded_to_63_characters():
    long_name = "n" * 63
    run = run_components(lambda: _network(network_name=long_name, regions=["northamerica-northeast2"]))
    names = [r.inputs["name"] for r in run.registrations if "name" in r.inputs]
    assert names and all(len(n) <= 63 for n in names)
    assert len(set(names) - {long_name}) == len(names) - 1


def test_outputs():
    captured = {}

    def body():
        net = _network(gke_region="us-central2")
        net.network_id.apply(lambda v: captured.__setitem__("network_id", v))
        net.subnetwork_ids.apply(lambda v: captured.__setitem__("subnetwork_ids", v))
        net.pods_range_name.apply(lambda v: captured.__setitem__("pods", v))
        net.services_range_name.apply(lambda v: captured.__setitem__("services", v))
        assert sorted(net.subnets) == sorted(REGIONS)
        assert net.plan == plan_network(REGIONS, "us-central2")

    run_components(body)
    assert captured == {
        "network_id": "net-vpc-id",
        "subnetwork_ids": {r: f"net-subnet-{r}-id" for r in REGIONS},
        "pods": "gke-pods",
        "services": "gke-services",
    }


def test_no_gke_range_names_without_a_gke_region():
    captured = {}

    def body():
        net = _network()
        net.pods_range_name.apply(lambda v: captured.__setitem__("pods", v))
        net.services_range_name.apply(lambda v: captured.__setitem__("services", v))

    run_components(body)
    assert captured == {"pods": None, "services": None}


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"network_name": "Training"}, "network_name: 'Training' must be 1-63 lowercase letters"),
        ({"network_name": "training-"}, "network_name: 'training-' must be"),
        ({"network_name": "1training"}, "network_name: '1training' must be"),
        ({"network_name": "t" * 64}, f"network_name: {'t' * 64!r} must be"),
        ({"regions": ["europe-west4-a"]}, "regions: 'europe-west4-a' is not a region name"),
        ({"regions": []}, "regions: at least one region is needed"),
        ({"gke_region": "us-central2-b"}, "gke_region: 'us-central2-b' is not a region name"),
        ({"iap_ssh": "yes"}, "iap_ssh = 'yes': Input should be a valid boolean"),
        ({"region": "europe-west4"}, "unknown argument 'region' (did you mean 'regions'?)"),
    ],
)
def test_bad_arguments_fail_before_any_resource(extra, fragment):
    with pytest.raises(InvalidArgument) as err:
        run_components(lambda: _network(**extra))
    assert str(err.value).startswith("TrainingNetwork 'net': ")
    assert fragment in str(err.value)
