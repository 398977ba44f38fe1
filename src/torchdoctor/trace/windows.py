"""Step windows: the stretches of time a trace is cut into, one per training step.

`torch.profiler.schedule` marks each step with a `ProfilerStep#N` annotation on the main
thread. Without a schedule there are none, but every `optimizer.step()` is recorded as an
`Optimizer.step#<Class>.step` annotation, which ends a training step (DESIGN.md §5). With
neither, the whole trace is one window.

A window runs from its step's start to the next step's start, so windows tile the time and
the GPU work of a step that runs on after the host moved on is counted where it ran. The
last window is extended to the end of the GPU work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import add, attrgetter
from statistics import median

from torchdoctor.trace.events import OPTIMIZER_STEP_PREFIX, STEP_RE, TraceEvents

# A last ProfilerStep shorter than this share of the median step was cut off when the
# profiler stopped (the loop broke out mid-step): it is dropped, as partial.
PARTIAL_STEP_SHARE = 0.5
PROFILER_STEP, OPTIMIZER_STEP, WHOLE_TRACE = "ProfilerStep", "optimizer step", "whole trace"

_TS, _DUR = attrgetter("ts"), attrgetter("dur")


@dataclass
class Window:
    label: str
    start: float
    end: float


@dataclass
class Windows:
    kind: str
    windows: list[Window] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def step_windows(events: TraceEvents) -> Windows:
    steps = sorted((a for a in events.annotations if STEP_RE.match(a.name)), key=_TS)
    if steps:
        out = Windows(PROFILER_STEP)
        if len(steps) >= 3 and steps[-1].dur < PARTIAL_STEP_SHARE * median(s.dur for s in steps[:-1]):
            out.notes.append(f"{steps[-1].name} was cut off by the end of profiling "
                             f"({steps[-1].dur / 1e3:.2f} ms); it is left out")
            steps = steps[:-1]
        bounds = [s.ts for s in steps] + [steps[-1].ts + steps[-1].dur]
        out.windows = [Window(s.name, bounds[i], bounds[i + 1]) for i, s in enumerate(steps)]
        return _extend_last(out, events)
    opt = sorted((a for a in events.annotations if a.name.startswith(OPTIMIZER_STEP_PREFIX)), key=_TS)
    start = _first_host_time(events)
    if opt and start is not None:
        out = Windows(OPTIMIZER_STEP, notes=[
            "no ProfilerStep#N annotations (no torch.profiler schedule): steps are cut at the end of "
            "each optimizer.step()"])
        bounds = [start] + [o.ts + o.dur for o in opt]
        out.windows = [Window(f"step {i + 1}", bounds[i], bounds[i + 1]) for i in range(len(opt))
                       if bounds[i + 1] > bounds[i]]
        return _extend_last(out, events)
    out = Windows(WHOLE_TRACE, notes=[
        "no ProfilerStep#N or Optimizer.step annotations: the whole trace is one window; record with "
        "torch.profiler.schedule(...) and call prof.step() every step for per-step numbers"])
    times = [(e.ts, e.ts + e.dur) for e in events.gpu] or \
            [(e.ts, e.ts + e.dur) for g in (events.ops, events.annotations, events.runtime) for e in g]
    if times:
        out.windows = [Window("trace", min(t[0] for t in times), max(t[1] for t in times))]
    return out


def _first_host_time(events: TraceEvents) -> float | None:
    firsts = [min(map(_TS, g)) for g in (events.ops, events.annotations, events.runtime, events.gpu) if g]
    return min(firsts) if firsts else None


def _extend_last(out: Windows, events: TraceEvents) -> Windows:
    """Stretch the last window to the end of the GPU work: whatever runs after the last step
    began was launched in it or in steps before it, and belongs to the trace's last window."""
    if out.windows and events.gpu:
        gpu_end = max(map(add, map(_TS, events.gpu), map(_DUR, events.gpu)))
        out.windows[-1].end = max(out.windows[-1].end, gpu_end)
    return out
