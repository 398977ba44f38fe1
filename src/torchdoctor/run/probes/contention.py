"""How busy the machine was while the steps ran: other processes stealing the CPU make
step times (and everything sized from them) unreliable, and must be said.

Three readings, at the start of the measured steps and at most every SNAPSHOT_EVERY_S after:
- the training thread's run-queue wait (`/proc/thread-self/schedstat`, Linux): time it was
  ready to run but had no CPU. This is contention, told apart from waiting on I/O;
- its involuntary context switches (`getrusage(RUSAGE_THREAD)`);
- the load average against the CPUs this process may use.
Where a reading is not available (another OS) it is None: not measured, never guessed.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from dataclasses import dataclass
from typing import Callable

from torchdoctor.machine.cpus import usable_cpus
from torchdoctor.model.record import Contention, RunRecord, StepSample
from torchdoctor.run.session import RunSession

SNAPSHOT_EVERY_S = 0.5  # a /proc read costs ~10 µs: never once per step of a fast loop
SCHEDSTAT = "/proc/thread-self/schedstat"


def thread_schedstat() -> tuple[float, float] | None:
    """(seconds on a CPU, seconds waiting in the run queue) of the calling thread."""
    try:
        with open(SCHEDSTAT, "rb") as handle:
            run_ns, wait_ns, _ = handle.read().split()
    except (OSError, ValueError):
        return None
    return int(run_ns) / 1e9, int(wait_ns) / 1e9


def _involuntary_switches() -> int | None:
    who = getattr(resource, "RUSAGE_THREAD", None)
    return resource.getrusage(who).ru_nivcsw if who is not None else None


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


@dataclass
class _Snapshot:
    wall: float
    process_cpu: float
    sched: tuple[float, float] | None
    switches: int | None
    load: float | None

    @classmethod
    def now(cls, clock: Callable[[], float]) -> "_Snapshot":
        return cls(clock(), time.process_time(), thread_schedstat(), _involuntary_switches(), _load())


class ContentionProbe:
    name = "contention"
    polls_steps = True  # a reading every SNAPSHOT_EVERY_S: the session's poll is often enough (session.POLL_S)

    def __init__(self, session: RunSession) -> None:
        self.session = session
        self.start: _Snapshot | None = None
        self.last: _Snapshot | None = None
        self._thread = threading.current_thread()  # the training thread: the readings are its own

    def install(self) -> None:
        pass  # readings are taken at step ends, in the training thread

    def uninstall(self) -> None:
        pass

    def on_step(self, step: StepSample) -> None:
        clock = self.session.clock
        if step.index == self.session.config.warmup or (self.start is None and not step.warmup):
            self.start = self.last = _Snapshot.now(clock)
        elif self.start is not None and clock() - self.last.wall >= SNAPSHOT_EVERY_S:
            self.last = _Snapshot.now(clock)

    def contribute(self, record: RunRecord) -> None:
        if self.start is not None and self.last is self.start and threading.current_thread() is self._thread:
            # a short run, no reading after the start yet: one now (with the little after the last step)
            self.last = _Snapshot.now(self.session.clock)
        a, b = self.start, self.last
        if a is None or b is None or b.wall <= a.wall:
            record.contention = Contention(cpus=usable_cpus(), load_start=_load())
            return
        wall = b.wall - a.wall
        record.contention = Contention(
            window_s=round(wall, 6),
            process_cpu_s=round(b.process_cpu - a.process_cpu, 6),
            thread_cpu_s=round(b.sched[0] - a.sched[0], 6) if a.sched and b.sched else None,
            thread_runqueue_s=round(b.sched[1] - a.sched[1], 6) if a.sched and b.sched else None,
            involuntary_switches=(b.switches - a.switches) if a.switches is not None and b.switches is not None
            else None,
            load_start=a.load, load_end=b.load, cpus=usable_cpus(),
        )
