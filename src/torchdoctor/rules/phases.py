"""Rules for time outside the training step proper: evaluation, checkpoints, logging.

Evaluation and checkpoints are sized per training interval from every occurrence the run
saw, wherever it fell (start-up, warm-up, measured steps): an evaluation every K steps that
takes E seconds costs E / (K·t + E) of the wall time, t being the training step alone.
Logging is judged only inside the measured steps, from calls that repeat there.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.record import PhaseStats, RunRecord
from torchdoctor.rules.base import MIN_REPORTED_SPEEDUP, Rule, amdahl, ms
from torchdoctor.rules.facts import RunFacts, core_duration, training_loader
from torchdoctor.run.cost import EVAL_SAMPLER, SAMPLER

MIN_LINE_SAMPLES = 10  # fewer stack samples than this are too noisy to use
MIN_REPEATS_IN_WINDOW = 2  # one print in the measured steps is never per-step overhead
# A phase seen once is said when it took this many training steps' worth of time, and ranked
# medium from the second: recurring every few hundred steps it is then a large share.
ONE_OFF_MIN_STEPS = 20
ONE_OFF_MEDIUM_STEPS = 100


@dataclass
class PhaseCost:
    """What one kind of phase costs per training interval."""

    seconds_each: float  # mean length of one occurrence
    period_steps: float  # training steps between occurrences
    period_basis: str  # how the period was found
    share: float  # of the wall time of a training interval with its phase
    occurrences: int
    site: PhaseStats  # the costliest call site
    compiling_s: float = 0.0  # torch.compile compiling inside its occurrences, left out of seconds_each
    sampler_s: float = 0.0  # what the doctor's op sampler added to the first evaluation, left out too


def phase_cost(record: RunRecord, facts: RunFacts, kind: str,
               skip_lines: frozenset[tuple[str, int]] = frozenset()) -> PhaseCost | None:
    """`skip_lines`: sites whose line another finding already explains (not costed twice)."""
    step_s = statistics.fmean(core_duration(s) for s in facts.measured) if facts.measured else None
    if not step_s:
        return None
    sites = [p for p in record.phases if p.kind == kind and p.occurrences
             and not (p.location and (p.location.path, p.location.line) in skip_lines)]
    if not sites:
        if any(p.kind == kind for p in record.phases if p.location
               and (p.location.path, p.location.line) in skip_lines):
            return None
        return _cost_from_window(record, facts, kind, step_s)
    by_position: dict[int, float] = {}
    compiling = sampler = 0.0
    first_t = min((occ.t for site in sites for occ in site.occurrences), default=None)
    for site in sites:
        for occ in site.occurrences:
            inside = compiling_within(record, occ.t, occ.seconds)
            compiling += inside
            sampled = eval_sampler_excess(record) if kind == "eval" and occ.t == first_t else 0.0
            sampler += min(sampled, max(0.0, occ.seconds - inside))
            own = max(0.0, occ.seconds - inside - sampled)
            by_position[occ.after_step] = by_position.get(occ.after_step, 0.0) + own
    positions = sorted(by_position)
    seconds_each = statistics.fmean(by_position.values())
    recurs = _period(record, positions)
    site = max(sites, key=lambda p: p.total_s)
    if recurs is None:  # seen once: how often it recurs is not measured (see OneOff)
        return PhaseCost(seconds_each, 0.0, "seen once", 0.0, len(positions), site, compiling, sampler)
    period, basis = recurs
    share = seconds_each / (period * step_s + seconds_each)
    return PhaseCost(seconds_each, period, basis, share, len(positions), site, compiling, sampler)


def compiling_within(record: RunRecord, start: float, seconds: float) -> float:
    """Seconds of torch.compile compiling (Dynamo's compile events, a backward graph's included) inside
    [start, start + seconds]: an evaluation that first runs a compiled model compiles its graph there,
    once, and that is not what the evaluation costs each time it recurs."""
    info = record.compile
    if info is None or not info.events:
        return 0.0
    end = start + seconds
    inside = sum(max(0.0, min(end, e.start + e.seconds) - max(start, e.start)) for e in info.events)
    return min(seconds, inside)


def eval_sampler_excess(record: RunRecord) -> float:
    """What the doctor's op sampler added to the first evaluation (it samples that one's first batches):
    its active time there less that time at plain speed, taken from the slowdown the op sampler measured
    on training steps. Nothing when either is unknown."""
    cost = record.doctor_cost
    if cost is None:
        return 0.0
    probes = {p.probe: p for p in cost.probes}
    evaluation, training = probes.get(EVAL_SAMPLER), probes.get(SAMPLER)
    if evaluation is None or training is None or not evaluation.active_s or not training.step_ratio \
            or training.step_ratio <= 1:
        return 0.0
    return evaluation.active_s * (1 - 1 / training.step_ratio)


def left_out_note(cost: "PhaseCost") -> str:
    """Said where a phase's time had in it what its figures leave out: compiling, the doctor's sampling."""
    note = ""
    if cost.compiling_s >= 0.001:
        note += (f" torch.compile compiled inside it for {cost.compiling_s:.1f} s in all (a new graph's one-time "
                 "cost, in the wall-time table): left out of these figures.")
    if cost.sampler_s >= 0.0005:
        note += (f" The doctor sampled the first evaluation's ops, which slowed it by an estimated "
                 f"{ms(cost.sampler_s):,.1f} ms (its sampled time there, at the slowdown the op sampler measured on "
                 "training steps): left out of these figures.")
    return note


def _cost_from_window(record: RunRecord, facts: RunFacts, kind: str, step_s: float) -> PhaseCost | None:
    """Records written before occurrences were kept (schema < 4): the phase's share of the
    post-warmup steps, as those versions measured it."""
    sites = [p for p in record.phases if p.kind == kind and p.calls]
    share = facts.window_share(f"{kind}_s")
    if not sites or share <= 0:
        return None
    site = max(sites, key=lambda p: p.total_s)
    each = site.total_s / site.calls
    period = each * (1 - share) / (share * step_s) if share < 1 else 0.0
    return PhaseCost(each, period, "from its share of the measured steps", share, site.calls, site)


def _period(record: RunRecord, positions: list[int]) -> tuple[float, str] | None:
    """Training steps between occurrences, and how that was found; None when one occurrence
    says nothing about how often it recurs (a one-off evaluation before training)."""
    if len(positions) >= 2 and all(_bookend(record, p) for p in positions):
        return None  # a check before training and a final one after it: each once, not every N steps
    if len(positions) >= 2:
        gaps = [b - a for a, b in zip(positions, positions[1:])]
        return max(1.0, statistics.median(gaps)), f"every {statistics.median(gaps):g} steps, as measured"
    loader = training_loader(record)
    per_epoch = _steps_per_epoch(loader) if loader else None
    if per_epoch and positions[0] in (loader.epoch_start_steps or [0]):
        return float(per_epoch), f"seen once, at an epoch boundary: taken as once per epoch of {per_epoch} steps"
    return None


def _bookend(record: RunRecord, after_step: int) -> bool:
    """Before the first training step, or after the last one of a run that ended by itself."""
    return after_step == 0 or (record.run.status in ("completed", "exited") and after_step == len(record.steps))


def _steps_per_epoch(loader) -> int | None:
    if not loader.dataset_len or not loader.batch_size:
        return None
    full, rest = divmod(loader.dataset_len, loader.batch_size)
    return full + (1 if rest and not loader.drop_last else 0)


def seen_once(rule: Rule, record: RunRecord, facts: RunFacts, cost: PhaseCost, what: str) -> list[Finding]:
    """One occurrence (an evaluation before the first step, `if step % 500 == 0:`): its period
    is not measured, so no share is claimed; a heavy one is said with what it measured, as
    training steps' worth, at the call site in the loop."""
    step_s = statistics.fmean(core_duration(s) for s in facts.measured)
    steps_worth = cost.seconds_each / step_s
    if steps_worth < ONE_OFF_MIN_STEPS or cost.site.location is None:
        return []  # the wall-time table shows it
    after = cost.site.occurrences[0].after_step if cost.site.occurrences else 0
    if record.steps and after >= len(record.steps):
        return []  # after the last step (a final test): the run's end, not a cost of training
    when = "before the first training step" if after == 0 else f"after step {after}"
    return [rule.finding(
        title=f"One {what} took as long as {steps_worth:,.0f} training steps",
        message=(f"The {what} {when} took {ms(cost.seconds_each):,.0f} ms, against "
                 f"{ms(step_s):.1f} ms per training step. It ran once in this bounded run, so how often it "
                 f"recurs was not measured: every K steps it costs {ms(cost.seconds_each):,.0f} / "
                 f"(K x {ms(step_s):.1f} + {ms(cost.seconds_each):,.0f}) ms of the wall time.{left_out_note(cost)}"),
        location=cost.site.location,
        evidence={"seconds_each": round(cost.seconds_each, 4), "training_steps_worth": round(steps_worth, 1),
                  "after_step": after, "occurrences": 1, "step_ms": ms(step_s),
                  "compiling_s_left_out": round(cost.compiling_s, 3), "doctor_sampling_s_left_out": round(cost.sampler_s, 4)},
        speedup=None,
        basis="not estimated: seen once, so its period is not measured (a longer run, or `torchdoctor run "
              "--steps` past the next one, measures it)",
        severity=Severity.MEDIUM if steps_worth >= ONE_OFF_MEDIUM_STEPS else Severity.LOW,
    )]


class _IntervalPhaseRule(Rule):
    """Evaluation or checkpoints: the fix makes the phase `reduction_factor` times rarer."""

    kind = ""
    min_share = 0.05
    reduction_factor = 5
    what = ""

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        cost = phase_cost(record, facts, self.kind)
        if cost is not None and not cost.period_steps:
            return self._seen_once(record, facts, cost)
        if cost is None or cost.share < self.min_share:
            return []
        saved_share = cost.share * (1 - 1 / self.reduction_factor)
        speedup = amdahl(1.0, saved_share)
        if speedup < MIN_REPORTED_SPEEDUP:
            return []
        site = cost.site
        return [
            self.finding(
                title=f"{self.what} takes {cost.share:.0%} of training wall time",
                message=(
                    f"Each {self.what.lower()} took {ms(cost.seconds_each):.0f} ms ({cost.occurrences} seen, "
                    f"{cost.period_basis}), against {ms(cost.seconds_each / cost.share - cost.seconds_each):.0f} ms of "
                    f"training in between.{left_out_note(cost)}"
                ),
                location=site.location,
                evidence={
                    "share_of_wall_time": round(cost.share, 3),
                    "seconds_each": round(cost.seconds_each, 4),
                    "period_steps": round(cost.period_steps, 1),
                    "occurrences": cost.occurrences,
                    "compiling_s_left_out": round(cost.compiling_s, 3),
                    "doctor_sampling_s_left_out": round(cost.sampler_s, 4),
                    "calls_at_line": site.calls,
                    "inner_location": (f"{site.inner_location.path}:{site.inner_location.line}"
                                       if site.inner_location else None),
                    # what `--set eval=off` / `checkpoint=off` measure: the phase gone entirely
                    "speedup_if_removed": round(amdahl(1.0, cost.share), 3),
                },
                speedup=speedup,
                basis=(f"Amdahl: {self.kind} {ms(cost.seconds_each):.0f} ms per {cost.period_steps:g} training "
                       f"steps ({cost.period_basis}), made {self.reduction_factor}x less frequent"),
            )
        ]


    def _seen_once(self, record: RunRecord, facts: RunFacts, cost: PhaseCost) -> list[Finding]:
        return seen_once(self, record, facts, cost, self.what.lower())


class FrequentEval(_IntervalPhaseRule):
    code = "TD701"
    slug = "frequent-eval"
    example = (
        "for step, (x, y) in enumerate(loader):\n"
        "    train_step(x, y)\n"
        "    val_acc = evaluate(model, val_loader)  # a full validation pass every step"
    )
    title = "Evaluation takes a large share of wall time"
    kind, what = "eval", "Evaluation"
    min_share = 0.10
    rationale = "Every evaluation pass stops training; evaluating often on a large set dominates."
    fix = (
        "Evaluate less often or on a subset during training, and fully at the end:\n```python\n"
        "if step % eval_every == 0:        # e.g. every 1000 steps, not every 50\n"
        "    evaluate(model, val_subset)\n```"
    )


class FrequentCheckpoint(_IntervalPhaseRule):
    code = "TD702"
    slug = "frequent-checkpoint"
    example = (
        "for step, (x, y) in enumerate(loader):\n"
        "    train_step(x, y)\n"
        "    torch.save(model.state_dict(), \"ckpt.pt\")  # every step"
    )
    title = "Checkpoint saving takes a large share of wall time"
    kind, what = "checkpoint", "Checkpoint saving"
    rationale = "`torch.save` serializes and writes the whole state synchronously; training waits."
    fix = (
        "Save less often (by time or every N steps), and only what you need to resume:\n```python\n"
        "if step % save_every == 0:\n    torch.save({'model': model.state_dict(), "
        "'opt': opt.state_dict()}, path)\n```"
    )


def _typical_total(site: PhaseStats) -> float:
    """The measured steps' calls at the site's typical (median) call time: one slow call (the
    first write to a pipe, a stall of the machine) is not the rate of the others."""
    each = [o.seconds for o in site.occurrences]
    if len(each) < 3:
        return site.in_measured_steps_s
    return min(site.in_measured_steps_s, statistics.median(each) * site.calls_in_measured)


TENSOR_FORMATTING = {"__format__", "__repr__"}  # printing a tensor: f"{loss}", print(grad)


def _formats_tensors(finding: Finding) -> bool:
    """A host-sync finding whose reads are a tensor's formatting (an f-string or print of the
    tensor): on a CPU the formatting is what the print costs, so the print is still costed."""
    apis = finding.evidence.get("apis")
    return bool(apis) and all(str(api).strip(".()") in TENSOR_FORMATTING for api in apis)


class LoggingOverhead(Rule):
    code = "TD703"
    slug = "logging-overhead"
    example = "print(f\"step {step} loss {loss} grad {model.fc.weight.grad}\")  # every step"
    title = "Per-step logging or plotting costs measurable time"
    rationale = (
        "Formatting tensors for print/logging every step is slow (and on a GPU it syncs); "
        "the console write itself can block; a figure redrawn in the loop (`plt.pause` sleeps "
        "to show it) can take longer than the training step."
    )
    fix = (
        "Log every N steps, and log Python floats, not tensors; draw figures rarely (or write the values to "
        "TensorBoard and plot there):\n```python\nif step % 50 == 0:\n"
        "    print(f\"step {step} loss {loss.item():.4f}\")\n```"
    )
    min_share = 0.05  # under it, a busy machine's noise
    reduction_factor = 10

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        # a print whose line already has a finding (`print(loss.item())`: the sync) is that finding's,
        # unless that finding is the print formatting a tensor: the formatting is the print's own cost
        taken = frozenset((f.location.path, f.location.line) for f in facts.earlier
                          if f.location is not None and not _formats_tensors(f))
        sites = [p for p in record.phases if p.kind == "logging" and p.calls_in_measured >= MIN_REPEATS_IN_WINDOW
                 and not (p.location and (p.location.path, p.location.line) in taken)]
        wall = sum(s.duration_s for s in facts.window)
        if not sites or wall <= 0:  # printing or plotting every N steps (a figure per epoch): per interval
            return self._per_interval(record, facts, taken)
        share = self._share(record, sites, wall)
        saved = share * (1 - 1 / self.reduction_factor)
        speedup = amdahl(1.0, saved)
        if share < self.min_share or speedup < MIN_REPORTED_SPEEDUP:
            return []
        site = max(sites, key=lambda p: p.in_measured_steps_s)
        calls = sum(p.calls_in_measured for p in sites)
        return [self.finding(
            title=f"Printing, logging and plotting take {share:.0%} of the measured steps",
            message=(f"{calls} print/log calls ran inside the {len(facts.window)} measured steps and took "
                     f"{ms(share * wall):.0f} ms of {ms(wall):.0f} ms, formatting included."),
            location=site.location,
            evidence={"share_of_wall_time": round(share, 3), "calls_in_measured_steps": calls,
                      "measured_steps": len(facts.window), "seconds_in_window": round(share * wall, 4)},
            speedup=speedup,
            basis=f"Amdahl: the measured logging share made {self.reduction_factor}x less frequent",
        )]

    def _per_interval(self, record: RunRecord, facts: RunFacts, taken: frozenset[tuple[str, int]]) -> list[Finding]:
        """Output that comes every N steps, not every step (a figure per epoch, every 50 steps):
        sized per interval from every occurrence, as evaluations are; seen once, said if heavy."""
        cost = phase_cost(record, facts, "logging", skip_lines=taken)
        if cost is None:
            return []
        if not cost.period_steps:
            return seen_once(self, record, facts, cost, "print or plot")
        saved = cost.share * (1 - 1 / self.reduction_factor)
        if cost.share < self.min_share or amdahl(1.0, saved) < MIN_REPORTED_SPEEDUP:
            return []
        return [self.finding(
            title=f"Printing and plotting every {cost.period_steps:g} steps take {cost.share:.0%} of the wall time",
            message=(f"Each time, {ms(cost.seconds_each):.0f} ms of output ({cost.occurrences} seen, "
                     f"{cost.period_basis}), against {ms(cost.seconds_each / cost.share - cost.seconds_each):.0f} ms "
                     "of training in between."),
            location=cost.site.location,
            evidence={"share_of_wall_time": round(cost.share, 3), "seconds_each": round(cost.seconds_each, 4),
                      "period_steps": round(cost.period_steps, 1), "occurrences": cost.occurrences},
            speedup=amdahl(1.0, saved),
            basis=(f"Amdahl: output {ms(cost.seconds_each):.0f} ms per {cost.period_steps:g} training steps "
                   f"({cost.period_basis}), made {self.reduction_factor}x less frequent"),
        )]

    @staticmethod
    def _share(record: RunRecord, sites: list[PhaseStats], wall: float) -> float:
        """The timed calls miss the formatting of their arguments (an f-string with tensors is
        evaluated before print runs); the stack samples of the calling lines include it, so
        the larger of the two measurements is used."""
        timed = sum(_typical_total(p) for p in sites) / wall
        profile = record.line_profile
        if profile.total_samples < MIN_LINE_SAMPLES:
            return timed
        # the print/log lines themselves: the loop line that called them holds its other work too
        lines = {(loc.path, loc.line) for p in sites for loc in [p.inner_location or p.location] if loc}
        sampled = sum(profile.share(path, line) or 0.0 for path, line in lines)
        return max(timed, sampled)
