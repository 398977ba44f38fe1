"""The probes around code that runs in this process: a script (`runner.execute`), the body
of a `with torchdoctor.watch():` block, or a framework's `fit` (the Lightning and Hugging Face
callbacks). One code path for all of them, so they measure the same things the same way.

    probed = ProbedRun(options, run_dir, script="train.py")
    with probed:                    # knobs and probes installed, the watchdog started
        ...the training code...     # the step limit raises StopRun in it (`stop="raise"`)
    record = probed.record()        # everything measured

`stop="raise"` ends the code with StopRun at the step or time limit (`run`, `watch`);
`stop="flag"` only sets `session.stop_reason`, for a caller that ends the loop its own way
(a callback sets `trainer.should_stop`). Only the command line may end the whole process
when the code will not stop (`end_process=True`): a notebook must survive its cell.
"""

from __future__ import annotations

import datetime as _dt
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from torchdoctor.version import __version__
from torchdoctor.model.limits import Limits
from torchdoctor.model.location import Location
from torchdoctor.model.record import ProbeNote, RunInfo, RunRecord
from torchdoctor.run.cost import doctor_cost
from torchdoctor.run.knobs.apply import KnobSet
from torchdoctor.run.knobs.base import KnobContext
from torchdoctor.run.probes.env import read_environment
from torchdoctor.run.probes.frames import display_path
from torchdoctor.run.probeset import ProbeSet
from torchdoctor.run.session import RunSession, SessionConfig, StopRun
from torchdoctor.run.signals import WHY, current as current_signals, exit_code_of
from torchdoctor.run.sources import executed_user_files, prefer_cuda
from torchdoctor.run.watchdog import Watchdog

LIVE_STEPS = 2_000  # live.json (`run --follow`) carries the last this many steps


@dataclass
class ProbeOptions(Limits):
    trace: bool | None = None  # None: capture a profiler window only when CUDA is in use
    knobs: dict[str, Any] = field(default_factory=dict)  # parsed `--set` knobs
    listeners: list[Any] = field(default_factory=list)  # get the session's events (on_step, on_output, ...)
    stop: str = "raise"  # "raise" StopRun into the code at a limit, or only "flag" it
    # Called with the record when the watchdog must end code that does not stop: it writes the
    # run directory and returns the exit code; then the process exits. None: the record alone
    # is saved. Only with end_process.
    on_abandon: Callable[[RunRecord], int] | None = None
    end_process: bool = False
    # The code imported its modules before the probes went in (a `watch()` block, a callback in
    # a Trainer): every user module loaded counts as executed, not only those imported during it.
    imported_before: bool = False
    schedule: dict[str, int] = field(default_factory=dict)  # SessionConfig window sizes to change (memory trials)
    follow: Any = None  # run/follow/follower.py's FollowOptions: follow the whole job (`run --follow`)


class ProbedRun:
    def __init__(self, options: ProbeOptions, run_dir: Path, script: str, argv: list[str] | None = None,
                 script_path: str | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.options = options
        self.run_dir = run_dir
        self.script_path = script_path  # the file whose module level ran (linted as executed)
        config = SessionConfig(warmup=options.warmup, steps=options.steps, max_seconds=options.max_seconds,
                               **options.schedule)
        if options.knobs.get("compile"):
            # The op sampler's modes and hooks run Python inside the model, which TorchDynamo would
            # trace, break on and recompile around: a compiled trial measures steps, not ops.
            config.sampled_steps = config.backward_steps = config.memory_steps = 0
        self.session = RunSession(config, clock, raise_on_stop=options.stop == "raise")
        self.probes = ProbeSet(self.session, run_dir, trace=options.trace, listeners=options.listeners,
                               options=options)
        # Stopped by flag, the code goes on (a Trainer's validation, a watched loop that continues):
        # the worker processes of its loaders are its own to end, not ours.
        self.probes.loaders.end_workers = options.stop == "raise"
        self.info = RunInfo(
            script=script, argv=list(argv or []), cwd=os.getcwd(),
            started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            torchdoctor_version=__version__, warmup=options.warmup, steps_requested=options.steps,
            max_seconds=options.max_seconds,
        )
        session = self.session
        self.knobs = KnobSet(options.knobs, KnobContext(
            in_eval=lambda: session.in_eval, warmup=options.warmup,
            micro_batches=lambda: (session.ledger.micro_batches, session.steps[-1].micro_batches if session.step_count else 0)))
        self.watchdog = Watchdog(session, options.max_seconds, self._abandon,
                                 raise_async=options.stop == "raise", end_process=options.end_process)
        session.subscribe(self.watchdog)
        self.follower = None  # `run --follow`: the timeline, changes, later windows, the black box
        self.live_parts: list = []  # (record) -> None: what the caller adds to live.json (a rank's identity)
        if options.follow is not None:
            from torchdoctor.run.follow.follower import Follower

            self.follower = Follower(session, self.probes, run_dir, options.follow, live_record=self.live_record)
            session.subscribe(self.follower)
        self._modules_before: set[str] = set()
        self.signals = None  # run/signals.py's StopSignals, when installed
        self._install_s = 0.0  # putting the probes in
        self._left_at: float | None = None  # when the code ended: taking them out and summarising follow

    # ---- around the code -----------------------------------------------------------------
    def __enter__(self) -> "ProbedRun":
        entered = time.perf_counter()
        self._modules_before = set() if self.options.imported_before else set(sys.modules)
        # Knob patches nest around the probes' (see KnobGroup.layer): inner, probes, outer.
        self.knobs.install("inner")
        try:
            self.probes.install()
            self.knobs.install("outer")
            self.watchdog.__enter__()
            if self.follower is not None:
                self.follower.start()
        except BaseException:
            self._uninstall()
            raise
        self._install_s = time.perf_counter() - entered
        self.signals = current_signals()
        if self.signals is not None:  # SIGTERM and Ctrl-C stop this run (installed by the command or watch())
            self.signals.attach(self.session)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        """Stop watching and take the probes out. A StopRun, ours, ends here. From now on a
        stop signal does not interrupt the writing of what was measured."""
        self._left_at = time.perf_counter()
        if self.signals is not None:
            self.signals.quiet = True
        if exc is not None:
            try:
                self.note_failure(exc)
            except Exception:  # explaining a failure must never replace it
                pass
        try:
            try:
                self.watchdog.__exit__(exc_type, exc, tb)
            except StopRun:  # raised by the watchdog into our code just after the code returned
                self.watchdog.disarm()
        finally:
            self._uninstall()
        return exc_type is not None and issubclass(exc_type, StopRun)

    def adopt_optimizers(self, count: int) -> None:
        """`count` optimizers exist that were made before the probes went in (a Trainer made
        them, or an earlier notebook cell): steps are theirs, not each `backward()` call's."""
        self.session.optimizers_created += count

    def enter_code(self) -> None:
        """The user's code starts: the watchdog may raise StopRun into it from now."""
        self.watchdog.enter_script()

    def leave_code(self) -> None:
        self.watchdog.disarm()

    def note_failure(self, exc: BaseException) -> None:
        """The code raised `exc`: probes that explain failures (running out of memory) read it
        now, while its traceback still holds what was live."""
        if isinstance(exc, StopRun) or getattr(exc, "_torchdoctor_noted", False):
            return
        try:
            exc._torchdoctor_noted = True  # type: ignore[attr-defined]
        except AttributeError:
            pass
        self.session.notify("on_failure", exc)

    def _uninstall(self) -> None:  # each part takes out only what it installed: safe twice
        self.knobs.uninstall("outer")
        self.probes.uninstall()
        self.knobs.uninstall("inner")

    # ---- after it --------------------------------------------------------------------------
    def settle(self, status: str, exit_code: int = 0, error: str | None = None) -> None:
        """How the code ended. Code that caught our StopRun and then ended its own way still
        ended because we stopped it: the status is the stop's reason, and what it did is noted."""
        info, session = self.info, self.session
        info.status, info.exit_code, info.error = status, exit_code, error
        if session.stop_signal is not None:  # whatever the code raised on the way out (a worker's death)
            self._settle_signal()
            return
        reason = session.stop_reason
        if reason is None or status == "interrupted":
            return
        caught = session.stop_raises + self.watchdog.async_raises - 1  # the last one ended it
        if caught > 0 or status not in (reason, "completed"):
            ended = "" if status in (reason, "completed") else f", then ended as '{status}'"
            info.ended_by = (f"the script caught the stop {caught} time{'s' if caught != 1 else ''} (a bare "
                             f"`except:` or `except BaseException:` around the loop){ended}; torchdoctor's next "
                             "stop ended it")
        info.status, info.exit_code, info.error = reason, 0, None

    def _settle_signal(self) -> None:
        """A stop signal ended the run: interrupted, exit code 128 + the signal, and why."""
        info, signum = self.info, self.session.stop_signal
        info.status, info.exit_code, info.error = "interrupted", exit_code_of(signum), None
        why = WHY.get(signal.Signals(signum).name, signal.Signals(signum).name)
        info.ended_by = why if not info.ended_by else f"{why}; {info.ended_by}"

    def record(self) -> RunRecord:
        """Everything measured so far, as a RunRecord."""
        info, session = self.info, self.session
        info.wall_s = session.elapsed()
        info.step_source, info.backward_calls = session.step_source, session.backward_calls
        info.loop_location = session.loop_location if session.step_source else None
        info.training_loops = [Location(display_path(f), line, function) for f, function, line in session.training_loops]
        if session.training_started is not None:
            info.startup_s = session.training_started - session.t0
        steps = list(session.steps)
        for step in steps:  # kept as torch's shape tuple during the run: lists in the record
            if step.batch_shape is not None and type(step.batch_shape) is not list:
                step.batch_shape = [int(d) for d in step.batch_shape]
        record = RunRecord(run=info, environment=read_environment(), steps=steps)
        if not record.steps:
            record.unfinished_step = session.unfinished_step()
            open_step = record.unfinished_step
            if open_step is not None and open_step.batch_shape is not None:
                open_step.batch_shape = [int(d) for d in open_step.batch_shape]
        self.knobs.contribute(record)
        record.source_files = executed_user_files(self.script_path, self._modules_before)
        record.sources_prefer_cuda = prefer_cuda(record.source_files)
        self.probes.contribute(record)
        sampler = self.probes.sampler
        record.doctor_cost = doctor_cost(
            record.steps, session.budgets, session.baseline_s, session.expected_run_s(),
            eval_sampled_s=sampler.eval_sampled_s, eval_cut=sampler.eval_cut, eval_passed=sampler.eval_passed,
            install_s=self._install_s,
            finish_s=time.perf_counter() - self._left_at if self._left_at is not None else 0.0,
            script_own_s=record.compile.seconds_by_step() if record.compile is not None else None)
        if self.options.knobs.get("compile"):
            record.probe_notes.append(
                ProbeNote("dispatch", "op sampling was off: with compile=true it would break the compiled graph"))
        if self.follower is not None:
            record.follow = self.follower.finish()
            record.probe_notes.extend(ProbeNote("follow", e) for e in self.follower.errors[:5])
        return record

    def live_record(self) -> RunRecord:
        """The record so far, while the code runs (`run --follow` writes it as live.json): the run's
        information and its last steps, without the probes' summaries (those are made at the end)."""
        import dataclasses

        session = self.session
        if getattr(self, "_environment", None) is None:
            self._environment = read_environment()
        info = dataclasses.replace(self.info, status="running", wall_s=session.elapsed(),
                                   step_source=session.step_source, backward_calls=session.backward_calls)
        steps = []
        for step in session.steps[-LIVE_STEPS:]:
            copy = dataclasses.replace(step)
            if copy.batch_shape is not None and type(copy.batch_shape) is not list:
                copy.batch_shape = [int(d) for d in copy.batch_shape]
            steps.append(copy)
        record = RunRecord(run=info, environment=self._environment, steps=steps)
        for part in self.live_parts:
            part(record)
        return record

    def _abandon(self, why: str) -> None:
        """From the watchdog's thread: the code would not stop. Save it all, then exit, whatever
        fails on the way (the process must end: that is the limit)."""
        code = 0
        try:
            self.info.status, self.info.ended_by = self.session.stop_reason or "time-limit", why
            if self.session.stop_signal is not None:
                self._settle_signal()
            self.probes.stop_background()
            record = self.record()
            on_abandon = self.options.on_abandon
            code = on_abandon(record) if on_abandon else _save(record, self.run_dir)
        except BaseException as exc:  # noqa: BLE001 - report it and still end the process
            sys.stderr.write(f"torchdoctor: error while writing the run that would not stop: "
                             f"{type(exc).__name__}: {exc}\n")
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def _save(record: RunRecord, run_dir: Path) -> int:
    from torchdoctor.model.layout import RECORD_FILE# not at the top: the run directory code is loaded when needed

    record.save(run_dir / RECORD_FILE)
    return 0
