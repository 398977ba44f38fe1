"""Run the plan: each step a process under its own time budget, stopped (with everything it
started) when the budget is spent; the next step runs regardless. After every step the
results so far are packed into --out, so a run cut short still leaves its evidence there."""

from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.gpucheck import bundle
from benchmarks.gpucheck.plan import STEPS, TOTAL_BUDGET_S, Context, Step

PASSED, FAILED, OVERRAN, SKIPPED = "passed", "failed", "overran", "skipped"
KILL_GRACE_S = 5.0  # after SIGTERM, this long to write partial results before SIGKILL
MIN_STEP_S = 5.0  # a step with less time than this left in the total is skipped, not started
LOG_TAIL_LINES = 25


@dataclass
class StepOutcome:
    name: str
    title: str
    status: str
    budget_s: float
    seconds: float = 0.0
    exit_code: int | None = None
    reason: str = ""  # why it was skipped, failed or stopped
    command: list[str] = field(default_factory=list)
    log_tail: str = ""


@dataclass
class CheckState:
    """Everything the summary and the bundle need; written as summary-<tag>.json."""

    schema_version: int
    rehearsal: bool
    started_at: str
    python: str
    total_budget_s: float
    tag: str = ""
    cuda: bool | None = None
    finished: bool = False
    seconds: float = 0.0
    steps: list[StepOutcome] = field(default_factory=list)
    not_selected: list[str] = field(default_factory=list)  # a rerun's (--steps) left-out steps

    def to_plain(self) -> dict:
        return asdict(self)


SCHEMA_VERSION = 1


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`, from /proc (the tune's trials start their own sessions,
    so killing the step's process group alone would leave them running on the GPU)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def is_running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie holds no GPU memory


def stop_tree(proc: subprocess.Popen) -> None:
    """SIGTERM the step and everything it started, give them KILL_GRACE_S, then SIGKILL, and
    wait until they are gone: the next step must not share the GPU with their remains."""
    tree = [proc.pid, *descendants(proc.pid)]
    _signal_all(tree, signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    tree += descendants(proc.pid)
    _signal_all(tree, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + KILL_GRACE_S
    while any(is_running(pid) for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.05)


def _tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])


def run_command(argv: list[str], timeout_s: float, log: Path, env: dict[str, str], cwd: Path) -> tuple[str, int | None, float]:
    """(status, exit code, seconds): PASSED, FAILED or OVERRAN."""
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                    start_new_session=True)
        except OSError as exc:
            out.write(f"could not start {argv[0]}: {exc}\n")
            return FAILED, None, 0.0
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_tree(proc)
            return OVERRAN, proc.returncode, time.monotonic() - started
        except KeyboardInterrupt:
            stop_tree(proc)
            raise
    return (PASSED if code == 0 else FAILED), code, time.monotonic() - started


class Orchestrator:
    def __init__(self, ctx: Context, out: Path, budgets: dict[str, float], total_s: float = TOTAL_BUDGET_S,
                 steps: tuple[Step, ...] = STEPS, echo=print, partial: bool = False) -> None:
        self.ctx, self.out, self.budgets, self.steps, self.echo = ctx, out, budgets, steps, echo
        self.partial = partial  # a rerun of some steps: its tag adds the time, so no full run's files are replaced
        self.total_s = total_s
        self.state = CheckState(SCHEMA_VERSION, ctx.rehearse, _dt.datetime.now(_dt.timezone.utc).isoformat(
            timespec="seconds"), ctx.python, total_s, tag=bundle.provisional_tag(ctx.rehearse))
        self.state.not_selected = [s.name for s in STEPS if s not in steps]
        self._t0 = time.monotonic()
        self._packed: list[Path] = []

    def _env(self, step: Step) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        paths = [*self.ctx.pythonpath, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        if step.env is not None:
            env.update(step.env(self.ctx))
        return env

    def _skip_reason(self, step: Step) -> str | None:
        if self.state.cuda is False and not self.ctx.rehearse and step.name not in ("install", "machine"):
            return "no CUDA device: torch.cuda.is_available() is False under " + self.ctx.python
        left = self.total_s - (time.monotonic() - self._t0)
        if left < MIN_STEP_S:
            return f"no time left: the check's {self.total_s:.0f} s were spent by the steps before it"
        return None

    def run_step(self, step: Step) -> StepOutcome:
        budget = self.budgets.get(step.name, step.budget_s)
        outcome = StepOutcome(step.name, step.title, SKIPPED, budget)
        reason = self._skip_reason(step)
        if reason:
            outcome.reason = reason
            return outcome
        left = self.total_s - (time.monotonic() - self._t0)
        timeout = min(budget, left)
        argv = step.command(self.ctx, timeout)
        outcome.command = argv
        log = self.ctx.work / f"{step.name}.log"
        outcome.status, outcome.exit_code, outcome.seconds = run_command(argv, timeout, log, self._env(step),
                                                                         self.ctx.root)
        wrote = step.result is not None and (self.ctx.work / step.result).exists()
        if outcome.status == OVERRAN:
            outcome.reason = (f"stopped after {timeout:.0f} s (its budget)" if timeout == budget else
                              f"stopped after {timeout:.0f} s: the check's {self.total_s:.0f} s ran out")
        elif outcome.status == FAILED and not wrote:
            outcome.reason = f"exit code {outcome.exit_code} and no result written: it crashed (the end of its log below)"
        elif outcome.status == FAILED:
            meaning = step.exit_codes.get(outcome.exit_code, "")
            outcome.reason = f"exit code {outcome.exit_code}" + (f": {meaning}" if meaning else "")
        if outcome.status == OVERRAN or (outcome.status == FAILED and not wrote):
            outcome.log_tail = _tail(log)  # a failure with a result says itself; all logs are in the logs tarball
        return outcome

    def _after(self, step: Step) -> None:
        """What a step's result means for the ones after it."""
        if step.name == "install":
            installed = _read_json(self.ctx.work / "install.json")
            self.ctx.pythonpath = list(installed.get("pythonpath", [])) if installed else [str(self.ctx.root / "src")]
        if step.name == "machine":
            machine = _read_json(self.ctx.work / "machine.json")
            # no machine.json (a cold start past its budget): unknown, so the GPU steps still run
            self.state.cuda = bool(machine["cuda_available"]) if machine and "cuda_available" in machine else None
            when = self.state.started_at[:10]
            if self.partial:
                when += "-" + self.state.started_at[11:16].replace(":", "")
            self.state.tag = bundle.tag_for(machine or {}, self.ctx.rehearse, when)

    def _pack(self) -> None:
        self.state.seconds = time.monotonic() - self._t0
        self._packed = bundle.pack(self.state, self.ctx.work, self.out, self._packed)

    def run(self) -> int:
        for n, step in enumerate(self.steps, 1):
            self.echo(f"[gpu {n}/{len(self.steps)}] {step.name}: {step.title} "
                      f"(budget {self.budgets.get(step.name, step.budget_s):.0f} s)", flush=True)
            outcome = self.run_step(step)
            self.state.steps.append(outcome)
            self._after(step)
            detail = f" ({outcome.reason})" if outcome.reason else ""
            self.echo(f"[gpu {n}/{len(self.steps)}] {step.name}: {outcome.status} in {outcome.seconds:.1f} s{detail}",
                      flush=True)
            self._pack()
        self.state.finished = True
        self._pack()
        self.echo(f"[gpu] {len(self._packed)} files in {self.out}: {', '.join(p.name for p in self._packed)}",
                  flush=True)
        if self.state.cuda is False and not self.ctx.rehearse:
            return 2
        return 0 if all(s.status in (PASSED, SKIPPED) for s in self.state.steps) else 1


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def new_work_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="torchdoctor-gpu-"))
