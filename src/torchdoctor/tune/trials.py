"""Run one trial in a fresh process: `python -m torchdoctor run --set ... SCRIPT ARGS`.

A fresh process per trial, so one trial's compiled kernels, warmed caches, leaked threads or
crash cannot touch the next one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from torchdoctor.tune.plan import Trial

LOG_TAIL_CHARS = 2000
KILL_GRACE_S = 10.0  # after --max-seconds the run stops itself; this is the backstop


@dataclass
class TrialSettings:
    target: str
    args: list[str]
    module: bool
    steps: int
    warmup: int
    max_seconds: float
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
    cmd = [sys.executable, "-m", "torchdoctor", "run", "--format", "json", "--out", str(run_dir),
           "--steps", str(settings.steps), "--warmup", str(settings.warmup),
           "--max-seconds", str(settings.max_seconds)]
    if settings.nproc_per_node is not None:
        cmd += ["--nproc-per-node", str(settings.nproc_per_node)]
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
        child = subprocess.Popen(command_for(trial, settings, run_dir), stdout=out, stderr=log,
                                 start_new_session=True)  # our Ctrl-C is forwarded deliberately, below
        try:
            code = child.wait(timeout=settings.max_seconds + KILL_GRACE_S + 60)
        except subprocess.TimeoutExpired:
            stop_child(child)
            code = -signal.SIGKILL
        except KeyboardInterrupt:
            stop_child(child)
            raise
    seconds = time.monotonic() - started
    error = None
    if code != 0:
        error = _tail(log_path) or f"exited with code {code}"
    return TrialResult(trial, run_dir, code, seconds, error)


def stop_child(child: subprocess.Popen) -> None:
    """SIGINT first so the child writes its partial run directory, then kill."""
    try:
        os.killpg(child.pid, signal.SIGINT)
        child.wait(timeout=KILL_GRACE_S)
    except (subprocess.TimeoutExpired, ProcessLookupError, PermissionError):
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        child.wait()


def _tail(path: Path) -> str:
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = [line for line in text.splitlines() if line.strip() and "\r" not in line]  # no progress redraws
    return "\n".join(lines)[-LOG_TAIL_CHARS:]
