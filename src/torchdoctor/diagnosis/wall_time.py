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
    compiling = _compiling_row(record, wall, startup)
    if compiling is not None:
        rows.append(compiling)
    return Table(
        title="Where the wall time went",
        columns=["part of the run", "seconds", "share", "detail"],
        rows=rows,
        caption=("The whole run, start to end; phases are counted inside the parts they fell in, at the "
                 "training-loop line that entered them."),
    )


def _compiling_row(record: RunRecord, wall: float, startup: float) -> list | None:
    """torch.compile's compiles (first compiles and recompiles, backward graphs too), wherever they
    fell: which compiled code took the most, and the line that called it."""
    info = record.compile
    if info is None or not info.events:
        return None
    total = info.compile_s
    warmup = record.run.warmup
    buckets: dict[str, float] = {}
    for event in info.events:
        part = ("start-up" if event.start < startup else "warm-up" if event.step <= warmup else "measured steps")
        buckets[part] = buckets.get(part, 0.0) + event.seconds
    by_code: dict[str, list] = {}
    for event in info.events:
        name = (f"{event.module}.forward" if event.module and event.library == "torch" else event.function) or "backward graphs"
        by_code.setdefault(name, []).append(event)
    name, events = max(by_code.items(), key=lambda item: sum(e.seconds for e in item[1]))
    called = next((e.called_from for e in events if e.called_from is not None), None)
    detail = (f"{len(info.events)} compile{'s' if len(info.events) != 1 else ''}; most in {name}"
              + (f" called at {called.path}:{called.line}" if called else "")
              + f" ({sum(e.seconds for e in events):.2f} s, {len(events)}x); "
              + ", ".join(f"{seconds:.2f} s in {part}" for part, seconds in buckets.items()))
    return ["  of which compiling (torch.compile)", _s(total), _share(total, wall), detail]


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
