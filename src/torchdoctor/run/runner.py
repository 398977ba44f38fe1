"""Run a user's script (or `-m module`) in this process, exactly as `python` would, under
the probes; stop it cleanly after the last measured step; return what was measured.

The runner never decides what is slow. Whatever happens to the script (it finishes,
raises, exits, is interrupted, or is stopped by us), the measurements come back.
"""

from __future__ import annotations

import datetime as _dt
import os
import runpy
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torchdoctor
from torchdoctor.record import ProbeNote, RunInfo, RunRecord
from torchdoctor.run.knobs.apply import KnobSet
from torchdoctor.run.knobs.base import KnobContext
from torchdoctor.run.probes.env import read_environment
from torchdoctor.run.probeset import ProbeSet
from torchdoctor.run.session import RunSession, SessionConfig, StopRun
from torchdoctor.run.sources import executed_user_files
from torchdoctor.run.target import check_target
from torchdoctor.run.watchdog import Watchdog

RECORD_FILE = "record.json"


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
    listeners: list[Any] = field(default_factory=list)  # get the session's events (on_step, on_output, ...)
    # Called with the record when the watchdog must end a script that does not stop: it
    # writes the run directory and returns the exit code; then the process exits. None: the
    # record alone is saved in the run directory.
    on_abandon: Callable[[RunRecord], int] | None = None


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
    probes = ProbeSet(session, run_dir, trace=request.trace, listeners=request.listeners)
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

    def collect() -> RunRecord:
        info.wall_s = session.elapsed()
        info.step_source, info.backward_calls = session.step_source, session.backward_calls
        info.loop_location = session.loop_location if session.step_source else None
        if session.training_started is not None:
            info.startup_s = session.training_started - session.t0
        record = RunRecord(run=info, environment=read_environment(), steps=list(session.steps))
        if not record.steps:
            record.unfinished_step = session.unfinished_step()
        knobs.contribute(record)
        record.source_files = executed_user_files(None if request.module else request.target, modules_before)
        probes.contribute(record)
        if request.knobs.get("compile"):
            record.probe_notes.append(
                ProbeNote("dispatch", "op sampling was off: with compile=true it would break the compiled graph"))
        return record

    def abandon(why: str) -> None:
        """From the watchdog's thread: the script would not stop. Save it all, then exit,
        whatever fails on the way (the process must end: that is the limit)."""
        code = 0
        try:
            info.status, info.ended_by = session.stop_reason or "time-limit", why
            probes.stop_background()
            record = collect()
            code = request.on_abandon(record) if request.on_abandon else _save(record, run_dir)
        except BaseException as exc:  # noqa: BLE001 - report it and still end the process
            sys.stderr.write(f"torchdoctor: error while writing the run that would not stop: "
                             f"{type(exc).__name__}: {exc}\n")
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    watchdog = Watchdog(session, request.max_seconds, abandon)
    session.subscribe(watchdog)
    try:
        # Knob patches nest around the probes' (see KnobGroup.layer): inner, probes, outer.
        knobs.install("inner")
        probes.install()
        knobs.install("outer")
        try:
            with watchdog:
                info.status, info.exit_code, info.error = _run_target(request, session, watchdog)
        except StopRun:  # raised by the watchdog into our code just after the script returned
            watchdog.disarm()
        _settle_after_stop(info, session, watchdog)
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path
        knobs.uninstall("outer")
        probes.uninstall()
        knobs.uninstall("inner")
    return collect()


def _settle_after_stop(info: RunInfo, session: RunSession, watchdog: Watchdog) -> None:
    """A script that caught our StopRun and then ended its own way still ended because we
    stopped it: the status is the stop's reason, and what the script did is noted."""
    reason = session.stop_reason
    if reason is None or info.status == "interrupted":
        return
    caught = session.stop_raises + watchdog.async_raises - 1  # the last one ended it
    if caught > 0 or info.status not in (reason, "completed"):
        ended = "" if info.status in (reason, "completed") else f", then ended as '{info.status}'"
        info.ended_by = (f"the script caught the stop {caught} time{'s' if caught != 1 else ''} (a bare `except:` or "
                         f"`except BaseException:` around the loop){ended}; torchdoctor's next stop ended it")
    info.status, info.exit_code, info.error = reason, 0, None


def _save(record: RunRecord, run_dir: Path) -> int:
    record.save(run_dir / RECORD_FILE)
    return 0


def _run_target(request: RunRequest, session: RunSession, watchdog: Watchdog) -> tuple[str, int, str | None]:
    """Returns (status, exit_code, traceback text)."""
    watchdog.enter_script()
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
        return session.stop_reason or stop.reason, 0, None
    except SystemExit as exc:
        code = exc.code
        if code is None or code == 0:
            return "exited", 0, None
        return "exited", code if isinstance(code, int) else 1, None if isinstance(code, int) else str(code)
    except KeyboardInterrupt:
        return "interrupted", 130, None
    except BaseException as exc:  # the user's script raised: keep what was measured
        return "crashed", 1, _user_traceback(exc)
    finally:
        watchdog.disarm()
    return "completed", 0, None
