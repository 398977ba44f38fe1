"""Where the step time goes when no known habit explains it.

The line sampler sees every line that takes time, whatever it does: a `time.sleep`, a slow
pure-Python metric, file I/O, a custom op. When one line holds a large share of the step and
no other rule has a finding there, the user still learns where the time went.
"""

from __future__ import annotations

from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.record import LineHits, RunRecord
from torchdoctor.rules.base import Rule, ms
from torchdoctor.rules.facts import RunFacts
from torchdoctor.rules.noise import share_lower_bound

# A line holding this share of the step's stack samples is worth a look whatever it does; a
# model's forward spreads over many lines, each well under it.
HOT_LINE_SHARE = 0.25
SURE_SHARE = 0.2  # ...and the share's 90 % lower bound from the sample count is at least this
MEDIUM_SHARE, HIGH_SHARE = 0.4, 0.6  # the severity follows the share: 40 % of the step is not "low"
MIN_SAMPLES = 10  # fewer samples than this are too noisy for a share (±30 % at 10)
MAX_LINES = 3
# A line whose sampled torch ops take this share of its time is compute (a model's forward).
COMPUTE_SHARE = 0.5
# Calls whose time the step split already shows (backward, the optimizer's step).
EXPLAINED_CALLS = (".backward(", "backward(", ".step(")


class HotLine(Rule):
    code = "TD901"
    slug = "hot-line"
    example = "metric = sum(abs(a - b) for a, b in zip(pred.tolist(), target.tolist()))  # pure Python, every step"
    title = "One line takes much of the step, and no known habit explains it"
    rationale = (
        "The line sampler saw this line on top of the user's stack for a large share of the "
        "measured steps, but it matches none of the known habits: it is plain Python, I/O, a "
        "sleep, or a slow op. Knowing where the time goes is where the fix starts."
    )
    fix = (
        "Look at what the line does and move it off the step: precompute it, vectorize it with "
        "tensor ops, do it in a DataLoader worker, or do it every N steps. To see inside it, "
        "profile the step (`torchdoctor run --trace`, py-spy, cProfile)."
    )

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        profile = record.line_profile
        if profile.total_samples < MIN_SAMPLES or not facts.step_s:
            return []
        taken = {(f.location.path, f.location.line) for f in facts.earlier if f.location is not None}
        # code inside an evaluation, a checkpoint or a print: the phase's own finding or row says it
        in_phases = {(p.inner_location.path, p.inner_location.function) for p in record.phases if p.inner_location}
        in_phases |= {(p.location.path, p.location.function) for p in record.phases if p.location}
        step_lines = {(o.step_location.path, o.step_location.line) for o in record.optimizers if o.step_location}
        # waiting for the next batch: TD101 judges it with the loader's own measurements
        loader_lines = {(ld.iterated_at.path, ld.iterated_at.line) for ld in record.loaders if ld.iterated_at}
        findings = []
        for hits in sorted(profile.lines, key=lambda h: -_training_share(profile, h)):
            share = _training_share(profile, hits)
            if share < HOT_LINE_SHARE or len(findings) >= MAX_LINES:
                break
            if share_lower_bound(share, profile.total_samples) < SURE_SHARE:
                continue  # few samples: 6 of 21 say 29 %, and as well 18 %
            place = hits.called_from if hits.library else hits.location  # a library's time, at the user's call
            if place is None:
                continue
            where = (place.path, place.line)
            if hits.loading_samples * 2 >= hits.samples:
                continue  # it ran while loading a batch (a Dataset's __getitem__): TD101 sizes that wait
            if where in taken or where in step_lines or where in loader_lines or _explained(hits) \
                    or (place.path, place.function) in in_phases or (hits.library and (
                        (hits.location.path, hits.location.function) in in_phases)):
                continue
            ops_s = _op_time_per_step(record, hits)
            if ops_s is not None and ops_s >= COMPUTE_SHARE * share * facts.step_s:
                continue  # its torch ops are its time: the model's work, shown in the step split
            findings.append(self._finding(record, facts, hits, share, ops_s))
        return findings

    def _finding(self, record: RunRecord, facts: RunFacts, hits: LineHits, share: float,
                 ops_s: float | None) -> Finding:
        """`ops_s`: the line's torch-op time per step (`_op_time_per_step`), None when not sampled."""
        what = ("it issued no torch ops in the sampled steps: the time is Python, I/O or waiting"
                if ops_s == 0.0 else
                f"its torch ops took {ms(ops_s):.2f} ms per step" if ops_s is not None else
                "its torch ops were not sampled")
        inside = (f" inside {hits.library} (`{hits.text}` at {hits.location}), called from this line"
                  if hits.library else "")
        return self.finding(
            title=f"{share:.0%} of the step on one line, no known habit" + (
                f", inside {hits.library}" if hits.library else f": `{hits.text}`" if hits.text else ""),
            message=(f"The line sampler found this line running{inside} in {hits.samples} of "
                     f"{record.line_profile.total_samples} samples of the measured steps: about "
                     f"{ms(share * facts.step_s):.1f} ms of each {ms(facts.step_s):.1f} ms step; {what}."),
            location=hits.called_from if hits.library else hits.location,
            evidence={"share_of_step_time": round(share, 3), "samples": hits.samples,
                      "total_samples": record.line_profile.total_samples, "source": hits.text,
                      "op_ms_per_step": None if ops_s is None else ms(ops_s)},
            speedup=None,
            basis="not estimated: no known fix applies; the share is what removing the line's work entirely "
                  "would save at most",
            # the share is measured: a line holding half the step is the first thing to look at
            severity=Severity.HIGH if share >= HIGH_SHARE else Severity.MEDIUM if share >= MEDIUM_SHARE else Severity.LOW,
        )


def _training_share(profile, hits: LineHits) -> float:
    """The line's share of the step, its samples inside an evaluation left out: a model's
    forward line runs in both, and the evaluation is its own phase."""
    share = profile.line_share(hits)
    return share * (1 - hits.eval_samples / hits.samples) if hits.samples else share


def _explained(hits: LineHits) -> bool:
    return any(call in hits.text for call in EXPLAINED_CALLS)


def _op_time_per_step(record: RunRecord, hits: LineHits) -> float | None:
    d = record.dispatch
    if not d.sampled_steps:
        return None
    sites = [s for s in d.sites if (s.location.path, s.location.line) == (hits.location.path, hits.location.line)]
    return sum(s.time_s for s in sites) / d.sampled_steps
