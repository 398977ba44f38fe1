"""`torchdoctor tune`: a baseline, then one fresh-process trial per knob set that addresses a
finding (plus the upper bounds), then the winners combined; within a time budget, and
keeping every finished trial when interrupted."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from torchdoctor.rules.noise import change, contention_gap, throughput
from torchdoctor.diagnosis.reliability import busy_machine
from torchdoctor.model.findings import Report
from torchdoctor.model.record import RunRecord
from torchdoctor.model.layout import safe_name
from torchdoctor.pipeline import load_record
from torchdoctor.tune.plan import FIX, Trial, combined_trial, plan_trials
from torchdoctor.tune.trials import TrialResult, TrialSettings, run_trial

BASELINE = Trial("baseline", {}, "baseline")
# Run again after the trials: machine drift during a tune shows up as a gap between the two.
BASELINE_REPEAT = Trial("baseline (repeat)", {}, "baseline")


@dataclass
class TunedTrial:
    result: TrialResult
    record: RunRecord | None = None

    @property
    def ok(self) -> bool:
        return self.record is not None


@dataclass
class TuneOutcome:
    tune_dir: Path
    baseline: TunedTrial
    trials: list[TunedTrial] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # trials left out by the budget
    interrupted: bool = False
    exit_code: int = 0  # 130 or 143 when Ctrl-C or SIGTERM stopped the tune
    baseline_repeat: TunedTrial | None = None

    def baseline_records(self) -> list[RunRecord]:
        repeat = self.baseline_repeat
        return [self.baseline.record] + ([repeat.record] if repeat is not None and repeat.ok else [])

    def gain(self, trial: TunedTrial):
        """The noise-aware change of a trial against the (pooled) baseline, or None; the band
        is wider when a run was measured on a busy machine."""
        base = throughput(*self.baseline_records()) if self.baseline.ok else None
        mine = throughput(trial.record) if trial.ok else None
        if not (base and mine):
            return None
        busy = any(busy_machine(r) for r in [*self.baseline_records(), trial.record])
        waiting = contention_gap(self.baseline_records(), [trial.record]) if busy else None
        return change(base, mine, busy=busy, waiting=waiting)


class Tuner:
    def __init__(self, settings: TrialSettings, tune_dir: Path, budget_s: float | None = None,
                 trials: list[Trial] | None = None,
                 on_trial: Callable[[int, int | None, Trial, float | None], None] | None = None,
                 analyze: Callable[[RunRecord], Report] | None = None):
        from torchdoctor.diagnosis.run import analyze as default_analyze

        self.settings = settings
        self.tune_dir = tune_dir
        self.budget_s = budget_s
        self.chosen = trials
        self.on_trial = on_trial or (lambda *a: None)
        self.analyze = analyze or default_analyze
        self._started = time.monotonic()
        self._count = 0
        self._in_flight: tuple[str, Path] | None = None  # the trial running now: (name, run directory)

    def run(self) -> TuneOutcome:
        outcome = TuneOutcome(self.tune_dir, TunedTrial(TrialResult(BASELINE, self.tune_dir, -1, 0.0)))
        try:
            outcome.baseline = self._run(BASELINE, 1, None, None)
            if not outcome.baseline.ok:
                return outcome
            record = outcome.baseline.record
            planned = self.chosen if self.chosen is not None else plan_trials(
                self.analyze(record), record, cuda=record.environment.cuda_used)
            total = 2 + len(planned) + (1 if self.chosen is None else 0)
            for i, trial in enumerate(planned, 2):
                # the top finding's trial always runs: a budget too short for it would tune nothing
                self._maybe_run(outcome, trial, i, total, budgeted=i > 2)
            if self.chosen is None:
                winners = [t.result.trial for t in outcome.trials if t.result.trial.kind == FIX and _helped(outcome, t)]
                combo = combined_trial(winners)
                if combo is not None:
                    self._maybe_run(outcome, combo, total - 1, total)
            outcome.baseline_repeat = self._maybe_run(outcome, BASELINE_REPEAT, total, total, keep=False)
        except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM's Terminated: the trial in flight was stopped
            outcome.interrupted, outcome.exit_code = True, getattr(stop, "exit_code", 130)
            if self._in_flight is not None:
                name, run_dir = self._in_flight
                outcome.skipped.append(f"{name} (interrupted; its partial run is in {run_dir})")
        return outcome

    def _maybe_run(self, outcome: TuneOutcome, trial: Trial, index: int, total: int,
                   keep: bool = True, budgeted: bool = True) -> TunedTrial | None:
        per_trial = outcome.baseline.result.seconds
        left = None if self.budget_s is None else self.budget_s - (time.monotonic() - self._started)
        if budgeted and left is not None and left < per_trial:
            outcome.skipped.append(f"{trial.name} (budget: {max(left, 0):.0f} s left, a trial takes ~{per_trial:.0f} s)")
            return None
        done = self._run(trial, index, total, per_trial * (total - index + 1))
        if keep:
            outcome.trials.append(done)
        return done

    def _run(self, trial: Trial, position: int, total: int | None, eta_s: float | None) -> TunedTrial:
        """`on_trial(position, total, trial, seconds left)`: total is unknown until the plan exists."""
        self._count += 1
        self.on_trial(position, total, trial, eta_s)
        run_dir = self.tune_dir / f"{self._count:02d}-{safe_name(trial.name.replace(' ', '_').replace('(', '').replace(')', ''))}"
        self._in_flight = (trial.name, run_dir)
        result = run_trial(trial, self.settings, run_dir)
        self._in_flight = None
        record = load_record(run_dir) if result.ok else None
        return TunedTrial(result, record)


def _helped(outcome: TuneOutcome, trial: TunedTrial) -> bool:
    gain = outcome.gain(trial)
    return gain is not None and gain.significant and gain.ratio > 1.0
