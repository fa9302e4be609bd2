"""The capacity ladder of a TPU VM: the (zone, capacity type) pairs it may run on, in order of
preference, and how recovery moves down it when the Cloud TPU API has no capacity. Pure Python.

A VM is declared on one rung at a time. Recovery re-creates a lost VM on the preferred rung (the
first); when the create is refused for want of capacity (a *stockout*) ``attempts`` times in a row
on one rung, the next re-creation is declared on the next rung, at a new generation. A VM that
runs is never moved: it climbs back to the preferred rung only when it is next lost. Quota,
permission and invalid-request errors never move it: another rung would not fix them, and moving
would hide what a person must fix.

Order: capacity outer, zones inner. ``zones: [a, b]`` with ``provisioning: [spot, on-demand]``
gives (a, spot), (b, spot), (a, on-demand), (b, on-demand): the capacity types are listed by the
user in order of price (Spot costs a fraction of on-demand), while the zones of one region are
equal for training (one regional checkpoint bucket serves them all, so every rung resumes from the
same checkpoint). Spot in another zone is tried before paying on-demand prices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence, cast

from . import catalogue, prices
from .recovery import StrEnum

LADDERS_OUTPUT = "capacityLadders"
"""Stack output: for each TPU VM with more than one rung, its rungs' prices and the worst's."""

DEFAULT_ATTEMPTS = 2
"""Stockouts in a row on one rung before the next rung is declared (``recovery.ladder.attempts``)."""


@dataclass(frozen=True)
class Rung:
    """One (zone, capacity type) pair a TPU VM may be declared on."""

    zone: str
    provisioning: str

    def __str__(self) -> str:
        return f"{self.zone} {self.provisioning}"

    def to_json(self) -> dict[str, str]:
        return {"zone": self.zone, "provisioning": self.provisioning}

    @staticmethod
    def from_json(value: Any) -> Optional[Rung]:
        """A rung as ``to_json`` wrote it; None for anything else (nothing is guessed)."""
        if not isinstance(value, dict):
            return None
        zone, provisioning = value.get("zone"), value.get("provisioning")
        if isinstance(zone, str) and isinstance(provisioning, str) and zone and provisioning:
            return Rung(zone, provisioning)
        return None


def build_ladder(zones: Sequence[str], provisioning: Sequence[str]) -> tuple[Rung, ...]:
    """The rungs in order: every zone with the first capacity type, then every zone with the
    second, and so on (see the module's docstring for why capacity is the outer loop)."""
    return tuple(Rung(zone, capacity) for capacity in provisioning for zone in zones)


def index_of(ladder: Sequence[Rung], rung: Optional[Rung]) -> Optional[int]:
    """Where ``rung`` stands on ``ladder``; None when it is not on it (or unknown)."""
    if rung is None:
        return None
    try:
        return list(ladder).index(rung)
    except ValueError:
        return None


def current_rung(ladder: Sequence[Rung], last_deployed: Optional[Rung]) -> Rung:
    """The rung a VM stands on: the one last deployed when it is still on the ladder (a rung is
    known by its zone and capacity type, not its place, so reordering the ladder moves nothing);
    the preferred one when nothing was deployed or the ladder no longer holds it (an edit that
    re-creates the VM, as editing ``zone`` always did)."""
    if last_deployed is not None and index_of(ladder, last_deployed) is not None:
        return last_deployed
    return ladder[0]


def last_deployed_rung(outputs: Optional[Mapping[str, Any]], name: str) -> Optional[Rung]:
    """The rung the stack output ``tpuVms`` says VM ``name`` was last deployed on (its ``zone``
    and ``provisioning``); None when it says nothing readable."""
    vms = (outputs or {}).get("tpuVms")
    entry = vms.get(name) if isinstance(vms, dict) else None
    return Rung.from_json(entry)


class RungNotOnLadder(ValueError):
    """A recovery round declares a VM on a rung its ladder does not hold."""


def standing_rung(
    ladder: Sequence[Rung],
    name: str,
    last_outputs: Optional[Mapping[str, Any]],
    round_rungs: Optional[Mapping[str, Rung]],
) -> Rung:
    """The rung of its capacity ladder VM ``name`` stands on before an update decides: the one a
    recovery round declares it on (``round_rungs``, None for every other update), or else the one
    last deployed (still on the ladder), or else the preferred one."""
    if round_rungs is not None and name in round_rungs:
        rung = round_rungs[name]
        if index_of(ladder, rung) is None:
            raise RungNotOnLadder(
                f"TPU VM {name}: rung {rung} is not on its ladder ({', '.join(str(r) for r in ladder)})"
            )
        return rung
    return current_rung(ladder, last_deployed_rung(last_outputs, name))


def declared_rung(ladder: Sequence[Rung], standing: Rung, *, kept: bool, round_declares: bool) -> Rung:
    """The rung a VM is declared on: where it stands while it is ``kept`` (a running VM never
    moves, whatever the ladder's order says) or when a recovery round declares its rung; the
    preferred rung when any other update creates or replaces it (climbing back up at its next
    recovery)."""
    if kept or round_declares:
        return standing
    return ladder[0]


# --- What a failed create says -------------------------------------------------------------------


class CreateFailure(StrEnum):
    """Why the Cloud TPU API refused to create a node, from its own error (a ``google.rpc.Status``:
    ``code`` and ``status`` as google/rpc/code.proto names them, and ``message``)."""

    STOCKOUT = "stockout"
    """No capacity in the zone for that capacity type: RESOURCE_EXHAUSTED (gRPC code 8, HTTP 429)
    with "There is no more capacity in the zone"; a reserved create's "Insufficient reserved
    capacity" (FAILED_PRECONDITION, code 9). Another rung may have capacity."""
    QUOTA = "quota"
    """The project's quota is spent: RESOURCE_EXHAUSTED with quota wording ("Quota limit ... has
    been exceeded"), or QUOTA_EXCEEDED. Raise the quota (Cloud TPU quotas page) or free some."""
    PERMISSION = "permission"
    """PERMISSION_DENIED (code 7, HTTP 403): the deploying identity lacks a role, or the API is off."""
    INVALID = "invalid"
    """INVALID_ARGUMENT (code 3, HTTP 400) or FAILED_PRECONDITION (code 9) otherwise: the request
    itself is wrong (an accelerator type the zone does not offer, say)."""
    UNKNOWN = "unknown"
    """Anything else, or no API error found: the ladder does not move on unknown."""


_ADVICE = {
    CreateFailure.QUOTA: "raise the project's Cloud TPU quota for this capacity type in the region "
    "(https://cloud.google.com/tpu/docs/quota) or free some; another rung would meet the same quota",
    CreateFailure.PERMISSION: "grant the deploying identity the Cloud TPU Admin role (roles/tpu.admin) "
    "and check that the Cloud TPU API is enabled; another rung would be refused the same way",
    CreateFailure.INVALID: "fix the request (accelerator type, runtime version, network) for that zone; "
    "`tpu-training plan` and `tpu-training preflight` check what they can",
    CreateFailure.UNKNOWN: "the error is not one the ladder moves on; a later round tries the same rung",
}


def advice(failure: CreateFailure) -> str:
    """What a person should do about a failure that does not move the ladder."""
    return _ADVICE.get(failure, "")


_STOCKOUT_WORDS = re.compile(r"no more capacity|insufficient reserved capacity|stockout", re.IGNORECASE)
_QUOTA_WORDS = re.compile(r"quota", re.IGNORECASE)


def classify_create_failure(text: str) -> CreateFailure:
    """Classify the error of a refused create, as the API's ``google.rpc.Status`` reaches us: in
    JSON (``{"code": 8, "message": ..., "status": "RESOURCE_EXHAUSTED"}``), or in the lines of a
    `pulumi up` that quote it (pulumi-gcp writes ``googleapi: Error 429: <message>`` or, for a
    failed long-running operation, ``Error code 8, message: <message>``).

    Sources: the canonical codes, google/rpc/code.proto (RESOURCE_EXHAUSTED 8 "some resource has
    been exhausted, perhaps a per-user quota", PERMISSION_DENIED 7, INVALID_ARGUMENT 3,
    FAILED_PRECONDITION 9); Cloud TPU's stockout message "There is no more capacity in the zone
    \"<zone>\"; you can try in another zone where Cloud TPU Nodes are offered" (code 8, as
    `gcloud compute tpus tpu-vm create` prints it); the quota message "Quota limit '...' has been
    exceeded" (RESOURCE_EXHAUSTED, gcloud); Cloud TPU quotas, https://cloud.google.com/tpu/docs/quota.
    tests/domain/test_capacity_ladder.py holds each example with where it comes from."""
    if not text:
        return CreateFailure.UNKNOWN
    upper = text.upper()
    exhausted = "RESOURCE_EXHAUSTED" in upper or _code(text, 8, 429)
    if "QUOTA_EXCEEDED" in upper or (exhausted and _QUOTA_WORDS.search(text)):
        return CreateFailure.QUOTA
    if _STOCKOUT_WORDS.search(text):
        return CreateFailure.STOCKOUT
    if "PERMISSION_DENIED" in upper or _code(text, 7, 403):
        return CreateFailure.PERMISSION
    if exhausted:
        # RESOURCE_EXHAUSTED without quota wording: the API's own stockout code.
        return CreateFailure.STOCKOUT
    if (
        "INVALID_ARGUMENT" in upper
        or "FAILED_PRECONDITION" in upper
        or _code(text, 3, 400)
        or _code(text, 9, 400)
    ):
        return CreateFailure.INVALID
    return CreateFailure.UNKNOWN


def _code(text: str, grpc: int, http: int) -> bool:
    """The gRPC code as pulumi-gcp and gcloud write it ("Error code 8", ``"code": 8``), or the
    HTTP status as googleapi writes it ("Error 429")."""
    return bool(
        re.search(rf"(error code|\"code\":)\s*{grpc}\b", text, re.IGNORECASE)
        or re.search(rf"\berror {http}\b", text, re.IGNORECASE)
    )


def failure_of(name: str, message: str, recovered: Iterable[str]) -> CreateFailure:
    """The failure of VM ``name`` in a failed update's ``message``: the message is its own when
    the update recovered it alone; otherwise only the lines that name its resource
    (``<name>-vm``) count, and a message that names none of them says nothing (unknown)."""
    others = [other for other in recovered if other != name]
    if not others:
        return classify_create_failure(message)
    lines = [line for line in message.splitlines() if f"{name}-vm" in line]
    return classify_create_failure("\n".join(lines))


# --- Where a VM stands, between rounds -------------------------------------------------------------


@dataclass(frozen=True)
class LadderState:
    """Where recovery stands with one VM: the rung it declares, and the stockouts in a row there."""

    rung: Rung
    stockouts: int = 0
    moved_from: Optional[Rung] = None
    """The rung it left for stockouts, when the next creation is the move (cause ``stockout``)."""


@dataclass(frozen=True)
class Declared:
    """Where a VM that recovery creates or replaces is declared, and why there."""

    state: LadderState
    moved: bool
    """Declared on a lower rung than the one it stood on, for stockouts: its cause is ``stockout``."""
    line: str


def declare(ladder: Sequence[Rung], state: Optional[LadderState], attempts: int) -> Declared:
    """The rung of a VM that recovery creates or replaces now.

    - ``attempts`` stockouts in a row on its rung, and a rung below: the next rung (a move);
    - moved already, or in a run of stockouts short of ``attempts``: the same rung again (the
      create that failed is what is being retried);
    - otherwise (a fresh loss, or nothing known): the preferred rung. That is how a VM climbs back
      up: only when it is lost again, never while it runs."""
    if state is None or index_of(ladder, state.rung) is None:
        return Declared(
            LadderState(ladder[0]), False, f"declared on the preferred rung {_shown(ladder, ladder[0])}"
        )
    here = index_of(ladder, state.rung)
    assert here is not None
    if state.stockouts >= attempts and here + 1 < len(ladder):
        following = ladder[here + 1]
        return Declared(
            LadderState(following, 0, moved_from=state.rung),
            True,
            f"{state.stockouts} stockouts in a row on rung {_shown(ladder, state.rung)}: declared on rung "
            f"{_shown(ladder, following)}",
        )
    if state.moved_from is not None:
        return Declared(
            state, True, f"declared on rung {_shown(ladder, state.rung)} after stockouts above it"
        )
    if state.stockouts > 0:
        last = " (the last rung: tried again until capacity returns)" if here + 1 == len(ladder) else ""
        return Declared(
            state,
            False,
            f"stockout {state.stockouts} of {attempts} on rung {_shown(ladder, state.rung)}: "
            f"tried again{last}",
        )
    return Declared(
        LadderState(ladder[0]), False, f"declared on the preferred rung {_shown(ladder, ladder[0])}"
    )


def after_create(
    ladder: Sequence[Rung], state: LadderState, failure: Optional[CreateFailure]
) -> tuple[LadderState, str]:
    """A VM's place after a create on ``state.rung`` (``failure`` None: it succeeded), and what to
    say of it. Only a stockout counts; quota, permission and invalid errors leave it where it is."""
    if failure is None:
        return LadderState(state.rung), f"created on rung {_shown(ladder, state.rung)}"
    if failure is not CreateFailure.STOCKOUT:
        return state, (
            f"create on rung {_shown(ladder, state.rung)} refused ({failure}): {advice(failure)}; "
            f"the ladder does not move"
        )
    counted = LadderState(state.rung, state.stockouts + 1, state.moved_from)
    return counted, f"stockout {counted.stockouts} on rung {_shown(ladder, state.rung)}"


def _shown(ladder: Sequence[Rung], rung: Rung) -> str:
    index = index_of(ladder, rung)
    return f"{index} ({rung})" if index is not None else f"({rung}, no longer on the ladder)"


def state_from_records(
    ladder: Sequence[Rung], name: str, records: Iterable[Mapping[str, Any]]
) -> Optional[LadderState]:
    """A VM's place as its recovery records tell it (``--records``, oldest first): the rung of its
    last record, and the stockouts in a row there; None when no record of it names a rung. This
    is how a run of ``--once`` on a schedule counts stockouts across runs."""
    state: Optional[LadderState] = None
    for record in records:
        if record.get("kind") != "tpuVm" or record.get("name") != name:
            continue
        rung = Rung.from_json(record.get("rung"))
        if rung is None or index_of(ladder, rung) is None:
            continue
        before = state.stockouts if state is not None and state.rung == rung else 0
        moved = rung if record.get("cause") == "stockout" else None
        if record.get("upStatus") == "succeeded":
            state = LadderState(rung)
        elif record.get("createFailure") == CreateFailure.STOCKOUT.value:
            state = LadderState(rung, before + 1, moved)
        else:
            state = LadderState(rung, before, moved)
    return state


def zone_to_judge(
    name: str, zones: Sequence[str], listed: Iterable[tuple[str, str]], unread: Iterable[str]
) -> str:
    """Which of a VM's ladder zones its live state is judged in: the first where a node of that
    name lives (``listed``: the (zone, name) pairs the API listed); failing that, the first zone
    that could not be listed (``unread``: the VM may be there, and it is kept as last deployed,
    never replaced on unknown); failing that, the preferred zone, where it is not (created)."""
    nodes = set(listed)
    failed = set(unread)
    for zone in zones:
        if (zone, name) in nodes:
            return zone
    for zone in zones:
        if zone in failed:
            return zone
    return zones[0]


# --- What each rung costs ----------------------------------------------------------------------------


def rung_prices(ladder: Sequence[Rung], accelerator_type: str) -> dict[str, Any]:
    """Each rung's hourly list price (``domain.prices``, the table the cost estimate reads) and the
    worst rung's: what the VM may cost when the cheaper rungs are out of capacity. A rung without
    a price makes the worst unknown (nothing is guessed)."""
    accelerator = catalogue.accelerator_type(accelerator_type)
    rows = []
    for index, rung in enumerate(ladder):
        # Preemptible TPU VMs are billed at the Spot price (domain/prices.py).
        model = cast(prices.Model, "spot" if rung.provisioning == "preemptible" else rung.provisioning)
        price = prices.tpu_vm_hour(
            accelerator.generation,
            catalogue.region_of_zone(rung.zone),
            accelerator.chips,
            accelerator.cores,
            model,
        )
        rows.append(
            {"rung": index, **rung.to_json(), "usdPerHour": price.usd_per_hour, "source": price.source}
        )
    known = [row["usdPerHour"] for row in rows if isinstance(row["usdPerHour"], float)]
    worst = max(known) if len(known) == len(rows) else None
    return {"rungs": rows, "worstUsdPerHour": worst, "pricesAsOf": prices.AS_OF}


def render_prices(ladders: Mapping[str, Any]) -> list[str]:
    """The plan's lines for the ``capacityLadders`` output: each rung's price, then the worst."""
    lines = []
    for name, ladder in sorted(ladders.items()):
        lines.append(f"  {name}:")
        for row in ladder.get("rungs", []):
            price = row.get("usdPerHour")
            shown = f"${price:.2f}/h" if isinstance(price, (int, float)) else f"unknown ({row.get('source')})"
            lines.append(f"    rung {row['rung']}: {row['zone']} {row['provisioning']}: {shown}")
        worst = ladder.get("worstUsdPerHour")
        lines.append(
            f"    worst rung: {f'${worst:.2f}/h' if isinstance(worst, (int, float)) else 'unknown'} "
            f"(the headline cost counts the rung declared now)"
        )
    return lines


def with_stockout_causes(last_recoveries: Any, stockouts: Iterable[str]) -> Any:
    """``lastRecoveries`` (``TrainingRecovery.last_recoveries``) with cause ``stockout`` for the
    TPU VMs a recovery round declared one rung down: the program saw them only as missing."""
    moved = set(stockouts)
    if (
        not moved
        or not isinstance(last_recoveries, dict)
        or not isinstance(last_recoveries.get("tpuVms"), dict)
    ):
        return last_recoveries
    vms = {
        name: dict(entry, cause="stockout") if name in moved and isinstance(entry, dict) else entry
        for name, entry in last_recoveries["tpuVms"].items()
    }
    return {**last_recoveries, "tpuVms": vms}
