"""GPU time per step from CUDA events recorded at step boundaries: no synchronization is
added during the run; the events are read once, after the last step.

Only the steps the session hands to polling listeners get an event (warm-up steps, the steps a
window runs in, an unmeasured step now and then): an event on every step kept every unmeasured
CUDA step off the session's lean path (a full sample built and handed out, an event made and
recorded), and no rule reads `gpu_s` of unmeasured steps."""

from __future__ import annotations

import torch

from torchdoctor.model.record import ProbeNote, RunRecord, StepSample
from torchdoctor.run.session import DONE

MAX_EVENTS = 10_000


class CudaStepEvents:
    name = "cuda-events"
    polls_steps = True

    def __init__(self) -> None:
        self.events: dict[int, "torch.cuda.Event"] = {}
        self._cuda_available = torch.cuda.is_available()

    def install(self) -> None:
        pass  # events are recorded from on_step once CUDA is in use

    def uninstall(self) -> None:
        pass

    def contribute(self, record: RunRecord) -> None:
        note = self.fill(record.steps)
        if note:
            record.probe_notes.append(ProbeNote(self.name, note))

    def on_step(self, step: StepSample):
        if not self._cuda_available:
            return DONE  # no CUDA on this machine: no step will need this
        if not torch.cuda.is_initialized():
            return None
        if len(self.events) < MAX_EVENTS:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.events[step.index] = event

    def fill(self, steps: list[StepSample]) -> str | None:
        """Set `gpu_s` on steps bounded by two events; returns an error note or None."""
        if not self.events:
            return None
        try:
            torch.cuda.synchronize()
            for step in steps:
                before, after = self.events.get(step.index - 1), self.events.get(step.index)
                if before is not None and after is not None:
                    step.gpu_s = before.elapsed_time(after) / 1000.0
        except Exception as exc:  # a failed device: keep host timings, say why
            return f"CUDA step events unreadable: {type(exc).__name__}: {exc}"
        return None
