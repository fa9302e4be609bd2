"""What declared resources cost per hour, from the pinned price table (``prices``): per resource
and kind, split into what bills only while training runs (TPU VMs, TPU node pools at full size)
and what bills always (the cluster's fee, its system nodes, the NAT addresses). A price the table
lacks is unknown, and a total with an unknown part says so: never a 0 in its place. Pure: it reads
the resources' inputs as the engine receives them (``tpu-training plan`` and ``preview`` both
record them so)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping, Optional, Protocol

from . import catalogue, prices
from .node_pool_plan import COMPUTE_CLASS_LABEL
from .prices import Model, Price
from .queued_resources import is_queued_tpu_vm, queued_as_vm

When = Literal["training", "always"]

# Kinds Google does not bill by the hour (networks, subnets, routers, firewall rules without
# logging, service accounts, IAM bindings, enabled APIs, Kubernetes objects on the nodes).
NO_HOURLY_CHARGE_PREFIXES = (
    "gcp:compute/network:",
    "gcp:compute/subnetwork:",
    "gcp:compute/router:",
    "gcp:compute/firewall:",
    "gcp:serviceaccount/",
    "gcp:projects/",
    "gcp:storage/bucketIAMMember:",
    "kubernetes:",
    "pulumi:providers:",
    # Dashboards and notification channels are configuration, with no charge of their own.
    "gcp:monitoring/dashboard:",
    "gcp:monitoring/notificationChannel:",
)
NOT_HOURLY = {
    "gcp:storage/bucket:Bucket": "per GiB stored and per operation",
    "gcp:storage/bucketObject:BucketObject": "per GiB stored",
    "gcp:logging/metric:Metric": "per MiB of metric samples ingested, beyond the free allotment",
    "gcp:monitoring/alertPolicy:AlertPolicy": "per condition per month and per time series it reads",
}


@dataclass(frozen=True)
class CostLine:
    type: str
    name: str
    what: str
    when: When
    price: Price
    ladder: str = ""
    """The capacity ladder (its ComputeClass) the line is one rung of: the rungs are alternatives,
    so a total counts only the dearest of them (the worst case)."""
    rung: str = ""
    """Which rung of ``ladder`` the line is: a rung of a ladder of several slices is one pool per
    slice, and its full cost is theirs together (every slice can land on the dearest rung)."""

    def to_json(self) -> dict[str, Any]:
        line = {
            "type": self.type,
            "name": self.name,
            "what": self.what,
            "when": self.when,
            "usdPerHour": None if self.price.usd_per_hour is None else round(self.price.usd_per_hour, 5),
            "source": self.price.source,
        }
        if self.price.upper_bound:
            line["upperBound"] = True
        if self.ladder:
            line["ladder"] = self.ladder
            line["rung"] = self.rung
        return line


@dataclass
class Estimate:
    lines: list[CostLine] = field(default_factory=list)
    not_hourly: dict[str, int] = field(default_factory=dict)
    """kind -> how many, for what is billed otherwise (storage)."""
    unpriced: list[str] = field(default_factory=list)
    """Kinds this estimate does not know at all."""

    def counted(self, when: When) -> list[CostLine]:
        """The lines a total adds up: every line, but of each ladder only its dearest rung, all of
        that rung's pools (one per slice). An unknown price on a ladder counts, as unknown: the
        worst case is then not known."""
        lines = [line for line in self.lines if line.when == when]
        ladders: dict[str, dict[str, list[CostLine]]] = {}
        for line in lines:
            if line.ladder:
                ladders.setdefault(line.ladder, {}).setdefault(line.rung, []).append(line)
        counted = [line for line in lines if not line.ladder]
        for rungs in ladders.values():
            unknown = [line for pools in rungs.values() for line in pools if not line.price.known]
            dearest = max(rungs.values(), key=lambda pools: sum(p.price.usd_per_hour or 0.0 for p in pools))
            counted.extend(unknown or dearest)
        return counted

    def total(self, when: When) -> tuple[float, list[str]]:
        """The known part of the hourly total, and the names of the lines whose price is unknown."""
        lines = self.counted(when)
        known = sum(line.price.usd_per_hour or 0.0 for line in lines if line.price.known)
        return known, [line.name for line in lines if not line.price.known]

    def bounded(self, when: When) -> bool:
        """Whether the total holds a price that is only an upper bound (flex-start)."""
        return any(line.price.upper_bound and line.price.known for line in self.counted(when))

    def to_json(self) -> dict[str, Any]:
        def part(when: When) -> dict[str, Any]:
            known, unknown = self.total(when)
            total = {
                "usdPerHour": None if unknown else round(known, 4),
                "knownUsdPerHour": round(known, 4),
                "unknown": unknown,
            }
            if self.bounded(when):
                total["upperBound"] = True
            return total

        by_kind: dict[str, dict[str, Any]] = {}
        counted = {id(line) for when in ("training", "always") for line in self.counted(when)}
        for line in self.lines:
            if id(line) not in counted:
                continue  # a cheaper rung of a ladder
            kind = by_kind.setdefault(line.type, {"knownUsdPerHour": 0.0, "unknown": []})
            if line.price.usd_per_hour is None:
                kind["unknown"].append(line.name)
            else:
                kind["knownUsdPerHour"] = round(kind["knownUsdPerHour"] + line.price.usd_per_hour, 5)
        return {
            "currency": "USD",
            "pricesAsOf": prices.AS_OF,
            "whileTraining": part("training"),
            "alwaysOn": part("always"),
            "byKind": dict(sorted(by_kind.items())),
            "lines": [line.to_json() for line in self.lines],
            "notHourly": dict(sorted(self.not_hourly.items())),
            "unpriced": sorted(self.unpriced),
        }


def _region(location: str) -> str:
    return catalogue.region_of_zone(location) if not catalogue.is_region(location) else location


def _vm_model(scheduling: dict[str, Any]) -> Model:
    if scheduling.get("preemptible") or scheduling.get("spot"):
        return "spot"
    return "reserved" if scheduling.get("reserved") else "on-demand"


def _pool_model(node_config: dict[str, Any]) -> Model:
    if node_config.get("flexStart"):
        return "flex-start"
    if node_config.get("spot"):
        return "spot"
    affinity = (node_config.get("reservationAffinity") or {}).get("consumeReservationType")
    return "reserved" if affinity == "SPECIFIC_RESERVATION" else "on-demand"


def _rung(node_config: dict[str, Any], inputs: Mapping[str, Any]) -> str:
    """What tells one rung of a pool ladder from another: how its capacity is bought (and from
    which reservations) and where. The pools of one rung differ only in their slice."""
    reservations = (node_config.get("reservationAffinity") or {}).get("values") or []
    zones = inputs.get("nodeLocations") or []
    return " ".join([_pool_model(node_config), *map(str, reservations), *sorted(map(str, zones))])


def _pool_nodes(inputs: Mapping[str, Any], *, most: bool) -> int:
    """The pool's largest (or smallest) node count: autoscaling's limits per zone times its zones,
    or its whole-pool limits."""
    scaling = inputs.get("autoscaling") or {}
    total = scaling.get("totalMaxNodeCount" if most else "totalMinNodeCount")
    if total is not None:
        return int(total)
    per_zone = scaling.get("maxNodeCount" if most else "minNodeCount")
    if per_zone is None:
        per_zone = inputs.get("nodeCount", inputs.get("initialNodeCount", 0))
    return int(per_zone) * max(1, len(inputs.get("nodeLocations") or []))


class Declared(Protocol):
    """One declared resource as a plan or a preview records it."""

    @property
    def type(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def custom(self) -> bool: ...
    @property
    def inputs(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class Priced:
    """A billable resource as a component declares it: its type, its resource name and the inputs
    this estimate reads, in the engine's shape (camelCase), so the stack program can price what it
    declares while it declares it (the dashboard's "Hourly cost" tile) with the same ``estimate``
    that prices a plan's registrations."""

    type: str
    name: str
    inputs: Mapping[str, Any]
    custom: bool = True


def estimate(declared: Iterable[Declared]) -> Estimate:
    """The hourly cost of every resource declared (components are skipped: they bill nothing)."""
    resources = list(declared)
    found = Estimate()
    nat_regions = {
        str(r.inputs.get("region")): r for r in resources if r.type == "gcp:compute/routerNat:RouterNat"
    }
    nat_vms: dict[tuple[str, When], int] = {}
    ladder_nodes: dict[tuple[str, str], dict[str, int]] = {}
    """(region, ladder) -> rung -> the nodes of its pools together."""

    for r in resources:
        if not r.custom:
            continue
        inputs = r.inputs
        queued = is_queued_tpu_vm(r.type, inputs)
        if queued:
            inputs = queued_as_vm(inputs)
        if r.type == "gcp:tpu/v2Vm:V2Vm" or (queued and inputs):
            # A queued TPU VM is priced as the VM it becomes (``flexStart``, ``slices``): waiting
            # in the queue bills nothing (an earlier Cloud TPU pricing page: "Charges for Cloud
            # TPU accrue while your TPU node is in a READY state").
            accelerator = catalogue.accelerator_type(str(inputs["acceleratorType"]))
            region = _region(str(inputs["zone"]))
            model = (
                "flex-start" if inputs.get("flexStart") else _vm_model(inputs.get("schedulingConfig") or {})
            )
            shown = "preemptible" if (inputs.get("schedulingConfig") or {}).get("preemptible") else model
            slices = int(inputs.get("slices") or 1)
            price = prices.tpu_vm_hour(
                accelerator.generation, region, accelerator.chips, accelerator.cores, model
            ).times(slices)
            what = f"{slices} x TPU {accelerator.name}" if slices > 1 else f"TPU {accelerator.name}"
            found.lines.append(CostLine(r.type, r.name, f"{what}, {shown}, {region}", "training", price))
            nat_vms[(region, "training")] = nat_vms.get((region, "training"), 0) + accelerator.hosts * slices
        elif r.type == "gcp:container/nodePool:NodePool":
            node_config = inputs.get("nodeConfig") or {}
            machine = str(node_config.get("machineType"))
            region = _region(str(inputs.get("location")))
            if machine in catalogue.MACHINE_TYPES:
                tpu = catalogue.MACHINE_TYPES[machine]
                nodes = _pool_nodes(inputs, most=True)
                model = _pool_model(node_config)
                ladder = str((node_config.get("labels") or {}).get(COMPUTE_CLASS_LABEL, ""))
                chips = tpu.chips_per_vm
                node = prices.tpu_vm_hour(
                    tpu.generation.name, region, chips, chips * tpu.generation.cores_per_chip, model
                )
                found.lines.append(
                    CostLine(
                        r.type,
                        r.name,
                        f"{nodes} x {machine}, {model}, {region}"
                        + (f", a rung of ladder {ladder}" if ladder else ""),
                        "training",
                        node.times(nodes),
                        ladder,
                        _rung(node_config, inputs) if ladder else "",
                    )
                )
                if ladder:
                    # The rungs are alternatives: the ladder's NAT use is that of its largest rung,
                    # all of its slices' pools.
                    rungs = ladder_nodes.setdefault((region, ladder), {})
                    rung = _rung(node_config, inputs)
                    rungs[rung] = rungs.get(rung, 0) + nodes
                else:
                    nat_vms[(region, "training")] = nat_vms.get((region, "training"), 0) + nodes
            else:
                nodes = _pool_nodes(inputs, most=False)
                found.lines.append(
                    CostLine(
                        r.type,
                        r.name,
                        f"{nodes} x {machine} (its least), {region}",
                        "always",
                        prices.machine_hour(machine, region).times(nodes),
                    )
                )
                nat_vms[(region, "always")] = nat_vms.get((region, "always"), 0) + nodes
        elif r.type == "gcp:container/cluster:Cluster":
            found.lines.append(
                CostLine(r.type, r.name, "cluster management fee", "always", prices.GKE_CLUSTER_HOUR)
            )
        elif r.type in NOT_HOURLY:
            found.not_hourly[r.type] = found.not_hourly.get(r.type, 0) + 1
        elif not r.type.startswith(NO_HOURLY_CHARGE_PREFIXES) and r.type != "gcp:compute/routerNat:RouterNat":
            found.unpriced.append(r.type)

    for (region, _), rung_nodes in ladder_nodes.items():
        nat_vms[(region, "training")] = nat_vms.get((region, "training"), 0) + max(rung_nodes.values())
    for region, nat in sorted(nat_regions.items()):
        whens: tuple[When, ...] = ("always", "training")
        for when in whens:
            vms = nat_vms.get((region, when), 0)
            if vms:
                found.lines.append(
                    CostLine(
                        nat.type,
                        nat.name,
                        f"{vms} VM(s) through Cloud NAT, {region}",
                        when,
                        prices.NAT_VM_HOUR.times(vms),
                    )
                )
        # A gateway in use holds at least one external address (AUTO_ONLY allocates them).
        when_used: Optional[When] = (
            "always"
            if nat_vms.get((region, "always"))
            else ("training" if nat_vms.get((region, "training")) else None)
        )
        if when_used:
            found.lines.append(
                CostLine(nat.type, nat.name, f"1 NAT address, {region}", when_used, prices.NAT_ADDRESS_HOUR)
            )
    return found


def _usd(value: Optional[float]) -> str:
    if value is None:
        return "unknown"
    return f"${value:.2f}" if value >= 0.1 else f"${value:.4f}"


PARTS: tuple[tuple[When, str], ...] = (("always", "always on"), ("training", "while training, on top"))


def total_text(found: Estimate, when: When, unit: str = "") -> str:
    """One part's total as the plan words it: a known figure, or "at least" the known part and the
    names of the lines whose price is unknown (never a 0 in their place); ``unit`` follows the
    figure."""
    known, unknown = found.total(when)
    figure = _usd(known) + unit
    total = figure if not unknown else f"at least {figure} ({len(unknown)} unknown: {', '.join(unknown)})"
    if found.bounded(when):
        total += ", or less: flex-start is counted at its on-demand price, its upper bound"
    if any(line.ladder for line in found.lines if line.when == when):
        total += "; of each ladder only its dearest rung"
    return total


def summary(found: Estimate) -> str:
    """Both totals in one line (the dashboard's "Hourly cost" tile), worded as ``render`` words
    them."""
    return "; ".join(f"{title}: {total_text(found, when, ' per hour')}" for when, title in PARTS)


def render(found: Estimate) -> str:
    """The cost section of the plan's text."""
    lines = [f"Cost per hour (list prices in USD read {prices.AS_OF}; docs/cost.md):"]
    for when, title in PARTS:
        lines.append(f"  {title}: {total_text(found, when)}")
        for line in found.lines:
            if line.when == when:
                reason = "" if line.price.known and not line.price.upper_bound else f" ({line.price.source})"
                shown = ("<=" if line.price.upper_bound and line.price.known else "") + _usd(
                    line.price.usd_per_hour
                )
                lines.append(f"    {shown:>9}  {line.type}  {line.name}: {line.what}{reason}")
    if found.not_hourly:
        counted = ", ".join(
            f"{count} {kind} ({NOT_HOURLY[kind]})" for kind, count in sorted(found.not_hourly.items())
        )
        lines.append(f"  not by the hour: {counted}; and network traffic (NAT $0.045/GiB, egress)")
    if found.unpriced:
        lines.append(f"  no price known for: {', '.join(sorted(set(found.unpriced)))}")
    return "\n".join(lines)
