"""GPU probe: starts NVML sampling and reads CUDA memory statistics once the script has
put work on a CUDA device. On CPU runs it records why nothing was measured."""

from __future__ import annotations

import torch

from torchdoctor.record import NvmlRecord, ProbeNote, RunRecord


class GpuProbe:
    name = "gpu"

    def __init__(self, clock) -> None:
        self.clock = clock
        self.sampler = None
        self.device_index: int | None = None
        self.nvml_reason = "CUDA was not used by this run"

    @property
    def cuda_in_use(self) -> bool:
        return self.device_index is not None

    def on_step(self) -> None:
        """Called at each step end; starts sampling at the first step that used CUDA."""
        if self.device_index is not None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return
        from torchdoctor.probes.cuda_memory import reset_peak
        from torchdoctor.probes.nvml import NvmlSampler, open_device

        self.device_index = torch.cuda.current_device()
        reset_peak(self.device_index)
        handle, reason = open_device(self.device_index)
        if handle is None:
            self.nvml_reason = reason
            return
        self.sampler = NvmlSampler(handle, clock=self.clock)
        self.sampler.start()

    def contribute(self, record: RunRecord) -> None:
        if self.sampler is not None:
            record.nvml = self.sampler.stop()
            self.sampler = None
        else:
            record.nvml = NvmlRecord(available=False, reason=self.nvml_reason)
            if self.device_index is not None:
                record.probe_notes.append(ProbeNote("nvml", f"GPU power/utilization not measured: {self.nvml_reason}"))
        if self.device_index is not None:
            from torchdoctor.probes.cuda_memory import read_cuda_memory

            record.cuda_memory = read_cuda_memory(self.device_index)
