"""The doctor's own cost in one run, from what the run measured: the time inside the hooks of
every step (StepSample.doctor_s), and for each costly probe the steps it ran in against the
median step no probe ran in. Nothing here is estimated from elsewhere: a number the run could
not measure is None, and the report says so."""

from __future__ import annotations

import statistics

from torchdoctor.model.record import DoctorCost, ProbeCost, StepSample
from torchdoctor.run.budget import LABELS, WindowBudget

SAMPLER = "sampler"  # the op sampler's budget name (run/budget.py)
EVAL_SAMPLER = "eval_sampler"


def doctor_cost(steps: list[StepSample], budgets: dict[str, WindowBudget], baseline_s: float | None,
                expected_run_s: float | None, eval_sampled_s: float = 0.0, eval_cut: bool = False,
                eval_passed: bool = False, install_s: float = 0.0, finish_s: float = 0.0,
                script_own_s: dict[int, float] | None = None) -> DoctorCost:
    """`script_own_s`: seconds of the script's own one-off work in a step (torch.compile compiling),
    which a probe's step is not charged with."""
    own = script_own_s or {}
    cost = DoctorCost(install_s=round(install_s, 6), finish_s=round(finish_s, 6))
    if not steps:
        return cost
    cost.steps_s = round(sum(s.duration_s for s in steps), 6)
    plain = [s for s in steps if not s.probes and not s.sampled]
    cost.unmeasured_steps = len(plain)
    cost.split_untimed_steps = sum(1 for s in plain if not s.split_timed)
    cost.sampled_steps = len(steps) - len(plain)
    if plain:
        hooks = sorted(s.doctor_s for s in plain)
        cost.hook_s_per_step = round(statistics.median(hooks), 9)
        cost.hook_s_p90 = round(hooks[min(len(hooks) - 1, int(0.9 * (len(hooks) - 1) + 0.5))], 9)
    clean = [s.duration_s for s in steps if not s.warmup and not s.sampled]
    median = statistics.median(clean) if clean else None
    first = steps[0]
    cost.first_step_s = round(first.duration_s, 6)
    cost.first_step_probes = list(first.probes)
    if median:
        cost.first_step_ratio = round(first.duration_s / median, 3)
    added = sum(s.doctor_s for s in plain)
    for name, label in LABELS.items():
        ran = [s for s in steps if name in s.probes]
        budget = budgets.get(name)
        if not ran and (budget is None or not budget.skipped):
            continue
        row = ProbeCost(probe=name, label=label, steps=[s.index for s in ran],
                        partial=[s.index for s in ran if name in s.partial])
        if budget is not None:
            row.active_s = round(budget.used_s, 6)
            row.skipped = list(budget.skipped)
            step_cap = budget.step_allowance(baseline_s)
            run_cap = budget.run_allowance(baseline_s, expected_run_s)
            row.budget_step_s = round(step_cap, 6) if step_cap is not None else None
            row.budget_run_s = round(run_cap, 6) if run_cap is not None else None
            reasons = sorted(set(budget.why_partial.values()))
            if reasons:
                row.note = "stopped partway: " + ", ".join(_WHY[r] for r in reasons)
        if ran and median:
            durations = [max(0.0, s.duration_s - own.get(s.index, 0.0)) for s in ran]  # the compiling left out
            row.step_ratio = round(statistics.median(d / median for d in durations), 3)
            row.added_s = round(sum(max(0.0, d - median) for d in durations), 6)
            if any(own.get(s.index) for s in ran):
                row.note = "; ".join(filter(None, [row.note, "compiling in its steps is the script's, left out"]))
            added += row.added_s
            if any(s.warmup for s in ran):
                row.note = "; ".join(filter(None, [row.note, "warm-up steps: their ratio includes the script's own "
                                                                "first-step work"]))
        cost.probes.append(row)
    if eval_sampled_s > 0:
        cost.probes.append(ProbeCost(
            probe=EVAL_SAMPLER, label="op sampler (evaluation)", active_s=round(eval_sampled_s, 6),
            note="the first evaluation's first batches" + (
                ", stopped at its time bound: no safe point to take the sampler out (the script compiles, and "
                "no DataLoader batch came), so it handed the rest's calls on unrecorded" if eval_passed else
                ", stopped at its time bound: the rest ran at plain speed" if eval_cut else "")))
    cost.added_s = round(added, 6) if median else None
    return cost


_WHY = {"step": "the step outgrew its allowance", "run": "its run budget was spent",
        "closure": "after one closure evaluation of a closure optimizer's step"}
