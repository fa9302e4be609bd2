"""The TPU zone tables against Google's "TPU regions and zones" page, and the acknowledgement of a
zone they lack: a plan runs clean where Google lists the zone, or where the user says it does
(``allowUnlistedZone``); otherwise it warns at the key, saying how to acknowledge it."""

from __future__ import annotations

import pytest
from support.harness.program import refused, run_stack
from tpu_training_components import PreemptibleTpuVm
from tpu_training_components.domain import tpu_availability
from tpu_training_components.domain.gcp_locations import zone_problem
from tpu_training_components.preview import preview

VMS = "tpu-training:tpuVms"
POOLS = "tpu-training:nodePools"
CLUSTER = "tpu-training:cluster"

# Google, "TPU regions and zones" (https://cloud.google.com/tpu/docs/regions-zones), its North
# America table as read on 2026-12-03, multi-tenant zones (v2-8's and v2-32's rows together).
GOOGLE_NORTH_AMERICA_2026_12_03 = {
    "tpu7x": {"us-central1-c"},
    "v6e": {"us-central1-b", "us-east1-d", "us-east5-a", "us-east5-b"},
    "v5p": {"us-central1-a", "us-east5-a"},
    "v5e": {"us-central1-a", "us-south1-a", "us-west1-c", "us-west4-a"},
    "v4": {"us-central2-b"},
    "v3": {"us-central1-a", "us-central1-b"},
    "v2": {"us-central1-a", "us-central1-b", "us-central1-c"},
}
# Its Europe table's v6e row (read), and the rows whose zones came from the secondary sources
# named in tpu_availability's docstring.
GOOGLE_EUROPE = {"v6e": {"europe-west4-a"}, "v5p": {"europe-west4-b"}, "v5e": {"europe-west4-b"}}


def zone_warnings(run) -> list[str]:
    return [w for w in run.warnings if "is not listed for" in w]


@pytest.mark.parametrize("generation", sorted(GOOGLE_NORTH_AMERICA_2026_12_03))
def test_the_north_american_zones_are_google_s(generation):
    ours = {z for z in tpu_availability.ZONES[generation] if z.startswith(("us-", "northamerica-"))}
    assert ours == GOOGLE_NORTH_AMERICA_2026_12_03[generation]


@pytest.mark.parametrize(("generation", "zones"), sorted(GOOGLE_EUROPE.items()))
def test_the_european_zones_are_listed(generation, zones):
    assert {z for z in tpu_availability.ZONES[generation] if z.startswith("europe-")} == zones


def test_every_listed_zone_is_a_zone_the_stack_accepts():
    listed = set().union(*tpu_availability.ZONES.values(), *tpu_availability.FLEX_START_ZONES.values())
    assert {zone: zone_problem(zone) for zone in listed if zone_problem(zone)} == {}


def _two_v5e_vms(config, zones):
    config.pop(CLUSTER), config.pop(POOLS), config.pop("tpu-training:jobs")
    (vm,) = config[VMS]
    config[VMS] = [
        dict(
            vm,
            name=f"v5e-{zone[-1]}",
            zone=zone,
            acceleratorType="v5litepod-8",
            runtimeVersion="v2-alpha-tpuv5-lite",
        )
        for zone in zones
    ]
    return config


def test_v5e_in_europe_west4_b_plans_clean_and_west4_a_warns_at_its_key_with_the_way_out(config):
    run = run_stack(_two_v5e_vms(config, ["europe-west4-b", "europe-west4-a"]))
    (warning,) = zone_warnings(run)
    assert warning.startswith(
        "tpu-training:tpuVms[1].zone: zone europe-west4-a is not listed for TPU v5e in our table of "
        "2026-12-03 (europe-west4-b, us-central1-a, us-south1-a, us-west1-c, us-west4-a); check Google's "
        "current list (https://cloud.google.com/tpu/docs/regions-zones) before `pulumi up`"
    )
    assert warning.endswith(
        "where Google offers it, set tpu-training:tpuVms[1].allowUnlistedZone: true to say so and silence "
        "this warning"
    )


def test_a_vm_whose_zone_is_acknowledged_plans_without_the_warning(config):
    config = _two_v5e_vms(config, ["europe-west4-b", "europe-west4-a"])
    config[VMS][1]["allowUnlistedZone"] = True
    run = run_stack(config)
    assert zone_warnings(run) == []
    # Only the warning: the VM is declared where it was asked for.
    (vm,) = [r for r in run.by_type("gcp:tpu/v2Vm:V2Vm") if r.inputs["zone"] == "europe-west4-a"]
    assert vm.inputs["acceleratorType"] == "v5litepod-8"


def test_a_ladder_s_unlisted_zones_are_acknowledged_together(config):
    config = _two_v5e_vms(config, ["europe-west4-b"])
    config[VMS][0].pop("zone")
    config[VMS][0].update(zones=["europe-west4-b", "europe-west4-c"], provisioning=["spot", "on-demand"])
    (warning,) = zone_warnings(run_stack(config))
    assert warning.startswith("tpu-training:tpuVms[0].zones: zone europe-west4-c is not listed")
    config[VMS][0]["allowUnlistedZone"] = True
    assert zone_warnings(run_stack(config)) == []


def test_allow_unlisted_zone_is_a_boolean(config):
    config[VMS][0]["allowUnlistedZone"] = "yes"
    assert "tpu-training:tpuVms[0].allowUnlistedZone" in refused(config)


def test_a_node_pool_s_unlisted_zone_is_acknowledged_by_its_entry(config):
    config[CLUSTER]["location"] = "europe-west4"
    config[POOLS][0]["nodeLocations"] = ["europe-west4-a"]
    (warning,) = zone_warnings(run_stack(config))
    assert warning.startswith(
        "tpu-training:nodePools[0].nodeLocations: zone europe-west4-a is not listed for TPU v6e"
    )
    assert "set tpu-training:nodePools[0].allowUnlistedZone: true" in warning
    config[POOLS][0]["allowUnlistedZone"] = True
    assert zone_warnings(run_stack(config)) == []


def _vm_in(zone, **more):
    def program():
        PreemptibleTpuVm(
            "tpu",
            {
                "zone": zone,
                "accelerator_type": "v5litepod-8",
                "runtime_version": "v2-alpha-tpuv5-lite",
                "checkpoint_dir": "gs://acme-ckpt/tpu",
                "train_command": "python train.py",
                "provisioning": "spot",
                "service_account_email": "trainer@acme.iam.gserviceaccount.com",
                "project": "acme",
                **more,
            },
        )

    return program


def test_a_component_preview_acknowledges_the_zones_it_is_given():
    (warning,) = preview(_vm_in("europe-west4-a")).warnings
    assert "zone europe-west4-a is not listed for TPU v5e" in warning
    assert preview(_vm_in("europe-west4-a"), acknowledged_zones=["europe-west4-a"]).warnings == []
    assert preview(_vm_in("europe-west4-b")).warnings == []


def test_a_component_preview_warns_of_a_queued_vm_s_zone_and_its_flex_start_zone():
    """A queued VM is a dynamic resource, not a V2Vm: its zone is read from its request."""
    (warning,) = preview(_vm_in("europe-west4-a", queued={})).warnings
    assert warning.startswith("tpu-queued: zone europe-west4-a is not listed for TPU v5e in our table")
    # europe-west4-b has v5e, but flex-start TPU VMs only in us-west4-a (Google's flex-start page).
    flex = _vm_in("europe-west4-b", provisioning="flex-start", max_run_duration="72h")
    (warning,) = preview(flex).warnings
    assert warning == (
        "tpu-queued: zone europe-west4-b is not listed for flex-start TPU v5e VMs (us-west4-a); check "
        "Google's current list (https://cloud.google.com/tpu/docs/request-using-flex-start) before "
        "`pulumi up`"
    )
    assert preview(flex, acknowledged_zones=["europe-west4-b"]).warnings == []
    assert preview(_vm_in("us-west4-a", provisioning="flex-start", max_run_duration="72h")).warnings == []
