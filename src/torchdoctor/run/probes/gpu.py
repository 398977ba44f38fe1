"""GPU probe: starts NVML sampling and reads CUDA memory statistics once the script has
put work on a CUDA device. On CPU runs it records why nothing was measured."""

from __future__ import annotations

from typing import Any, Callable

import torch

from torchdoctor.run.probes.cuda_memory import read_cuda_memory, reset_peak
from torchdoctor.run.probes.nvml import NvmlSampler, sample_device
from torchdoctor.model.record import NvmlRecord, NvmlSample, ProbeNote, RunRecord, StepSample
from torchdoctor.run.session import DONE


class GpuProbe:
    name = "gpu"
    polls_steps = True  # on_step only looks for CUDA coming into use: a poll (session.POLL_S)

    def __init__(self, clock: Callable[[], float], t0: float, torch_module: Any = torch, nvml: Any = None) -> None:
        self.clock = clock
        self.t0 = t0  # NVML sample times share the run's time origin with the steps
        self.torch = torch_module
        self.nvml = nvml
        self.sampler: NvmlSampler | None = None
        self.device_index: int | None = None
        self.nvml_reason = "CUDA was not used by this run"
        self._cuda_available = bool(torch_module.cuda.is_available())  # once: it cannot appear mid-run
        self._nvml_record: NvmlRecord | None = None

    def install(self) -> None:
        pass  # sampling starts at the first step that used CUDA (on_step)

    def uninstall(self) -> None:
        """Stop the sampler thread with the other probes, before any summarising."""
        if self.sampler is not None:
            self._nvml_record = self.sampler.stop()
            self.sampler = None

    @property
    def cuda_in_use(self) -> bool:
        return self.device_index is not None

    def on_step(self, step: StepSample | None = None) -> None:
        """Called at each step end; starts sampling at the first step that used CUDA."""
        if not self._cuda_available:
            return DONE  # no CUDA on this machine: no step will need this
        if self.device_index is not None:
            return DONE
        cuda = self.torch.cuda
        if not cuda.is_initialized():
            return
        self.device_index = device_in_use(cuda)
        reset_peak(self.device_index, torch_module=self.torch)
        started = sample_device(self.device_index, clock=self.clock, nvml=self.nvml,
                                torch_module=self.torch, t0=self.t0)
        if isinstance(started, NvmlRecord):
            self.nvml_reason = started.reason
        else:
            self.sampler = started

    def latest_sample(self) -> NvmlSample | None:
        """The newest NVML sample of this run's device; None while none was taken (no CUDA yet, no NVML).
        Read from the follower's thread (`run --follow`) while the sampler appends."""
        sampler = self.sampler
        samples = sampler.samples if sampler is not None else None
        return samples[-1] if samples else None

    def contribute(self, record: RunRecord) -> None:
        self.uninstall()
        if self._nvml_record is not None:
            record.nvml = self._nvml_record
        else:
            record.nvml = NvmlRecord(available=False, reason=self.nvml_reason)
            if self.device_index is not None:
                record.probe_notes.append(ProbeNote("nvml", f"GPU power/utilization not measured: {self.nvml_reason}"))
        if self.device_index is not None:
            record.cuda_memory = read_cuda_memory(self.device_index, torch_module=self.torch)


def device_in_use(cuda: Any) -> int:
    """The CUDA device this process trains on: the one its allocator holds the most memory on.
    The current device alone is wrong for a rank whose script moves its model with
    `.to(local_rank)` without `torch.cuda.set_device` (the DDP tutorial's way): every rank's current
    device is 0 then, and each would report GPU 0's figures as its own. A rank's small allocation on
    device 0 (a barrier's tensor) weighs less than its model on its own device. The allocator's
    figures are read without creating a context on a device; with none allocated yet, the current
    device."""
    current = cuda.current_device()
    try:
        held = {i: cuda.memory_allocated(i) for i in range(cuda.device_count())}
    except Exception:  # a fake or an old torch without these: the current device
        return current
    busiest = max(held, key=lambda i: (held[i], i == current), default=current)
    return busiest if held.get(busiest) else current
