"""A followed run's report (`run --follow`): the run split at its changes, each stretch diagnosed
on its own steps and its own probe window, so findings from different times stay apart ("from step
300: ..."); each change named with its cause; the black box leading when the run ended badly; and
what the following cost.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from torchdoctor.model.findings import Finding, Report, Severity, Table
from torchdoctor.model.follow_record import (AFTER_CHANGE, DATA_WAIT, STEP_TIME, STRAGGLER, ChangePoint, FollowRecord,
                                             ProbeWindow)
from torchdoctor.model.location import Location
from torchdoctor.model.record import DispatchSample, LineHits, LineProfile, PhaseStats, RunRecord
from torchdoctor.rules.base import ms
from torchdoctor.rules.changes import busy_machine_explains, said_once, wait_holds_added_time
from torchdoctor.rules.shifts import RECENT_STEPS

SHIFT_KINDS = (STEP_TIME, DATA_WAIT)
CHANGE_CODES = ("TD902", "TD903", "TD904")


def shift_changes(follow: FollowRecord | None) -> list[ChangePoint]:
    """The changes of the script's own steps, where the run is split into stretches: not those the
    busy machine explains (the script did the same work, only slower)."""
    return sorted((c for c in (follow.changes if follow else []) if c.kind in SHIFT_KINDS
                   and not busy_machine_explains(c)), key=lambda c: c.step)


def first_stretch(record: RunRecord) -> RunRecord:
    """The record the usual rules judge: the steps before the first change (all of them when none)."""
    changes = shift_changes(record.follow)
    if not changes:
        return record
    return dataclasses.replace(record, steps=[s for s in record.steps if s.index < changes[0].step],
                               phases=phases_within(record, 1, changes[0].step))


def phases_within(record: RunRecord, first: int, end: int | None) -> list[PhaseStats]:
    """Each evaluation, checkpoint and logging site as the steps from `first` up to (not including) `end`
    saw it, from its timed occurrences there. The run's totals are the whole job's: judged against one
    stretch's steps they made a GAN's plotting "1189% of the measured steps". A site whose kept
    occurrences (the first MAX_OCCURRENCES) end before the stretch has nothing measured in it."""
    inside = lambda step: step >= first and (end is None or step < end)  # noqa: E731
    measured = {s.index for s in record.steps if not s.warmup and inside(s.index)}
    out = []
    for site in record.phases:
        occurrences = [o for o in site.occurrences if inside(o.after_step + 1)]
        if not occurrences:
            continue
        timed = [o for o in occurrences if o.after_step + 1 in measured]
        out.append(dataclasses.replace(site, calls=len(occurrences), total_s=sum(o.seconds for o in occurrences),
                                       in_measured_steps_s=sum(o.seconds for o in timed), calls_in_measured=len(timed),
                                       occurrences=occurrences))
    return out


def window_profile(window: ProbeWindow | None) -> LineProfile:
    """A window's lines as the line profile the rules read."""
    if window is None or not window.lines:
        return LineProfile()
    return LineProfile(interval_s=0.001, total_samples=window.samples, total_s=window.sampled_s, method="signal",
                       lines=[LineHits(location=w.location, samples=w.samples, text=w.text, library=w.library,
                                       seconds=w.seconds, called_from=w.called_from, loading_samples=w.loading_samples)
                              for w in window.lines])


def stretch_record(record: RunRecord, first: int, end: int | None, window: ProbeWindow | None) -> RunRecord:
    """The steps from `first` up to (not including) `end`, with the window sampled in them: probe
    results of the run's start (the op sampler's, memory accounting, the trace) are not theirs."""
    steps = [s for s in record.steps if s.index >= first and (end is None or s.index < end)]
    run = dataclasses.replace(record.run, startup_s=None)
    return dataclasses.replace(record, run=run, steps=steps, phases=phases_within(record, first, end),
                               line_profile=window_profile(window),
                               dispatch=DispatchSample(), trace=None, trace_file=None, memory=None, follow=None,
                               static_findings=[], doctor_cost=None, unfinished_step=None, losses=None,
                               batch_scaling=None)


def add_follow(report: Report, record: RunRecord, analyze: Callable[[RunRecord], Report]) -> None:
    """The followed run's parts of `report` (made by `analyze` from the first stretch)."""
    follow = record.follow
    if follow is None:
        return
    if report.summary is not None:  # the record keeps the start and the end of a long job (run/follow/kept.py)
        report.summary.steps_total = max(report.summary.steps_total, follow.steps)
    changes = shift_changes(follow)
    for i, change in enumerate(changes):
        end = changes[i + 1].step if i + 1 < len(changes) else None
        window = follow.windows[change.window] if change.window is not None and change.window < len(follow.windows) else None
        later = analyze(stretch_record(record, change.step, end, window)).findings
        later = [f for f in later if f.code not in CHANGE_CODES]
        for finding in later:
            finding.title = f"from step {change.step}: {finding.title}"
            finding.evidence = {**finding.evidence, "from_step": change.step}
        _name_the_cause(report, change, later, window, _window_before(follow, change.step))
        _whole_stretch(report, record, change, end)
        report.findings.extend(f for f in later if not _found_before(report.findings, f, change.step))
    _say_where_found_again(report.findings)
    report.findings = said_once(report.findings, "slowed_alike",
                                "From step {step}, every part of the step slowed alike, {times} times",
                                "with no part of the script taking the added time", "slowed_alike_from_steps")
    for change in (c for c in follow.changes if c.kind == STRAGGLER):
        _name_the_straggler(report, follow, change)
    stacks = _rank_stacks(record) or _blackbox_stacks(follow)
    tables = [t for t in (stacks, _last_steps(follow)) if t is not None]
    report.tables[0:0] = tables  # what happened leads the measurements
    windows = _windows_table(follow)
    if windows is not None:
        report.tables.append(windows)
    report.notes.append(_cost_note(record, follow))
    if changes:
        report.notes.append(f"Findings without \"from step N\" come from the steps before step {changes[0].step} "
                            "and the probe windows at the start of the run.")
    if follow.live:
        report.notes.insert(0, f"The run is still going: this report is made from what it had written by "
                               f"{record.run.wall_s:.0f} s (step {follow.steps}); `torchdoctor report` again shows more.")


# A stretch's finding is the same news as an earlier one of the same rule at the same place unless its
# estimate is larger by more than this factor (the loader's wait that grew from 8 % to 70 % of the step
# is new; the same 1.19x found again after each change is not)
SAME_SIZE = 1.02


def _found_before(findings: list[Finding], later: Finding, step: int) -> bool:
    """Whether `later` (a stretch's, from `step`) repeats a finding already kept; the kept one then
    lists `step` among those it was found again from."""
    for earlier in findings:
        if earlier.code != later.code or str(earlier.location) != str(later.location) or earlier.code in CHANGE_CODES:
            continue
        a, b = earlier.estimated_speedup, later.estimated_speedup
        if (a is None) != (b is None) or (b is not None and b > a * SAME_SIZE) or later.severity.rank < earlier.severity.rank:
            continue
        earlier.evidence = {**earlier.evidence,
                            "found_again_from_steps": [*earlier.evidence.get("found_again_from_steps", []), step]}
        return True
    return False


def _say_where_found_again(findings: list[Finding]) -> None:
    for finding in findings:
        steps = finding.evidence.get("found_again_from_steps")
        if steps:
            many = len(steps) > 1
            finding.message += (f" Found again, no larger, in the stretch{'es' if many else ''} after the "
                                f"change{'s' if many else ''} at step{'s' if many else ''} "
                                f"{', '.join(str(s) for s in steps)}.")


def _window_before(follow: FollowRecord, step: int) -> ProbeWindow | None:
    """The last window with line samples that ended before `step`: the lines' shares before a change."""
    return next((w for w in reversed(follow.windows) if w.lines and w.last_step < step), None)


# A line took a change's added time when its share of the step rose by at least this much of the added
# time (a line that only slowed with every other line keeps its share: the machine, or more of the same
# work everywhere), and by more than twice the sampling error of the two windows' shares.
LINE_EXPLAINS_SHARE = 0.5


def line_that_took_it(before: ProbeWindow | None, after: ProbeWindow | None,
                      change: ChangePoint) -> tuple[LineHits | None, dict] | None:
    """(the line whose share of the step rose by enough to explain the added step time, or None when
    none did; the evidence), or None when there is nothing to compare (a window without lines)."""
    old, new = window_profile(before), window_profile(after)
    step_before, step_after = change.figures_before.get("step_s"), change.figures_after.get("step_s")
    if not old.lines or not new.lines or not step_before or not step_after or step_after <= step_before:
        return None
    key = lambda h: (str(h.location), str(h.called_from))  # noqa: E731
    shares = {key(h): old.line_share(h) for h in old.lines}
    added = step_after - step_before
    best, gain = None, 0.0
    for hits in new.lines:
        rise = new.line_share(hits) - shares.get(key(hits), 0.0)
        if rise > gain:
            best, gain = hits, rise
    top = max(new.lines, key=lambda h: h.seconds)
    evidence = {"top_line": str(top.location), "top_line_share_before": round(shares.get(key(top), 0.0), 3),
                "top_line_share_after": round(new.line_share(top), 3), "added_ms": ms(added),
                "samples_before": old.total_samples, "samples_after": new.total_samples}
    if best is None:
        return None, evidence
    share = new.line_share(best)
    before_share = shares.get(key(best), 0.0)
    error = ((share * (1 - share)) / max(1, new.total_samples)
             + (before_share * (1 - before_share)) / max(1, old.total_samples)) ** 0.5
    evidence.update(rising_line=str(best.location), rising_line_gain=round(gain, 3),
                    rising_line_added_ms=ms(gain * step_after))
    if gain * step_after >= LINE_EXPLAINS_SHARE * added and gain > 2 * error:
        return best, evidence
    return None, evidence


def _name_the_cause(report: Report, change: ChangePoint, later: list[Finding], window: ProbeWindow | None,
                    before: ProbeWindow | None = None) -> None:
    """The change's own finding gets the cause found right after it: the stretch's top finding
    with a line, and the line that took most of the window. Neither is a cause when it was there
    before the change at the same share: when the line samples before and after it show that no line
    took the added time, the finding says so and names none (a machine that slowed, or more of the same
    work everywhere), unestimated."""
    code = "TD902" if change.kind == STEP_TIME else "TD903"
    own = next((f for f in report.findings if f.code == code and f.evidence.get("from_step") == change.step), None)
    if own is None:
        return
    ranked = sorted(later, key=Finding.sort_key)
    cause = next((f for f in ranked if f.location is not None), None)
    rising = None
    if own.evidence.get("busy_machine") or own.evidence.get("slowed_alike"):
        cause = None  # the machine's change: a finding of the stretch is not what changed
    elif code == "TD902":
        judged = line_that_took_it(before, window, change) if window is not None else None
        if judged is not None:
            rising, evidence = judged
            own.evidence = {**own.evidence, "lines_before_and_after": evidence}
            if rising is None:  # the stretch's findings describe its steps, not what changed in them
                _no_line_took_it(own, change, window, before, evidence)
                return
        elif _timed_parts_slowed_alike(change):  # no line samples to compare: the hooks' timings say it
            _slowed_alike_by_timings(own, change)
            return
    top = _top_line(window)
    parts = []
    if window is not None:
        parts.append(f"the window sampled right after it (steps {window.first_step}-{window.last_step})")
    if cause is not None:
        parts.append(f"found \"{cause.title.removeprefix(f'from step {change.step}: ')}\" ({cause.code}) at "
                     f"{cause.location}")
        own.location = cause.location
    if rising is not None:  # the line whose share rose by the added time: what the steps started doing
        where = _users_line(rising)
        text = f" `{rising.text}`" if rising.text else ""
        lines = own.evidence["lines_before_and_after"]
        parts.append(f"the line that took the added time: {rising.location}{text} (its share of the step rose by "
                     f"{lines['rising_line_gain']:.0%}, {lines['rising_line_added_ms']:.2f} ms a step)")
        if own.location is None:
            own.location = where
    if rising is not None and top is not None:
        own.evidence = {**own.evidence, "window_top_line": str(top[0].location), "window_top_line_share": round(top[1], 3)}
    elif top is not None:
        hits, share, loading = top
        where = _users_line(hits)
        text = f" `{hits.text}`" if hits.text else ""
        parts.append(f"the line that took most of it: {hits.location}{text} ({share:.0%} of the window"
                     + (f", {loading:.0%} of its samples while loading a batch" if loading else "") + ")")
        if own.location is None and not own.evidence.get("busy_machine") and not own.evidence.get("slowed_alike"):
            own.location = where
        own.evidence = {**own.evidence, "window_top_line": str(hits.location), "window_top_line_share": round(share, 3)}
    if cause is not None:
        own.evidence = {**own.evidence, "cause_code": cause.code}
        own.fix = cause.fix
    if parts:
        own.message += " Cause: " + "; ".join(parts) + "."
    elif change.window is None:
        own.message += " No probe window could be sampled after it (the run ended, or the cost bound was spent)."


def _users_line(hits: LineHits) -> Location:
    """A sampled line as the user's: inside a library, the user's line that called into it."""
    return hits.called_from if hits.library and hits.called_from else hits.location


def _no_line_took_it(own: Finding, change: ChangePoint, window: ProbeWindow, before: ProbeWindow | None,
                     evidence: dict) -> None:
    """A step-time change no line of the script took: said with what was compared, ranked low, no estimate."""
    parts = []
    for key, label in (("compute_s", "backward and optimizer"), ("data_wait_s", "data wait")):
        a, b = change.figures_before.get(key), change.figures_after.get(key)
        if a and b:
            parts.append(f"{label} x{b / a:.2f}")
    step = change.figures_after["step_s"] / change.figures_before["step_s"]
    alike = f" ({', '.join(parts)}, the step x{step:.2f})" if parts else ""
    own.message += (
        f" Cause: none of the script's lines. The window sampled right after it (steps {window.first_step}-"
        f"{window.last_step}) against the one before (steps {before.first_step}-{before.last_step}) finds the same "
        f"lines taking the same shares: the top one, {evidence['top_line']}, {evidence['top_line_share_before']:.0%} "
        f"before and {evidence['top_line_share_after']:.0%} after, and no line's share rose by enough to hold "
        f"the added {evidence['added_ms']:.2f} ms{alike}. Every part of the step slowed alike: a machine that got "
        "slower fits (a shared machine's neighbours, thermal or power throttling), or more of the same work in "
        "every part; nothing the script started doing shows.")
    _the_machines(own, "not estimated: no line of the script took the added time (the line samples before and after "
                       "the change), so no fix of the script is sized", no_line_took_it=True)


def _the_machines(own: Finding, basis: str, **evidence) -> None:
    """A change every part of the step shared: ranked low, no estimate, no line."""
    own.severity, own.estimated_speedup, own.estimate_basis, own.location = Severity.LOW, None, basis, None
    own.evidence = {**own.evidence, **evidence, "slowed_alike": True}


def _timed_parts_slowed_alike(change: ChangePoint) -> bool:
    """Backward and optimizer (the hooks time them, apart from the forward and the data wait) slowed
    by at least half as much as the whole step, relatively, and the data wait holds less than half of
    the added time: the step slowed in every part, not in one the script started doing differently."""
    fb, fa = change.figures_before, change.figures_after
    if not all(fb.get(k) and fa.get(k) for k in ("step_s", "compute_s")) or fa["step_s"] <= fb["step_s"]:
        return False
    step, compute = fa["step_s"] / fb["step_s"], fa["compute_s"] / fb["compute_s"]
    return compute - 1 >= LINE_EXPLAINS_SHARE * (step - 1) and not wait_holds_added_time(change)


def _slowed_alike_by_timings(own: Finding, change: ChangePoint) -> None:
    """A step-time change with no line samples to compare (no window after it: the cost bound was spent,
    or the run ended) where the timed parts slowed with the step: said as the machine's, low, no estimate."""
    fb, fa = change.figures_before, change.figures_after
    own.message += (
        f" Cause: none found in the script. No line window could be compared across it, but the parts the hooks "
        f"time slowed with the whole step: backward and optimizer x{fa['compute_s'] / fb['compute_s']:.2f}, the step "
        f"x{fa['step_s'] / fb['step_s']:.2f}, the data wait {ms(fb.get('data_wait_s', 0.0)):.2f} → "
        f"{ms(fa.get('data_wait_s', 0.0)):.2f} ms. Every part of the step slowed alike: a machine that got slower "
        "fits (a shared machine's neighbours, thermal or power throttling), or more of the same work in every part.")
    _the_machines(own, "not estimated: the backward and optimizer the hooks time slowed with the step, so no part "
                       "the script changed is sized")


def _name_the_straggler(report: Report, follow: FollowRecord, change: ChangePoint) -> None:
    """The straggler's finding (TD905) gets the line its own window sampled right after it; a step-time
    or data-wait change of the ranks at the same step is said to be their wait for it."""
    own = next((f for f in report.findings if f.code == "TD905" and f.evidence.get("from_step") == change.step
                and f.evidence.get("rank") == change.rank), None)
    if own is None:
        return
    window = follow.windows[change.window] if change.window is not None and change.window < len(follow.windows) else None
    top = _top_line(window)
    if window is not None and top is not None:
        hits, share, loading = top
        own.location = _users_line(hits)
        text = f" `{hits.text}`" if hits.text else ""
        own.message += (f" Cause: rank {change.rank}'s own window sampled right after it (steps {window.first_step}-"
                        f"{window.last_step}); the line that took most of it: {hits.location}{text} ({share:.0%} of the "
                        "window" + (f", {loading:.0%} of its samples while loading a batch" if loading else "") + ").")
        own.evidence = {**own.evidence, "window_top_line": str(hits.location), "window_top_line_share": round(share, 3)}
    else:
        own.message += f" No window of rank {change.rank}'s probes was sampled right after it."
    for other in report.findings:
        if other.code in ("TD902", "TD903") and abs(other.evidence.get("from_step", -10**9) - change.step) <= RECENT_STEPS:
            # the same slowdown, seen from the lowest rank: said once, as the straggler's (ranked, estimated there)
            other.title += f" (rank {change.rank} became the straggler: TD905)"
            other.message += (f" Rank {change.rank} became the straggler from step {change.step} (TD905): the slower "
                              "steps are the other ranks' wait for it in the step's collectives; its estimate is "
                              "TD905's.")
            other.evidence = {**other.evidence, "straggler_rank": change.rank}
            other.estimated_speedup, other.estimate_basis, other.severity = None, "", Severity.LOW
            other.fix = own.fix
            if own.location is not None:
                other.location = own.location


def _rank_stacks(record: RunRecord) -> Table | None:
    """A multi-rank followed run: every rank's black box, the training thread's stack of each (and
    the other threads of the rank that failed first)."""
    boxes = [v.blackbox for v in record.ranks if v.blackbox is not None]
    if not boxes:
        return None
    lead = record.follow.blackbox.rank if record.follow is not None and record.follow.blackbox is not None else None
    rows: list[list] = []
    for box in boxes:
        for thread in box.threads:
            if not thread.main and box.rank != lead:
                continue
            label = f"rank {box.rank} · {thread.name}{' (training)' if thread.main else ''}"
            why = f"{box.reason}; waits in {box.waiting_in}" if thread.main and box.waiting_in else box.reason
            if not thread.frames:
                rows.append([label, why, "—", ""])
            for i, frame in enumerate(reversed(thread.frames[-12:])):
                rows.append([label if i == 0 else "", why if i == 0 else "",
                             f"{frame.path}:{frame.line} {frame.function}()", frame.text])
    missing = [v.rank for v in record.ranks if v.blackbox is None]
    caption = ("Every rank's black box: the training thread's stack of each rank (and every thread of the rank that "
               f"{'failed first' if lead is not None else 'stopped first'}), innermost frame first, up to 12 per "
               "thread, with the collective it waited in for the others; torchdoctor's own frames and threads left "
               "out.")
    if missing:
        caption += f" No black box from rank(s) {', '.join(map(str, missing))} (ended well, or killed before writing)."
    return Table(title="Black box: every rank's stacks when the run stopped", columns=["rank · thread", "why", "frame",
                                                                                        "line"],
                 rows=rows, caption=caption)


def _whole_stretch(report: Report, record: RunRecord, change: ChangePoint, end: int | None) -> None:
    """The change's finding was sized at detection, on the steps then; the record has the whole stretch."""
    import statistics

    code = "TD902" if change.kind == STEP_TIME else "TD903"
    own = next((f for f in report.findings if f.code == code and f.evidence.get("from_step") == change.step), None)
    steps = [s for s in record.steps if s.index >= change.step and (end is None or s.index < end)
             and not s.warmup and not s.sampled]
    if own is None or len(steps) < 2:
        return
    median = statistics.median(s.duration_s for s in steps)
    wait = statistics.median(s.data_wait_s for s in steps)
    last = steps[-1].index
    own.message += (f" Over the whole stretch after it (steps {change.step}-{last}, {len(steps)} measured): median step "
                    f"{ms(median):.2f} ms, data wait {ms(wait):.2f} ms.")
    own.evidence = {**own.evidence, "stretch_median_ms": ms(median), "stretch_steps": len(steps)}
    key, figure = ("step_s", median) if code == "TD902" else ("data_wait_s", wait)
    before, after = change.figures_before.get(key), change.figures_after.get(key)
    if before is None or after is None or after <= before or len(steps) < LASTED_STEPS:
        return
    if figure - before < 0.5 * (after - before):  # the stretch sits nearer the old level than the new one
        _did_not_last(own, change, code, before, after, figure, len(steps))


# A change is judged on the RECENT_STEPS after it; over a stretch this much longer, its median says
# whether it lasted (a GAN's figure redrawn every 50 steps slowed 20 steps 1.75x, then the steps were
# back at their old median for 5,800 steps, and the finding said "stayed so", high)
LASTED_STEPS = 5 * RECENT_STEPS


def _did_not_last(own: Finding, change: ChangePoint, code: str, before: float, after: float, figure: float,
                  steps: int) -> None:
    what = "the median step" if code == "TD902" else "the median data wait"
    if code == "TD902":
        own.title = (f"From step {change.step}, steps were {after / max(before, 1e-12):.2f}x slower for at least "
                     f"{change.after.steps} steps, then back")
    else:
        own.title = f"From step {change.step}, each step waited {ms(after):.1f} ms for data for a while, then back"
    own.message += (f" It did not last: over the {steps} measured steps of the stretch {what} was {ms(figure):.2f} ms, "
                    f"nearer its level before ({ms(before):.2f} ms) than the {ms(after):.2f} ms the test saw.")
    if own.severity.rank < Severity.LOW.rank:
        own.severity = Severity.LOW
    own.estimated_speedup = None
    own.estimate_basis = (f"not estimated: {what} over the stretch after it was back near its level before, so a "
                          "fix would save a few steps' time")
    own.evidence = {**own.evidence, "did_not_last": True}


def _top_line(window: ProbeWindow | None) -> tuple[LineHits, float, float] | None:
    profile = window_profile(window)
    if not profile.lines or profile.total_s <= 0:
        return None
    best = max(profile.lines, key=lambda h: h.seconds)
    return best, profile.line_share(best), (best.loading_samples / best.samples if best.samples else 0.0)


def ended_line(record: RunRecord) -> str | None:
    """The black box's one line: what happened and where (None: the run ended well)."""
    box = record.follow.blackbox if record.follow is not None else None
    if box is None:
        return None
    where = f" at {box.where} in {box.where.function}()" if box.where is not None else ""
    return f"{box.message}{where} (step {box.step}, {box.t:.1f} s)"


def _blackbox_stacks(follow: FollowRecord) -> Table | None:
    box = follow.blackbox
    if box is None:
        return None
    rows: list[list] = []
    for thread in box.threads:
        label = f"{thread.name}{' (training)' if thread.main else ''}{' daemon' if thread.daemon else ''}"
        if not thread.frames:
            rows.append([label, "—", ""])
        for i, frame in enumerate(reversed(thread.frames[-12:])):  # innermost first
            rows.append([label if i == 0 else "", f"{frame.path}:{frame.line} {frame.function}()", frame.text])
    return Table(title="Black box: every thread's stack when the run stopped", columns=["thread", "frame", "line"],
                 rows=rows, caption=f"{box.message}. Innermost frame first, up to 12 per thread; torchdoctor's own "
                                    "frames and threads left out.")


def _last_steps(follow: FollowRecord) -> Table | None:
    box = follow.blackbox
    if box is None or not box.last_points:
        return None
    rows = [[p.step, round(p.t, 3), round(ms(p.step_s), 2), round(ms(p.data_wait_s), 2),
             "yes" if p.sampled else ""] for p in box.last_points[-10:]]
    whose = f" (rank {box.rank})" if box.rank is not None else ""
    return Table(title=f"Black box: the last steps before it stopped{whose}", columns=["step", "ended at s", "step ms",
                                                                                "data wait ms", "under a probe"],
                 rows=rows, caption="From the timeline the run was writing.")


def _windows_table(follow: FollowRecord) -> Table | None:
    if not follow.windows:
        return None
    rows = []
    for w in follow.windows[:50]:
        top = _top_line(w)
        change = follow.changes[w.change] if w.change is not None and w.change < len(follow.changes) else None
        why = w.reason if w.reason != AFTER_CHANGE or change is None else f"after the change at step {change.step}"
        if change is not None and change.kind == STRAGGLER:
            why = f"rank {change.rank}'s, after it became the straggler at step {change.step}"
        rows.append([why, f"{w.first_step}-{w.last_step}", round(w.start_t, 2), ", ".join(w.probes),
                     f"{top[0].location} ({top[1]:.0%})" if top else "—"])
    return Table(title="Probe windows along the run", columns=["why", "steps", "began at s", "probes", "top line"],
                 rows=rows, caption="Each stretch of the run is diagnosed with its own window: findings \"from step N\" "
                                    "come from the window after that change.")


def _cost_note(record: RunRecord, follow: FollowRecord) -> str:
    wall = record.run.wall_s or 0.0
    later = [w for w in follow.windows if w.reason != "start"]
    share = follow.windows_s / wall if wall > 0 else 0.0
    text = (f"Followed {follow.steps} steps; the timeline ({follow.timeline_file}) was written every "
            f"{follow.every_s:g} s")
    if follow.thinned_to > 1:
        text += f" (older points thinned: one point for up to {follow.thinned_to} steps)"
    if follow.thread_cpu_s:
        text += (f"; the follower's thread used {follow.thread_cpu_s:.2f} s of CPU "
                 f"({follow.thread_cpu_s / wall if wall > 0 else 0:.2%} of the run)")
    text += (f". Probe windows after the start: {len(later)}, costing {follow.windows_s:.3f} s over their steps' "
             f"usual time ({share:.2%} of the run; bound {follow.window_share:.0%})")
    if follow.windows_skipped:
        text += f"; {follow.windows_skipped} windows skipped, the bound spent"
    if follow.steps_dropped:
        text += (f". The record keeps the first and the last steps; {follow.steps_dropped:,} steps in between are in "
                 "the timeline only")
    if follow.exports:
        text += f". Also sent to: {', '.join(follow.exports)}"
    return text + "."


__all__ = ["add_follow", "ended_line", "first_stretch", "stretch_record", "window_profile", "Location"]
