"""`torchdoctor run --nproc-per-node N [--nnodes M --node-rank R --rdzv-endpoint H:P]`: start
the ranks through PyTorch's own elastic launcher (`torch.distributed.run`, the engine behind
`torchrun`), each one `torchdoctor run` of the script (child.py), and keep the launch bounded.

The launcher process is torchrun's agent: it starts the ranks in their own sessions, stops
them all when one fails (SIGTERM, then SIGKILL after the shutdown timeout; the options are run/children.py's) and forwards
Ctrl-C. On top of it a stall watch reads the ranks' heartbeats and, when none makes progress
for the stall timeout, names the rank the others wait for and stops the job through the agent
(a SIGTERM to this process, which the agent turns into stopping every rank). Each rank writes
its own record whatever happens; what the agent knows of ranks that could not (killed, or
dead before they started) comes back in `LaunchOutcome`.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any
from pathlib import Path

from torchdoctor.errors import UsageError
from torchdoctor.machine.cpus import usable_cpus
from torchdoctor.machine.oom import oom_kills
from torchdoctor.run.children import torchrun_entry, torchrun_options
from torchdoctor.run.ranks.heartbeat import Stall, StallWatch
from torchdoctor.run.ranks.identity import JOB_ID_ENV, RANKS_DIR_ENV

DEFAULT_STALL_S = 60.0


@dataclass
class LaunchRequest:
    nproc_per_node: int
    child_argv: list[str]  # `torchdoctor run` options and the target, for every rank
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    stall_s: float = DEFAULT_STALL_S
    # `run --follow` with its live panel (run/follow/job.py's JobOutput): the ranks' output is teed through
    # torchrun's agent into this process, whose stdout and stderr are the panel's pass-through meanwhile
    output: Any = None


@dataclass
class LaunchOutcome:
    exit_codes: dict[int, int] = field(default_factory=dict)  # global rank -> exit code, for failed ranks
    first_failure: int | None = None  # the rank the agent saw fail first
    # global rank -> when the agent saw it fail (torchrun's timestamp: whole seconds, so ranks that fail
    # within one second tie, and its first failure is then any of them)
    failure_times: dict[int, int] = field(default_factory=dict)
    interrupted: bool = False
    signal_exit: int | None = None  # 130 or 143: the launcher got SIGINT or SIGTERM (not its own stall stop)
    stall: Stall | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # the launcher itself failed (rendezvous, a port)
    oom_kills: int | None = None  # the memory cgroup's OOM kills during the launch (None: not readable)


def device_note(nproc: int) -> str | None:
    """Say so when there are more ranks than devices (on CPU that is allowed)."""
    import torch

    if torch.cuda.is_available():
        gpus = torch.cuda.device_count()
        if nproc > gpus:
            return (f"--nproc-per-node {nproc} is more than this machine's {gpus} GPU(s): ranks {gpus}-{nproc - 1} "
                    f"share a GPU, and DDP with device_ids=[local_rank] fails on them; use --nproc-per-node {gpus}")
        return None
    cores = usable_cpus()
    if nproc > cores:
        return (f"{nproc} ranks on {cores} CPU cores: allowed on CPU, but the ranks take turns on the cores, so "
                "step times include waiting for a core")
    return None


def check_endpoint(endpoint: str | None, node_rank: int) -> tuple[str, int] | None:
    """`HOST:PORT` parsed; on the node that hosts the rendezvous, refuse a port already in use."""
    if endpoint is None:
        return None
    host, sep, port_text = endpoint.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(f"--rdzv-endpoint {endpoint!r} is not HOST:PORT; e.g. --rdzv-endpoint localhost:29500")
    port = int(port_text)
    if node_rank == 0 and _is_local(host):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("" if host in ("0.0.0.0", "") else socket.gethostbyname(host), port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise UsageError(
                        f"port {port} on {host} is already in use (another torchrun or torchdoctor run?); pass a free "
                        f"one, e.g. --rdzv-endpoint {host}:{_free_port()}, or leave --rdzv-endpoint out on one node"
                    ) from None
                raise UsageError(f"cannot listen on {endpoint}: {exc.strerror}; pass --rdzv-endpoint HOST:PORT of "
                                 "this machine") from None
    return host, port


def _is_local(host: str) -> bool:
    if host in ("localhost", "127.0.0.1", "0.0.0.0", "::1", socket.gethostname()):
        return True
    try:
        return socket.gethostbyname(host).startswith("127.") or socket.gethostbyname(host) == socket.gethostbyname(
            socket.gethostname())
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher_argv(request: LaunchRequest) -> list[str]:
    tee_dir = request.output.log_dir if request.output is not None else None
    return [*torchrun_options(request.nproc_per_node, nnodes=request.nnodes, node_rank=request.node_rank,
                              rdzv_endpoint=request.rdzv_endpoint, tee_dir=tee_dir), *torchrun_entry("torchdoctor"),
            "run", *request.child_argv]


def launch(request: LaunchRequest, run_dir: Path) -> LaunchOutcome:
    """Start the ranks and wait for them; every rank's record is in run_dir/rank-K afterwards."""
    outcome = LaunchOutcome()
    note = device_note(request.nproc_per_node)
    if note:
        outcome.notes.append(note)
        sys.stderr.write(f"torchdoctor: {note}\n")
    if "OMP_NUM_THREADS" not in os.environ and request.nproc_per_node > 1:
        os.environ["OMP_NUM_THREADS"] = "1"  # what torchrun does (with a banner); said in the report instead
        outcome.notes.append("torchrun's default applied: OMP_NUM_THREADS=1 in every rank (it was unset)")
    os.environ[RANKS_DIR_ENV] = str(run_dir.resolve())
    os.environ.setdefault(JOB_ID_ENV, uuid.uuid4().hex)
    capture_nccl_log(run_dir)
    first = request.node_rank * request.nproc_per_node
    ranks = list(range(first, first + request.nproc_per_node))

    def stop_job(stall: Stall) -> None:  # from the watch's thread: the agent stops every rank
        sys.stderr.write(f"torchdoctor: stopping all ranks: {stall.message}\n")
        os.kill(os.getpid(), signal.SIGTERM)

    watch = StallWatch(run_dir, ranks, request.stall_s, on_stall=stop_job)
    kills_before = oom_kills()
    try:
        with watch:
            if request.output is not None:
                with request.output:  # sys.stdout and sys.stderr pass the ranks' lines around the panel
                    run_elastic(launcher_argv(request), outcome)
            else:
                run_elastic(launcher_argv(request), outcome)
    finally:
        os.environ.pop(RANKS_DIR_ENV, None)
    kills_after = oom_kills()
    if kills_before is not None and kills_after is not None:
        outcome.oom_kills = kills_after - kills_before
    outcome.stall = watch.stall
    if outcome.stall is not None:  # the SIGTERM was the stall watch's own
        outcome.interrupted, outcome.signal_exit = False, None
    return outcome


def run_elastic(argv: list[str], outcome: LaunchOutcome) -> None:
    """torch.distributed.run with `argv` (its own command line); the result into `outcome`."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    handlers = {signum: handler for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
                if (handler := signal.getsignal(signum)) is not None}
    try:
        run(parse_args(argv))
    except ChildFailedError as failed:
        for rank, failure in failed.failures.items():
            outcome.exit_codes[rank] = failure.exitcode
            outcome.failure_times[rank] = int(getattr(failure, "timestamp", 0) or 0)
        outcome.first_failure, _ = failed.get_first_failure()
    except SignalException as signalled:
        outcome.interrupted = True
        outcome.signal_exit = 128 + int(signalled.sigval)
        outcome.notes.append(f"the launcher got {signalled.sigval.name}")
    except KeyboardInterrupt as stop:  # before the agent's handlers were in: ours (run/signals.py)
        outcome.interrupted = True
        outcome.signal_exit = getattr(stop, "exit_code", 130)
    except Exception as exc:  # the rendezvous failed, a port was taken between the check and the bind, ...
        outcome.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:  # the agent replaced the stop signals' handlers and leaves them raising its exception
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def capture_nccl_log(run_dir: Path) -> None:
    """On GPUs, have NCCL write its INFO lines (the transport it chose) to files in the run
    directory instead of the script's output; never when the user set NCCL_DEBUG."""
    from torchdoctor.comm.discover import NCCL_LOG_ENV, NCCL_LOG_PATTERN

    try:
        import torch

        if not torch.cuda.is_available() or "NCCL_DEBUG" in os.environ:
            return
    except ImportError:
        return
    folder = run_dir / "nccl"
    folder.mkdir(exist_ok=True)
    os.environ.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV",
                       "NCCL_DEBUG_FILE": str(folder / NCCL_LOG_PATTERN), NCCL_LOG_ENV: str(folder)})


# Targets that are torchrun's launcher itself: `torchdoctor run -m torch.distributed.run ... train.py` (or the
# `torchrun` script) would measure the agent, which trains nothing; the ranks are read from its command line.
TORCHRUN_MODULES = ("torch.distributed.run",)
TORCHRUN_SCRIPTS = ("torchrun",)


@dataclass
class TorchrunTarget:
    nproc_per_node: int
    nnodes: int
    node_rank: int | None
    rdzv_endpoint: str | None
    target: str
    args: list[str]
    module: bool


def is_torchrun(target: str, module: bool) -> bool:
    return target in TORCHRUN_MODULES if module else Path(target).name in TORCHRUN_SCRIPTS


def from_torchrun(args: list[str]) -> TorchrunTarget:
    """torchrun's command line read by torchrun's own parser, as the doctor's multi-rank run. What the
    doctor's launch does not carry (restarts, elastic node counts, no-python) is refused by name."""
    from torch.distributed.run import parse_args

    try:
        parsed = parse_args(list(args))
    except SystemExit:  # argparse has printed what it could not read
        raise UsageError("torchrun's options above could not be read; e.g. torchdoctor run --nproc-per-node 2 "
                         "train.py ARGS") from None
    nproc = str(parsed.nproc_per_node)
    if not nproc.isdigit() or int(nproc) < 1:
        raise UsageError(f"torchrun --nproc-per-node {nproc}: give the number of ranks, e.g. --nproc-per-node 2")
    low, _, high = str(parsed.nnodes).partition(":")
    if not low.isdigit() or (high and high != low):
        raise UsageError(f"torchrun --nnodes {parsed.nnodes}: an elastic node count is not followed by the doctor; "
                         "give a fixed one, e.g. --nnodes 2")
    refused = [name for name, given in (("--max-restarts", parsed.max_restarts), ("--no-python", parsed.no_python),
                                         ("--run-path", parsed.run_path)) if given]
    if refused:
        raise UsageError(f"torchrun {refused[0]} is not carried into the doctor's run (each rank is measured once, "
                         "as a Python script or module); leave it out")
    endpoint = parsed.rdzv_endpoint or (f"{parsed.master_addr}:{parsed.master_port}" if parsed.master_port else None)
    nnodes = int(low)
    return TorchrunTarget(nproc_per_node=int(nproc), nnodes=nnodes,
                          node_rank=parsed.node_rank if nnodes > 1 else None,
                          rdzv_endpoint=endpoint if nnodes > 1 else None, target=parsed.training_script,
                          args=list(parsed.training_script_args), module=bool(parsed.module))
