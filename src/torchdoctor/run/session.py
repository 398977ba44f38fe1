"""The measuring session: step accounting, the sampling schedule and the stop signal.

Probes report events here (a batch arrived, backward ran, an optimizer stepped); the
session turns them into `StepSample`s. It never judges: rules do that later.

What a step is: one `step()` of the first `torch.optim` optimizer that steps. A script that
updates its parameters by hand (no optimizer was ever created when its first `backward()`
ends) steps once per `backward()` instead: the backward-to-backward interval.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from torchdoctor.model.limits import Limits
from torchdoctor.model.record import StepSample
from torchdoctor.run.budget import WindowBudget, default_budgets
from torchdoctor.run.process import current_pid

CATEGORIES = ("data_wait", "backward", "optimizer", "zero_grad", "eval", "checkpoint", "logging")
_ZERO = dict.fromkeys(CATEGORIES, 0.0)
# A handler of on_step may return DONE: it needs no more steps (a GPU probe on a machine without
# CUDA, a window probe whose window is behind), and is called no more: an unmeasured step then
# costs only the handlers that still need it.
DONE = object()
# Events the session passes on to every probe that defines a handler of that name:
# on_step(StepSample), on_batch(in_eval: bool), on_eval_enter(), on_eval_exit(),
# on_stop(reason: str): a stop was requested (the watchdog enforces it);
# on_output(): the script is about to print or log (a live progress line clears itself);
# on_training_start(kind): the first loader iteration ("batch"), zero_grad or backward of the run;
# on_failure(exc): the code raised exc (not our StopRun), its traceback still alive;
# on_optimizer_created(): a torch.optim optimizer was made (training is about to start).
EVENTS = ("on_step", "on_batch", "on_eval_enter", "on_eval_exit", "on_stop", "on_output", "on_training_start",
          "on_failure", "on_optimizer_created")
OPTIMIZER, BACKWARD = "optimizer", "backward"  # what closes a step
# A listener whose on_step only watches for news (a module imported, a process group made, a
# /proc reading due) sets `polls_steps = True`: it gets every step a window ran in, every warm-up
# step, and an unmeasured step at most every POLL_S. An unmeasured step then calls no handler at
# all unless a listener needs every step (the follower, a progress line).
POLL_S = 0.05
# The split of a step (backward, optimizer, zero_grad) is timed in every unmeasured step until
# SPLIT_TIMED_FIRST of them are, then in one unmeasured step in SPLIT_EVERY: the others are "bare",
# their hooks pass the calls on untimed (and keep no loss value), so a long run's unmeasured step
# costs only its boundary and its data wait (README, "The doctor's own cost"). A bounded run at
# the default 30 steps times every step.
SPLIT_TIMED_FIRST = 32
SPLIT_EVERY = 8


class StopRun(BaseException):
    """Raised into the user's script to end it after the last measured step.

    A BaseException so that a user's `except Exception:` around the loop cannot swallow it.
    (A bare `except:` can: the watchdog then ends the run, see run/watchdog.py.)
    """

    def __init__(self, reason: str = "stopped") -> None:
        super().__init__(reason)
        self.reason = reason


class WindowProbe(Protocol):
    """A costly probe that runs only in chosen step intervals (sampler, profiler)."""

    def activate(self, phase: str) -> None: ...
    def deactivate(self) -> None: ...
    @property
    def active(self) -> bool: ...


@dataclass
class SessionConfig(Limits):
    sampled_steps: int = 3  # dispatch-sampled steps, after warmup
    backward_steps: int = 1  # steps timing the backward of loop lines, after the sampled ones
    profiled_steps: int = 2  # torch.profiler steps after those, when enabled
    line_steps: int = 8  # line-sampled steps after those (more while the sampler wants more time)
    # memory-accounted steps: the warmup steps (they are never timed), from the first training
    # activity; at least one; 0 turns the accounting off
    memory_steps: int | None = None
    # an emulated device of this many bytes of tensors: an allocation beyond it fails as an
    # out-of-memory error would, in the accounted steps (memory trials and benchmarks)
    memory_limit_bytes: int | None = None
    budgets: bool = True  # False: every window runs its whole schedule, whatever it costs (tests, trials)


class StepLedger:
    """Time by category for the step interval that is open now.

    While an evaluation region is open, time spent inside it (its data loading, its
    printing) belongs to evaluation alone, so categories never double count.
    """

    def __init__(self) -> None:
        self.seconds = _ZERO.copy()
        self.probes: set[str] = set()  # window probes that ran in it
        self.partial: set[str] = set()  # ...and those stopped partway, their budget spent
        self.reset()

    def reset(self) -> None:
        # In place, every step: the step's sample has copied what it keeps (a new dict and two
        # sets a step were allocation the user's loop paid for)
        self.seconds.update(_ZERO)
        self.samples: int | None = None
        # the step's last training batch's first tensor, or its shape (torch.Size or a tuple): read as a list
        # by shape()
        self.batch_shape = None
        self.micro_batches = 0
        self.closure_calls = 0
        self.heavy_probe_ran = False
        self.doctor_s = 0.0  # time inside the doctor's own hooks in this interval
        if self.probes:
            self.probes.clear()
        if self.partial:
            self.partial.clear()

    def add(self, category: str, seconds: float, in_eval: bool) -> None:
        if in_eval and category != "eval":
            return
        self.seconds[category] += seconds

    def shape(self) -> list[int] | None:
        """The last training batch's first tensor's shape (kept as the tensor: one read a step)."""
        held = self.batch_shape
        if held is None:
            return None
        return [int(d) for d in (held.shape if hasattr(held, "shape") else held)]

    def add_samples(self, n: int) -> None:
        self.samples = (self.samples or 0) + n


class RunSession:
    def __init__(self, config: SessionConfig, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.thread_time, raise_on_stop: bool = True):
        self.config = config
        # False: a limit only sets stop_reason, and the caller ends the loop its own way (a
        # framework callback sets the trainer's stop flag); no step is recorded after it
        self.raise_on_stop = raise_on_stop
        self.clock = clock
        # CPU time of the calling (training) thread: set against the clock it tells computing
        # from waiting. Not the process's: torch's pool threads spin between ops and would
        # count as work while the training thread sleeps on storage.
        self.cpu_clock = cpu_clock
        self.t0 = clock()
        self._deadline = self.t0 + config.max_seconds  # past it, a safe point checks the time limit
        self._last_index = config.warmup + config.steps  # the step that ends the run
        # a process forked from the script's (multiprocessing.Process with fork) inherits the probes:
        # there they must neither count steps nor stop anything, so the user's workers run as written
        self.pid = current_pid()
        self.ledger = StepLedger()
        # The run's steps, read through `steps`. An unmeasured step that no listener needs at once is
        # kept in _rows as a tuple of the figures its StepSample is made of, in the sample's field
        # order, and made a StepSample only when the steps are read: building one costs the user's loop
        # a few µs a step on a busy machine (README, "The doctor's own cost").
        self._samples: list[StepSample] = []
        self._rows: list[tuple] = []  # the training thread appends here, without a lock
        # held to build the rows and by readers on other threads (a rank's heartbeat reads the last step, a
        # followed run's thread the new ones), and by whoever drops old steps (run --follow)
        self.steps_lock = threading.Lock()
        self.last_batch_at: float | None = None  # clock() when the last batch left a DataLoader (a stall check's)
        self.step_count = 0  # len(self.steps), without a build: steps closed so far
        # True while the open step may take the hooks' lean paths: no window open nor opening in it, no
        # costly probe ran in it, no evaluation open, no stop asked, no listener of every batch. Set when
        # a step closes, cleared by whatever ends one of these: a hook reads one flag, not five states.
        self.lean = True
        # True while the open step is lean and its split goes untimed (SPLIT_EVERY): the hooks' bare
        # paths. Cleared with `lean`; _began_bare remembers it for the step's row.
        self.bare = False
        self._began_bare = False
        self._split_timed_clean = 0  # unmeasured steps after warm-up whose split was timed
        self.interval_start = self.t0
        self.eval_started: float | None = None
        self.loading_depth = 0  # inside DataLoader.__next__: the dataset's work, not the step's
        self.stop_reason: str | None = None
        self.stop_requested_at: float | None = None
        self.stop_raises = 0  # StopRuns raised into the script: more than one means it caught them
        self.stop_signal: int | None = None  # SIGINT or SIGTERM, when a signal stopped the run (run/signals.py)
        self.step_source: str | None = None  # OPTIMIZER or BACKWARD, fixed by the first step
        self.optimizers_created = 0
        self.backward_calls = 0
        self.training_started: float | None = None  # end of start-up: first loader, zero_grad or backward
        self.loop_location = None  # Location of the step()/backward() call of the first step
        self.training_loops: list[tuple[str, str, int]] = []  # (file, function, header) of loops around it
        self.backward_loops_seen = False  # the loops around the first backward() joined training_loops
        self.sampler: WindowProbe | None = None
        self.backward_timer: WindowProbe | None = None
        self.profiler: WindowProbe | None = None
        self._listeners: dict[str, list[Callable]] = {event: [] for event in EVENTS}
        self._pollers: list[Callable] = []  # on_step handlers of listeners that poll (POLL_S)
        self._polled_at = self.t0
        self.line_sampler = None  # a window probe too: samples lines in its own steps
        self.memory: WindowProbe | None = None  # storage accounting: opens at the first training activity
        first = config.warmup + 2  # one clean measured step first, for the baseline
        last = config.warmup + config.steps  # the final step is never sampled
        memory = config.warmup if config.memory_steps is None else config.memory_steps
        if config.warmup == 0 and config.memory_steps is None:
            memory = 1 if last > 1 else 0  # a measured step left out of timings, never the only one
        self.memory_at = set(range(1, min(memory, max(config.warmup, 1), last) + 1)) if memory else set()
        self.sample_at = set(range(first, min(first + config.sampled_steps, last)))
        after = first + config.sampled_steps
        self.backward_at = set(range(after, min(after + config.backward_steps, last)))
        after += config.backward_steps
        self.profile_at: set[int] = set(range(after, min(after + config.profiled_steps, last)))
        # the profiler's steps are planned whether or not it runs (only on CUDA or with --trace):
        # the line window comes after them either way, so it is the last and may grow
        after += config.profiled_steps
        self.line_at = set(range(after, min(after + config.line_steps, last)))
        self._line_limit = after + max(config.line_steps, config.steps // 2)  # half the steps stay clean
        # every step some window is planned for (the line window adds its steps as it grows)
        self._planned = self.memory_at | self.sample_at | self.backward_at | self.profile_at | self.line_at
        # What each window probe may spend (run/budget.py); None: whole schedules, whatever they cost
        self.budgets: dict[str, WindowBudget] = default_budgets() if config.budgets else {}
        self._open: set[str] = set()  # window probes active now, by session attribute name
        self._clean: list[float] = []  # durations of the steps measured clean so far
        self.baseline_s: float | None = None  # their median: what a step costs without the doctor
        self.closure_guess_s: float | None = None  # before any clean step: the shortest closure evaluation
        self.setup_s = 0.0  # the doctor's own time before the script ran (install) and in it outside steps

    # ---- the steps -----------------------------------------------------------------
    @property
    def steps(self) -> list[StepSample]:
        """Every step closed so far, in order, as StepSamples: the rows kept by the lean path are
        built here, on read. Its length is `step_count`, which builds nothing."""
        if self._rows:
            self._build_rows()
        return self._samples

    @steps.setter
    def steps(self, samples: list[StepSample]) -> None:
        """Another list for the steps (run --follow keeps a bounded one), holding those closed so far."""
        samples.extend(self.steps)
        self._samples = samples

    def _build_rows(self) -> None:
        with self.steps_lock:
            rows = self._rows
            taken = rows[:]  # rows the training thread appends meanwhile stay for the next read
            self._samples.extend([StepSample(i, a, b, w, False, m, c, n, dw, bw, op, zg, ev, ck, lg, None, shape,
                                             doc, [], [], timed)
                                  for (i, a, b, w, m, c, n, shape, doc, dw, bw, op, zg, ev, ck, lg, timed) in taken])
            del rows[:len(taken)]

    def steps_after(self, index: int) -> list[StepSample]:
        """The steps closed after step `index`, in order: another thread's read (a followed run's, which
        takes the steps from here rather than from an on_step listener, so unmeasured steps stay lean)."""
        samples = self.steps
        newer = []
        with self.steps_lock:  # against a trim of old steps on the training thread
            for sample in reversed(samples):
                if sample.index <= index:
                    break
                newer.append(sample)
        newer.reverse()
        return newer

    # ---- events -------------------------------------------------------------------
    def subscribe(self, listener: object) -> None:
        """Pass each event on to `listener`'s handler of the same name, if it has one."""
        polls = getattr(listener, "polls_steps", False) is True
        for event in EVENTS:
            handler = getattr(listener, event, None)
            if handler is not None and (event != "on_batch" or getattr(listener, "listens_to_batches", True)):
                (self._pollers if polls and event == "on_step" else self._listeners[event]).append(handler)
        if self._listeners["on_batch"]:
            self.lean = self.bare = False

    def _poll(self, sample: StepSample, now: float) -> None:
        self._polled_at = now
        handlers = self._pollers
        for handler in handlers:
            if handler(sample) is DONE:
                self._pollers = [h for h in self._pollers if h is not handler]

    def notify(self, event: str, *args) -> None:
        handlers = self._listeners[event]
        for handler in handlers:
            if handler(*args) is DONE:
                self._listeners[event] = [h for h in handlers if h is not handler]
                handlers = self._listeners[event]

    @property
    def in_eval(self) -> bool:
        return self.eval_started is not None

    def outside_training_step(self) -> bool:
        """True while evaluating or loading data: ops then are not the step's own."""
        return self.eval_started is not None or self.loading_depth > 0

    def add_time(self, category: str, seconds: float) -> None:
        # inline of StepLedger.add: called several times every step, from the user's loop
        if self.eval_started is None or category == "eval":
            self.ledger.seconds[category] += seconds

    def enter_eval(self) -> None:
        self.lean = self.bare = False
        if self.eval_started is None:
            self.eval_started = self.clock()

    def exit_eval(self) -> float:
        """Close the evaluation region; returns its length (0 when none was open)."""
        if self.eval_started is None:
            return 0.0
        seconds = self.clock() - self.eval_started
        self.eval_started = None
        self.ledger.add("eval", seconds, in_eval=False)
        self.notify("on_eval_exit")
        return seconds

    def note_heavy_probe(self) -> None:
        """A costly probe ran in this interval outside any window (an evaluation sampled)."""
        self.ledger.heavy_probe_ran = True
        self.lean = self.bare = False

    def note_training_activity(self, kind: str = "") -> None:
        """Training began (a loader iterated, gradients zeroed or backward started): the
        time before the first one is start-up, not part of the first step."""
        if self.training_started is None:
            self.training_started = self.clock()
            if not self.step_count:
                self.interval_start = self.training_started
                self.notify("on_training_start", kind)

    def forked(self) -> bool:
        return current_pid() != self.pid

    def on_optimizer_step(self) -> None:
        """The primary optimizer finished a step."""
        if current_pid() != self.pid:
            return
        if self.step_source is None:
            self.step_source = OPTIMIZER
        if self.step_source == OPTIMIZER:
            self._close_step()

    def on_backward_done(self) -> None:
        """A `backward()` returned: a step when no optimizer exists to define one."""
        if current_pid() != self.pid:
            return
        self.backward_calls += 1
        self.ledger.micro_batches += 1
        if self.step_source is None and self.optimizers_created == 0:
            self.step_source = BACKWARD
        if self.step_source == BACKWARD:
            self._close_step()

    def _close_step(self) -> None:
        """Close the open interval as one step and plan the next.

        An unmeasured step (lean: no window ran in it nor opens in the next, no stop asked, no evaluation
        open) is closed in this frame, as a row of its figures (read by `steps`) unless a listener reads its
        sample now: what an unmeasured step costs (README, "The doctor's own cost"); a call is a
        microsecond on a busy machine, every step."""
        now = self.clock()
        index = self.step_count + 1
        if self.lean and index + 1 not in self._planned:
            ledger, t0, start = self.ledger, self.t0, self.interval_start
            held, warmup = ledger.batch_shape, index <= self.config.warmup
            timed = not self._began_bare
            # the row: (index, start, end, warmup, micro-batches, closures, samples, shape, doctor_s, then the
            # seconds by category in CATEGORIES' order, then whether the split was timed), the sample's field
            # order (_build_rows)
            row = (index, start - t0, now - t0, warmup, ledger.micro_batches, ledger.closure_calls, ledger.samples,
                   held if held is None or isinstance(held, tuple) else _shape_of(held), ledger.doctor_s,
                   *ledger.seconds.values(), timed)
            handlers = self._listeners["on_step"]
            poll = self._pollers and (warmup or now - self._polled_at >= POLL_S or index == self.config.warmup + 1)
            if handlers or poll:  # a listener reads it now: the sample itself
                self.steps.append(StepSample(*row[:4], False, *row[4:7], *row[9:16], None, row[7], row[8], [], [],
                                             timed))
            else:
                self._rows.append(row)
            self.step_count = index
            if not warmup:
                if timed:
                    self._split_timed_clean += 1
                clean = self._clean
                clean.append(now - start)
                if len(clean) <= 16 or len(clean) % 16 == 0:  # the median of a few, then now and then
                    self.baseline_s = statistics.median(clean[-64:])
            # ledger.reset, inline: no window ran, so no probe name to clear (a copy: fewer steps than an update)
            ledger.seconds = _ZERO.copy()
            ledger.samples = ledger.batch_shape = None
            ledger.micro_batches = ledger.closure_calls = 0
            ledger.doctor_s = 0.0
            self.interval_start = now
            self.lean = self.eval_started is None  # an evaluation region left open goes on in the next step
            # the next step's split goes untimed once enough are timed, but in one step in SPLIT_EVERY; only in a
            # loop whose step() closes steps after backward() was seen (the hooks' lean paths' own condition)
            bare = self.lean and self._split_timed_clean >= SPLIT_TIMED_FIRST and (index + 1) % SPLIT_EVERY != 0 \
                and self.step_source == OPTIMIZER and self.backward_loops_seen
            self.bare = self._began_bare = bare
            if handlers:
                self.notify("on_step", self._samples[-1])
            if poll:
                self._poll(self._samples[-1], now)
        else:
            if self.stop_reason is not None:
                self.raise_if_stopping()  # a script that swallowed the stop records no more steps
                return  # stopped by flag: the caller is ending the loop
            if self.eval_started is not None:  # a step inside an eval region: split it here
                self.ledger.add("eval", now - self.eval_started, in_eval=False)
                self.eval_started = now
            self._close_windowed_step(index, now)
            self.lean = not self._open and self.eval_started is None and self.stop_reason is None \
                and not self._listeners["on_batch"]
        if index >= self._last_index:
            self.stop("step-limit")
        if now > self._deadline:
            self.check_time()
        # the doctor's time after the step's end belongs to the next interval
        self.ledger.doctor_s += self.clock() - now

    def _close_windowed_step(self, index: int, now: float) -> None:
        ledger = self.ledger
        windows = self._windows()
        for name in self._open:
            budget = self.budgets.get(name)
            if budget is not None:
                budget.stop(now)
                budget.start(now)  # still open: its time from here is the next step's
        ledger.probes.update(name for name, probe, _ in windows if probe.active)
        sample = self._step_sample(index, now, warmup=index <= self.config.warmup,
                                   sampled=ledger.heavy_probe_ran or bool(ledger.probes))
        # the next step is timed whole (a window may follow), also when its planned window does not open (run
        # budget spent, a probe that declines): the step's hooks read `bare`, which only a lean close sets
        self.bare = self._began_bare = False
        self.steps.append(sample)
        self.step_count = index
        for name in sample.probes:
            budget = self.budgets.get(name)
            if budget is not None:
                budget.steps.append(index)
        for budget in self.budgets.values():
            budget.step_used_s = 0.0
        self._note_clean(sample)
        ledger.reset()
        self.interval_start = now
        self.notify("on_step", sample)
        if self._pollers:
            self._poll(sample, now)
        lines = self.line_sampler
        if lines is not None and lines.active:
            # Samples count only for whole steps: what the interval just closed recorded is
            # kept, and nothing after the last step ever is. The window grows while the
            # sampler has too little time to judge by (a fast step), up to half the steps.
            lines.commit()
            last = self.config.warmup + self.config.steps
            if index + 1 not in self.line_at and lines.wants_more() and index + 1 < min(self._line_limit, last):
                self.line_at.add(index + 1)
                self._planned.add(index + 1)
        self._schedule(index + 1, windows)

    def _note_clean(self, sample: StepSample) -> None:
        if not sample.warmup and not sample.sampled:
            clean = self._clean
            clean.append(sample.end - sample.start)
            if len(clean) <= 16 or len(clean) % 16 == 0:  # the median of a few, then now and then
                self.baseline_s = statistics.median(clean[-64:])

    def _windows(self) -> list[tuple[str, WindowProbe, set[int]]]:
        # the memory window first: it closes before another window's modes open on the same step
        triples = (("memory", self.memory, self.memory_at), ("sampler", self.sampler, self.sample_at),
                   ("backward_timer", self.backward_timer, self.backward_at),
                   ("line_sampler", self.line_sampler, self.line_at), ("profiler", self.profiler, self.profile_at))
        return [(name, probe, chosen) for name, probe, chosen in triples if probe is not None]

    def _schedule(self, next_index: int, windows) -> None:
        for name, probe, chosen in windows:
            if next_index in chosen:
                budget = self.budgets.get(name)
                if budget is not None and not budget.may_open(self.baseline_s, self.expected_run_s()):
                    budget.skipped.append(next_index)  # its run budget is spent: this step stays clean
                    if probe.active:
                        probe.deactivate()
                        self.window_closed(name)
                    continue
                probe.activate("train")  # counts one more window when already active
                if probe.active:
                    self.window_opened(name)
            elif probe.active:
                probe.deactivate()
                self.window_closed(name)

    def plan_window(self, name: str, first: int, count: int) -> None:
        """Open window probe `name` (a budget name: "line_sampler", "sampler", ...) for `count` steps
        from step `first`, later in the run (`run --follow`: after a change, or periodically)."""
        chosen = {"memory": self.memory_at, "sampler": self.sample_at, "backward_timer": self.backward_at,
                  "line_sampler": self.line_at, "profiler": self.profile_at}[name]
        steps = range(first, first + count)
        chosen.update(steps)
        self._planned.update(steps)

    # ---- budgets (run/budget.py) --------------------------------------------------
    def expected_run_s(self) -> float | None:
        """The run's wall time if the remaining steps take the baseline step each."""
        if self.baseline_s is None:
            return None
        remaining = max(0, self.config.warmup + self.config.steps - self.step_count)
        return self.elapsed() + remaining * self.baseline_s

    def window_opened(self, name: str) -> None:
        """A window probe became active (by the schedule, or by itself: memory at training start)."""
        self.ledger.heavy_probe_ran = True
        self.lean = self.bare = False
        self.ledger.probes.add(name)
        self._open.add(name)
        budget = self.budgets.get(name)
        if budget is not None:
            budget.start(self.clock())

    def script_time_in_windows(self, seconds: float) -> None:
        """The script spent `seconds` on work of its own while windows were open (torch.compile compiling):
        no window's budget pays for it (an op sampler whose first step compiled the model would find its
        run budget spent and sample nothing: litgpt's run)."""
        now = self.clock()
        for budget in self.budgets.values():
            budget.exclude(seconds, now)
        if self.sampler is not None and hasattr(self.sampler, "exclude_script_time"):
            self.sampler.exclude_script_time(seconds, now)  # the first evaluation's sample has a bound of its own

    def window_closed(self, name: str) -> None:
        self._open.discard(name)
        budget = self.budgets.get(name)
        if budget is not None:
            budget.stop(self.clock())

    def checkpoint(self, closure_s: float | None = None) -> None:
        """A safe point: no torch mode's handler is running (a closure evaluation or a
        `backward()` returned, a batch is about to load, a module is called). A window whose
        budget in this step or run is spent stops here, and the step is marked partial for it.
        `closure_s`: a closure evaluation just ended, having taken that long."""
        if closure_s is not None and self.baseline_s is None:
            guess = self.closure_guess_s
            self.closure_guess_s = closure_s if guess is None else min(guess, closure_s)
        if not self._open:
            return
        now = self.clock()
        baseline = self.baseline_s if self.baseline_s is not None else self.closure_guess_s
        expected = self.expected_run_s()
        for name in tuple(self._open):
            budget = self.budgets.get(name)
            probe = getattr(self, name, None)
            if budget is None or probe is None or not probe.active:
                continue
            if getattr(probe, "sampling_evaluation", False):
                continue  # the evaluation's own sample, bounded by its batches and time, not the training window's
            # a closure optimizer that evaluates its closure several times a step (LBFGS): one
            # evaluation is a whole forward and backward, all a per-closure probe needs
            closure_cut = closure_s is not None and budget.per_closure and self.step_count > 0 \
                and self.steps[-1].closure_calls > 1
            if (closure_cut or budget.over(now, baseline, expected)) \
                    and getattr(probe, "can_stop_now", _always)():
                probe.deactivate()
                self.window_closed(name)
                index = self.step_count + 1
                self.ledger.partial.add(name)
                budget.partial.append(index)
                budget.why_partial[index] = "closure" if closure_cut else (
                    "step" if budget.in_step(now) > (budget.step_allowance(baseline) or 0) else "run")
        self.ledger.doctor_s += self.clock() - now

    # ---- stopping -----------------------------------------------------------------
    def elapsed(self) -> float:
        return self.clock() - self.t0

    def check_time(self) -> None:
        if current_pid() != self.pid:
            return
        if self.elapsed() > self.config.max_seconds:
            self.stop("time-limit")

    def stop(self, reason: str) -> None:
        self.request_stop(reason)
        if self.raise_on_stop:
            self.stop_raises += 1
            raise StopRun(self.stop_reason)

    def request_stop(self, reason: str) -> None:
        """Ask the script to end (the first reason wins); the watchdog enforces it."""
        if self.stop_reason is None:
            self.lean = self.bare = False
            self.stop_reason = reason
            self.stop_requested_at = self.clock()
            self.notify("on_stop", reason)

    def unfinished_step(self) -> StepSample | None:
        """The interval open when the run ended, when training work happened in it (a
        closure optimizer's step that outlasted the time limit, say)."""
        ledger = self.ledger
        if not (ledger.micro_batches or ledger.closure_calls or self.training_started):
            return None
        return self._step_sample(self.step_count + 1, self.clock(), warmup=False, sampled=ledger.heavy_probe_ran)

    def _step_sample(self, index: int, now: float, *, warmup: bool, sampled: bool) -> StepSample:
        """The interval from `interval_start` to `now` as step `index`, from the ledger's counts."""
        ledger = self.ledger
        sec = ledger.seconds
        # positional, in the field order: one call, its fields slots (model/record.py)
        # the shape as torch gives it (a tuple): made a list once, when the record is built
        sample = StepSample(
            index, self.interval_start - self.t0, now - self.t0, warmup, sampled, ledger.micro_batches,
            ledger.closure_calls, ledger.samples, sec["data_wait"], sec["backward"], sec["optimizer"],
            sec["zero_grad"], sec["eval"], sec["checkpoint"], sec["logging"], None,
            _shape_of(ledger.batch_shape), ledger.doctor_s,
            sorted(ledger.probes) if ledger.probes else [], sorted(ledger.partial) if ledger.partial else [],
            not self._began_bare)  # a window that opened inside a bare step: its split's first calls went untimed
        return sample

    def raise_if_stopping(self) -> None:
        """Probes call this at safe points so a script that swallowed StopRun still ends."""
        if self.stop_reason is not None and self.raise_on_stop and current_pid() == self.pid:
            self.stop_raises += 1
            raise StopRun(self.stop_reason)


def _always() -> bool:
    return True


def _shape_of(held):
    """A batch's shape as a tuple: of the tensor the loader probe kept, or as given (a torch.Size is one)."""
    if held is None or isinstance(held, tuple):
        return held
    return held.shape if hasattr(held, "shape") else tuple(held)
