"""One recovery round (``Recoverer.run_round``): read the stack's config and live state, decide,
settle what an interrupted update left, and run a `pulumi up` targeted at what must be re-created.
A round where everything works costs the list calls and nothing more: no `pulumi up`, no stack
lock."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import datetime, timezone
from typing import Any, Callable, Optional, Sequence

import pulumi
from tpu_training_components.domain.capacity_ladder import (
    CreateFailure,
    LadderState,
    Rung,
    after_create,
    current_rung,
    declare,
    failure_of,
    last_deployed_rung,
    state_from_records,
)
from tpu_training_components.domain.recovery import (
    Cause,
    Decision,
    failure_summary,
    live_generation,
    utc_now,
)
from tpu_training_components.domain.recovery_rounds import (
    RecoveryRound,
    RoundOutcome,
    plan_round,
)
from tpu_training_components.domain.restart_budget import (
    RESTARTS_OUTPUT,
    Recovery,
    RestartBudget,
    history_after_recovery,
    live_restarts,
    read_history,
    with_budget,
)

from tpu_training import project_files, stack_config
from tpu_training.recovery import recovery_targets
from tpu_training.recovery.automation import UpResult, UpRunner, deployed_names
from tpu_training.recovery.interrupted_updates import Live, any_interrupted, interruptions, settle
from tpu_training.recovery.maintenance import NoticeRound
from tpu_training.recovery.pulumi_process import PulumiTryLater, PulumiUnavailable
from tpu_training.recovery.round_report import RoundReport
from tpu_training.recovery.stack_probe import Decrypt, LoadedStack, SecretsNeedTheCli, Target, load_settings


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Recoverer:
    """Runs rounds for one stack and says what each did; the CLI wraps it."""

    def __init__(
        self,
        target: Target,
        *,
        probe: Callable[[stack_config.StackConfig], list[tuple[str, Decision]]],
        up: Optional[UpRunner],
        say: Callable[[str], None],
        decrypt: Optional[Decrypt] = None,
        stopping: Callable[[], bool] = lambda: False,
        apply_pending: bool = False,
        notices: Optional[Callable[[stack_config.StackConfig, datetime], NoticeRound]] = None,
        clock: Callable[[], datetime] = utc_now,
        records: Optional[str] = None,
    ) -> None:
        self.target = target
        self.clock = clock
        """Now: when a round decided, and when its `pulumi up` started and ended."""
        self.probe = probe
        self.up = up
        """None for a dry run: decide and say, never run `pulumi up`."""
        self.say = say
        self.decrypt = decrypt
        """Reads the decrypted config through the Pulumi CLI; None when there is no CLI."""
        self.stopping = stopping
        """True once a stop was asked: a round then decides, but starts no `pulumi up`."""
        self.apply_pending = apply_pending
        """Run a full `pulumi up`, edits not yet deployed included, instead of a targeted one."""
        self.notices = notices
        """Reads the maintenance notices and asks for saves (``tpu_training.recovery.maintenance``);
        None: not read."""
        self.rounds = 0
        self.ladders: dict[str, LadderState] = {}
        """Each TPU VM's place on its capacity ladder: its rung and its stockouts in a row there,
        kept between the rounds of a watch (domain/capacity_ladder.py)."""
        self.records = records
        """The ``--records`` file: where a run that has not seen a VM yet reads its stockouts."""
        self.unsettled = True
        """Whether the state may hold what an interrupted update left: true for the first round
        of a run (the last one may have been killed) and after an update that did not succeed;
        such a round reads the state even when it recovers nothing."""
        self.failed_causes: dict[str, Cause] = {}
        """VM or Job -> the cause of a recovery whose update failed: what the round that carries
        it on records, instead of "missing"."""

    def run_round(self) -> RoundReport:
        self.rounds += 1
        started = time.monotonic()
        report = RoundReport(self.target.qualified, self.rounds, _now())
        try:
            self._run_round(report)
        except PulumiUnavailable as exc:
            report.ended_early = (RoundOutcome.UNAVAILABLE, str(exc))
            self.say(f"error: {exc}")
        except PulumiTryLater as exc:
            report.ended_early = (RoundOutcome.TRY_LATER, str(exc))
            self.say(f"error: {exc}; nothing was changed, a later round tries again")
        report.duration_seconds = round(time.monotonic() - started, 3)
        return report

    def _run_round(self, report: RoundReport) -> None:
        try:
            loaded = load_settings(self.target, self.decrypt)
        except SecretsNeedTheCli as exc:
            raise PulumiUnavailable(str(exc)) from None
        except (project_files.ProjectFileError, pulumi.RunError) as exc:
            report.ended_early = (RoundOutcome.CONFIG_ERROR, str(exc))
            self.say(f"error: {exc}")
            return
        settings = loaded.settings
        report.gcp_project = settings.gcp_project
        for warning in loaded.warnings:
            self.say(f"warning: {warning}")
        if not settings.recovery.read_live_state:
            message = (
                f"{stack_config.PROJECT}:recovery.readLiveState is false: the stack reads no live "
                f"state, so there is nothing to recover by"
            )
            report.ended_early = (RoundOutcome.CONFIG_ERROR, message)
            self.say(f"error: {message}")
            return

        decisions = self._carry_failed(self._settle(loaded, self.probe(settings), report))
        outputs: Optional[dict[str, Any]] = None
        if plan_round([d for _, d in decisions]).run_up and self.up is not None:
            # Which VMs and Jobs the stack deployed, and each Job's recoveries: one CLI call, made
            # only by a round that would recover something.
            outputs = self.up.stack_outputs(self.target.qualified)
        history = self._history(outputs)
        now = self.clock()
        budget = settings.recovery.restart_budget.budget
        report.decisions = [
            (kind, with_budget(d, history.get(d.name, ()) if outputs is not None else None, budget, now))
            if kind == "job"
            else (kind, self._on_ladder(settings, d, report, outputs))
            for kind, d in decisions
        ]
        for kind, decision in report.decisions:
            level = "warning" if decision.warn else "info"
            self.say(f"{level}: {'TPU VM' if kind == 'tpuVm' else 'Job'} {decision.message}")
        self._notices(report, settings, now)
        report.plan = plan_round([d for _, d in report.decisions])
        report.detected_at = now
        self.say(f"{self.target.qualified}: {report.plan.summary}")
        if not report.plan.run_up:
            return
        report.up = self._recover(report, loaded, outputs or {}, history, now)
        if report.up_started_at is not None:
            report.up_ended_at = self.clock()
        self._released(report, report.up.released_locks)
        self.say(f"{self.target.qualified}: pulumi up {report.up.status}: {report.up.message}")
        self._remember(report)
        self._after_creates(settings, report)

    def _settle(
        self, loaded: LoadedStack, decisions: list[tuple[str, Decision]], report: RoundReport
    ) -> list[tuple[str, Decision]]:
        """Settle what an interrupted update left for the recovered VMs and Jobs, from the live
        state just read (``tpu_training.recovery.interrupted_updates``), before deciding on it: the decisions,
        with the recovery each interrupted update began carried on (``Decision.resumed``)."""
        if self.up is None or not (self.unsettled or plan_round([d for _, d in decisions]).run_up):
            return decisions
        stack = self.target.qualified
        state = self.up.export_state(stack)
        if not any_interrupted(state):
            self.unsettled = False
            return decisions
        try:
            urns = self._targets(loaded, decisions).urns
        except Exception as exc:  # noqa: BLE001 - the program, run offline, refused: leave the state be
            self.say(f"warning: the state was not settled: its resources could not be found: {exc}")
            return decisions
        named = {urn: name for name, urn in urns.items()}
        found = interruptions(state, named)
        if not found:
            self.unsettled = False
            return decisions
        by_name = {d.name: d for _, d in decisions}
        live = {urn: _live(by_name[named[urn]]) for urn in found}
        settlement = settle(state, found, live, loaded.settings.gcp_project or "")
        if settlement.unknown:
            names = ", ".join(named[urn] for urn in settlement.unknown)
            raise PulumiTryLater(
                f"an interrupted update left {names} half-done, and the live state to settle it by "
                f"could not be read; the stack's state is left as it is"
            )
        # Written back under the stack's lock (`pulumi stack import` takes it, and a live update's
        # refuses it), and only if nothing wrote the state since it was read: an update that was
        # still running then, and ended since, must not be overwritten with what it left.
        if settlement.state != state:
            if self.up.export_state(stack) != state:
                raise PulumiTryLater(
                    "the stack's state changed while the round settled what an interrupted update "
                    "left: an update is running; it is left to finish"
                )
            self._released(report, self.up.import_state(stack, settlement.state))
        for line in settlement.lines:
            report.settled.append(line)
            self.say(f"info: settled: {line}")
        if settlement.adopted:
            # Its outputs read now: the round's own update may run without --refresh (a create
            # among its targets), and until a refresh they are its inputs (``_unread``).
            self._released(report, self.up.refresh(stack, sorted(settlement.adopted)))
        self.unsettled = False
        settled = []
        for kind, decision in decisions:
            urn = urns.get(decision.name)
            if urn in settlement.adopted and decision.action == "keep" and not decision.unavailable:
                cause = settlement.adopted[urn]
                decision = _resuming(
                    decision,
                    cause,
                    f"an interrupted update made it, and this round records that recovery "
                    f"({cause or 'cause not recorded'})",
                )
            elif urn in found and decision.action != "keep" and decision.cause is Cause.MISSING:
                cause = settlement.resumed.get(urn) or self._failed_cause(decision.name)
                if cause is not None:
                    decision = _resuming(
                        decision, cause, f"carries on the recovery ({cause}) an interrupted update began"
                    )
            settled.append((kind, decision))
        return settled

    def _carry_failed(self, decisions: list[tuple[str, Decision]]) -> list[tuple[str, Decision]]:
        """A VM or Job this run's last update failed to re-create, now found missing: created with
        the cause of the recovery that update began, not "missing"."""
        carried = []
        for kind, decision in decisions:
            if decision.action == "keep" and not decision.unavailable:
                self.failed_causes.pop(decision.name, None)  # it runs: that recovery is over
            cause = self.failed_causes.get(decision.name)
            if cause is not None and decision.action == "create" and decision.cause is Cause.MISSING:
                decision = _resuming(
                    decision, cause, f"carries on the recovery ({cause}) whose update failed"
                )
            carried.append((kind, decision))
        return carried

    def _failed_cause(self, name: str) -> Optional[Cause]:
        """The cause of ``name``'s last recovery whose update failed: this run's, or the last
        record of it in ``--records`` when that one did not succeed."""
        if name in self.failed_causes:
            return self.failed_causes[name]
        records = self._read_records()
        if records is None:
            return None
        mine = [r for r in records if r.get("name") == name]
        if not mine or mine[-1].get("upStatus") == RoundOutcome.SUCCEEDED.value:
            return None
        cause = mine[-1].get("cause")
        return Cause(cause) if cause in {c.value for c in Cause} and cause != Cause.MISSING else None

    def _remember(self, report: RoundReport) -> None:
        """After an update: whether the state may hold an interruption, and each failed recovery's cause."""
        if report.up is None or report.plan is None:
            return
        if report.up.status is RoundOutcome.SUCCEEDED:
            for decision in report.plan.recovering:
                self.failed_causes.pop(decision.name, None)
        elif report.up.status in (RoundOutcome.FAILED, RoundOutcome.BUSY):
            self.unsettled = True
            for decision in report.plan.recovering:
                if decision.cause is not None and decision.cause is not Cause.MISSING:
                    self.failed_causes[decision.name] = decision.cause

    def _on_ladder(
        self,
        settings: stack_config.StackConfig,
        decision: Decision,
        report: RoundReport,
        outputs: Optional[dict[str, Any]],
    ) -> Decision:
        """A TPU VM that recovery creates or replaces, declared on a rung of its capacity ladder:
        the preferred one, the same one after a stockout, or the next one after
        ``recovery.ladder.attempts`` stockouts in a row (then its cause is ``stockout``). A queued
        request that failed for want of capacity waited as long as it was allowed to: that is a
        rung's worth of stockouts at once."""
        vm = next((vm for vm in settings.tpu_vms if vm.name == decision.name), None)
        if vm is None or decision.action == "keep":
            return decision
        state = self.ladders.get(vm.name) or self._recorded(vm.name, vm.ladder)
        if decision.cause is Cause.STOCKOUT:
            standing = state.rung if state else current_rung(vm.ladder, last_deployed_rung(outputs, vm.name))
            if vm.request_on(standing.provisioning) is not None:
                attempts = settings.recovery.ladder.attempts
                state = LadderState(standing, max(attempts, state.stockouts if state else 0))
        declared = declare(vm.ladder, state, settings.recovery.ladder.attempts)
        self.ladders[vm.name] = declared.state
        report.rungs[vm.name] = declared.state.rung
        if len(vm.ladder) == 1:
            return decision
        if declared.moved:
            report.stockout_moves.add(vm.name)
            return dataclasses.replace(
                decision, reason=f"{decision.reason}; {declared.line}", cause=Cause.STOCKOUT
            )
        return dataclasses.replace(decision, reason=f"{decision.reason}; {declared.line}")

    def _recorded(self, name: str, ladder: Sequence[Rung]) -> Optional[LadderState]:
        records = self._read_records(unread="stockouts count from this run")
        return state_from_records(ladder, name, records) if records is not None else None

    def _read_records(self, *, unread: Optional[str] = None) -> Optional[list[dict[str, Any]]]:
        """The ``--records`` file's records; None when there is none, or it cannot be read (then,
        with ``unread``, a warning saying what follows from that)."""
        if self.records is None:
            return None
        try:
            with open(self.records, encoding="utf-8") as lines:
                records = [json.loads(line) for line in lines if line.strip()]
        except (OSError, ValueError) as exc:
            if unread is not None:
                self.say(f"warning: --records {self.records}: not read ({exc}); {unread}")
            return None
        return [r for r in records if isinstance(r, dict)]

    def _targets(
        self, loaded: LoadedStack, decisions: Sequence[tuple[str, Decision]]
    ) -> recovery_targets.RecoveryTargets:
        """The URNs of the VMs and Jobs of ``decisions``, from the stack program run offline."""
        return recovery_targets.find_targets(
            self.target.project,
            self.target.stack,
            loaded.config,
            loaded.secret_keys,
            [(kind, d.name) for kind, d in decisions],
        )

    def _released(self, report: RoundReport, lines: Sequence[str]) -> None:
        """Says and reports the dead updates' locks a CLI call released."""
        for line in lines:
            report.released_locks.append(line)
            self.say(f"info: {line}")

    def _after_creates(self, settings: stack_config.StackConfig, report: RoundReport) -> None:
        """Count what the update's creates met: a stockout brings the VM nearer its next rung;
        a quota, permission or invalid error is said, with what to fix, and moves nothing."""
        if report.up is None or report.up.status not in (RoundOutcome.SUCCEEDED, RoundOutcome.FAILED):
            return
        attempts = settings.recovery.ladder.attempts
        recovered = (
            [name for name in report.rungs if name in {d.name for d in report.plan.recovering}]
            if report.plan
            else []
        )
        for vm in settings.tpu_vms:
            if vm.name not in recovered or vm.name not in self.ladders:
                continue
            failure = (
                failure_of(vm.name, report.up.message, recovered)
                if report.up.status is RoundOutcome.FAILED
                else None
            )
            if failure is not None:
                report.create_failures[vm.name] = failure
            self.ladders[vm.name], line = after_create(vm.ladder, self.ladders[vm.name], failure)
            if failure is not None:
                self.say(f"warning: TPU VM {vm.name}: {line}")
            if (
                failure is CreateFailure.STOCKOUT
                and declare(vm.ladder, self.ladders[vm.name], attempts).moved
            ):
                report.ladder_moves += (vm.name,)

    def _notices(self, report: RoundReport, settings: stack_config.StackConfig, now: datetime) -> None:
        """Maintenance notices, after the decisions and apart from them: a notice never changes
        one. What they ask (a save before the window) is written whatever the round does next."""
        if self.notices is None:
            return
        try:
            report.notices = self.notices(settings, now)
        except Exception as exc:  # noqa: BLE001 - notices never stop a round
            self.say(f"warning: maintenance notices not read: {failure_summary(exc)}")
            return
        for warning in report.notices.warnings:
            self.say(f"warning: {warning}")
        for notice in report.notices.notices:
            self.say(f"info: maintenance notice: {notice.line()}")

    def _history(self, outputs: Optional[dict[str, Any]]) -> dict[str, tuple[Recovery, ...]]:
        if outputs is None:
            return {}
        history, problems = read_history(outputs.get(RESTARTS_OUTPUT))
        for problem in problems:
            self.say(f"warning: {problem}")
        return history

    def _recover(
        self,
        report: RoundReport,
        loaded: LoadedStack,
        outputs: dict[str, Any],
        history: dict[str, tuple[Recovery, ...]],
        now: datetime,
    ) -> UpResult:
        assert report.plan is not None
        recovering = [(kind, d) for kind, d in report.decisions if d in report.plan.recovering]
        try:
            targets = self._targets(loaded, recovering)
        except recovery_targets.TargetsNotFound as exc:
            return UpResult(RoundOutcome.FAILED, str(exc), 0.0)
        except Exception as exc:  # noqa: BLE001 - the program, run offline, refused its config
            return UpResult(
                RoundOutcome.FAILED, f"the stack program could not be run to find the targets: {exc}", 0.0
            )
        shown = " ".join(f"--target {urn}" for urn in targets.urns.values())
        if self.up is None:
            return UpResult(
                RoundOutcome.DRY_RUN, f"dry run: `pulumi up --refresh --yes {shown}` not run", 0.0
            )
        if self.stopping():
            # A stop asked while the round read live state: an update can take an hour; not now.
            return UpResult(RoundOutcome.STOPPED, "a stop was asked before `pulumi up` started; not run", 0.0)
        pending = self.up.pending_changes(self.target.qualified)
        chosen = recovery_targets.set_against(
            targets, pending, deployed_names(outputs), apply_pending=self.apply_pending
        )
        report.pending = chosen.beside
        budget = loaded.settings.recovery.restart_budget.budget
        if self.apply_pending:
            for change in chosen.beside:
                self.say(f"warning: --apply-pending: applied too: {change.shown}")
            told = _recovery_round(
                recovering, None, history, budget, now, report.rungs, frozenset(report.stockout_moves)
            )
            report.up_started_at = self.clock()
            return self.up(self.target.qualified, recovery_round=told)
        for line in recovery_targets.describe(chosen):
            self.say(f"warning: {line}")
        if not chosen.targets:
            return UpResult(
                RoundOutcome.BLOCKED,
                "nothing can be recovered without pending changes; `pulumi up` not run",
                0.0,
            )
        if self.stopping():
            return UpResult(RoundOutcome.STOPPED, "a stop was asked before `pulumi up` started; not run", 0.0)
        report.targets = chosen.targets
        recovered = [(kind, d) for kind, d in recovering if targets.urns[d.name] in chosen.targets]
        told = _recovery_round(
            recovered, chosen.targets, history, budget, now, report.rungs, frozenset(report.stockout_moves)
        )
        report.up_started_at = self.clock()
        return self.up(
            self.target.qualified, list(chosen.targets), refresh=chosen.refresh, recovery_round=told
        )


def _resuming(decision: Decision, cause: Optional[Cause], why: str) -> Decision:
    """``decision`` carrying on an interrupted recovery, with that recovery's cause."""
    return dataclasses.replace(decision, resumed=True, cause=cause, reason=f"{decision.reason}; {why}")


def _live(decision: Decision) -> Live:
    """What a round's decision says of its object's live state."""
    if decision.unavailable:
        return Live(None)
    if decision.action == "create":
        return Live(False)
    return Live(True, live_generation(decision))


def _recovery_round(
    recovered: Sequence[tuple[str, Decision]],
    targets: Optional[Sequence[str]],
    history: dict[str, tuple[Recovery, ...]],
    budget: RestartBudget,
    now: datetime,
    rungs: Optional[dict[str, Rung]] = None,
    stockouts: frozenset[str] = frozenset(),
) -> RecoveryRound:
    """What the round's `pulumi up` tells the program: what it recovers, and each recovered Job's
    history with this recovery in it."""
    jobs = {d.name: d for kind, d in recovered if kind == "job"}
    vms = {d.name for kind, d in recovered if kind == "tpuVm"}
    return RecoveryRound(
        targeted=targets is not None,
        tpu_vms=frozenset(d.name for kind, d in recovered if kind == "tpuVm"),
        jobs=frozenset(jobs),
        restarts={
            name: history_after_recovery(
                history.get(name, ()), live_restarts(d.restarts, d.created, budget, now), budget, now
            )
            for name, d in jobs.items()
        },
        rungs={name: rung for name, rung in (rungs or {}).items() if name in vms},
        stockouts=frozenset(name for name in stockouts if name in vms),
        resumed={d.name: d.cause.value for _, d in recovered if d.resumed and d.cause is not None},
    )
