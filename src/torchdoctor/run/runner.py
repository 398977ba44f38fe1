"""Run a user's script (or `-m module`) in this process, exactly as `python` would, under
the probes; stop it cleanly after the last measured step; return what was measured.

The runner never decides what is slow. Whatever happens to the script (it finishes,
raises, exits, is interrupted, or is stopped by us), the measurements come back.
"""

from __future__ import annotations

import _thread
import datetime as _dt
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
from torchdoctor.record import ProbeNote, RunInfo, RunRecord, StepSample
from torchdoctor.run.knobs.apply import KnobSet
from torchdoctor.run.knobs.base import KnobContext
from torchdoctor.run.probes.env import read_environment
from torchdoctor.run.probeset import ProbeSet
from torchdoctor.run.session import RunSession, SessionConfig, StopRun
from torchdoctor.run.sources import executed_user_files
from torchdoctor.run.target import check_target

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
    script = check_target(request.target, request.module)
    config = SessionConfig(warmup=request.warmup, steps=request.steps, max_seconds=request.max_seconds)
    if request.knobs.get("compile"):
        # The op sampler's modes and hooks run Python inside the model, which TorchDynamo would
        # trace, break on and recompile around: a compiled trial measures steps, not ops.
        config.sampled_steps = config.backward_steps = 0
    session = RunSession(config, clock)
    probes = ProbeSet(session, run_dir, trace=request.trace, on_step=request.on_step)
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
    try:
        # Knob patches nest around the probes' (see KnobGroup.layer): inner, probes, outer.
        knobs.install("inner")
        probes.install()
        knobs.install("outer")
        with _Watchdog(request.max_seconds + WATCHDOG_GRACE_S) as watchdog:
            info.status, info.exit_code, info.error = _run_target(request, watchdog)
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path
        knobs.uninstall("outer")
        probes.uninstall()
        knobs.uninstall("inner")
        info.wall_s = session.elapsed()
    record = RunRecord(run=info, environment=read_environment(), steps=session.steps)
    knobs.contribute(record)
    record.source_files = executed_user_files(None if request.module else request.target, modules_before)
    probes.contribute(record)
    if request.knobs.get("compile"):
        record.probe_notes.append(
            ProbeNote("dispatch", "op sampling was off: with compile=true it would break the compiled graph"))
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
