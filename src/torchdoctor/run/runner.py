"""Run a user's script (or `-m module`) in this process, exactly as `python` would, under
the probes; stop it cleanly after the last measured step; return what was measured.

The runner never decides what is slow. Whatever happens to the script (it finishes,
raises, exits, is interrupted, or is stopped by us), the measurements come back.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from torchdoctor.model.limits import Limits
from torchdoctor.model.record import RunRecord
from torchdoctor.run.probed import ProbedRun, ProbeOptions
from torchdoctor.run.outcome import CRASHED, Outcome
from torchdoctor.run.target import check_target

__all__ = ["RunRequest", "execute"]


@dataclass
class RunRequest(Limits):  # the limits are keywords: RunRequest("train.py", steps=10)
    target: str
    args: list[str] = field(default_factory=list)
    module: bool = False
    trace: bool | None = None  # None: capture a profiler window only when CUDA is in use
    knobs: dict[str, Any] = field(default_factory=dict)  # parsed `--set` knobs, for this run only
    listeners: list[Any] = field(default_factory=list)  # get the session's events (on_step, on_output, ...)
    # Called with the record when the watchdog must end a script that does not stop: it
    # writes the run directory and returns the exit code; then the process exits. None: the
    # record alone is saved in the run directory.
    on_abandon: Callable[[RunRecord], int] | None = None
    schedule: dict[str, int] = field(default_factory=dict)  # window sizes to change (memory trials)
    # Called with the ProbedRun once it exists, before the script starts (a rank's signal
    # watcher and heartbeat read its session)
    on_probed: Callable[[ProbedRun], None] | None = None
    follow: Any = None  # run/follow/follower.py's FollowOptions: `run --follow`


def execute(request: RunRequest, run_dir: Path, clock: Callable[[], float] = time.perf_counter) -> RunRecord:
    """Run the target under the probes and return the RunRecord (never raises for
    anything the script does; the status says what happened)."""
    script = check_target(request.target, request.module)
    options = ProbeOptions(warmup=request.warmup, steps=request.steps, max_seconds=request.max_seconds,
                           trace=request.trace, knobs=request.knobs, listeners=request.listeners,
                           on_abandon=request.on_abandon, end_process=True, schedule=request.schedule,
                           follow=request.follow)
    probed = ProbedRun(options, run_dir, script, request.args,
                       script_path=None if request.module else request.target, clock=clock)
    if request.on_probed is not None:
        request.on_probed(probed)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    outcome = ("completed", 0, None)
    try:
        with probed:
            outcome = _run_target(request, probed)
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path
    probed.settle(*outcome)
    return probed.record()


def _run_target(request: RunRequest, probed: ProbedRun) -> tuple[str, int, str | None]:
    """Returns (status, exit_code, traceback text)."""
    probed.enter_code()
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
    except BaseException as exc:  # whatever the script did: keep what was measured
        outcome = Outcome.of(exc, probed.session.stop_reason)
        if outcome.status == CRASHED:
            try:
                probed.note_failure(exc)
            except Exception:  # explaining a failure must never replace it
                pass
        return outcome.astuple()
    finally:
        probed.leave_code()
    return Outcome().astuple()
