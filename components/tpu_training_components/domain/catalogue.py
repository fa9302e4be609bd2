"""The Cloud TPU hardware catalogue and its arithmetic.

Pure Python with no Pulumi import, so it can be unit-tested and reused anywhere. The numbers come
from the Cloud TPU and GKE TPU documentation (see ``shared/REFERENCE.md``); where public sources
disagree (the largest slice of a generation) the value is data in one table here, not logic.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Literal, Optional


class CatalogueError(ValueError):
    """A value that the catalogue does not know; the message says what is allowed."""


# --------------------------------------------------------------------------------------------
# TPU VM accelerator types (Cloud TPU API: `v3-8`, `v5litepod-16`, ...)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AcceleratorFamily:
    """One TPU VM accelerator-type prefix and the rules for its size suffix."""

    prefix: str
    generation: str
    suffix_counts: Literal["cores", "chips"]
    cores_per_chip: int
    chips_per_host: int
    """Chips on each host of a multi-host slice."""
    max_single_host_chips: int
    """Slices of at most this many chips run on one host."""
    sizes: tuple[int, ...]
    """Valid suffixes, in the unit given by ``suffix_counts``."""
    shielded_vm: bool = True
    """Whether TPU VMs of this family take Shielded VM secure boot (v4 and later)."""


def _v5p_sizes() -> tuple[int, ...]:
    # The v5p docs list 8, 16, 32, 64 and then every multiple of 128 cores up to the full pod.
    return (8, 16, 32, 64) + tuple(range(128, 12288 + 1, 128))


ACCELERATOR_FAMILIES: dict[str, AcceleratorFamily] = {
    family.prefix: family
    for family in (
        # v2 to v5p: two TensorCores per chip, and the suffix counts cores (v3-8 = 4 chips).
        AcceleratorFamily("v2", "v2", "cores", 2, 4, 4, (8, 32, 128, 256, 512), shielded_vm=False),
        AcceleratorFamily(
            "v3", "v3", "cores", 2, 4, 4, (8, 32, 64, 128, 256, 512, 1024, 2048), shielded_vm=False
        ),
        AcceleratorFamily(
            "v4",
            "v4",
            "cores",
            2,
            4,
            4,
            (8, 16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 4096),
        ),
        AcceleratorFamily("v5p", "v5p", "cores", 2, 4, 4, _v5p_sizes()),
        # v5e and v6e: one TensorCore per chip, and the suffix counts chips; up to 8 chips on one host.
        AcceleratorFamily("v5litepod", "v5e", "chips", 1, 4, 8, (1, 4, 8, 16, 32, 64, 128, 256)),
        AcceleratorFamily("v6e", "v6e", "chips", 1, 4, 8, (1, 4, 8, 16, 32, 64, 128, 256)),
    )
}


@dataclass(frozen=True)
class AcceleratorType:
    """A TPU VM accelerator type resolved against the catalogue."""

    name: str
    family: AcceleratorFamily
    chips: int
    cores: int
    hosts: int
    chips_per_host: int

    @property
    def generation(self) -> str:
        return self.family.generation

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1


def _describe_sizes(sizes: tuple[int, ...]) -> str:
    if len(sizes) > 8:
        return ", ".join(str(s) for s in sizes[:6]) + f", ... {sizes[-1]}"
    return ", ".join(str(s) for s in sizes)


def allowed_accelerator_types() -> str:
    """A one-line description of every accelerator type the catalogue accepts."""
    return "; ".join(
        f"{family.prefix}-N with N (counting {family.suffix_counts}) in {_describe_sizes(family.sizes)}"
        for family in ACCELERATOR_FAMILIES.values()
    )


_ACCELERATOR_PATTERN = re.compile(r"^([a-z0-9]+)-([0-9]+)$")


def _did_you_mean(suggestion: str | None) -> str:
    return f" (did you mean {suggestion!r}?)" if suggestion else ""


def suggest_accelerator_type(name: str) -> str | None:
    """The accelerator type ``name`` most likely meant, or None: a generation's name for its
    prefix (``v5e-8`` -> ``v5litepod-8``: the API names v5e ``v5litepod``), another case or
    separator (``V3_8``), or a close spelling of a valid type."""
    written = re.sub(r"[\s_]+", "-", name.strip().lower())
    match = re.fullmatch(r"([a-z0-9]*?[a-z][a-z0-9]*?)-?([0-9]+)", written)
    if match:
        prefix, size = match.group(1), int(match.group(2))
        for family in ACCELERATOR_FAMILIES.values():
            if prefix in (family.prefix, family.generation) and size in family.sizes:
                candidate = f"{family.prefix}-{size}"
                return candidate if candidate != name else None
    valid = [f"{family.prefix}-{size}" for family in ACCELERATOR_FAMILIES.values() for size in family.sizes]
    close = difflib.get_close_matches(written, valid, n=1, cutoff=0.8)
    return close[0] if close and close[0] != name else None


def accelerator_type(name: str) -> AcceleratorType:
    """Resolve a TPU VM accelerator type such as ``v3-8`` or ``v5litepod-16``."""
    match = _ACCELERATOR_PATTERN.fullmatch(name)
    family = ACCELERATOR_FAMILIES.get(match.group(1)) if match else None
    if match is None or family is None:
        raise CatalogueError(
            f"unknown accelerator type {name!r}{_did_you_mean(suggest_accelerator_type(name))}; "
            f"allowed: {allowed_accelerator_types()}"
        )
    size = int(match.group(2))
    if size not in family.sizes:
        # A chip count where the suffix counts cores (v4-4 for 4 chips) is the common slip.
        cores = size * family.cores_per_chip
        hint = (
            f" (did you mean {f'{family.prefix}-{cores}'!r}, {size} chips?)"
            if family.suffix_counts == "cores" and cores in family.sizes
            else ""
        )
        raise CatalogueError(
            f"accelerator type {name!r} is not a valid {family.prefix} size{hint}; the suffix counts "
            f"{family.suffix_counts} and must be one of {_describe_sizes(family.sizes)}"
        )
    if family.suffix_counts == "cores":
        chips, cores = size // family.cores_per_chip, size
    else:
        chips, cores = size, size * family.cores_per_chip
    if chips <= family.max_single_host_chips:
        hosts, chips_per_host = 1, chips
    else:
        hosts, chips_per_host = chips // family.chips_per_host, family.chips_per_host
    return AcceleratorType(name, family, chips, cores, hosts, chips_per_host)


# --------------------------------------------------------------------------------------------
# GKE TPU machine types and slice topologies
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GkeTpuGeneration:
    """A TPU generation as GKE schedules it: node label, topology shape and size limits."""

    name: str
    accelerator_label: str
    """Value of the node label ``cloud.google.com/gke-tpu-accelerator``."""
    cores_per_chip: int
    topology_dims: Literal[2, 3]
    max_chips: int
    """Largest slice; public sources disagree for some generations, so this is data."""


GKE_GENERATIONS: dict[str, GkeTpuGeneration] = {
    g.name: g
    for g in (
        GkeTpuGeneration("v4", "tpu-v4-podslice", 2, 3, 4096),
        GkeTpuGeneration("v5e", "tpu-v5-lite-podslice", 1, 2, 256),
        # Google's v5p doc says 96 cubes of 64 chips; xpk allows 140 cubes. We take the doc.
        GkeTpuGeneration("v5p", "tpu-v5p-slice", 2, 3, 96 * 64),
        GkeTpuGeneration("v6e", "tpu-v6e-slice", 1, 2, 256),
        GkeTpuGeneration("tpu7x", "tpu7x", 2, 3, 9216),
    )
}


@dataclass(frozen=True)
class MachineType:
    """A GKE TPU machine type: one VM (node) with a fixed number of chips."""

    name: str
    generation: GkeTpuGeneration
    chips_per_vm: int


MACHINE_TYPES: dict[str, MachineType] = {
    m.name: m
    for m in (
        MachineType("ct4p-hightpu-4t", GKE_GENERATIONS["v4"], 4),
        MachineType("ct5lp-hightpu-1t", GKE_GENERATIONS["v5e"], 1),
        MachineType("ct5lp-hightpu-4t", GKE_GENERATIONS["v5e"], 4),
        MachineType("ct5lp-hightpu-8t", GKE_GENERATIONS["v5e"], 8),
        MachineType("ct5p-hightpu-4t", GKE_GENERATIONS["v5p"], 4),
        MachineType("ct6e-standard-1t", GKE_GENERATIONS["v6e"], 1),
        MachineType("ct6e-standard-4t", GKE_GENERATIONS["v6e"], 4),
        MachineType("ct6e-standard-8t", GKE_GENERATIONS["v6e"], 8),
        MachineType("tpu7x-standard-1t", GKE_GENERATIONS["tpu7x"], 1),
        MachineType("tpu7x-standard-4t", GKE_GENERATIONS["tpu7x"], 4),
    )
}

# v5e and v6e slices are 2D and come in exactly these shapes.
_TOPOLOGIES_2D = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
# v4, v5p and tpu7x are 3D: these small shapes, then every dimension a multiple of 4.
_SMALL_TOPOLOGIES_3D = ("1x1x1", "2x2x1", "2x2x2", "2x2x4", "2x4x4")

_TOPOLOGY_PATTERN = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*)+$")


def suggest_machine_type(name: str) -> str | None:
    """The machine type ``name`` most likely meant, or None: the closest spelling, among those of
    its generation's prefix when it has a known one (``ct6e-hightpu-4t`` -> ``ct6e-standard-4t``)."""
    written = name.strip().lower()
    same_prefix = [known for known in MACHINE_TYPES if known.split("-")[0] == written.split("-")[0]]
    close = difflib.get_close_matches(
        written, same_prefix or list(MACHINE_TYPES), n=1, cutoff=0.5 if same_prefix else 0.9
    )
    return close[0] if close and close[0] != name else None


def machine_type(name: str) -> MachineType:
    """Resolve a GKE TPU machine type such as ``ct6e-standard-4t``."""
    try:
        return MACHINE_TYPES[name]
    except KeyError:
        suggestion = suggest_machine_type(name)
        raise CatalogueError(
            f"unknown TPU machine type {name!r}{_did_you_mean(suggestion)}; "
            f"allowed: {', '.join(MACHINE_TYPES)}"
        ) from None


def topology_dimensions(topology: str) -> tuple[int, ...]:
    """``"4x4"`` -> ``(4, 4)``; raises for anything that is not ``AxB`` or ``AxBxC``."""
    if not _TOPOLOGY_PATTERN.fullmatch(topology) or topology.count("x") > 2:
        raise CatalogueError(
            f"topology {topology!r} is not of the form AxB or AxBxC (for example 2x2, 4x4, 2x2x4)"
        )
    return tuple(int(d) for d in topology.split("x"))


def topology_chips(topology: str) -> int:
    """Chips in a slice of this topology: the product of its dimensions."""
    return math.prod(topology_dimensions(topology))


def is_valid_topology(generation: GkeTpuGeneration, topology: str) -> bool:
    """Whether GKE offers this slice shape for the generation."""
    dims = topology_dimensions(topology)
    if len(dims) != generation.topology_dims or math.prod(dims) > generation.max_chips:
        return False
    if generation.topology_dims == 2:
        return topology in _TOPOLOGIES_2D
    if topology in _SMALL_TOPOLOGIES_3D:
        return True
    return all(d % 4 == 0 for d in dims) and list(dims) == sorted(dims)


def describe_valid_topologies(generation: GkeTpuGeneration) -> str:
    if generation.topology_dims == 2:
        return ", ".join(_TOPOLOGIES_2D)
    return (
        ", ".join(_SMALL_TOPOLOGIES_3D) + f", then AxBxC with every dimension a multiple of 4, A <= B <= C, "
        f"at most {generation.max_chips} chips"
    )


@dataclass(frozen=True)
class SliceShape:
    """A TPU slice on GKE: machine type and topology, with the VM count they imply."""

    machine_type: MachineType
    topology: str
    chips: int
    vms: int

    @property
    def multi_host(self) -> bool:
        return self.vms > 1

    @property
    def cores(self) -> int:
        return self.chips * self.machine_type.generation.cores_per_chip

    @property
    def accelerator_label(self) -> str:
        return self.machine_type.generation.accelerator_label


def slice_shape(machine_type_name: str, topology: str) -> SliceShape:
    """Resolve a machine type and topology into a slice: VMs = chips in topology / chips per VM."""
    machine = machine_type(machine_type_name)
    generation = machine.generation
    dims = topology_dimensions(topology)
    chips = math.prod(dims)
    if len(dims) != generation.topology_dims:
        raise CatalogueError(
            f"topology {topology!r} has {len(dims)} dimensions but {generation.name} "
            f"({machine.name}) slices have {generation.topology_dims}; "
            f"valid: {describe_valid_topologies(generation)}"
        )
    if machine.chips_per_vm == 1 and chips != 1:
        raise CatalogueError(
            f"{machine.name} has 1 chip per VM and takes only a single-chip topology "
            f"({'x'.join(['1'] * generation.topology_dims)}), not {topology!r}"
        )
    if machine.chips_per_vm == 8 and topology != "2x4":
        raise CatalogueError(
            f"{machine.name} has 8 chips per VM and is single-host only: topology must be 2x4, "
            f"not {topology!r}"
        )
    if not is_valid_topology(generation, topology):
        raise CatalogueError(
            f"topology {topology!r} is not offered for {generation.name} ({machine.name}); "
            f"valid: {describe_valid_topologies(generation)}"
        )
    if chips % machine.chips_per_vm:
        raise CatalogueError(
            f"topology {topology!r} has {chips} chips, which {machine.name} "
            f"({machine.chips_per_vm} chips per VM) cannot divide into whole VMs"
        )
    return SliceShape(machine, topology, chips, chips // machine.chips_per_vm)


def multi_host_shape(shape: SliceShape) -> Optional[SliceShape]:
    """The smallest multi-host slice of ``shape``'s generation with at least its chips (what a
    JobSet across slices needs, GKE's Multislice taking only multi-host pools); None when the
    generation has none."""
    generation = shape.machine_type.generation
    topologies = _TOPOLOGIES_2D if generation.topology_dims == 2 else _SMALL_TOPOLOGIES_3D
    candidates = []
    for machine in MACHINE_TYPES.values():
        if machine.generation != generation or machine.chips_per_vm in (1, 8):
            continue
        for topology in topologies:
            try:
                candidate = slice_shape(machine.name, topology)
            except CatalogueError:
                continue
            if candidate.multi_host and candidate.chips >= shape.chips:
                candidates.append(candidate)
    return min(candidates, key=lambda c: (c.chips, c.machine_type.name), default=None)


# --------------------------------------------------------------------------------------------
# Locations
# --------------------------------------------------------------------------------------------

_ZONE_PATTERN = re.compile(r"^([a-z]+-[a-z]+[0-9]+)-([a-z])$")
_REGION_PATTERN = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")


def region_of_zone(zone: str) -> str:
    """``europe-west4-a`` -> ``europe-west4``."""
    match = _ZONE_PATTERN.fullmatch(zone)
    if match is None:
        raise CatalogueError(
            f"{zone!r} is not a Compute Engine zone; expected REGION-LETTER such as "
            f"'europe-west4-a' or 'us-central2-b'"
        )
    return match.group(1)


def is_region(value: str) -> bool:
    """Whether the value has the shape of a region such as ``europe-west4``."""
    return _REGION_PATTERN.fullmatch(value) is not None
