"""The plan's hourly cost: every resource priced from the pinned table (domain/prices.py) or said
to be unknown, split into what bills always and what bills only while training."""

from __future__ import annotations

import copy
import json

import pytest
from support.harness.in_process import run_plan
from support.harness.program import run_stack
from tpu_training_components.domain import catalogue, cost_estimate, prices

from tpu_training.commands import cost

POOLS = "tpu-training:nodePools"
VMS = "tpu-training:tpuVms"


def lines_of(config) -> dict[str, cost.CostLine]:
    return {
        line.name + ":" + line.what.split(",")[0]: line for line in cost.estimate(run_stack(config)).lines
    }


def test_the_dev_stack_costs_what_its_parts_cost(config):
    found = cost.estimate(run_stack(config))
    by_name = {(line.name, line.when): line for line in found.lines}
    # A preemptible v3-8 in europe-west4 is billed at the catalogue's Spot price of the device.
    assert by_name[("demo-tpu-vm", "training")].price.usd_per_hour == 2.244
    # Flex-start's own price is not published where the table reads prices: its on-demand price
    # (the source's whole v6e-16 slice in us-east5, $43.20) stands as its upper bound, and says so.
    pool = by_name[("v6e-4x4-pool", "training")]
    assert pool.price.usd_per_hour == pytest.approx(43.2) and pool.price.upper_bound
    assert pool.price.source.startswith("at most: flex-start's own price is not published")
    # Always on: the regional cluster's fee, its one e2-standard-4 system node, the NAT it uses.
    assert by_name[("tpu-dev-cluster", "always")].price.usd_per_hour == 0.10
    assert by_name[("tpu-dev-system", "always")].price.usd_per_hour == pytest.approx(2 * 0.06701)
    known, unknown = found.total("always")
    assert (round(known, 5), unknown) == (round(0.10 + 2 * 0.06701 + 0.0014 + 0.005, 5), [])
    known, unknown = found.total("training")
    assert unknown == [] and found.bounded("training")
    document = found.to_json()
    assert document["whileTraining"]["usdPerHour"] == pytest.approx(known, abs=1e-4)
    assert document["whileTraining"]["upperBound"] is True
    assert "upperBound" not in document["alwaysOn"]
    assert document["alwaysOn"]["usdPerHour"] == pytest.approx(0.2404, abs=1e-4)
    assert document["notHourly"] == {
        "gcp:storage/bucket:Bucket": 2,
        "gcp:storage/bucketObject:BucketObject": 22,  # the trainer's 11 files in each of 2 buckets
        "gcp:logging/metric:Metric": 6,  # monitoring: billed per MiB ingested, not per hour
        "gcp:monitoring/alertPolicy:AlertPolicy": 4,
    }
    assert document["unpriced"] == []


@pytest.mark.parametrize(
    ("pool", "expected"),
    [
        # The source's own rows for a whole v6e-16 slice in us-east5: $43.20 on demand, $17.28 Spot.
        ({"provisioning": "on-demand"}, 43.2),
        ({"provisioning": "spot"}, 17.28),
    ],
)
def test_a_tpu_pool_at_full_size_costs_its_slice(config, pool, expected):
    config = copy.deepcopy(config)
    config[POOLS][0].update(pool)
    line = next(line for line in cost.estimate(run_stack(config)).lines if line.name == "v6e-4x4-pool")
    assert line.price.usd_per_hour == pytest.approx(expected)
    assert line.when == "training" and line.what.startswith("4 x ct6e-standard-4t")


def test_a_v3_pod_slice_is_priced_per_eight_cores(config):
    config = copy.deepcopy(config)
    config[VMS][0]["acceleratorType"] = "v3-32"
    line = next(line for line in cost.estimate(run_stack(config)).lines if line.name == "demo-tpu-vm")
    assert line.price.usd_per_hour == pytest.approx(10.56)  # the source's v3-32 Spot row in europe-west4


def test_a_price_the_table_lacks_is_unknown_and_says_why(config):
    config = copy.deepcopy(config)
    config[VMS][0].update(provisioning="on-demand", zone="us-central1-b", acceleratorType="v3-32")
    found = cost.estimate(run_stack(config))
    line = next(line for line in found.lines if line.name == "demo-tpu-vm")
    assert line.price.usd_per_hour is None
    assert line.price.source == "no TPU v3 in us-central1 Pod price in the table"
    text = cost.render(found)
    assert (
        "      unknown  gcp:tpu/v2Vm:V2Vm  demo-tpu-vm: TPU v3-32, on-demand, us-central1 (no TPU v3" in text
    )
    assert "while training, on top: at least $" in text


def test_every_price_is_sourced_and_every_key_is_in_the_catalogue():
    generations = {f.generation for f in catalogue.ACCELERATOR_FAMILIES.values()} | set(
        catalogue.GKE_GENERATIONS
    )
    for table in (prices.TPU_CHIP_HOUR, prices.TPU_DEVICE_HOUR, prices.TPU_POD_EIGHT_CORES_HOUR):
        for (generation, region), (on_demand, spot) in table.items():
            assert generation in generations and catalogue.is_region(region)
            assert 0 < spot < on_demand
    for price in (prices.GKE_CLUSTER_HOUR, prices.NAT_VM_HOUR, prices.NAT_ADDRESS_HOUR):
        assert price.known and price.source
    assert prices.machine_hour("n2-standard-4", "us-east5").usd_per_hour is None
    assert prices.machine_hour("e2-standard-8", "us-east5").usd_per_hour == pytest.approx(4 * 0.06701)


def test_the_plan_shows_the_cost_and_writes_it_in_its_json(tmp_path):
    result = run_plan("--json", str(tmp_path / "plan.json"))
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "Cost per hour (list prices in USD read 2026-11-26; docs/cost.md):" in text
    assert "  always on: $0.24" in text
    assert (
        "  while training, on top: $45.46, or less: flex-start is counted at its on-demand price, its "
        "upper bound" in text
    )
    assert (
        "   <=$43.20  gcp:container/nodePool:NodePool  v6e-4x4-pool: 4 x ct6e-standard-4t, flex-start" in text
    )
    assert text.index("Cost per hour") < text.index("Summary:")
    document = json.loads((tmp_path / "plan.json").read_text())
    assert document["cost"]["alwaysOn"]["usdPerHour"] == pytest.approx(0.2404, abs=1e-4)
    assert document["cost"]["byKind"]["gcp:tpu/v2Vm:V2Vm"] == {"knownUsdPerHour": 2.244, "unknown": []}


def test_the_cost_command_prints_the_stacks_hourly_cost(capsys):
    """`tpu-training cost`: the plan's cost section alone, for the dev stack by default."""
    assert cost.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Stack tpu-training/dev\nCost per hour (list prices in USD read ")
    assert "always on: $0.24" in out
    assert "$2.24  gcp:tpu/v2Vm:V2Vm  demo-tpu-vm: TPU v3-8, preemptible, europe-west4" in out


def test_the_cost_command_as_json_is_the_plans_cost(capsys):
    assert cost.main(["--json", "--stack", "dev"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["alwaysOn"]["usdPerHour"] == pytest.approx(0.2404)
    assert document["whileTraining"]["unknown"] == []
    assert document["whileTraining"]["upperBound"] is True


def test_the_cost_command_refuses_a_bad_stack_name_or_a_missing_stack(capsys):
    assert cost.main(["--stack", "a/b/c/d"]) == 64
    assert "--stack 'a/b/c/d': a stack name is" in capsys.readouterr().err
    assert cost.main(["--stack", "nosuchstack"]) == 2
    assert "Pulumi.nosuchstack.yaml does not exist" in capsys.readouterr().err


def test_a_flex_start_price_is_its_on_demand_price_as_an_upper_bound():
    # No flex-start price is in the table's sources (prices.py says which, and when they were read):
    # the bound is the on-demand price of the same chips; where that is unknown, so is the bound.
    flex = prices.tpu_vm_hour("v6e", "us-east5", 16, 16, "flex-start")
    on_demand = prices.tpu_vm_hour("v6e", "us-east5", 16, 16, "on-demand")
    assert (flex.usd_per_hour, flex.upper_bound) == (on_demand.usd_per_hour, True)
    assert not on_demand.upper_bound and flex.times(2).upper_bound
    assert prices.tpu_vm_hour("v6e", "europe-north9", 16, 16, "flex-start").usd_per_hour is None
    assert prices.tpu_vm_hour("v6e", "us-east5", 16, 16, "reserved").usd_per_hour is None


def test_a_ladder_counts_only_its_dearest_rung(config):
    # [spot, flex-start] on the dev pool: both rungs' pools are declared, but a Job runs on one of
    # them at a time, so the total takes the worse case (flex-start's bound, $43.20), not the sum.
    config = copy.deepcopy(config)
    config[POOLS][0]["provisioning"] = ["spot", "flex-start"]
    found = cost.estimate(run_stack(config))
    rungs = {line.name: line for line in found.lines if line.ladder == "v6e-4x4"}
    assert {name: line.price.usd_per_hour for name, line in rungs.items()} == {
        "v6e-4x4-pool-spot": pytest.approx(17.28),
        "v6e-4x4-pool-flex": pytest.approx(43.2),
    }
    known, unknown = found.total("training")
    # Besides the dearest rung: the VM's $2.244, NAT for the VM and for one rung's 4 nodes (not 8),
    # and the NAT address of the VM's region (the pool's region has one always on already).
    assert unknown == [] and known == pytest.approx(2.244 + 43.2 + 0.0014 * 5 + 0.005, abs=1e-5)
    text = cost.render(found)
    assert "of each ladder only its dearest rung" in text
    assert "v6e-4x4-pool-spot: 4 x ct6e-standard-4t, spot, us-east5, a rung of ladder v6e-4x4" in text
    document = found.to_json()
    assert document["byKind"]["gcp:container/nodePool:NodePool"]["knownUsdPerHour"] == pytest.approx(
        43.2 + 2 * 0.06701
    )


# The source's rows for ct6e-standard-4t in us-east5, per VM (4 chips): its whole v6e-16 slice
# above is 4 of them, $43.20 on demand and $17.28 Spot. Flex-start is counted at on demand.
NODE_HOUR = {"on-demand": 43.2 / 4, "spot": 17.28 / 4, "flex-start": 43.2 / 4}
NAT_VM_HOUR = 0.0014


@pytest.mark.parametrize("slices", [1, 2, 3])
@pytest.mark.parametrize(("topology", "hosts"), [("2x2", 1), ("4x4", 4)], ids=["single-host", "multi-host"])
@pytest.mark.parametrize(
    "ladder",
    [["spot"], ["flex-start", "spot"], ["spot", "on-demand"]],
    ids=["one-rung", "flex-spot", "spot-od"],
)
def test_a_ladder_of_slices_costs_its_dearest_rung_in_full(config, ladder, topology, hosts, slices):
    """Issue 52: every slice of a pool can land on the ladder's dearest rung, so the worst case is
    that rung's pools together (slices x hosts VMs), in the total, the NAT count, the JSON and the
    dashboard's tile; a cheaper rung is never added to it."""
    config = copy.deepcopy(config)
    config[POOLS][0].update(
        topology=topology, slices=slices, provisioning=ladder if len(ladder) > 1 else ladder[0]
    )
    result = run_stack(config)
    found = cost.estimate(result)
    vms = slices * hosts
    dearest = max(NODE_HOUR[rung] for rung in ladder) * vms
    pools = [line for line in found.lines if line.name.startswith("v6e-4x4-pool")]
    # A pool per rung, and of a multi-host slice a pool per slice (single-host slices share one).
    assert len(pools) == len(ladder) * (slices if hosts > 1 else 1)
    known, unknown = found.total("training")
    # Besides the ladder: the dev VM ($2.244), NAT for it and for the ladder's VMs, and the NAT
    # address of the VM's region (the pool's region has one always on already).
    assert unknown == []
    assert known == pytest.approx(2.244 + dearest + NAT_VM_HOUR * (1 + vms) + 0.005, abs=1e-5)
    nat = next(
        line
        for line in found.lines
        if line.type == "gcp:compute/routerNat:RouterNat"
        and line.when == "training"
        and "us-east5" in line.what
    )
    assert nat.what == f"{vms} VM(s) through Cloud NAT, us-east5"
    document = found.to_json()
    assert document["whileTraining"]["usdPerHour"] == pytest.approx(known, abs=1e-4)
    if len(ladder) > 1:
        assert {line["rung"] for line in document["lines"] if line.get("ladder")} == {
            f"{rung} us-east5-a" for rung in ladder
        }
    (dashboard,) = [r for r in result.registrations if r.type == "gcp:monitoring/dashboard:Dashboard"]
    assert cost_estimate.total_text(found, "training", " per hour") in json.dumps(dashboard.inputs)
