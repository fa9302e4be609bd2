"""The TPU catalogue: table tests against the documented hardware, properties for the math."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tpu_training_components.domain import catalogue
from tpu_training_components.domain.catalogue import CatalogueError


@pytest.mark.parametrize(
    ("name", "generation", "chips", "cores", "hosts", "chips_per_host"),
    [
        ("v2-8", "v2", 4, 8, 1, 4),
        ("v2-32", "v2", 16, 32, 4, 4),
        ("v3-8", "v3", 4, 8, 1, 4),
        ("v3-32", "v3", 16, 32, 4, 4),
        ("v4-8", "v4", 4, 8, 1, 4),
        ("v4-16", "v4", 8, 16, 2, 4),
        ("v5p-8", "v5p", 4, 8, 1, 4),
        ("v5litepod-1", "v5e", 1, 1, 1, 1),
        ("v5litepod-8", "v5e", 8, 8, 1, 8),
        ("v5litepod-16", "v5e", 16, 16, 4, 4),
        ("v6e-8", "v6e", 8, 8, 1, 8),
        ("v6e-256", "v6e", 256, 256, 64, 4),
    ],
)
def test_accelerator_types(name, generation, chips, cores, hosts, chips_per_host):
    acc = catalogue.accelerator_type(name)
    assert (acc.generation, acc.chips, acc.cores, acc.hosts, acc.chips_per_host) == (
        generation,
        chips,
        cores,
        hosts,
        chips_per_host,
    )
    assert acc.multi_host == (hosts > 1)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("v3-9", "not a valid v3 size"),
        ("v3-16", "not a valid v3 size"),
        ("v9-8", "unknown accelerator type"),
        ("v38", "unknown accelerator type"),
        ("V3-8", "unknown accelerator type"),
        ("v5litepod-2", "counts chips"),
    ],
)
def test_unknown_accelerator_types_say_what_is_allowed(name, fragment):
    with pytest.raises(CatalogueError) as err:
        catalogue.accelerator_type(name)
    assert fragment in str(err.value)
    assert repr(name) in str(err.value)


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("v5e-8", "v5litepod-8"),  # the generation's name, where the API says v5litepod
        ("v5lite-8", "v5litepod-8"),
        ("V3-8", "v3-8"),
        ("v3_8", "v3-8"),
        ("v38", "v3-8"),
        ("v6e8", "v6e-8"),
        ("v4-4", "v4-8"),  # chips where the suffix counts cores
    ],
)
def test_near_misses_of_accelerator_types_get_a_suggestion(name, meant):
    with pytest.raises(CatalogueError) as err:
        catalogue.accelerator_type(name)
    assert f"(did you mean {meant!r}" in str(err.value)
    catalogue.accelerator_type(meant)  # and the suggestion is valid


@pytest.mark.parametrize("name", ["v9-8", "v5e-3", "v5litepod-3", "tpu"])
def test_no_suggestion_for_what_is_nothing_like_a_valid_type(name):
    with pytest.raises(CatalogueError) as err:
        catalogue.accelerator_type(name)
    assert "did you mean" not in str(err.value)


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("ct6e-standard-4", "ct6e-standard-4t"),
        ("CT6E-STANDARD-4T", "ct6e-standard-4t"),
        ("ct6e-hightpu-4t", "ct6e-standard-4t"),  # v5e's naming on v6e
        ("ct5lp-hightpu-4", "ct5lp-hightpu-4t"),
    ],
)
def test_near_misses_of_machine_types_get_a_suggestion(name, meant):
    with pytest.raises(CatalogueError) as err:
        catalogue.machine_type(name)
    assert f"(did you mean {meant!r}?)" in str(err.value)
    assert "allowed: ct4p-hightpu-4t" in str(err.value)


def test_no_machine_type_suggestion_for_another_generation():
    with pytest.raises(CatalogueError) as err:
        catalogue.machine_type("ct9-hightpu-4t")
    assert "did you mean" not in str(err.value)


@pytest.mark.parametrize(
    ("machine", "chips_per_vm", "label"),
    [
        ("ct4p-hightpu-4t", 4, "tpu-v4-podslice"),
        ("ct5lp-hightpu-1t", 1, "tpu-v5-lite-podslice"),
        ("ct5lp-hightpu-4t", 4, "tpu-v5-lite-podslice"),
        ("ct5lp-hightpu-8t", 8, "tpu-v5-lite-podslice"),
        ("ct5p-hightpu-4t", 4, "tpu-v5p-slice"),
        ("ct6e-standard-1t", 1, "tpu-v6e-slice"),
        ("ct6e-standard-4t", 4, "tpu-v6e-slice"),
        ("ct6e-standard-8t", 8, "tpu-v6e-slice"),
        ("tpu7x-standard-1t", 1, "tpu7x"),
        ("tpu7x-standard-4t", 4, "tpu7x"),
    ],
)
def test_machine_types(machine, chips_per_vm, label):
    m = catalogue.machine_type(machine)
    assert (m.chips_per_vm, m.generation.accelerator_label) == (chips_per_vm, label)


@pytest.mark.parametrize(
    ("machine", "topology", "vms"),
    [
        # Seed 002 and the provisioner's public table for ct6e.
        ("ct6e-standard-4t", "2x2", 1),
        ("ct6e-standard-4t", "2x4", 2),
        ("ct6e-standard-4t", "4x4", 4),
        ("ct6e-standard-4t", "4x8", 8),
        ("ct6e-standard-4t", "8x8", 16),
        ("ct6e-standard-4t", "8x16", 32),
        ("ct6e-standard-4t", "16x16", 64),
        ("ct6e-standard-8t", "2x4", 1),
        ("ct6e-standard-1t", "1x1", 1),
        ("ct5lp-hightpu-8t", "2x4", 1),
        ("ct4p-hightpu-4t", "2x2x1", 1),
        ("ct4p-hightpu-4t", "2x2x4", 4),
        ("ct4p-hightpu-4t", "4x4x4", 16),
        ("tpu7x-standard-4t", "2x2x1", 1),
        ("tpu7x-standard-4t", "8x16x16", 512),
    ],
)
def test_slice_shapes(machine, topology, vms):
    shape = catalogue.slice_shape(machine, topology)
    assert shape.vms == vms
    assert shape.multi_host == (vms > 1)


@pytest.mark.parametrize(
    ("machine", "topology", "fragment"),
    [
        ("ct6e-standard-8t", "4x4", "single-host only"),  # xpk's 4-chips-per-VM mistake
        ("ct6e-standard-1t", "2x2", "single-chip topology"),
        ("ct6e-standard-4t", "3x3", "not offered"),
        ("ct6e-standard-4t", "2x2x2", "dimensions"),
        ("ct4p-hightpu-4t", "4x4", "dimensions"),
        ("ct4p-hightpu-4t", "4x4x6", "not offered"),
        ("ct4p-hightpu-4t", "8x4x4", "not offered"),
        ("ct4p-hightpu-4t", "16x16x32", "not offered"),  # 8192 chips: larger than a v4 pod
        ("ct6e-standard-4t", "4by4", "form AxB"),
        ("ct9-hightpu-4t", "2x2", "unknown TPU machine type"),
    ],
)
def test_invalid_slices_are_explained(machine, topology, fragment):
    with pytest.raises(CatalogueError) as err:
        catalogue.slice_shape(machine, topology)
    assert fragment in str(err.value)


dims = st.integers(min_value=1, max_value=64)


@given(st.lists(dims, min_size=2, max_size=3))
def test_topology_chips_is_the_product_of_its_dimensions(dimensions):
    topology = "x".join(str(d) for d in dimensions)
    assert catalogue.topology_chips(topology) == math.prod(dimensions)


@given(st.sampled_from(sorted(catalogue.MACHINE_TYPES)), st.lists(dims, min_size=2, max_size=3))
def test_every_accepted_slice_divides_into_whole_vms(machine, dimensions):
    topology = "x".join(str(d) for d in dimensions)
    try:
        shape = catalogue.slice_shape(machine, topology)
    except CatalogueError:
        return
    m = catalogue.machine_type(machine)
    assert shape.vms * m.chips_per_vm == shape.chips == math.prod(dimensions)
    assert shape.vms >= 1
    assert catalogue.is_valid_topology(m.generation, topology)
    assert shape.chips <= m.generation.max_chips


@given(st.sampled_from(list(catalogue.ACCELERATOR_FAMILIES.values())), st.data())
def test_accelerator_types_split_evenly_into_hosts(family, data):
    size = data.draw(st.sampled_from(family.sizes))
    acc = catalogue.accelerator_type(f"{family.prefix}-{size}")
    assert acc.hosts * acc.chips_per_host == acc.chips
    assert acc.cores == acc.chips * family.cores_per_chip
    assert (acc.cores if family.suffix_counts == "cores" else acc.chips) == size


@given(
    st.from_regex(r"[a-z]{2,12}-[a-z]{4,10}[0-9]{1,2}", fullmatch=True),
    st.sampled_from("abcdef"),
)
def test_region_of_zone_strips_the_zone_letter(region, letter):
    assert catalogue.region_of_zone(f"{region}-{letter}") == region
    assert catalogue.is_region(region)


@pytest.mark.parametrize("zone", ["europe-west4", "europe-west4-", "europe-west4-ab", "EU-WEST4-A", ""])
def test_a_zone_that_is_not_a_zone(zone):
    with pytest.raises(CatalogueError, match="not a Compute Engine zone"):
        catalogue.region_of_zone(zone)
