"""GPU probe: starts NVML sampling and reads CUDA memory statistics once the script has
put work on a CUDA device. On CPU runs it records why nothing was measured."""

from __future__ import annotations

from typing import Any, Callable

import torch

from torchdoctor.run.probes.cuda_memory import read_cuda_memory, reset_peak
from torchdoctor.run.probes.nvml import NvmlSampler, sample_device
from torchdoctor.model.record import NvmlRecord, ProbeNote, RunRecord, StepSample
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
        self.device_index = cuda.current_device()
        reset_peak(self.device_index, torch_module=self.torch)
        started = sample_device(self.device_index, clock=self.clock, nvml=self.nvml,
                                torch_module=self.torch, t0=self.t0)
        if isinstance(started, NvmlRecord):
            self.nvml_reason = started.reason
        else:
            self.sampler = started

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
