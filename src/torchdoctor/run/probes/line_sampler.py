"""Line sampler: where the steps spend their time, line by line, without the per-op cost of
the dispatch sampler.

It is a window probe: the session runs it for a few consecutive steps of its own (more while
they add up to too little time to judge by), which are then left out of the step timings
like the op sampler's. Every timer signal costs the step tens of microseconds on a virtual
machine, so sampling every measured step would cost several percent of every step.

In its window, every SAMPLE_INTERVAL_S a real-time timer (SIGALRM) interrupts the training thread, and the
handler notes the innermost user line it interrupted, weighted by the wall time since the
previous sample. The handler runs at the next bytecode boundary: in pure Python at once, after
a long C call (a big op, `time.sleep`, I/O) as soon as it returns, on the line that made it,
which then gets the whole call's time through the weight. A sampling thread would be biased:
it can only look when the training thread lets go of the GIL, which torch ops do and pure
Python does only every 5 ms, so a short Python stretch before a torch op would never be seen.
Where a timer signal cannot be used (not the main thread, the script has its own SIGALRM
handler, another OS) a sampling thread does the job, biased as said, and the record says so.

Samples are kept per step: those of the step in progress are pending until the step closes,
so time after the last step (a `print` after `trainer.fit()` returned, teardown) never
counts as step time.

Every sample also notes which of the user's functions are on the stack, and outside its window
the sampler keeps doing only that, five times a second: the functions the run executed, so
that static findings in code that never ran can be left out of the report.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections import Counter

from torchdoctor.model.record import LineHits, LineProfile, Location, ProbeNote, RunRecord
from torchdoctor.run.probes.frames import display_path, frame_line, library_of, project_frames, source_text, user_frame
from torchdoctor.run.probes.outside_compiled import outside_compiled

SAMPLE_INTERVAL_S = 0.001  # in the window: many samples from a few steps
COVERAGE_INTERVAL_S = 0.2  # outside it: which functions run, at a cost nobody can measure
WINDOW_MIN_S = 0.25  # the window grows until its steps add up to this much time
MAX_LINES_KEPT = 200


class LineSampler:
    name = "line-sampler"

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S, clock=time.perf_counter,
                 on_activate=lambda: None, loading=lambda: False, evaluating=lambda: False) -> None:
        self.interval_s = interval_s
        self.loading = loading  # True while the training thread is inside a DataLoader's next()
        self.evaluating = evaluating  # True inside an evaluation (a model.eval() region)
        self.on_activate = on_activate
        self.clock = clock
        self.target_ident = threading.main_thread().ident
        self.hits: Counter = Counter()  # (file, line, function, caller or None) -> samples
        self.seconds: Counter = Counter()  # the same key -> wall time they stand for
        self.loading_hits: Counter = Counter()  # the same key -> samples taken while loading a batch
        self.eval_hits: Counter = Counter()  # the same key -> samples taken inside an evaluation
        self.total = 0
        self.total_s = 0.0
        self._pending: Counter = Counter()
        self._pending_s: Counter = Counter()
        self._pending_loading: Counter = Counter()
        self._pending_eval: Counter = Counter()
        self._pending_total = 0
        self._pending_total_s = 0.0
        self.functions: set[tuple[str, str]] = set()  # (filename, qualname) of user code seen running
        self.recording = False  # in the window: lines are counted, not only functions
        self.mode = "off"  # "signal" | "thread"
        self.note: str | None = None
        self._last = 0.0
        self._previous_handler = None
        self._eval_paused = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- install / uninstall ----------------------------------------------------------
    def install(self) -> None:
        self._last = self.clock()
        why_not = self._signal_unusable()
        if why_not is None:
            self._previous_handler = signal.signal(signal.SIGALRM, self._on_signal)
            signal.setitimer(signal.ITIMER_REAL, COVERAGE_INTERVAL_S, COVERAGE_INTERVAL_S)
            self.mode = "signal"
            return
        self.note = f"line sampling by a thread ({why_not}): lines that do not release the GIL are under-sampled"
        self.mode = "thread"
        self._thread = threading.Thread(target=self._loop, name="torchdoctor-line-sampler", daemon=True)
        self._thread.start()

    def uninstall(self) -> None:
        if self.mode == "signal":
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
            if signal.getsignal(signal.SIGALRM) != self._on_signal:
                self.note = "line sampling stopped early: the script installed its own SIGALRM handler"
            else:
                signal.signal(signal.SIGALRM, self._previous_handler or signal.SIG_DFL)
            self.mode = "off"
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # ---- the window (the session's schedule) ------------------------------------------
    @property
    def active(self) -> bool:
        return self.recording

    def activate(self, phase: str) -> None:
        if self.recording:
            return
        self.recording = True
        self._last = self.clock()
        if self.mode == "signal":
            signal.setitimer(signal.ITIMER_REAL, self.interval_s, self.interval_s)
        self.on_activate()

    def deactivate(self) -> None:
        if not self.recording:
            return
        self.recording = False
        self._pending, self._pending_s = Counter(), Counter()  # a step the window did not close
        self._pending_loading, self._pending_eval = Counter(), Counter()
        self._pending_total, self._pending_total_s = 0, 0.0
        if self.mode == "signal":
            signal.setitimer(signal.ITIMER_REAL, COVERAGE_INTERVAL_S, COVERAGE_INTERVAL_S)

    def on_eval_enter(self) -> None:
        """An evaluation inside the window runs at plain speed: the timer slows to coverage
        until training resumes (lines sampled in an evaluation were only ever left out)."""
        if self.recording and self.mode == "signal":
            signal.setitimer(signal.ITIMER_REAL, COVERAGE_INTERVAL_S, COVERAGE_INTERVAL_S)
            self._eval_paused = True

    def on_eval_exit(self) -> None:
        if self._eval_paused:
            self._eval_paused = False
            self._last = self.clock()  # the evaluation's time is no line's
            if self.recording and self.mode == "signal":
                signal.setitimer(signal.ITIMER_REAL, self.interval_s, self.interval_s)

    def wants_more(self) -> bool:
        """Too little time sampled yet to judge a line by (the steps are fast)."""
        return self.total_s < WINDOW_MIN_S

    def quiesce(self) -> None:
        """Stop sampling from another thread (the watchdog's, ending the run): the timer stops
        and a sampling thread ends; the handler stays (only the main thread may change it)."""
        self.recording = False
        if self.mode == "signal":
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _signal_unusable(self) -> str | None:
        if not hasattr(signal, "setitimer") or not hasattr(signal, "SIGALRM"):
            return "no interval timers on this OS"
        if threading.get_ident() != self.target_ident:
            return "the run is not in the main thread"
        if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None) or signal.getitimer(signal.ITIMER_REAL)[0]:
            return "SIGALRM or its timer is already in use"
        return None

    # ---- steps ------------------------------------------------------------------------
    def commit(self) -> None:
        """The step in progress closed: its samples count (a later step's are discarded
        unless committed too)."""
        pending, self._pending = self._pending, Counter()
        pending_s, self._pending_s = self._pending_s, Counter()
        self.hits.update(pending)
        self.seconds.update(pending_s)
        self.loading_hits.update(self._pending_loading)
        self.eval_hits.update(self._pending_eval)
        self._pending_loading, self._pending_eval = Counter(), Counter()
        self.total += self._pending_total
        self.total_s += self._pending_total_s
        self._pending_total, self._pending_total_s = 0, 0.0

    # ---- sampling ---------------------------------------------------------------------
    @outside_compiled  # the timer can fire inside the script's compiled call
    def _on_signal(self, signum, frame) -> None:
        try:
            self._take(frame)
        except Exception:  # a sampler bug must never surface inside the user's code
            pass

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s if self.recording else COVERAGE_INTERVAL_S):
            self._take(sys._current_frames().get(self.target_ident))

    def _take(self, frame) -> None:
        if not self.recording or self._eval_paused:
            self._note_functions(frame)
            return
        now = self.clock()
        weight, self._last = now - self._last, now
        user, _ = user_frame(frame)
        self._pending_total += 1
        self._pending_total_s += weight
        if user is not None:
            code = user.f_code
            key = (code.co_filename, frame_line(user), getattr(code, "co_qualname", code.co_name), None)
            if library_of(code.co_filename) is not None:  # inside a library: also the user's line that called it
                own = project_frames(user, limit=1)
                if own:
                    key = key[:3] + ((own[0].f_code.co_filename, frame_line(own[0]),
                                      getattr(own[0].f_code, "co_qualname", own[0].f_code.co_name)),)
            self._pending[key] += 1
            self._pending_s[key] += weight
            if self.loading():
                self._pending_loading[key] += 1
            if self.evaluating():
                self._pending_eval[key] += 1
        self._note_functions(frame)

    def _note_functions(self, frame) -> None:
        for f in project_frames(frame):
            code = f.f_code
            self.functions.add((code.co_filename, getattr(code, "co_qualname", code.co_name)))

    def contribute(self, record: RunRecord) -> None:
        record.line_profile = LineProfile(
            interval_s=self.interval_s,
            total_samples=self.total,
            total_s=round(self.total_s, 6),
            method=self.mode if self.mode != "off" else ("signal" if self.note is None else "thread"),
            lines=self._lines(),
        )
        record.functions_seen = sorted(f"{path}::{name}" for path, name in self.functions)
        if self.note:
            record.probe_notes.append(ProbeNote(self.name, self.note))

    def _lines(self) -> list[LineHits]:
        """One entry per source line, its samples summed over the code objects that ran it (a
        comprehension is a function of its own in Python 3.11; the enclosing one names it)."""
        merged: dict[tuple, list] = {}
        for (filename, line, function, caller), samples in self.hits.items():
            entry = merged.setdefault((filename, line, caller), [function, 0, 0.0, 0, 0])
            if "<" in entry[0] and "<" not in function:  # main.<locals>.<listcomp> -> main
                entry[0] = function
            entry[1] += samples
            entry[2] += self.seconds[(filename, line, function, caller)]
            entry[3] += self.loading_hits[(filename, line, function, caller)]
            entry[4] += self.eval_hits[(filename, line, function, caller)]
        ranked = sorted(merged.items(), key=lambda item: -item[1][2])[:MAX_LINES_KEPT]
        return [LineHits(Location(display_path(f), line, function), samples, text=source_text(f, line),
                         library=library_of(f), seconds=round(seconds, 6),
                         called_from=Location(display_path(caller[0]), caller[1], caller[2]) if caller else None,
                         loading_samples=loading, eval_samples=evaluating)
                for (f, line, caller), (function, samples, seconds, loading, evaluating) in ranked]
