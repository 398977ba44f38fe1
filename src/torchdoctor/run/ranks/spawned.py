"""Scripts that start their own ranks with `torch.multiprocessing.spawn(fn, nprocs=N)`: every
child runs `fn` under the probes, with the run's limits and knobs, and writes
RUN_DIR/rank-K/record.json like a launched rank; the parent's run merges them.

The parent wraps `fn` in a picklable `SpawnedRank` before torch starts the children (the
"spawn" start method pickles the function by reference and re-imports the script as
`__mp_main__`, so the wrapper is all that changes). Children started another way cannot be
measured: `start_processes(..., start_method="fork")` copies the parent's probes mid-run, and
`multiprocessing.Process(target=train)` hands torch nothing to wrap. For those the run says
exactly that, where, and how to launch instead.
"""

from __future__ import annotations

import multiprocessing.process
import os
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchdoctor.model.limits import Limits
from torchdoctor.model.paths import typed_path
from torchdoctor.model.record import ProbeNote, RunRecord
from torchdoctor.run.probes.frames import USER, caller_location, classify_file
from torchdoctor.run.probes.patching import PatchSet

CHILD_MARGIN_S = 15.0  # a child's time limit ends this long before the parent's, so the parent can merge
LAUNCH_INSTEAD = ("launch the ranks with `torchdoctor run --nproc-per-node N train.py` and read RANK, "
                  "LOCAL_RANK and WORLD_SIZE from the environment in the script, as torchrun sets them")


def _processes_note(where: str, name: str, count: int) -> str:
    """Processes the script started itself: not measured, said once, without assuming they are
    data-parallel ranks (Hogwild workers share one model lock-free, and DDP is no fix for them)."""
    what = f"{count} processes" if count > 1 else "a process"
    return (f"{where}: the script started {what} running {name} with multiprocessing; torchdoctor measures only "
            f"this process, so their training was not measured. If they are data-parallel ranks, "
            + LAUNCH_INSTEAD + " (torch.multiprocessing.spawn is measured too); if they train one shared model "
            f"(Hogwild, `model.share_memory()`), measure one worker by calling {name} in the main process")


@dataclass
class SpawnedRank(Limits):
    """`fn` as the child runs it: under the probes. Pickled by the parent, called by torch."""

    fn: Any
    nprocs: int
    ranks_dir: str
    job_id: str
    script: str
    trace: bool | None = None
    knobs: dict[str, Any] = field(default_factory=dict)

    def __call__(self, index: int, *args) -> Any:
        from torchdoctor.run.probed import ProbedRun, ProbeOptions
        from torchdoctor.run.ranks.child import RankRun
        from torchdoctor.run.ranks.identity import LaunchEnv
        from torchdoctor.run.outcome import COMPLETED, CRASHED, EXITED, Outcome

        launch = LaunchEnv(rank=index, world_size=self.nprocs, local_rank=index, local_world_size=self.nprocs,
                           node_rank=0, master_addr=os.environ.get("MASTER_ADDR"),
                           master_port=int(os.environ["MASTER_PORT"]) if os.environ.get("MASTER_PORT", "").isdigit()
                           else None, run_id=self.job_id, agent_store=False, coordinated=True)
        os.environ["TORCHDOCTOR_JOB_ID"] = self.job_id
        rank = RankRun(launch, Path(self.ranks_dir), launcher="mp.spawn")
        rank.start()
        options = ProbeOptions(warmup=self.warmup, steps=self.steps, max_seconds=self.max_seconds, trace=self.trace,
                               knobs=dict(self.knobs), end_process=True,
                               on_abandon=lambda record: rank.finish(record, after_script=False))
        probed = ProbedRun(options, rank.rank_dir, self.script, script_path=self.script)
        rank.attach(probed)
        outcome, raised = Outcome(), None
        with probed:
            probed.enter_code()
            try:
                result = self.fn(index, *args)
            except BaseException as exc:
                outcome = Outcome.of(exc, probed.session.stop_reason)
                if outcome.status == CRASHED:
                    try:
                        probed.note_failure(exc)  # an out-of-memory error gets its diagnosis, as in a script
                    except Exception:  # explaining a failure must never replace it
                        pass
                if outcome.status in (CRASHED, EXITED):  # the parent sees the child end as without the doctor
                    raised = exc
            finally:
                probed.leave_code()
        probed.settle(*outcome.astuple())
        rank.finish(probed.record())
        if raised is not None:
            raise raised
        return None if outcome.status != COMPLETED else result


class SpawnProbe:
    """Wraps torch.multiprocessing's spawn; notes children it cannot measure."""

    name = "spawn"

    def __init__(self, session, run_dir: Path, options=None) -> None:
        self.session = session
        self.run_dir = run_dir
        self.options = options
        self.patches = PatchSet()
        self.spawned = 0
        self.notes: list[str] = []
        self.processes: dict[tuple[str, str], int] = {}  # (where, target) -> multiprocessing.Process starts

    def install(self) -> None:
        if self.options is None or os.environ.get("RANK") is not None:
            return  # a rank of a launch, or a watch() block: spawning is the script's own business
        import torch.multiprocessing as tmp

        spawn_module = sys.modules.get("torch.multiprocessing.spawn")
        for owner in {id(m): m for m in (tmp, spawn_module) if m is not None}.values():
            if hasattr(owner, "start_processes"):
                self.patches.wrap(owner, "start_processes", self._wrap_start)
        self.patches.wrap(multiprocessing.process.BaseProcess, "start", self._wrap_process_start)

    def uninstall(self) -> None:
        self.patches.restore()

    def contribute(self, record: RunRecord) -> None:
        record.probe_notes += [ProbeNote(self.name, note) for note in self.notes]
        record.probe_notes += [ProbeNote(self.name, _processes_note(where, name, count))
                               for (where, name), count in self.processes.items()]

    def _wrap_start(self, original):
        probe = self

        def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn", *rest, **kwargs):
            where = caller_location()
            if isinstance(fn, SpawnedRank):
                return original(fn, args, nprocs, join, daemon, start_method, *rest, **kwargs)
            if start_method != "spawn":
                probe.notes.append(
                    f"{where}: {nprocs} processes started with start_method={start_method!r} are not measured (a "
                    f"forked child inherits this process's probes mid-run); use start_method='spawn', or "
                    + LAUNCH_INSTEAD)
                return original(fn, args, nprocs, join, daemon, start_method, *rest, **kwargs)
            probe.spawned += nprocs
            wrapped = probe._wrap_fn(fn, nprocs)
            return original(wrapped, args, nprocs, join, daemon, start_method, *rest, **kwargs)

        return start_processes

    def _wrap_fn(self, fn, nprocs: int) -> SpawnedRank:
        options = self.options
        left = options.max_seconds - self.session.elapsed()
        main = sys.modules.get("__main__")
        script = getattr(main, "__file__", None) or "<spawned>"
        return SpawnedRank(fn=fn, nprocs=nprocs, ranks_dir=str(self.run_dir.resolve()), job_id=uuid.uuid4().hex,
                           script=typed_path(script),
                           warmup=options.warmup, steps=options.steps, max_seconds=max(5.0, left - CHILD_MARGIN_S),
                           trace=options.trace, knobs={k: v for k, v in options.knobs.items() if k != "nproc"})

    def _wrap_process_start(self, original):
        probe = self

        def start(process, *args, **kwargs):
            caller = sys._getframe(1)
            if classify_file(caller.f_code.co_filename) == USER:  # torch's own (spawn, DataLoader) are not
                target = getattr(process, "_target", None)
                name = getattr(target, "__name__", "a function")
                key = (str(caller_location()), name)
                probe.processes[key] = probe.processes.get(key, 0) + 1  # one note per call site, counted
            return original(process, *args, **kwargs)

        return start
