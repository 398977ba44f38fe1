"""The doctor's own cost, as every report shows it: one summary line, and a table with a row
for the hooks of every step and one per costly probe (its steps, what they cost against the
median unmeasured step, its budget). The numbers come from the run (`record.doctor_cost`);
nothing here measures."""

from __future__ import annotations

from torchdoctor.model.findings import Table
from torchdoctor.model.record import DoctorCost, RunRecord

NOT_MEASURED = "not measured"


def _us(seconds: float | None) -> str:
    return NOT_MEASURED if seconds is None else f"{seconds * 1e6:.0f} µs"


def _ms(seconds: float | None) -> str:
    return NOT_MEASURED if seconds is None else f"{seconds * 1e3:.1f} ms"


def _ratio(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.2f}x"


def _steps(indices: list[int]) -> str:
    """1-3, 5, 11-25: runs of consecutive steps collapsed."""
    if not indices:
        return "—"
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def doctor_cost_line(record: RunRecord, step_s: float | None) -> str | None:
    """One line: the hooks' time per unmeasured step, the sampled steps by probe, the first step."""
    cost = record.doctor_cost
    if cost is None or not record.steps:
        return None
    parts = []
    if cost.hook_s_per_step is not None:
        share = f" ({cost.hook_s_per_step / step_s:.2%} of a step)" if step_s else ""
        parts.append(f"+{_us(cost.hook_s_per_step)} per unmeasured step in its hooks{share}")
    if cost.split_untimed_steps:
        parts.append(_split_timed(cost))
    probes = [p for p in cost.probes if p.steps]
    if probes:
        each = ", ".join(f"{p.label} {len(p.steps)}" + (f" ({_ratio(p.step_ratio)})" if p.step_ratio else "")
                         + (f", {len(p.partial)} partial" if p.partial else "") for p in probes)
        parts.append(f"{cost.sampled_steps} sampled steps, left out of timings: {each}")
    if cost.first_step_ratio is not None:
        under = f" (under {', '.join(_label(cost, n) for n in cost.first_step_probes)})" if cost.first_step_probes else ""
        parts.append(f"first step {cost.first_step_ratio:.1f}x the median step{under}")
    if cost.added_s is not None and cost.steps_s:
        parts.append(f"in all +{_ms(cost.added_s)} of {cost.steps_s:.2f} s of steps ({cost.added_s / cost.steps_s:.1%})")
    return "; ".join(parts) or None


def _split_timed(cost: DoctorCost) -> str:
    timed = cost.unmeasured_steps - cost.split_untimed_steps
    return (f"backward, optimizer and zero_grad timed in {timed} of {cost.unmeasured_steps} unmeasured steps "
            f"(the others only counted: the split's figures are those steps' means)")


def _label(cost: DoctorCost, name: str) -> str:
    return next((p.label for p in cost.probes if p.probe == name), name)


def doctor_cost_table(record: RunRecord) -> Table | None:
    cost = record.doctor_cost
    if cost is None or not record.steps:
        return None
    rows: list[list] = [["hooks (every step)", f"{cost.unmeasured_steps} unmeasured", "—",
                         f"+{_us(cost.hook_s_per_step)} (p90 {_us(cost.hook_s_p90)})",
                         _ms(cost.hook_s_per_step * cost.unmeasured_steps if cost.hook_s_per_step is not None
                             else None), "—", "measured inside the hooks: loader next(), zero_grad, backward, "
                                              "optimizer step" + (f"; {_split_timed(cost)}" if cost.split_untimed_steps
                                                                  else "")]]
    for p in cost.probes:
        budget = "—" if p.budget_run_s is None else (
            f"{_ms(p.budget_run_s)} run, {_ms(p.budget_step_s)} a step")
        rows.append([p.label, _steps(p.steps) + (f" (skipped {_steps(p.skipped)})" if p.skipped else ""),
                     _steps(p.partial), _ratio(p.step_ratio) if p.steps else f"{_ms(p.active_s)} sampled",
                     _ms(p.added_s) if p.added_s is not None else NOT_MEASURED, budget, p.note])
    first = f"step 1: {_ms(cost.first_step_s)}"
    if cost.first_step_ratio is not None:
        first += f", {cost.first_step_ratio:.2f}x the median unmeasured step"
    return Table(
        title="The doctor's own cost",
        columns=["probe", "steps", "partial", "each step vs unmeasured", "added", "budget (active time)", "note"],
        rows=rows,
        caption=(f"Steps a costly probe ran in are left out of every timing above; {first}. Putting the probes "
                 f"in took {_ms(cost.install_s)}; taking them out and summarising after the script "
                 f"{_ms(cost.finish_s)}."),
    )
