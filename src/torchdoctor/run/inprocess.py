"""Measuring code that runs in this process but that torchdoctor did not start: the body of a
`torchdoctor.watch()` block, or a Trainer's fit with a DoctorCallback.

The same ProbedRun as `torchdoctor run` measures with; what comes after it (lint and trace
evidence, the diagnosis, the run directory) is the caller's: `pipeline.finish_in_process`, so
the three ways in measure and diagnose the same things the same way.

    run = InProcessRun(MeasureSpec(steps=30), label="train.py", script_path="train.py")
    run.start(optimizers=1)     # the probes go in
    ...training...              # a limit sets run.stop_requested (or raises StopRun, stop="raise")
    run.stop_probes()           # the probes come out
    record = run.finish("completed")  # None on a rank that keeps nothing
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from torchdoctor.model.paths import typed_path
from torchdoctor.errors import UsageError
from torchdoctor.model.findings import Report  # set by pipeline.finish_in_process
from torchdoctor.model.limits import DEFAULT_MAX_SECONDS, DEFAULT_STEPS, DEFAULT_WARMUP, Limits
from torchdoctor.model.record import ProbeNote, RunRecord
from torchdoctor.run.probed import ProbedRun, ProbeOptions
from torchdoctor.run.signals import StopSignals, current as current_signals


@dataclass
class MeasureSpec(Limits):
    """What to measure, as `torchdoctor run`'s options say it."""

    out: Path | None = None  # None: ./torchdoctor-runs/<time>-<label>/
    trace: bool | None = None  # None: a profiler window only when CUDA is in use
    knobs: Sequence[str] = field(default_factory=tuple)  # "KNOB=VALUE", as after `--set`
    follow: bool = False  # the whole job, as `run --follow` (run/follow/)
    follow_every_s: float = 10.0  # the timeline and live.json written this often

    @classmethod
    def of(cls, steps: int | None = None, warmup: int = DEFAULT_WARMUP, out: str | os.PathLike[str] | None = None,
           max_seconds: float | None = None, trace: bool | None = None,
           knobs: Sequence[str] = (), follow: bool = False, follow_every_s: float = 10.0) -> "MeasureSpec":
        """From the API's arguments (`watch()`, the callbacks), checked. `steps` and `max_seconds`
        None: the defaults, or with `follow` no limit."""
        from torchdoctor.model.limits import FOLLOW_MAX_SECONDS, FOLLOW_STEPS

        if steps is None:
            steps = FOLLOW_STEPS if follow else DEFAULT_STEPS
        if max_seconds is None:
            max_seconds = FOLLOW_MAX_SECONDS if follow else DEFAULT_MAX_SECONDS
        spec = cls(steps=steps, warmup=warmup, max_seconds=max_seconds, out=Path(out) if out is not None else None,
                   trace=trace, knobs=knobs if isinstance(knobs, str) else tuple(knobs), follow=bool(follow),
                   follow_every_s=follow_every_s)
        spec.check()
        return spec

    def check(self) -> None:
        """A one-line UsageError for values `torchdoctor run` would refuse too."""
        super().check()
        if isinstance(self.knobs, str):
            raise UsageError(f"knobs takes a list of 'KNOB=VALUE' strings, e.g. knobs=[{self.knobs!r}]")
        every = self.follow_every_s
        if isinstance(every, bool) or not isinstance(every, (int, float)) or not 0 < every < float("inf"):
            raise UsageError(f"follow_every_s must be a positive number of seconds, not {every!r}")


class InProcessRun:
    """`stop="raise"` ends the measured code with StopRun at a limit; `stop="flag"` only sets
    `stop_requested`, and the caller ends its loop its own way. `writes=False` (a rank other
    than 0) measures the same, so every rank stops at the same step, but keeps nothing."""

    def __init__(self, spec: MeasureSpec, label: str, script_path: str | None, stop: str = "flag",
                 writes: bool = True) -> None:
        from torchdoctor.run.knobs.spec import parse_settings

        spec.check()
        self.spec, self.label, self.script_path, self.writes = spec, label, script_path, writes
        self.options = ProbeOptions(warmup=spec.warmup, steps=spec.steps, max_seconds=float(spec.max_seconds),
                                    trace=spec.trace, knobs=parse_settings(list(spec.knobs)), stop=stop,
                                    end_process=False, imported_before=True, follow=_follow_options(spec))
        self.probed: ProbedRun | None = None
        self.run_dir: Path | None = None
        self.record: RunRecord | None = None
        self.report: Report | None = None
        self._probes_in = False
        self._signals: StopSignals | None = None  # ours, when no command installed any (run/signals.py)

    @property
    def started(self) -> bool:
        return self.probed is not None

    @property
    def finished(self) -> bool:
        return self.record is not None

    @property
    def stop_requested(self) -> bool:
        return self.probed is not None and self.probed.session.stop_reason is not None

    def start(self, optimizers: int = 0) -> None:
        """Put the probes in. `optimizers`: how many exist already (made before this)."""
        from torchdoctor.model.layout import create_run_dir

        if self.writes:
            self.run_dir = create_run_dir(self.spec.out, self.label)
        else:
            self.run_dir = Path(tempfile.mkdtemp(prefix="torchdoctor-rank-"))
        if current_signals() is None:  # SIGTERM stops the measuring and is delivered once the run is written
            self._signals = StopSignals(raise_in_code=self.options.stop == "raise", signums=(signal.SIGTERM,)).install()
        self.probed = ProbedRun(self.options, self.run_dir, self.label, sys.argv[1:], script_path=self.script_path)
        self.probed.__enter__()
        self._probes_in = True
        self.probed.adopt_optimizers(optimizers)

    def stop_probes(self, exc_type=None, exc=None, tb=None) -> bool:
        """Take the probes out (safe twice). True when `exc` is our StopRun, to be swallowed."""
        if not self._probes_in or self.probed is None:
            return False
        self._probes_in = False
        self.probed.leave_code()
        return bool(self.probed.__exit__(exc_type, exc, tb))

    def finish(self, status: str = "completed", exit_code: int = 0, error: str | None = None,
               notes: Sequence[ProbeNote] = ()) -> RunRecord | None:
        """How the code ended; then the record (with the caller's `notes`). Returns the record
        where this process writes (its run directory stays for the pipeline), else None."""
        if self.probed is None or self.finished:
            return self.record if self.writes else None
        self.stop_probes()
        self.probed.settle(status, exit_code, error)
        self.record = self.probed.record()
        self.record.probe_notes.extend(notes)
        if not self.writes:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            return None
        return self.record


    def release_signals(self) -> None:
        """After the run directory is written: a SIGTERM that stopped the measuring now ends the
        process as it would have without us (exit status 143); else the handler comes out."""
        signals, self._signals = self._signals, None
        if signals is None:
            return
        signals.redeliver()
        signals.uninstall()


def _follow_options(spec: MeasureSpec):
    if not spec.follow:
        return None
    from torchdoctor.run.follow.follower import FollowOptions

    return FollowOptions(every_s=float(spec.follow_every_s))


def script_label(filename: str | None) -> tuple[str, str | None]:
    """(label, script path) for the file the measured code runs from: the path as the user
    would type it when it is a file on disk; "notebook" for a notebook cell or `python -c`."""
    if filename and filename.endswith(".py") and os.path.isfile(filename):
        return typed_path(filename), filename
    return "notebook", None


def main_script() -> str | None:
    """The file `python` ran (`__main__`), if there is one."""
    return getattr(sys.modules.get("__main__"), "__file__", None)
