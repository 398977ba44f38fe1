"""One rank of a multi-rank run: the script under the probes in this process, its record in
RUN_DIR/rank-K/record.json, whatever happens.

Started by `torchdoctor run --nproc-per-node N` (through torch.distributed.run, launch.py) or
by torchrun directly (`torchrun --nproc_per_node N -m torchdoctor run train.py`). Every rank
has the whole run contract of a single-process run: the same probes, the step and time
limits, the watchdog. On top of it:
- SIGTERM (the launcher stopping the job: another rank failed, Ctrl-C, a stall) and SIGINT end
  the script as an interruption and keep what it measured; if the training thread is stuck in
  a collective and cannot take the exception, the watchdog writes the record and ends the
  process (run/watchdog.py);
- the rank dies with its launcher (Linux: PR_SET_PDEATHSIG), so no rank is left orphaned;
- a heartbeat file says how far it got (heartbeat.py);
- after a script that stopped cleanly, every rank joins a short all-reduce check on a process
  group of its own (check.py).
Ranks started by torchrun directly have no launcher of ours to merge their records: the first
local rank waits (bounded) for the others of its node and writes the merged report.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from torchdoctor.model.distributed_record import DistributedInfo, RankIdentity
from torchdoctor.model.record import RunRecord
from torchdoctor.run.outcome import exit_code_of
from torchdoctor.run.ranks.heartbeat import HeartbeatWriter
from torchdoctor.run.ranks.identity import JOB_ID_ENV, LaunchEnv, agent_store, agree_job_id
from torchdoctor.run.signals import StopSignals, current as current_signals

MERGE_WAIT_S = 60.0  # torchrun-started ranks: how long local rank 0 waits for its neighbours' records
CLEAN_ENDS = ("completed", "step-limit", "time-limit", "exited", "loader-only")
PR_SET_PDEATHSIG = 1


def rank_dir_of(ranks_dir: Path, rank: int) -> Path:
    return ranks_dir / f"rank-{rank}"


def die_with_parent() -> None:
    """Linux: get SIGTERM when the launcher dies, so no rank outlives it."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class RankRun:
    """Everything one rank does around `runner.execute`."""

    def __init__(self, launch: LaunchEnv, ranks_dir: Path, launcher: str = "torchrun") -> None:
        self.launch = launch
        self.ranks_dir = ranks_dir
        self.rank_dir = rank_dir_of(ranks_dir, launch.rank)
        self.launcher = launcher
        self.store = None
        self.job_id = ""
        self.termination = current_signals() or StopSignals()  # the command line's, when it installed them
        self._own_signals = current_signals() is None
        self.heartbeat = HeartbeatWriter(self.rank_dir, launch.rank)
        self.probed = None
        self.epoch_t0 = time.time()
        self._finished = False
        self._lock = threading.Lock()

    def start(self) -> None:
        self.rank_dir.mkdir(parents=True, exist_ok=True)
        die_with_parent()
        self.store = agent_store(self.launch)
        self.job_id = agree_job_id(self.store, self.launch, os.environ.get(JOB_ID_ENV))
        self.termination.install()
        self.heartbeat.start()

    def attach(self, probed) -> None:
        """The run's ProbedRun exists: the signal watcher and the heartbeat read its session."""
        self.probed = probed
        self.heartbeat.session = probed.session
        self.termination.attach(probed.session)
        self.epoch_t0 = time.time() - (probed.session.clock() - probed.session.t0)
        probed.live_parts.append(self._identify)  # `run --follow`: live.json says which rank it is

    def _identify(self, record: RunRecord) -> None:
        record.distributed = DistributedInfo(identity=self.identity(None))

    def identity(self, probe_identity: RankIdentity | None) -> RankIdentity:
        return RankIdentity(
            rank=self.launch.rank, world_size=self.launch.world_size, local_rank=self.launch.local_rank,
            local_world_size=self.launch.local_world_size, node_rank=self.launch.node_rank,
            host=socket.gethostname(), pid=os.getpid(), job_id=self.job_id, launcher=self.launcher,
            backend=probe_identity.backend if probe_identity else None,
            init_location=probe_identity.init_location if probe_identity else None, epoch_t0=self.epoch_t0)

    def finish(self, record: RunRecord, after_script: bool = True) -> int:
        """Write this rank's record (once); returns the rank's exit code."""
        with self._lock:
            if self._finished:
                return _exit_code(record)
            self._finished = True
        self.termination.quiet = True
        if self.termination.signal_name and record.run.status == "interrupted":
            record.run.ended_by = (
                f"the launcher sent {self.termination.signal_name} (the job was stopped, another rank failed, "
                "or the job stopped making progress)")
        info = record.distributed or DistributedInfo(identity=RankIdentity(rank=self.launch.rank, world_size=1))
        record.distributed = info
        probe_identity = info.identity
        info.identity = self.identity(probe_identity)
        if after_script and record.run.status in CLEAN_ENDS and record.run.exit_code == 0:
            from torchdoctor.run.ranks.check import communication_check

            communication_check(record, self.store_for_check(), self.launch)
        if record.trace_file:
            record.trace_file = f"{self.rank_dir.name}/{record.trace_file}"
        from torchdoctor.model.layout import RECORD_FILE  # not at the top: a rank's start-up stays light

        record.save(self.rank_dir / RECORD_FILE)
        self.heartbeat.stop("done")
        if self._own_signals and threading.current_thread() is threading.main_thread():
            self.termination.uninstall()
        return _exit_code(record)

    def store_for_check(self):
        probes = getattr(self.probed, "probes", None)
        collectives = getattr(probes, "collectives", None) if probes is not None else None
        return self.store or getattr(collectives, "store", None)


def _exit_code(record: RunRecord) -> int:
    return exit_code_of(record.run.status, record.run.exit_code)


def run_rank(launch: LaunchEnv, ranks_dir: Path, make_request: Callable, launcher: str = "torchrun") -> tuple[RunRecord, int]:
    """Run the script as this rank. `make_request(on_probed, on_abandon)` builds the RunRequest."""
    from torchdoctor.run.runner import execute

    rank = RankRun(launch, ranks_dir, launcher)
    rank.start()

    def abandon(record: RunRecord) -> int:  # from the watchdog's thread: the process ends after this
        return rank.finish(record, after_script=False)

    request = make_request(rank.attach, abandon)
    record = execute(request, rank.rank_dir)
    code = rank.finish(record)
    return record, code


def wait_for_neighbours(ranks_dir: Path, expected: int, timeout_s: float = MERGE_WAIT_S) -> list[Path]:
    """Ranks started by torchrun directly: the record files of this node's ranks, once all
    `expected` are there or the wait is over."""
    from torchdoctor.model.layout import RECORD_FILE

    deadline = time.monotonic() + timeout_s
    while True:
        found = sorted(ranks_dir.glob(f"rank-*/{RECORD_FILE}"))
        if len(found) >= expected or time.monotonic() > deadline:
            return found
        time.sleep(0.2)
