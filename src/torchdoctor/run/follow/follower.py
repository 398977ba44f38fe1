"""Following a whole job (`torchdoctor run --follow`, `watch(follow=True)`): the script runs to its
end (its limits still hold), and all along

- every step's cheap figures (step time, data wait, the hooks' compute time, samples, the memory
  high-water mark, the GPU's utilization, power and memory as NVML last saw them) go to the
  timeline (run/follow/timeline.py), appended every `every_s` seconds, with the record so far
  (RUN_DIR/live.json), so `torchdoctor report DIR` works while it runs;
- the series are tested for a persistent change (rules/shifts.py): a step-time shift, a data wait
  that appears, memory creeping toward the limit; a change is kept with the step and time it
  began and what changed, and a line-sampler window is sampled right after it, so its cause is
  found at a line;
- line-sampler windows also run periodically, while all later windows together stay under
  `window_share` of the run's time (the start's windows are the session's usual schedule);
- a stall (no step for the stall limit) is stopped, and on an exception, a signal or a stall the
  black box (run/follow/blackbox.py) keeps every thread's stack and the last steps.

On the training thread it costs nothing per step: the follower is no step listener (a listener makes
every step build its sample and leave the hooks' lean path, README "The doctor's own cost"). Its own
thread ("torchdoctor-follow") wakes every TICK_S and takes the steps closed since its last look from
the session (`steps_after`), and the time of the last batch from `session.last_batch_at`; the session
polls `on_step` now and then on the training thread, which only drops the middle of a long job's steps.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import msgspec

from torchdoctor.machine.memory import available_memory_bytes, heap_in_use_bytes, peak_rss_bytes
from torchdoctor.model.follow_record import (AFTER_CHANGE, AT_START, CUDA_ALLOCATED, DATA_WAIT, HEAP_IN_USE, MEMORY,
                                             PERIODIC, RSS_HIGH_WATER, STEP_TIME,
                                             BlackBox, ChangePoint, FollowRecord, Level, ProbeWindow,
                                             TimelinePoint, WindowLine)
from torchdoctor.model.layout import BLACKBOX_FILE, CHANGES_FILE, LIVE_FILE, TIMELINE_FILE
from torchdoctor.model.location import Location
from torchdoctor.rules.shifts import RECENT_STEPS, memory_creep, recent_shift
from torchdoctor.run.follow.blackbox import capture, write_box
from torchdoctor.run.follow.kept import FIRST_STEPS, LAST_STEPS, TRIM_EVERY, KeptSteps
from torchdoctor.run.follow.timeline import Timeline

TICK_S = 0.25  # the follower's thread wakes this often: tests, stall check, window bookkeeping
WINDOW_MIN_S = 0.25  # a later line window lasts this long at least (the line sampler's own minimum)
WINDOW_MIN_STEPS, WINDOW_MAX_STEPS = 4, 400
PERIOD_S = 600.0  # a periodic line window this often at most (when the cost bound allows)
WINDOW_SHARE = 0.02  # later windows' extra time: at most this share of the run's time so far
# A stall: no step and no batch (an evaluation's batches count) for STALL_FACTOR usual steps, twice
# the longest gap seen between two steps (an evaluation, a checkpoint) and STALL_MIN_S, whichever is
# longest (unless the user gave --stall-timeout). Stopping a job that was only busy is worse than
# finding a hang a few minutes late: a first evaluation without a DataLoader may take minutes.
STALL_FACTOR = 100.0
STALL_MIN_S = 300.0
BLACKBOX_POINTS = 50  # the black box keeps the last this many steps' figures
MEMORY_CHECK_S = 8.0  # the memory high-water mark is kept this often (its maximum in between)
HEAP_READ_SHARE = 0.001  # the heap's reading (its allocator's locks held) takes at most this share of the time


@dataclass
class FollowOptions:
    every_s: float = 10.0  # timeline and live.json written this often
    stall_s: float | None = None  # None: the adaptive limit above
    window_share: float = WINDOW_SHARE
    period_s: float = PERIOD_S
    sinks: list[Any] = field(default_factory=list)  # exporters: on_points, on_change, on_blackbox, close
    panel: Any = None  # a live panel: update(state), close()
    # the panel's current top findings from the record so far (diagnosis/run.py's top_findings, handed in
    # from above: run/ never imports diagnosis/); asked at each live.json write, only with a panel
    top_findings: Callable[[Any], list[str]] | None = None
    # False: the caller closes the sinks itself, after handing them the report (commands/run.py)
    close_sinks: bool = True


class Follower:
    """A session listener (on_failure, on_stop, and on_step polled); started and stopped by ProbedRun."""

    polls_steps = True  # on_step only trims: the steps themselves are read from the follower's thread

    def __init__(self, session, probes, run_dir: Path, options: FollowOptions,
                 live_record: Callable[[], Any] | None = None) -> None:
        self.session, self.probes, self.run_dir, self.options = session, probes, run_dir, options
        self.live_record = live_record  # () -> RunRecord so far, without the probes' summaries
        self.record = FollowRecord(timeline_file=TIMELINE_FILE, every_s=options.every_s,
                                   window_share=options.window_share)
        self.timeline = Timeline(run_dir / TIMELINE_FILE)
        self._exports = [getattr(s, "describe", lambda: type(s).__name__)() for s in options.sinks]
        self.main_ident = threading.get_ident()
        if not session.steps and type(session.steps) is list:
            session.steps = KeptSteps()  # len() counts every step; the middle of a long job is dropped
        self._drained = 0  # the last step taken from the session
        self._trimmed_at = 0  # the step at the last trim
        self._lock = threading.RLock()  # the follower's state: its thread vs a black box on the training thread
        self._wake = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._run, name="torchdoctor-follow", daemon=True)
        # series of clean measured steps since the last change, for the tests
        self._clean_steps: list[int] = []
        self._clean_t: list[float] = []
        self._step_s: list[float] = []
        self._wait_s: list[float] = []
        self._since_step = 0  # the series start after this step (the last change)
        self._mem_t: list[float] = []
        self._mem: list[int] = []
        self._mark: int | None = None  # the memory high-water mark at the last tick
        self._gpu: tuple[float | None, float | None, int | None] = (None, None, None)  # NVML's at the last tick
        self._mem_reported = False
        self._mem_measure: str | None = None  # what the creep series reads
        self._check_began = 0.0  # when the current memory check began
        self._heap_next_t = 0.0  # the heap is read again from then (_held)
        # the machine's memory readings (machine/memory.py), replaceable in tests
        self.read_peak_rss, self.read_heap_in_use = peak_rss_bytes, heap_in_use_bytes
        self.read_available = available_memory_bytes
        self._last_step_t: float | None = None
        self._first_measured_t: float | None = None  # when the first step after the warm-up ended
        self._longest_gap = 0.0
        self._last_flush = 0.0
        self._exported_step = 0
        self._last_window_t: float | None = None
        self._window: dict | None = None  # the window in progress: first step, probes, snapshot
        self._planned: dict[int, tuple[str, int | None]] = {}  # first planned step -> (reason, change)
        self._line_snapshot = self._line_counters()
        self._stalled = False
        self.top_findings: list[str] = []  # the panel's, as of the last live.json write
        self.errors: list[str] = []
        self._main_tid = threading.get_native_id()  # the training thread's, for its run-queue wait
        self._sched: tuple[float, float, float] | None = None  # (wall, cpu, waiting) at the last tick
        self._cpu_wait: float | None = None  # the training thread's run-queue share over the last tick
        # the step's wait in collectives (ProbeSet.comm_wait): DDP publishes a step's timings at the next
        # step's forward, so a point gets its figure once the step after it closed; until then it is held
        # back from the timeline file
        self._comm_wait = getattr(probes, "comm_wait", None)
        self._pending: list[TimelinePoint] = []

    # ---- the training thread -----------------------------------------------------------
    def on_step(self, s) -> None:
        if s.index - self._trimmed_at >= TRIM_EVERY:
            self._trimmed_at = s.index
            self._trim()

    def _trim(self) -> None:
        """Keep the record bounded (run/follow/kept.py): the session's steps, and its clean step
        durations (the baseline reads the last 64)."""
        steps = self.session.steps
        if isinstance(steps, KeptSteps):
            with self.session.steps_lock:  # the follower's thread may be reading the newest
                steps.trim()
        clean = getattr(self.session, "_clean", None)
        if isinstance(clean, list) and len(clean) > 4 * TRIM_EVERY:
            del clean[:-2 * TRIM_EVERY]
        trim = getattr(self.probes, "trim_steps", None)
        if trim is not None and isinstance(steps, KeptSteps) and steps.dropped:  # DDP's, FSDP's, collectives' per step
            trim(FIRST_STEPS, len(steps) - LAST_STEPS)

    def on_failure(self, exc: BaseException) -> None:
        self.black_box("exception", f"{type(exc).__name__}: {exc}".strip()[:500], exc=exc)

    def on_stop(self, reason: str) -> None:
        signum = getattr(self.session, "stop_signal", None)
        if reason == "interrupted" and signum is not None:
            import signal as _signal

            name = _signal.Signals(signum).name
            self.black_box("signal", f"stopped by {name}")

    # ---- start / stop --------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def finish(self) -> FollowRecord:
        """Stop the thread; the final timeline, windows and changes. Safe twice."""
        if not self._done:
            self._done = True
            self._wake.set()
            if self._thread.is_alive() and self._thread is not threading.current_thread():
                self._thread.join(timeout=10)
            with self._lock:
                self._tick(final=True)
                self._settle_comm(final=True)
                self.timeline.flush()
            if self.options.close_sinks:
                self.close_sinks()
            if self.options.panel is not None:
                self._call(self.options.panel, "close")
        return self.snapshot()

    def close_sinks(self, report=None) -> None:
        """Hand the exporters the run's report (their findings events), then close them. Safe twice."""
        sinks, self.options.sinks = list(self.options.sinks), []
        for sink in sinks:
            if report is not None:
                self._call(sink, "on_report", report)
            self._call(sink, "close")

    def snapshot(self, live: bool = False) -> FollowRecord:
        self.record.steps_dropped = getattr(self.session.steps, "dropped", 0)
        rec = dataclasses.replace(self.record, points=list(self.timeline.points), windows=list(self.record.windows),
                                  changes=list(self.record.changes), thinned_to=self.timeline.thinned_to,
                                  exports=list(self._exports),
                                  live=live)
        return rec

    # ---- the black box ---------------------------------------------------------------------
    def black_box(self, reason: str, message: str, exc: BaseException | None = None,
                  stall: tuple[float, float] | None = None) -> None:
        """Keep the black box and send it out at once: RUN_DIR/blackbox.json (a followed job's launcher
        passes it to the exporters from there), this run's exporters, live.json. `stall`: (seconds
        without a step, the limit)."""
        if self.record.blackbox is not None:
            return  # the first event is what happened; a stop after a stall is its consequence
        now = self.session.clock() - self.session.t0
        with self._lock:
            self._drain()
            last = self.timeline.points[-BLACKBOX_POINTS:]
            step = self.record.steps
            try:
                box = capture(reason, message, self.main_ident, step, now, last, exc)
            except Exception as err:  # the box must never replace what happened
                box = BlackBox(reason=reason, message=message, step=step, t=now)
                self.errors.append(f"black box: {type(err).__name__}: {err}")
            if stall is not None:
                box.stall_s, box.stall_limit_s = round(stall[0], 3), stall[1]
            self.record.blackbox = box
            try:
                write_box(self.run_dir / BLACKBOX_FILE, box)
            except (OSError, TypeError, ValueError) as err:
                self.errors.append(f"black box file: {type(err).__name__}: {err}")
            self._flush(now)  # live.json before the exporters: a collector that does not answer delays only them
        for sink in self.options.sinks:
            self._call(sink, "on_blackbox", box)

    # ---- the follower's thread -------------------------------------------------------------
    def _run(self) -> None:
        while not self._done:
            self._wake.wait(TICK_S)
            if self._done:
                return
            try:
                self.tick()
                self.record.thread_cpu_s = time.thread_time()  # this thread's CPU time, all its ticks
            except Exception as exc:  # never let the follower's failure reach the training
                self.errors.append(f"{type(exc).__name__}: {exc}")
                if len(self.errors) > 20:
                    return

    def tick(self) -> None:
        """The thread's work once: drain, test, plan, check for a stall, write when due."""
        with self._lock:
            self._tick()

    def _tick(self, final: bool = False) -> None:
        session = self.session
        now = session.clock() - session.t0
        self._read_cpu_wait(now)
        self._read_memory(now)
        self._read_gpu()
        new = self._drain()
        if new:
            self._test(new)
        self._track_windows(new, final)
        if not final:
            self._maybe_plan_periodic(now)
            self._check_stall(now)
        if final or now - self._last_flush >= self.options.every_s:
            self._flush(now)
        if self.options.panel is not None and not final:
            self._call(self.options.panel, "update", self)

    def _drain(self) -> list[TimelinePoint]:
        """The steps closed since the last look, as timeline points."""
        new = []
        mem = self._mark
        util, power, gpu_mem = self._gpu
        for s in self.session.steps_after(self._drained):
            end, warmup = s.end, s.warmup
            point = TimelinePoint(step=s.index, t=end, step_s=max(0.0, end - s.start), data_wait_s=s.data_wait_s,
                                  compute_s=s.backward_s + s.optimizer_s + s.zero_grad_s if s.split_timed else None,
                                  samples=s.samples,
                                  mem_bytes=mem, cpu_wait=self._cpu_wait, gpu_util=util, gpu_power_w=power,
                                  gpu_mem_bytes=gpu_mem, sampled=s.sampled or bool(s.probes), warmup=warmup)
            new.append(point)
            self._drained = s.index
            self._window_step(point, tuple(s.probes))
            if not warmup and self._first_measured_t is None:
                self._first_measured_t = end
            if self._last_step_t is not None and not warmup:
                self._longest_gap = max(self._longest_gap, end - self._last_step_t)
            self._last_step_t = end
        if new:
            self.record.steps = new[-1].step
            self.timeline.add(new)
            if self._comm_wait is not None:
                self._pending.extend(new)
                self._settle_comm()
        return new

    def _settle_comm(self, final: bool = False) -> None:
        """Each held point's wait in collectives, once the step after it closed (all of them at the end)."""
        if not self._pending:
            return
        last = self.record.steps
        keep = []
        for point in self._pending:
            if final or point.step < last:
                try:
                    wait = self._comm_wait(point.step)
                except Exception:  # a probe's figure is never worth a failure
                    wait = None
                point.comm_wait_s = None if wait is None else round(wait, 9)
            else:
                keep.append(point)
        self._pending = keep

    def _read_cpu_wait(self, now: float) -> None:
        """The training thread's run-queue wait since the last tick, as a share of the wall time."""
        try:
            with open(f"/proc/self/task/{self._main_tid}/schedstat", "rb") as handle:
                run_ns, wait_ns, _ = handle.read().split()
        except (OSError, ValueError):
            self._cpu_wait = None
            return
        reading = (now, int(run_ns) / 1e9, int(wait_ns) / 1e9)
        last, self._sched = self._sched, reading
        if last is not None and reading[0] > last[0]:
            self._cpu_wait = min(1.0, max(0.0, (reading[2] - last[2]) / (reading[0] - last[0])))

    def _read_gpu(self) -> None:
        """NVML's latest sample of this process's GPU (a rank's own device), for the points of this tick."""
        gpu = getattr(self.probes, "gpu", None)
        latest = getattr(gpu, "latest_sample", None)
        sample = latest() if latest is not None else None
        self._gpu = (None, None, None) if sample is None else (sample.gpu_util, sample.power_w, sample.mem_used_bytes)

    def _cuda_device(self) -> int | None:
        """The device the GPU probe found this process training on (a rank's own); None: the current one."""
        return getattr(getattr(self.probes, "gpu", None), "device_index", None)

    # ---- memory ------------------------------------------------------------------------------
    # Two figures. Every point carries the high-water mark (CUDA's allocated bytes, or on a CPU the
    # resident set's). The creep test reads what the program holds: on CUDA that same mark; on a CPU
    # the C heap in use, never the resident set. The RSS high-water mark also keeps what the
    # allocator holds after a free, and that moves with the order of allocations: under the doctor's
    # own small allocations a stationary 10 ms MLP's mark rose 60 MiB in 130 s (the plain script's
    # stayed within 2 MiB), with its heap in use flat within 4 MiB. The RSS mark is the creep's figure
    # only where the C library gives no heap figure, and the finding then says what it measured.
    def _read_memory(self, now: float) -> None:
        mark = self._high_water()
        if mark is None:
            return
        self._mark = mark  # every point's figure
        if self._first_measured_t is None:  # the warm-up fills caches and pools: the creep test starts after it
            return
        held = self._held(mark, now)
        if held is None:
            return
        value, measure = held
        if self._mem_measure not in (None, measure):  # CUDA came up mid-run: the series starts again
            self._mem_t, self._mem, self.record.memory_limit_bytes = [], [], None
        self._mem_measure = measure
        if not self._mem or now - self._check_began >= max(MEMORY_CHECK_S, self.options.every_s / 2):
            self._check_began = now
            self._mem_t.append(now)
            self._mem.append(value)
            if len(self._mem) > 4096:  # bounded: every other old check
                self._mem_t, self._mem = self._mem_t[::2], self._mem[::2]
        elif value > self._mem[-1]:
            # a check's figure is its highest reading, timed when it was read (the growth rate's time base)
            self._mem_t[-1], self._mem[-1] = now, value
        if self.record.memory_limit_bytes is None:
            self.record.memory_limit_bytes = self._memory_limit(value)
        if not self._mem_reported:
            creep = memory_creep(self._mem_t, self._mem, self.record.memory_limit_bytes)
            if creep is not None:
                self._mem_reported = True
                step = self.record.steps
                change = ChangePoint(kind=MEMORY, step=self._step_at(creep.first_t), t=creep.first_t,
                                     detected_step=step, before=Level(float(creep.first_bytes), 0.0, 1),
                                     after=Level(float(creep.last_bytes), 0.0, 1), threshold=0.0,
                                     limit_bytes=self.record.memory_limit_bytes, bytes_per_s=creep.rate_bytes_per_s,
                                     memory_measure=measure)
                self._add_change(change)

    def _on_cuda(self):
        torch = sys.modules.get("torch")
        return torch if torch is not None and torch.cuda.is_initialized() else None

    def _high_water(self) -> int | None:
        try:
            torch = self._on_cuda()
            if torch is not None:
                return int(torch.cuda.max_memory_allocated(self._cuda_device()))
            return self.read_peak_rss()
        except Exception:
            return None

    def _held(self, mark: int, now: float) -> tuple[int, str] | None:
        """The creep test's reading and what it measures (a MEMORY_MEASURES name); None: nothing read
        this tick. The heap's reading walks the allocator's free lists under its locks: 20 µs on a
        steady heap, 2-8 ms on a fragmented 1.2 GiB one. It is taken again only once the time since
        its last reading is 1000x what that reading cost (HEAP_READ_SHARE), so the training thread
        never waits on those locks for more than 0.1 % of its time."""
        try:
            if self._on_cuda() is not None:
                return mark, CUDA_ALLOCATED
            if now < self._heap_next_t:
                return None
            began = time.perf_counter()
            heap = self.read_heap_in_use()
            self._heap_next_t = now + max(TICK_S, (time.perf_counter() - began) / HEAP_READ_SHARE)
        except Exception:
            return None
        return (heap, HEAP_IN_USE) if heap is not None else (mark, RSS_HIGH_WATER)

    def _memory_limit(self, held: int) -> int | None:
        """The most the creep's figure can reach: the device's memory on CUDA; on a CPU what the
        figure reads now plus what the machine, the cgroup and ulimit still allow."""
        try:
            torch = self._on_cuda()
            if torch is not None:
                device = self._cuda_device()
                return int(torch.cuda.get_device_properties(torch.cuda.current_device() if device is None
                                                            else device).total_memory)
            left = self.read_available()
            return None if left is None else held + left
        except Exception:
            return None

    def _step_at(self, t: float) -> int:
        for p in self.timeline.points:
            if p.t >= t:
                return p.step
        return self.record.steps

    # ---- the change tests --------------------------------------------------------------------
    def _test(self, new: list[TimelinePoint]) -> None:
        for p in new:
            if p.warmup or p.sampled or p.step <= self._since_step:
                continue
            self._clean_steps.append(p.step)
            self._clean_t.append(p.t - p.step_s)
            self._step_s.append(p.step_s)
            self._wait_s.append(p.data_wait_s)
        limit = 4 * 1024
        if len(self._step_s) > limit:  # the tests look at the last few hundred steps only
            cut = len(self._step_s) - limit // 2
            for series in (self._clean_steps, self._clean_t, self._step_s, self._wait_s):
                del series[:cut]
        if len(self._step_s) < RECENT_STEPS + 30:
            return
        scale = statistics.median(self._step_s[-200:])
        shift = recent_shift(self._step_s, scale=scale)
        kind = STEP_TIME
        if shift is None:
            shift = recent_shift(self._wait_s, scale=scale)
            kind = DATA_WAIT
        if shift is None:
            return
        at = shift.at
        step, t = self._clean_steps[at], self._clean_t[at]
        lo, hi = max(0, at - 100), min(len(self._step_s), at + 100)
        figures_before = self._figures(lo, at)
        figures_after = self._figures(at, hi)
        change = ChangePoint(kind=kind, step=step, t=t, detected_step=self._clean_steps[-1],
                             before=Level(shift.before_median, shift.before_spread, shift.before_n),
                             after=Level(shift.after_median, shift.after_spread, shift.after_n),
                             threshold=shift.threshold, figures_before=figures_before, figures_after=figures_after)
        # the series restart at the change: the next test compares the new level with itself
        self._since_step = step - 1
        keep = [i for i, s in enumerate(self._clean_steps) if s >= step]
        for name in ("_clean_steps", "_clean_t", "_step_s", "_wait_s"):
            series = getattr(self, name)
            setattr(self, name, [series[i] for i in keep])
        self._add_change(change)

    def _figures(self, lo: int, hi: int) -> dict[str, float]:
        if hi - lo < 1:
            return {}
        steps = self._step_s[lo:hi]
        out = {"step_s": statistics.median(steps), "data_wait_s": statistics.median(self._wait_s[lo:hi])}
        points = {p.step: p for p in self.timeline.points[-(len(self._step_s) + 400):]}
        chosen = [points[s] for s in self._clean_steps[lo:hi] if s in points]
        if chosen:
            timed = [p.compute_s for p in chosen if p.compute_s is not None]
            if timed:
                out["compute_s"] = statistics.median(timed)
            rates = [p.samples / p.step_s for p in chosen if p.samples and p.step_s > 0]
            if rates:
                out["samples_per_s"] = statistics.median(rates)
            waits = [p.cpu_wait for p in chosen if p.cpu_wait is not None]
            if waits:
                out["cpu_wait"] = statistics.fmean(waits)
        return {k: round(v, 9) for k, v in out.items()}

    def _add_change(self, change: ChangePoint) -> None:
        self.record.changes.append(change)
        try:  # one line as it is found: a followed job's launcher passes it to the exporters (run/follow/job.py)
            from torchdoctor.model.serialize import to_plain

            with open(self.run_dir / CHANGES_FILE, "ab") as handle:
                handle.write(msgspec.json.encode(to_plain(change)) + b"\n")
        except (OSError, TypeError, ValueError) as exc:
            self.errors.append(f"changes file: {type(exc).__name__}: {exc}")
        index = len(self.record.changes) - 1
        now = self.session.clock() - self.session.t0
        first = not any(w.reason == AFTER_CHANGE for w in self.record.windows)
        if first or self.record.windows_s <= self.options.window_share * now:  # the bound; the first change's always
            self._plan_window(AFTER_CHANGE, index)
        else:
            self.record.windows_skipped += 1
        for sink in self.options.sinks:
            self._call(sink, "on_change", change)

    # ---- windows -----------------------------------------------------------------------------
    def _window_length(self) -> int:
        # the steps as they are now (after a change, not the baseline of the run's start)
        base = statistics.median(self._step_s[-RECENT_STEPS:]) if self._step_s else self.session.baseline_s
        if not base:
            return WINDOW_MIN_STEPS
        return int(min(WINDOW_MAX_STEPS, max(WINDOW_MIN_STEPS, math.ceil(WINDOW_MIN_S / base))))

    def _plan_window(self, reason: str, change: int | None = None) -> bool:
        session = self.session
        if getattr(session, "line_sampler", None) is None or not hasattr(session, "plan_window"):
            return False
        if self._window is not None or self._planned:
            if change is not None and self._planned:  # a change while a periodic window waits: it is the change's
                first = min(self._planned)
                self._planned[first] = (AFTER_CHANGE, change)
                return True
            return False
        first = len(session.steps) + 2  # the next step may be closing already: the one after it
        session.plan_window("line_sampler", first, self._window_length())
        self._planned[first] = (reason, change)
        self._last_window_t = session.clock() - session.t0
        return True

    def _maybe_plan_periodic(self, now: float) -> None:
        last = self._last_window_t if self._last_window_t is not None else 0.0
        if now - last < self.options.period_s or self.record.steps < 1:
            return
        if self.record.windows_s > self.options.window_share * now:
            self.record.windows_skipped += 1
            self._last_window_t = now
            return
        self._plan_window(PERIODIC)

    def _window_step(self, point: TimelinePoint, probes: tuple) -> None:
        """Windows are runs of consecutive steps with window probes in them."""
        window = self._window
        if probes:
            if window is None:
                reason, change = AT_START, None
                for first in sorted(self._planned):
                    if first <= point.step:
                        reason, change = self._planned.pop(first)
                window = self._window = {"first": point.step, "start_t": point.t - point.step_s, "probes": set(),
                                         "reason": reason, "change": change, "steps_s": [], "last": point.step,
                                         "end_t": point.t}
            window["probes"].update(probes)
            window["steps_s"].append(point.step_s)
            window["last"], window["end_t"] = point.step, point.t
        elif window is not None:
            self._close_window()

    def _track_windows(self, new: list[TimelinePoint], final: bool) -> None:
        if final and self._window is not None:
            self._close_window()
        if self._planned and not self._window:
            # a planned window whose steps are long past without opening (the sampler refused): dropped
            for first in [f for f in self._planned if f + WINDOW_MAX_STEPS < self.record.steps]:
                self._planned.pop(first)

    def _close_window(self) -> None:
        window, self._window = self._window, None
        if window is None:
            return
        now_counters = self._line_counters()
        lines, sampled_s, samples = self._window_lines(self._line_snapshot, now_counters)
        self._line_snapshot = now_counters
        change = window["change"]
        pw = ProbeWindow(reason=window["reason"], first_step=window["first"], last_step=window["last"],
                         start_t=window["start_t"], end_t=window["end_t"], probes=sorted(window["probes"]),
                         lines=lines, sampled_s=round(sampled_s, 6), samples=samples, change=change)
        self.record.windows.append(pw)
        if change is not None and change < len(self.record.changes):
            self.record.changes[change].window = len(self.record.windows) - 1
        if pw.reason != AT_START:
            base = self.session.baseline_s or 0.0
            self.record.windows_s += max(0.0, sum(window["steps_s"]) - base * len(window["steps_s"]))

    def _line_counters(self) -> dict:
        lines = getattr(self.probes, "lines", None)
        if lines is None:
            return {"hits": {}, "seconds": {}, "loading": {}, "total": 0, "total_s": 0.0}
        return {"hits": dict(lines.hits), "seconds": dict(lines.seconds), "loading": dict(lines.loading_hits),
                "total": lines.total, "total_s": lines.total_s}

    def _window_lines(self, before: dict, after: dict) -> tuple[list[WindowLine], float, int]:
        from torchdoctor.model.paths import library_of
        from torchdoctor.run.probes.frames import display_path, source_text

        merged: dict[tuple, list] = {}
        for key, seconds in after["seconds"].items():
            delta = seconds - before["seconds"].get(key, 0.0)
            hits = after["hits"].get(key, 0) - before["hits"].get(key, 0)
            if hits <= 0:
                continue
            filename, line, function, caller = key
            entry = merged.setdefault((filename, line, caller), [function, 0, 0.0, 0])
            entry[1] += hits
            entry[2] += delta
            entry[3] += after["loading"].get(key, 0) - before["loading"].get(key, 0)
        ranked = sorted(merged.items(), key=lambda item: -item[1][2])[:20]
        lines = [WindowLine(location=Location(display_path(f), line, function), seconds=round(max(0.0, s), 6),
                            samples=n, loading_samples=max(0, loading), text=source_text(f, line), library=library_of(f),
                            called_from=Location(display_path(caller[0]), caller[1], caller[2]) if caller else None)
                 for (f, line, caller), (function, n, s, loading) in ranked]
        return lines, after["total_s"] - before["total_s"], after["total"] - before["total"]

    # ---- stalls ------------------------------------------------------------------------------
    def stall_limit(self) -> float | None:
        if self.options.stall_s is not None:
            return self.options.stall_s
        base = self.session.baseline_s
        if base is None:
            return None
        return max(STALL_FACTOR * base, 2 * self._longest_gap, STALL_MIN_S)

    def _check_stall(self, now: float) -> None:
        if self._stalled or self._last_step_t is None or self.session.stop_reason is not None:
            return
        limit = self.stall_limit()
        if limit is None:
            return
        last = self._last_step_t
        batch_at = getattr(self.session, "last_batch_at", None)  # a batch (an evaluation's too): not stuck
        if batch_at is not None:
            last = max(last, batch_at - self.session.t0)
        quiet = now - last
        if quiet < limit:
            return
        self._stalled = True
        base = self.session.baseline_s
        usual = f", the usual step {base * 1000:.1f} ms" if base else ""
        message = (f"no step finished for {now - self._last_step_t:.1f} s after step {self.record.steps} (limit "
                   f"{limit:g} s{usual})")
        self.black_box("stall", message, stall=(quiet, limit))
        self.session.request_stop("stalled")

    # ---- writing -----------------------------------------------------------------------------
    def _flush(self, now: float) -> None:
        self._last_flush = now
        self.timeline.flush(hold=len(self._pending))
        new = []
        for point in reversed(self.timeline.points):  # those after the last exported (indices move when thinned)
            if point.step <= self._exported_step:
                break
            new.append(point)
        new.reverse()
        if new:
            self._exported_step = new[-1].step
        for sink in self.options.sinks:
            self._call(sink, "on_points", list(new[-10_000:]))
        if self.live_record is not None:
            try:
                record = self.live_record()
                record.follow = self.snapshot(live=True)
                record.save(self.run_dir / LIVE_FILE)
            except Exception as exc:
                self.errors.append(f"live record: {type(exc).__name__}: {exc}")
                return
            if self.options.panel is not None and self.options.top_findings is not None:
                try:  # a few ms every `every_s`, on this thread
                    self.top_findings = self.options.top_findings(record)
                except Exception as exc:  # the panel goes on without them
                    self.errors.append(f"top findings: {type(exc).__name__}: {exc}")

    def _call(self, target, method: str, *args) -> None:
        handler = getattr(target, method, None)
        if handler is None:
            return
        try:
            handler(*args)
        except Exception as exc:  # an exporter's failure is said in the report, never raised into training
            self.errors.append(f"{type(target).__name__}.{method}: {type(exc).__name__}: {exc}")
