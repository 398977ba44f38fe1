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
        code = run_bounded(command_for(trial, settings, run_dir), settings.max_seconds + KILL_GRACE_S + 60,
                           stdout=out, stderr=log)
    if code is None:
        code = -signal.SIGKILL
    seconds = time.monotonic() - started
    error = None
    if code != 0:
        error = output_tail(log_path.read_text(encoding="utf-8", errors="replace"), LOG_TAIL_CHARS)
        error = error or f"exited with code {code}"
    return TrialResult(trial, run_dir, code, seconds, error)


def run_bounded(cmd: list[str], timeout_s: float, stdout, stderr, env: dict[str, str] | None = None) -> int | None:
    """Runs `cmd` in a session of its own (our Ctrl-C is forwarded deliberately, by stop_child)
    and waits: its exit code, or None when it had to be stopped at `timeout_s`. Ctrl-C stops
    the child too, then propagates."""
    child = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, start_new_session=True, env=env)
    try:
        return child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_child(child)
        return None
    except KeyboardInterrupt:
        stop_child(child)
        raise


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


def output_tail(text: str | None, max_chars: int, last_line: bool = False) -> str:
    """The end of a child's output, its blank lines and progress redraws left out: the last
    `max_chars` characters of its lines, or with `last_line` the first `max_chars` of the last."""
    lines = [line for line in (text or "").splitlines() if line.strip() and "\r" not in line]
    if last_line:
        return lines[-1][:max_chars] if lines else ""
    return "\n".join(lines)[-max_chars:]
