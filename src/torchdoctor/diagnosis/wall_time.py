"""Where the whole wall time of a run went: start-up, warm-up, the measured steps, what came
after the last step, and each phase (evaluation, checkpoints, logging) wherever it fell.

The step statistics cover measured steps only; this table accounts for the rest, so an
evaluation that ran during warm-up (or a long start-up) is never invisible.
"""

from __future__ import annotations

from torchdoctor.model.findings import Table
from torchdoctor.model.record import PhaseStats, RunRecord

PHASE_WORDS = {"eval": "evaluation", "checkpoint": "checkpoint saving", "logging": "printing and logging"}


def wall_time_table(record: RunRecord) -> Table | None:
    wall = record.run.wall_s
    if wall <= 0:
        return None
    steps = record.steps
    startup = record.run.startup_s if record.run.startup_s is not None else (steps[0].start if steps else wall)
    warm = [s for s in steps if s.warmup]
    measured = [s for s in steps if not s.warmup]
    sampled = [s for s in measured if s.sampled]
    last_end = steps[-1].end if steps else startup
    rows = [
        ["start-up (imports, data and model set-up)", _s(startup), _share(startup, wall), ""],
        [f"warm-up steps ({len(warm)})", _s(sum(s.duration_s for s in warm)),
         _share(sum(s.duration_s for s in warm), wall), ""],
        [f"measured steps ({len(measured)})", _s(sum(s.duration_s for s in measured)),
         _share(sum(s.duration_s for s in measured), wall),
         f"{len(sampled)} under a costly probe, left out of step timings" if sampled else ""],
        ["after the last step (stop, teardown, code after training)", _s(max(0.0, wall - last_end)),
         _share(max(0.0, wall - last_end), wall), ""],
    ]
    for kind in ("eval", "checkpoint", "logging"):
        sites = [p for p in record.phases if p.kind == kind and p.total_s > 0]
        if not sites:
            continue
        total = sum(p.total_s for p in sites)
        rows.append([f"  of which {PHASE_WORDS[kind]}", _s(total), _share(total, wall), _where(record, sites)])
    return Table(
        title="Where the wall time went",
        columns=["part of the run", "seconds", "share", "detail"],
        rows=rows,
        caption=("The whole run, start to end; phases are counted inside the parts they fell in, at the "
                 "training-loop line that entered them."),
    )


def _where(record: RunRecord, sites: list[PhaseStats]) -> str:
    parts = []
    for site in sorted(sites, key=lambda p: -p.total_s)[:2]:
        at = f"{site.location.path}:{site.location.line}" if site.location else "?"
        when = _when(record, site)
        parts.append(f"{site.calls}x at {at}" + (f" ({when})" if when else ""))
    return "; ".join(parts)


def _when(record: RunRecord, site: PhaseStats) -> str:
    """Seconds of the site in each part of the run, from its occurrences."""
    if not site.occurrences:
        return ""
    startup = record.run.startup_s or 0.0
    warmup = record.run.warmup
    measured_steps = len(record.steps)
    last_end = record.steps[-1].end if record.steps else None
    buckets: dict[str, float] = {}
    for occ in site.occurrences:
        if occ.t < startup:
            part = "start-up"
        elif last_end is not None and occ.t >= last_end and occ.after_step >= measured_steps:
            part = "after the last step"
        elif occ.after_step < warmup:
            part = "warm-up"
        else:
            part = "measured steps"
        buckets[part] = buckets.get(part, 0.0) + occ.seconds
    return ", ".join(f"{seconds:.2f} s in {part}" for part, seconds in buckets.items())


def _s(seconds: float) -> float:
    return round(seconds, 2)


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole > 0 else "-"
