"""Run one trial in a fresh process: `python -m torchdoctor run --set ... SCRIPT ARGS`.

A fresh process per trial, so one trial's compiled kernels, warmed caches, leaked threads or
crash cannot touch the next one.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path

from torchdoctor.model.limits import Limits
from torchdoctor.run.children import STOP_GRACE_S, doctor_command, output_tail, run_bounded
from torchdoctor.tune.plan import Trial

LOG_TAIL_CHARS = 2000
BACKSTOP_S = 60.0  # after --max-seconds the run stops itself; past this more, the trial is stopped


@dataclass
class TrialSettings(Limits):  # the limits are keywords: TrialSettings(target, args, module, steps=...)
    target: str
    args: list[str]
    module: bool
    nproc_per_node: int | None = None  # a DDP script's ranks; a trial's `nproc` knob overrides it


@dataclass
class TrialResult:
    trial: Trial
    run_dir: Path
    exit_code: int
    seconds: float
    error: str | None = None  # the last lines of its output when it failed

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and (self.run_dir / "record.json").exists()


def command_for(trial: Trial, settings: TrialSettings, run_dir: Path) -> list[str]:
    cmd = [*doctor_command("run", settings.limits()), "--format", "json", "--out", str(run_dir)]
    if settings.nproc_per_node is not None:  # tune's own nproc=1 trial is the one-rank baseline
        cmd += ["--nproc-per-node", str(settings.nproc_per_node), "--one-rank", "never"]
    for setting in trial.settings():
        cmd += ["--set", setting]
    target = ["-m", settings.target] if settings.module else [settings.target]
    return cmd + target + list(settings.args)


def run_trial(trial: Trial, settings: TrialSettings, run_dir: Path) -> TrialResult:
    """Blocks until the trial ends. Ctrl-C stops the child too, then propagates."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log_path = run_dir.with_suffix(".stderr.log")  # the script's stderr, tracebacks, the doctor's errors
    started = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log, open(run_dir.with_suffix(".stdout.log"), "w") as out:
        code = run_bounded(command_for(trial, settings, run_dir), settings.max_seconds + STOP_GRACE_S + BACKSTOP_S,
                           stdout=out, stderr=log)
    if code is None:
        code = -signal.SIGKILL
    seconds = time.monotonic() - started
    error = None
    if code != 0:
        error = output_tail(log_path.read_text(encoding="utf-8", errors="replace"), LOG_TAIL_CHARS)
        error = error or f"exited with code {code}"
    return TrialResult(trial, run_dir, code, seconds, error)
