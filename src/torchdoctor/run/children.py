"""Child processes, through one door: torch.distributed.run's command line, the `torchdoctor`
child command line with its limits, and running a child under a time limit.

`run --nproc-per-node`, `comm` and `memory`'s DDP trials launch ranks with the same torchrun
options (no restarts, a fast monitor, a short shutdown); `tune` and `memory` start one fresh
process per trial and stop it, with everything it started, when its time is up or on Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

from torchdoctor.errors import Terminated
from torchdoctor.model.limits import Limits

SHUTDOWN_TIMEOUT_S = 30  # torchrun's SIGTERM-to-SIGKILL grace for its ranks: a stuck rank needs ~10 s to save
MONITOR_INTERVAL_S = 0.2  # how often torchrun's agent looks at its ranks (its default, 5 s, delays every stop)
STOP_GRACE_S = 10.0  # a trial stopped with a signal writes its partial run directory within this, or is killed
END_GRACE_S = 2.0  # processes the script left running get this long after SIGTERM, then SIGKILL


@lru_cache(maxsize=None)
def launcher_accepts(option: str) -> bool:
    """Whether this torch's torch.distributed.run knows `option`: torchrun gains flags over
    releases (`--shutdown-timeout` is not in torch 2.11, whose torchrun exits 2 on it)."""
    from torch.distributed.run import get_args_parser

    return any(option in action.option_strings for action in get_args_parser()._actions)


def torchrun_options(nproc_per_node: int, *, nnodes: int = 1, node_rank: int = 0,
                     rdzv_endpoint: str | None = None, tee_dir: Path | None = None) -> list[str]:
    """torch.distributed.run's options for every launch of ours, before the entry point.
    `tee_dir`: the ranks' output goes to files there, and torchrun's agent writes it on to this
    process's stdout and stderr, line by line (`run --follow`'s live panel passes it through)."""
    argv = ["--nproc-per-node", str(nproc_per_node), "--nnodes", str(nnodes), "--max-restarts", "0",
            "--monitor-interval", str(MONITOR_INTERVAL_S)]
    if tee_dir is not None:
        argv += ["--tee", "3", "--log-dir", str(tee_dir)]
    if launcher_accepts("--shutdown-timeout"):  # older torchrun waits its own default (30 s) after SIGTERM
        argv += ["--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S)]
    if rdzv_endpoint:
        argv += ["--rdzv-backend", "static", "--rdzv-endpoint", rdzv_endpoint, "--node-rank", str(node_rank)]
    else:
        argv += ["--standalone"]
    return argv


def torchrun_entry(module: str) -> list[str]:
    """torchrun's entry point `python -m module`, after its options. The `--` ends torchrun's options: its parser
    otherwise takes a script argument that abbreviates one of its own (`--logs` for `--logs-specs`) and exits 2."""
    return ["--module", "--", module]


def torchrun_command(nproc_per_node: int, module: str) -> list[str]:
    """A launch of `python -m module` on one machine, as a command line of its own (a trial)."""
    return [sys.executable, "-m", "torch.distributed.run", *torchrun_options(nproc_per_node), *torchrun_entry(module)]


def doctor_command(subcommand: str, limits: Limits) -> list[str]:
    """`python -m torchdoctor SUBCOMMAND` with the run's limits; the caller adds the rest."""
    return [sys.executable, "-m", "torchdoctor", subcommand, *limits.argv()]


def run_bounded(cmd: list[str], timeout_s: float, stdout, stderr, env: dict[str, str] | None = None) -> int | None:
    """Runs `cmd` in a session of its own (our Ctrl-C or SIGTERM is forwarded deliberately, by
    stop_child) and waits: its exit code, or None when it had to be stopped at `timeout_s`.
    Ctrl-C or SIGTERM (run/signals.py raises Terminated) stops the child the same way, then
    propagates."""
    child = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, start_new_session=True, env=env)
    try:
        return child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_child(child)
        return None
    except KeyboardInterrupt as stop:
        stop_child(child, signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT)
        raise


def stop_child(child: subprocess.Popen, signum: int = signal.SIGINT) -> None:
    """The signal we got (SIGINT or SIGTERM) to the child's session, so it writes its partial
    run directory; then kill what is left of it."""
    try:
        os.killpg(child.pid, signum)
        child.wait(timeout=STOP_GRACE_S)
    except (subprocess.TimeoutExpired, ProcessLookupError, PermissionError):
        pass
    try:
        os.killpg(child.pid, signal.SIGKILL)  # the session's other processes too (a trial's loader workers)
    except (ProcessLookupError, PermissionError):
        pass
    child.wait()


def descendants(pid: int | None = None) -> list[int]:
    """Every living process below `pid` (default: this one), whatever session it is in
    (Linux's /proc; elsewhere none)."""
    root = os.getpid() if pid is None else pid
    parents: dict[int, int] = {}
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return []
    for name in entries:
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": the name may hold spaces
        if fields and fields[0] not in ("Z", "X"):
            parents[int(name)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent]
        found += children
        frontier += children
    return found


def end_descendants(grace_s: float = END_GRACE_S) -> list[int]:
    """End every process this one started that is still running (a stopped script's DataLoader
    workers, a server it started): SIGTERM, then SIGKILL after `grace_s`. Returns their pids."""
    pids = descendants()
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [pid for pid in alive if _running(pid)]
    for pid in alive:
        _signal(pid, signal.SIGKILL)
    return pids


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:][:1] not in ("Z", "X")


def output_tail(text: str | None, max_chars: int, last_line: bool = False) -> str:
    """The end of a child's output, its blank lines and progress redraws left out: the last
    `max_chars` characters of its lines, or with `last_line` the first `max_chars` of the last."""
    lines = [line for line in (text or "").splitlines() if line.strip() and "\r" not in line]
    if last_line:
        return lines[-1][:max_chars] if lines else ""
    return "\n".join(lines)[-max_chars:]
