"""What each costly probe may spend: a budget within one step and across the run.

A window probe (op sampler, memory accounting, backward timer, line sampler, profiler) slows
the steps it runs in. Its budget is counted in the wall time it is active, the time the
user's code runs under it:

- within a step: at most `step_factor` times the baseline step (the median of the steps
  measured clean so far), and never less than `step_min_s`; a step that outgrows it (a long
  closure optimizer step, a step with an evaluation inside) is sampled partly: the probe
  stops at the next safe point and the step is marked partial for it;
- in a closure optimizer's step (`optimizer.step(closure)`: LBFGS, Lightning), probes with
  `per_closure` stop after the first closure evaluation, one forward and backward, which is
  what their measurement needs;
- across the run: its first step always (within the step's allowance), so every probe gets a
  sample; more steps only while its active time stays under `run_share` of the run's expected
  wall time (the time so far, start-up included, plus the remaining steps at the baseline
  step), or `run_min_s` when that is more: a short run is diagnosed whole, since its samples
  cost less than a second. A window step that finds the run budget spent is skipped and
  measured clean instead.

Budgets are decided at safe points only (a step boundary, a closure's end, `backward()`'s end,
a DataLoader batch, a module call while a window is open): never inside a torch mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The probes' own labels, as reports print them.
LABELS = {
    "memory": "memory accounting",
    "sampler": "op sampler",
    "backward_timer": "backward timer",
    "line_sampler": "line sampler",
    "profiler": "profiler",
}


@dataclass
class WindowBudget:
    name: str  # the session attribute of the probe ("sampler", "memory", ...)
    step_factor: float  # active time within a step: at most this many baseline steps...
    step_min_s: float  # ...and never less than this
    run_share: float  # active time across the run: at most this share of the expected run...
    run_min_s: float = 0.5  # ...and never less than this: a short run's samples stay whole
    per_closure: bool = False  # in a closure step: stop after the first closure evaluation
    used_s: float = 0.0  # active time so far, all steps
    opened_at: float | None = None  # when its current stretch began (None: not active)
    step_used_s: float = 0.0  # active time in the step in progress
    steps: list[int] = field(default_factory=list)  # steps it ran in (whole or partly)
    partial: list[int] = field(default_factory=list)  # steps it stopped in, its budget spent
    skipped: list[int] = field(default_factory=list)  # steps of its window left clean: run budget spent
    why_partial: dict[int, str] = field(default_factory=dict)

    def step_allowance(self, baseline_s: float | None) -> float | None:
        """Active seconds allowed within one step (None: no baseline yet, no time cap)."""
        if baseline_s is None:
            return None
        return max(self.step_factor * baseline_s, self.step_min_s)

    def run_allowance(self, baseline_s: float | None, expected_run_s: float | None) -> float | None:
        """Active seconds allowed across the run, past the first step (None: no baseline yet)."""
        if baseline_s is None or expected_run_s is None:
            return None
        return max(self.run_share * expected_run_s, self.run_min_s)

    def may_open(self, baseline_s: float | None, expected_run_s: float | None) -> bool:
        allowed = self.run_allowance(baseline_s, expected_run_s)
        return not self.steps or allowed is None or self.used_s < allowed

    def start(self, now: float) -> None:
        if self.opened_at is None:
            self.opened_at = now

    def stop(self, now: float) -> None:
        if self.opened_at is not None:
            spent = max(0.0, now - self.opened_at)
            self.used_s += spent
            self.step_used_s += spent
            self.opened_at = None

    def exclude(self, seconds: float, now: float) -> None:
        """The script's own time inside an open stretch (torch.compile compiling a graph): not the probe's
        to pay. At most what the stretch has run so far."""
        if self.opened_at is not None and seconds > 0:
            seconds = min(seconds, now - self.opened_at)
            self.used_s -= seconds
            self.step_used_s -= seconds

    def in_step(self, now: float) -> float:
        """Active seconds in the step in progress, up to `now`."""
        return self.step_used_s + (now - self.opened_at if self.opened_at is not None else 0.0)

    def over(self, now: float, baseline_s: float | None, expected_run_s: float | None) -> bool:
        """The step's allowance, or what is left of the run's, is spent."""
        step = self.step_allowance(baseline_s)
        if step is not None and self.in_step(now) > step:
            return True
        if not self.steps:  # its first step: the step's allowance alone bounds it
            return False
        run = self.run_allowance(baseline_s, expected_run_s)
        running = self.used_s + (now - self.opened_at if self.opened_at is not None else 0.0)
        return run is not None and running > run


def default_budgets() -> dict[str, WindowBudget]:
    """The budgets `torchdoctor run` uses (README, "The doctor's own cost"). A short run keeps its
    samples whole (the floor: half a second of each probe); a long one gives each probe a tenth
    of its time at most, and a step many times the baseline is sampled partly."""
    return {
        # the warm-up steps, before any baseline: only a closure step's length bounds it
        "memory": WindowBudget("memory", step_factor=3.0, step_min_s=0.05, run_share=0.1, per_closure=True),
        # whole steps, however many ops: its counts are per step; only a pathological step is cut
        "sampler": WindowBudget("sampler", step_factor=8.0, step_min_s=0.5, run_share=0.1),
        "backward_timer": WindowBudget("backward_timer", step_factor=4.0, step_min_s=0.5, run_share=0.05,
                                       run_min_s=0.2),
        "line_sampler": WindowBudget("line_sampler", step_factor=2.0, step_min_s=0.5, run_share=0.1),
        "profiler": WindowBudget("profiler", step_factor=4.0, step_min_s=0.5, run_share=0.1),
    }
