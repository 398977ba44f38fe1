"""Run a user's script (or `-m module`) in this process, exactly as `python` would, under
the probes; stop it cleanly after the last measured step; return what was measured.

The runner never decides what is slow. Whatever happens to the script (it finishes,
raises, exits, is interrupted, or is stopped by us), the measurements come back.
"""

from __future__ import annotations

import _thread
import datetime as _dt
import importlib.util
import os
import runpy
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torchdoctor
from torchdoctor.errors import UsageError
from torchdoctor.knobs import KnobSet
from torchdoctor.knobs.base import KnobContext
from torchdoctor.probes.backward_attribution import BackwardTimer
from torchdoctor.probes.cuda_events import CudaStepEvents
from torchdoctor.probes.dataloader import DataLoaderProbe
from torchdoctor.probes.dispatch import DispatchSampler
from torchdoctor.probes.env import read_environment
from torchdoctor.probes.gpu import GpuProbe
from torchdoctor.probes.line_sampler import LineSampler
from torchdoctor.probes.phases import PhaseProbe
from torchdoctor.probes.profiler import ProfilerWindow
from torchdoctor.probes.sources import executed_user_files, lint_executed
from torchdoctor.probes.steps import StepProbe
from torchdoctor.record import ProbeNote, RunInfo, RunRecord, StepSample
from torchdoctor.session import RunSession, SessionConfig, StopRun

TRACE_FILE = "trace.json.gz"
WATCHDOG_GRACE_S = 2.0  # the hooks stop a stepping script first; the timer is a backstop


@dataclass
class RunRequest:
    target: str
    args: list[str] = field(default_factory=list)
    module: bool = False
    warmup: int = 3
    steps: int = 30
    max_seconds: float = 300.0
    trace: bool | None = None  # None: capture a profiler window only when CUDA is in use
    knobs: dict[str, Any] = field(default_factory=dict)  # parsed `--set` knobs, for this run only
    on_step: Callable[[StepSample], None] | None = None


def check_target(request: RunRequest) -> str:
    """Validate the script or module before anything runs; returns its display name."""
    if request.module:
        sys.path.insert(0, os.getcwd())  # as `python -m` will have it when the module runs
        try:
            spec = importlib.util.find_spec(request.target)
        except (ImportError, ValueError) as exc:
            spec, reason = None, str(exc)
        else:
            reason = "no such module"
        finally:
            sys.path.remove(os.getcwd())
        if spec is None:
            raise UsageError(
                f"cannot find module '{request.target}' ({reason}); run from the directory "
                "that contains it or install it, as `python -m` would need"
            )
        return f"-m {request.target}"
    path = Path(request.target)
    if not path.exists():
        raise UsageError(f"script not found: {request.target}; pass the path to your training script")
    if path.is_dir():
        raise UsageError(f"{request.target} is a directory; pass the training script inside it")
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise UsageError(f"cannot read {request.target} ({exc.strerror}); check its permissions") from None
    return request.target


class _Watchdog:
    """Interrupts a script that neither steps nor loads data once time is up."""

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.name = "torchdoctor-watchdog"

    def _fire(self) -> None:
        self.fired = True
        _thread.interrupt_main()

    def __enter__(self) -> "_Watchdog":
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        self._timer.join()


def _user_traceback(exc: BaseException) -> str:
    """The traceback as the user would see it from plain `python`: our frames removed."""
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith(os.path.dirname(torchdoctor.__file__))
        and os.path.basename(f.filename) != "runpy.py"
    ]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def execute(request: RunRequest, run_dir: Path, clock: Callable[[], float] = time.perf_counter) -> RunRecord:
    """Run the target under the probes and return the RunRecord (never raises for
    anything the script does; the status says what happened)."""
    script = check_target(request)
    config = SessionConfig(warmup=request.warmup, steps=request.steps, max_seconds=request.max_seconds)
    if request.knobs.get("compile"):
        # The op sampler's modes and hooks run Python inside the model, which TorchDynamo would
        # trace, break on and recompile around: a compiled trial measures steps, not ops.
        config.sampled_steps = config.backward_steps = 0
    session = RunSession(config, clock)
    steps = StepProbe(session)
    loaders = DataLoaderProbe(session)
    sampler = DispatchSampler(clock, on_activate=session.note_heavy_probe,
                              outside_step=session.outside_training_step)
    phases = PhaseProbe(session, on_eval_enter=sampler.on_eval_enter, on_eval_exit=sampler.on_eval_exit)
    gpu = GpuProbe(clock, t0=session.t0)
    cuda_events = CudaStepEvents()
    profiler = ProfilerWindow(run_dir / TRACE_FILE, on_activate=session.note_heavy_probe)
    lines = LineSampler()
    backward = BackwardTimer(clock, candidates=sampler.busiest_lines, on_activate=session.note_heavy_probe)
    session.backward_timer = backward
    loaders.on_batch = sampler.on_batch
    session.sampler = sampler
    session.line_sampler = lines

    def on_step(step: StepSample) -> None:
        cuda_events.on_step(step)
        gpu.on_step()
        if session.profiler is None and (request.trace or (request.trace is None and gpu.cuda_in_use)):
            session.profiler = profiler
        if request.on_step is not None:
            request.on_step(step)

    session.on_step = on_step
    probes = [steps, loaders, phases, sampler, lines, gpu]
    windows = [backward, profiler]  # installed lazily by the session's schedule
    info = RunInfo(
        script=script,
        argv=list(request.args),
        cwd=os.getcwd(),
        started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        torchdoctor_version=torchdoctor.__version__,
        warmup=request.warmup,
        steps_requested=request.steps,
        max_seconds=request.max_seconds,
    )
    knobs = KnobSet(request.knobs, KnobContext(in_eval=lambda: session.in_eval, warmup=request.warmup))
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    modules_before = set(sys.modules)
    notes: list[ProbeNote] = []
    installed = []
    try:
        # Knob patches nest around the probes' (see KnobGroup.layer): inner, probes, outer.
        knobs.install("inner")
        for probe in probes:
            probe.install()
            installed.append(probe)
        knobs.install("outer")
        with _Watchdog(request.max_seconds + WATCHDOG_GRACE_S) as watchdog:
            info.status, info.exit_code, info.error = _run_target(request, watchdog)
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path
        knobs.uninstall("outer")
        for probe in [*windows, *reversed(installed)]:
            probe.uninstall()
        knobs.uninstall("inner")
        loaders.shutdown_workers()
        info.wall_s = session.elapsed()
    record = RunRecord(run=info, environment=read_environment(), steps=session.steps)
    knobs.contribute(record)
    record.source_files = executed_user_files(None if request.module else request.target, modules_before)
    try:
        record.static_findings = lint_executed(record.source_files)
    except Exception as exc:  # the static cross-check is a bonus; never lose the run for it
        notes.append(ProbeNote("lint", f"could not lint the executed files: {type(exc).__name__}: {exc}"))
    for probe in [*probes, backward]:  # backward after dispatch: it annotates the sites
        try:
            probe.contribute(record)
        except Exception as exc:  # a probe bug must not lose the other measurements
            notes.append(ProbeNote(probe.name, f"failed to summarise: {type(exc).__name__}: {exc}"))
    note = cuda_events.fill(record.steps)
    if note:
        notes.append(ProbeNote("cuda-events", note))
    if profiler.saved:
        record.trace_file = profiler.saved
        try:
            from torchdoctor.trace import analyze_trace_files  # the parser loads only for runs that saved one

            record.trace = analyze_trace_files([run_dir / profiler.saved])
        except Exception as exc:  # the trace is a bonus; the file stays for `torchdoctor trace`
            notes.append(ProbeNote("profiler", f"could not analyse {profiler.saved}: {type(exc).__name__}: {exc}"))
    elif profiler.error:
        notes.append(ProbeNote("profiler", profiler.error))
    if request.knobs.get("compile"):
        notes.append(ProbeNote("dispatch", "op sampling was off: with compile=true it would break the compiled graph"))
    record.probe_notes = notes + record.probe_notes
    return record


def _run_target(request: RunRequest, watchdog: _Watchdog) -> tuple[str, int, str | None]:
    """Returns (status, exit_code, traceback text)."""
    try:
        if request.module:
            sys.argv[:] = [request.target, *request.args]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(request.target, run_name="__main__", alter_sys=True)
        else:
            path = os.path.abspath(request.target)
            sys.argv[:] = [request.target, *request.args]
            sys.path[0] = os.path.dirname(path)
            runpy.run_path(path, run_name="__main__")
    except StopRun as stop:
        return stop.reason, 0, None
    except SystemExit as exc:
        code = exc.code
        if code is None or code == 0:
            return "exited", 0, None
        return "exited", code if isinstance(code, int) else 1, None if isinstance(code, int) else str(code)
    except KeyboardInterrupt:
        return ("time-limit", 0, None) if watchdog.fired else ("interrupted", 130, None)
    except BaseException as exc:  # the user's script raised: keep what was measured
        return "crashed", 1, _user_traceback(exc)
    return "completed", 0, None
