"""The probes of one run, and how they are wired together.

Every probe follows `Probe`: `install` its hooks and patches before the script runs,
`uninstall` them after, then `contribute` what it measured to the record. Probes never call
each other: they report events to the session (a step ended, a batch arrived, an evaluation
began or ended) and the session passes each event on to every probe with a handler of that
name (`session.EVENTS`). Costly probes are windows the session's schedule switches on for a
few chosen steps. Adding a probe is one line in `ProbeSet.__init__`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence

from torchdoctor.model.record import ProbeNote, RunRecord, StepSample
from torchdoctor.run.probes.backward_attribution import BackwardTimer
from torchdoctor.run.probes.collectives import CollectivesProbe
from torchdoctor.run.probes.compile import CompileProbe, compiled_code_in_use
from torchdoctor.run.probes.fsdp import FsdpProbe
from torchdoctor.run.probes.contention import ContentionProbe
from torchdoctor.run.probes.cuda_events import CudaStepEvents
from torchdoctor.run.probes.dataloader import DataLoaderProbe
from torchdoctor.run.probes.ddp import DdpProbe
from torchdoctor.run.probes.dispatch import DispatchSampler
from torchdoctor.run.probes.gpu import GpuProbe
from torchdoctor.run.probes.line_sampler import LineSampler
from torchdoctor.run.probes.memory import MemoryProbe
from torchdoctor.run.probes.phases import PhaseProbe
from torchdoctor.run.probes.profiler import ProfilerWindow
from torchdoctor.run.probes.steps import StepProbe
from torchdoctor.run.ranks.spawned import SpawnProbe
from torchdoctor.run.session import DONE, RunSession

TRACE_FILE = "trace.json.gz"


class Probe(Protocol):
    name: str

    def install(self) -> None: ...
    def uninstall(self) -> None: ...
    def contribute(self, record: RunRecord) -> None: ...


class ProbeSet:
    """All probes of a run. `trace`: None captures a profiler window only once CUDA is in use."""

    polls_steps = True  # on_step decides on the profiler window, which comes after the sampled windows

    def __init__(self, session: RunSession, run_dir: Path, trace: bool | None, listeners: Sequence[object] = (),
                 options=None) -> None:
        self.session = session
        self.trace = trace
        clock = session.clock
        self.gpu = GpuProbe(clock, t0=session.t0)
        compiles = CompileProbe(session)
        self.sampler = DispatchSampler(clock, on_activate=lambda: session.window_opened("sampler"),
                                       on_deactivate=lambda: session.window_closed("sampler"),
                                       outside_step=session.outside_training_step,
                                       baseline=lambda: session.baseline_s,
                                       script_compiles=lambda: compiles.hooked or compiled_code_in_use(),
                                       compiling=compiles.compiling)
        self.backward = BackwardTimer(clock, candidates=self.sampler.busiest_lines,
                                      on_activate=session.note_heavy_probe)
        self.profiler = ProfilerWindow(run_dir / TRACE_FILE, on_activate=session.note_heavy_probe)
        self.lines = LineSampler(on_activate=session.note_heavy_probe, loading=lambda: session.loading_depth > 0,
                                 evaluating=lambda: session.in_eval)
        steps = StepProbe(session)
        self.loaders = DataLoaderProbe(session)
        self.memory = MemoryProbe(session, optimizers=lambda: list(steps.infos.keys()))
        self.collectives = CollectivesProbe(session)  # its store serves a rank's check after the script
        self.ddp, self.fsdp = DdpProbe(session), FsdpProbe(session)
        # Installed in this order, uninstalled in reverse; contributed in this order (the
        # backward timer after the sampler: it annotates the sampler's sites).
        self.probes: list[Probe] = [
            steps, self.loaders, PhaseProbe(session), self.sampler, self.lines,
            self.gpu, CudaStepEvents(), ContentionProbe(session), self.backward, self.profiler, self.memory,
            self.collectives, self.ddp, self.fsdp, compiles, SpawnProbe(session, run_dir, options),
        ]
        session.sampler, session.backward_timer, session.line_sampler = self.sampler, self.backward, self.lines
        session.memory = self.memory
        for listener in [*self.probes, self, *listeners]:
            session.subscribe(listener)
        self._installed: list[Probe] = []

    def on_step(self, step: StepSample):
        if self.session.profiler is None and (self.trace or (self.trace is None and self.gpu.cuda_in_use)):
            self.session.profiler = self.profiler
        if self.session.profiler is not None or self.trace is False or (
                self.trace is None and not self.gpu._cuda_available):
            return DONE  # decided: the profiler window runs, or never will
        return None

    def comm_wait(self, index: int) -> float | None:
        """Step `index`'s wait in collectives: DDP's all-reduce not hidden by backward (and its
        buffer broadcasts), FSDP's exposed communication, the collectives the script calls. None
        where no collective was seen (one process alone). Read from the follower's thread
        (`run --follow`): each lookup is a dictionary's get, never an iteration of a growing one."""
        ddp, fsdp, sites = self.ddp.steps.get(index), self.fsdp.steps.get(index), list(self.collectives.sites.values())
        if ddp is None and fsdp is None and not sites and not self.ddp.tracked:
            return None
        key = str(index)
        user = sum(site.steps.get(key, 0.0) for site in sites)
        return (ddp.exposed_s if ddp is not None else 0.0) + (fsdp.exposed_s if fsdp is not None else 0.0) + user

    def trim_steps(self, first: int, before: int) -> None:
        """`run --follow` keeps a long job's record bounded (run/follow/kept.py): the per-step
        distributed figures of steps `first` < index < `before` are dropped, as the record's steps are."""
        for steps in (self.ddp.steps, self.fsdp.steps):
            for index in [i for i in steps if first < i < before]:
                steps.pop(index, None)
        for site in list(self.collectives.sites.values()):
            for key in [k for k in site.steps if k.isdigit() and first < int(k) < before]:
                site.steps.pop(key, None)

    def install(self) -> None:
        for probe in self.probes:
            probe.install()
            self._installed.append(probe)

    def uninstall(self) -> None:
        while self._installed:
            self._installed.pop().uninstall()

    def stop_background(self) -> None:
        """Stop the probes' own threads (samplers) without touching the script's thread:
        for a run the watchdog ends while the script is still running."""
        self.lines.quiesce()
        self.gpu.uninstall()

    def contribute(self, record: RunRecord) -> None:
        """Every probe's measurements into `record`; a probe that fails here leaves a note."""
        for probe in self.probes:
            try:
                probe.contribute(record)
            except Exception as exc:  # a probe bug must not lose the other measurements
                record.probe_notes.append(ProbeNote(probe.name, f"failed to summarise: {type(exc).__name__}: {exc}"))
