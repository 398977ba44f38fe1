"""Changes found along a followed run (`run --follow`, rules/shifts.py's tests): the steps became
slower and stayed so, a data wait appeared, memory creeps toward the limit, a rank became the
straggler the others wait for (`--nproc-per-node`: from the ranks' timelines, straggler_changes). Each finding says the
step and the time the change began and what changed in the measurements; the diagnosis adds the
cause found in the window sampled right after it (diagnosis/follow.py)."""

from __future__ import annotations

from torchdoctor.model.findings import Finding, Severity
import statistics

from torchdoctor.model.follow_record import (CUDA_ALLOCATED, DATA_WAIT, HEAP_IN_USE, MEMORY, RSS_HIGH_WATER, STEP_TIME,
                                             STRAGGLER, ChangePoint, Level, TimelinePoint)
from torchdoctor.model.record import RunRecord
from torchdoctor.model.units import format_bytes
from torchdoctor.rules.base import MIN_REPORTED_SPEEDUP, Rule, ms, severity_for
from torchdoctor.rules.facts import RunFacts
from torchdoctor.rules.shifts import K_SPREAD, REFERENCE_STEPS, StragglerTest, own_time


def _changes(record: RunRecord, kind: str) -> list[ChangePoint]:
    return [c for c in (record.follow.changes if record.follow is not None else []) if c.kind == kind]


def what_changed(change: ChangePoint) -> str:
    """"data wait 0.1 -> 5.0 ms, compute 3.9 -> 4.0 ms, samples/s 15,000 -> 7,000": every figure's
    level before and after the change."""
    names = (("step_s", "step", "ms"), ("data_wait_s", "data wait", "ms"), ("compute_s", "backward and optimizer", "ms"),
             ("samples_per_s", "samples/s", ""))
    parts = []
    for key, label, unit in names:
        a, b = change.figures_before.get(key), change.figures_after.get(key)
        if a is None or b is None:
            continue
        if unit == "ms":
            parts.append(f"{label} {ms(a):.2f} → {ms(b):.2f} ms")
        else:
            parts.append(f"{label} {a:,.0f} → {b:,.0f}")
    a, b = change.figures_before.get("cpu_wait"), change.figures_after.get("cpu_wait")
    if a is not None and b is not None:
        parts.append(f"the training thread waiting for a CPU {a:.0%} → {b:.0%} of the time")
    return ", ".join(parts)


# The extra step time is the machine's when the training thread's added wait for a CPU (its
# run-queue share times the step) covers at least this share of it: other processes took the CPUs.
BUSY_EXPLAINS_SHARE = 0.5


def busy_machine_explains(change: ChangePoint) -> bool:
    """The slowdown is other processes' doing: the run-queue wait grew by most of the added time."""
    a, b = change.figures_before.get("cpu_wait"), change.figures_after.get("cpu_wait")
    before, after = change.figures_before.get("step_s"), change.figures_after.get("step_s")
    if None in (a, b, before, after) or after <= before:
        return False
    return b * after - a * before >= BUSY_EXPLAINS_SHARE * (after - before)


def _level_line(change: ChangePoint) -> str:
    b, a = change.before, change.after
    return (f"the median step went from {ms(b.median):.2f} ms (spread ±{ms(b.spread):.2f} ms over the {b.steps} steps "
            f"before it) to {ms(a.median):.2f} ms over the {a.steps} steps after; the test needed the fast quarter "
            f"of the steps to move by more than {ms(change.threshold):.2f} ms ({K_SPREAD:g} spreads of the steps "
            "before it, or 3 % of the step), in nearly every step after it")


def said_once(findings: list[Finding], flag: str, title: str, again: str, steps_key: str) -> list[Finding]:
    """Changes of one kind that is not the script's (evidence `flag` set), said once: on a shared machine
    the neighbours and the machine's pace come and go many times in a long job, and each time is the same
    news. The first (by step) stays, titled `title` (formatted with `step` and `times`), its message
    saying where it happened `again`; its evidence lists every step under `steps_key`."""
    same = sorted((f for f in findings if f.evidence.get(flag)), key=lambda f: f.evidence["from_step"])
    if len(same) < 2:
        return findings
    first, rest = same[0], same[1:]
    steps = [f.evidence["from_step"] for f in same]
    first.title = title.format(step=steps[0], times=len(same))
    first.message += f" It happened again from step {', '.join(str(s) for s in steps[1:])}, each time {again}."
    first.evidence = {**first.evidence, steps_key: steps}
    return [f for f in findings if not any(f is r for r in rest)]


class _ShiftRule(Rule):
    kind = STEP_TIME

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        out = []
        for change in _changes(record, self.kind):
            before, after = change.figures_before.get("step_s"), change.figures_after.get("step_s")
            if before is None or after is None:
                before, after = change.before.median, change.after.median
            busy = busy_machine_explains(change)
            alike = not busy and self.slowed_alike(change, before, after)
            basis = ""
            if after <= before:  # faster from here on: said as information
                speedup, severity = None, Severity.INFO
            elif busy:  # not the script's change: said, with no estimate a fix of the script could give
                speedup, severity = None, Severity.LOW
                basis = "other processes' CPU use, not the script's: no fix of the script sizes it"
            elif alike:
                speedup, severity = None, Severity.LOW
                basis = "not estimated: every part of the step slowed, not only this one; no fix of the script is sized"
            else:
                speedup, basis = self.estimate(change, before, after)
                severity = severity_for(speedup) if speedup else Severity.MEDIUM
                if speedup is not None and speedup < MIN_REPORTED_SPEEDUP:
                    continue
            out.append(self.finding(
                title=self.headline(change, before, after),
                message=(f"From step {change.step} (at {change.t:.1f} s into the run) {_level_line(change)}. "
                         f"What changed: {what_changed(change)}. Seen at step {change.detected_step}."
                         + (" The machine got busy: the training thread's added wait for a CPU covers most of the "
                            "added time, so other processes took the CPUs; not a change of the script." if busy else "")
                         + (" " + _slowed_alike_line(change) if alike else "")),
                location=None,
                evidence={"from_step": change.step, "at_s": round(change.t, 3), "detected_at_step": change.detected_step,
                          "before_ms": ms(change.before.median), "before_spread_ms": ms(change.before.spread),
                          "after_ms": ms(change.after.median), "threshold_ms": ms(change.threshold),
                          "figures_before": change.figures_before, "figures_after": change.figures_after,
                          "window": change.window, "busy_machine": busy, **({"slowed_alike": True} if alike else {})},
                speedup=speedup,
                basis=basis,
                severity=severity,
            ))
        return said_once(out, "busy_machine", "From step {step}, other processes slowed the steps {times} times",
                         "with the training thread's wait for a CPU covering the added time", "busy_changes_from_steps")

    def slowed_alike(self, change: ChangePoint, before: float, after: float) -> bool:
        """The whole step slowed, not the part this rule is about (a step-time change is judged on the
        line samples instead, diagnosis/follow.py)."""
        return False

    def estimate(self, change: ChangePoint, before: float, after: float) -> tuple[float | None, str]:
        speedup = after / before if before > 0 else None
        return speedup, (f"the steps after step {change.step} back at the median step before it: {ms(after):.2f} → "
                         f"{ms(before):.2f} ms (measured in this run)") if speedup else ""

    def headline(self, change: ChangePoint, before: float, after: float) -> str:
        verb = "slower" if after > before else "faster"
        return f"From step {change.step}, steps became {max(after, before) / max(min(after, before), 1e-12):.2f}x {verb} and stayed so"


class StepTimeShift(_ShiftRule):
    code = "TD902"
    slug = "step-time-shift"
    kind = STEP_TIME
    title = "The step time shifted partway through the run, and stayed"
    example = "# from step 12,000 a data shard on slow storage: every step waits longer for its batch"
    rationale = (
        "A followed run's step times are tested for a persistent shift against the spread of the steps "
        "before it: a new level that holds, not a noisy step. Throughput that drops after hours (slow "
        "storage, throttling, a leak making the allocator work harder) is the trouble a 30-step window "
        "never sees. A window of probes sampled right after the change names the line that changed."
    )
    fix = ("Look at the cause found right after the change (the line named, the finding \"from step N\"): "
           "it is what the steps started doing differently.")


class DataWaitAppeared(_ShiftRule):
    code = "TD903"
    slug = "data-wait-appeared"
    kind = DATA_WAIT
    title = "A data wait appeared partway through the run"
    example = "# from step 300 the loader reads a shard from network storage"
    rationale = (
        "The time each step waits in `next(loader)` rose to a new level and stayed there, while the step "
        "time's own test did not fire (the rest of the step got faster, or the wait is small against its "
        "spread). The loader has started doing something slower."
    )
    fix = ("See what the loader does from that step on (the line named below): a new shard on slower "
           "storage, a cache that filled up, an augmentation that changed. Prefetch with more workers "
           "(`num_workers`, `prefetch_factor`) or move the slow part out of `__getitem__`.")

    def headline(self, change: ChangePoint, before: float, after: float) -> str:
        wb, wa = _added_wait(change)
        return f"From step {change.step}, each step waits {ms(wa):.1f} ms for data (was {ms(wb):.1f} ms)"

    def slowed_alike(self, change: ChangePoint, before: float, after: float) -> bool:
        """The wait is the change only where it holds most of the time the step added: a wait that grew
        with every other part of the step (a machine that slowed) is not a loader that changed."""
        if "step_s" not in change.figures_before or "step_s" not in change.figures_after:
            return False
        return after > before and not wait_holds_added_time(change)

    def estimate(self, change: ChangePoint, before: float, after: float) -> tuple[float | None, str]:
        """The added wait removed, no more: the rest of the step's change is not the loader's."""
        wb, wa = _added_wait(change)
        back = max(before, after - max(0.0, wa - wb))
        if back <= 0:
            return None, ""
        return after / back, (f"the wait back at its level before step {change.step} ({ms(wb):.2f} ms, was "
                              f"{ms(wa):.2f} ms): the median step {ms(after):.2f} → {ms(back):.2f} ms "
                              "(measured in this run)")


# A data wait that appeared is the loader's only where it holds at least this share of the time the
# step added (as a line must, diagnosis/follow.py's LINE_EXPLAINS_SHARE)
WAIT_EXPLAINS_SHARE = 0.5


def _added_wait(change: ChangePoint) -> tuple[float, float]:
    return change.figures_before.get("data_wait_s", 0.0), change.figures_after.get("data_wait_s", 0.0)


def wait_holds_added_time(change: ChangePoint) -> bool:
    """The data wait grew by at least WAIT_EXPLAINS_SHARE of the time the step added (figures before
    and after the change): the loader's change, not the whole step's."""
    wb, wa = _added_wait(change)
    added = change.figures_after.get("step_s", 0.0) - change.figures_before.get("step_s", 0.0)
    return wa - wb >= WAIT_EXPLAINS_SHARE * added


def _slowed_alike_line(change: ChangePoint) -> str:
    wb, wa = _added_wait(change)
    added = change.figures_after["step_s"] - change.figures_before["step_s"]
    return (f"The wait grew by {ms(wa - wb):.2f} ms of the {ms(added):.2f} ms the step grew: every part of the step "
            "slowed, not the loader alone. A machine that got slower fits (a shared machine's neighbours, thermal "
            "or power throttling); nothing the loader started doing shows.")


# What each reading measures, said in the finding (ChangePoint.memory_measure; None: a record from
# before it was kept, whose figure was the high-water mark)
MEASURED = {
    CUDA_ALLOCATED: "the CUDA tensors' high-water mark (torch.cuda.max_memory_allocated)",
    HEAP_IN_USE: ("the process's heap in use (glibc's mallinfo2: memory allocated and not freed, the tensors' storage "
                  "included, the allocator's free lists left out)"),
    RSS_HIGH_WATER: ("the process's resident-set high-water mark. It also counts what the C allocator keeps after a "
                     "free and the doctor's own bookkeeping; this C library gives no figure without them, so part of "
                     "the growth may be neither the script's nor a leak (`torchdoctor memory` counts the tensors)"),
    None: "the memory high-water mark",
}


class MemoryCreep(Rule):
    code = "TD904"
    slug = "memory-creep"
    title = "Memory keeps growing toward the limit"
    example = "history.append(loss)  # a tensor with its graph, kept every step"
    rationale = (
        "The memory a followed run holds rose check after check, not once: something is kept every step "
        "(losses with their graph, a cache without bound, growing batches). At its rate it reaches the limit, "
        "and the run ends in an out-of-memory error hours in. On a CPU the figure is the heap in use, not the "
        "resident set: the resident set also holds what the allocator keeps after a free, which grows with "
        "fragmentation while the program holds the same."
    )
    fix = ("Keep numbers, not tensors (`loss.item()` at a logging step, or `loss.detach()`), bound caches, "
           "and check what grows with `torchdoctor memory`:\n```python\nhistory.append(loss.detach())\n```")

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        out = []
        for change in _changes(record, MEMORY):
            rate = change.bytes_per_s or 0.0
            left = None
            if change.limit_bytes and rate > 0:
                left = max(0.0, (change.limit_bytes - change.after.median) / rate)
            reach = (f"; at this rate it reaches the limit ({format_bytes(change.limit_bytes)}) in "
                     f"{left / 3600:.1f} h" if left is not None and change.limit_bytes else "")
            measure = change.memory_measure if change.memory_measure in MEASURED else None
            severity = Severity.HIGH if left is not None and left < 3600 else Severity.MEDIUM
            if measure == RSS_HIGH_WATER:  # the allocator's kept memory is in it: never ranked as a measured leak
                severity = Severity.LOW
            out.append(self.finding(
                title=f"From step {change.step}, memory grows {format_bytes(int(rate * 60))} a minute",
                message=(f"Measured: {MEASURED[measure]}. It rose from {format_bytes(int(change.before.median))} at "
                         f"step {change.step} ({change.t:.1f} s) to {format_bytes(int(change.after.median))} by step "
                         f"{change.detected_step}, in most checks{reach}."),
                location=None,
                evidence={"from_step": change.step, "at_s": round(change.t, 3), "bytes_per_s": round(rate, 1),
                          "high_water_bytes": int(change.after.median), "limit_bytes": change.limit_bytes,
                          "reaches_limit_in_s": round(left, 1) if left is not None else None,
                          "measured": measure},
                speedup=None, basis="a leak costs no time until memory runs out; it ends the run then",
                severity=severity,
            ))
        return out


# ---- a rank that becomes a straggler (`run --follow --nproc-per-node N`) -----------------------------
def _aligned(points: dict[int, list[TimelinePoint]]) -> list[tuple[int, dict[int, TimelinePoint]]]:
    """The steps every rank has a clean point for (no warm-up, no probe window on any rank), in order;
    a step whose wait in collectives some ranks measured and others not yet is left out."""
    by_step: dict[int, dict[int, TimelinePoint]] = {}
    for rank, series in points.items():
        for p in series:
            if not p.warmup and not p.sampled:
                by_step.setdefault(p.step, {})[rank] = p
    ranks = set(points)
    rows = []
    for step in sorted(by_step):
        row = by_step[step]
        if set(row) != ranks or len({p.comm_wait_s is None for p in row.values()}) > 1:
            continue
        rows.append((step, row))
    return rows


def straggler_changes(points: dict[int, list[TimelinePoint]]) -> list[ChangePoint]:
    """Each rank that became a straggler along the run, from every rank's timeline points."""
    if len(points) < 2:
        return []
    rows = _aligned(points)
    test = StragglerTest()
    for step, row in rows:
        test.add(step, {r: own_time(p.step_s, p.comm_wait_s) for r, p in row.items()},
                 step_s=max(p.step_s for p in row.values()))
    changes = []
    steps = [step for step, _ in rows]
    for found in test.found:
        at = steps.index(found.step)
        before, after = rows[max(0, at - REFERENCE_STEPS):at], rows[at:at + REFERENCE_STEPS]
        point = rows[at][1][found.rank]
        shift = found.shift
        changes.append(ChangePoint(
            kind=STRAGGLER, rank=found.rank, step=found.step, t=round(point.t - point.step_s, 6),
            detected_step=found.detected, before=Level(shift.before_median, shift.before_spread, shift.before_n),
            after=Level(shift.after_median, shift.after_spread, shift.after_n), threshold=shift.threshold,
            figures_before=_rank_figures(before, found.rank), figures_after=_rank_figures(after, found.rank)))
    return changes


def _rank_figures(rows: list[tuple[int, dict[int, TimelinePoint]]], rank: int) -> dict[str, float]:
    if not rows:
        return {}
    mine = [row[rank] for _, row in rows]
    others = [p for _, row in rows for r, p in row.items() if r != rank]
    out = {"step_s": statistics.median(p.step_s for p in mine),
           "own_s": statistics.median(own_time(p.step_s, p.comm_wait_s) for p in mine),
           "data_wait_s": statistics.median(p.data_wait_s for p in mine)}
    timed = [p.compute_s for p in mine if p.compute_s is not None]
    if timed:
        out["compute_s"] = statistics.median(timed)
    waits = [p.comm_wait_s for p in mine if p.comm_wait_s is not None]
    if waits:
        out["comm_wait_s"] = statistics.median(waits)
    waits = [p.comm_wait_s for p in others if p.comm_wait_s is not None]
    if waits:
        out["others_comm_wait_s"] = statistics.median(waits)
    out["others_own_s"] = statistics.median(own_time(p.step_s, p.comm_wait_s) for p in others)
    return {k: round(v, 9) for k, v in out.items()}


def straggler_what_changed(change: ChangePoint) -> str:
    names = (("own_s", f"rank {change.rank}'s own time"), ("comm_wait_s", f"rank {change.rank}'s wait in collectives"),
             ("others_comm_wait_s", "the other ranks' wait in collectives"), ("data_wait_s", "its data wait"),
             ("compute_s", "its backward and optimizer"), ("step_s", "the step"))
    parts = []
    for key, label in names:
        a, b = change.figures_before.get(key), change.figures_after.get(key)
        if a is not None and b is not None:
            parts.append(f"{label} {ms(a):.2f} → {ms(b):.2f} ms")
    return ", ".join(parts)


class StragglerAppeared(Rule):
    code = "TD905"
    slug = "straggler-appeared"
    title = "A rank became the straggler partway through the run"
    example = "# from step 12,000 rank 3's GPU throttles, or its data shard is on slower storage"
    rationale = (
        "Every rank of a data-parallel job waits for the slowest in each step's collectives. A followed "
        "job's ranks are compared step by step: a rank whose own time per step (its step less its wait in "
        "the collectives) rose above the others' and stayed there, beyond the spread of the steps before "
        "it, is the one the whole job now waits for."
    )
    fix = ("Look at what that rank does differently from that step on (the line named, its own window of "
           "probes): its data shard, its device (thermal throttling, another process on it: `nvidia-smi`), "
           "work only it does (evaluation, logging, checkpoints on one rank). Give every rank the same work.")

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        out = []
        for change in _changes(record, STRAGGLER):
            rise = change.after.median - change.before.median
            step = change.figures_after.get("step_s")
            speedup = step / (step - rise) if step and step > rise > 0 else None
            if speedup is not None and speedup < MIN_REPORTED_SPEEDUP:
                continue
            others = change.figures_after.get("others_comm_wait_s")
            waits = f": the others wait {ms(others):.1f} ms a step for it" if others is not None else ""
            out.append(self.finding(
                title=f"From step {change.step}, rank {change.rank} became the straggler{waits}",
                message=(f"From step {change.step} (at {change.t:.1f} s into the run) rank {change.rank}'s own time "
                         f"per step (its step less its wait in the step's collectives) went from "
                         f"{ms(change.before.median):+.2f} ms to {ms(change.after.median):+.2f} ms against the "
                         f"other ranks' median (spread ±{ms(change.before.spread):.2f} ms over the "
                         f"{change.before.steps} steps before it, {change.after.steps} steps after); the test needed "
                         f"more than {ms(change.threshold):.2f} ms ({K_SPREAD:g} spreads of the steps before it, or "
                         f"3 % of the step), in nearly every step after it. What changed: "
                         f"{straggler_what_changed(change)}. Seen at step {change.detected_step}."),
                location=None,
                evidence={"rank": change.rank, "from_step": change.step, "at_s": round(change.t, 3),
                          "detected_at_step": change.detected_step, "excess_before_ms": ms(change.before.median),
                          "excess_after_ms": ms(change.after.median), "threshold_ms": ms(change.threshold),
                          "figures_before": change.figures_before, "figures_after": change.figures_after,
                          "window": change.window},
                speedup=speedup,
                basis=(f"the job's step without rank {change.rank}'s excess over the other ranks: "
                       f"{ms(step):.2f} → {ms(step - rise):.2f} ms (measured in this run)") if speedup else "",
                severity=severity_for(speedup) if speedup else Severity.MEDIUM,
            ))
        return out
