"""GPU memory rules: room for a bigger batch, or too little room."""

from __future__ import annotations

from torchdoctor.findings import Finding, Severity
from torchdoctor.record import RunRecord
from torchdoctor.rules.base import Rule
from torchdoctor.rules.facts import RunFacts, training_loader

HEADROOM_MAX_USE = 0.40  # peak under 40 % of the card: a 2x batch would still fit
PRESSURE_MIN_USE = 0.95  # peak reserved above 95 %: the allocator is close to failing


class MemoryHeadroom(Rule):
    code = "TD501"
    slug = "memory-headroom"
    example = "loader = DataLoader(ds, batch_size=16)  # peak memory 3 GB of an 80 GB GPU"
    title = "Peak GPU memory far below capacity"
    needs_cuda = True
    rationale = "Unused memory is unused batch: a larger batch usually raises throughput."
    fix = "Raise the batch size until peak memory is ~80 % of the card:\n```python\nloader = DataLoader(ds, batch_size=2 * old_batch_size, ...)\n```"

    def not_measurable(self, record, facts):
        return super().not_measurable(record, facts) or (
            None if record.cuda_memory else "CUDA memory statistics were not available")

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        mem = record.cuda_memory
        use = mem.peak_reserved_bytes / mem.device_total_bytes if mem and mem.device_total_bytes else None
        if use is None or use >= HEADROOM_MAX_USE:
            return []
        loader = training_loader(record)
        return [
            self.finding(
                title=f"Peak GPU memory is {use:.0%} of the card",
                message=f"Peak reserved {mem.peak_reserved_bytes / 2**30:.2f} GiB of {mem.device_total_bytes / 2**30:.1f} GiB.",
                location=loader.created_at if loader else None,
                evidence={"peak_reserved_bytes": mem.peak_reserved_bytes, "device_total_bytes": mem.device_total_bytes,
                          "batch_size": loader.batch_size if loader else None},
                speedup=None,
                basis="throughput at a larger batch must be measured: `torchdoctor tune --set batch_size=N`",
                severity=Severity.LOW,
            )
        ]


class MemoryPressure(Rule):
    code = "TD502"
    slug = "memory-pressure"
    example = "loader = DataLoader(ds, batch_size=512)  # peak memory 79 of 80 GB, allocator retries"
    title = "GPU memory near capacity or allocator retries"
    needs_cuda = True
    rationale = "When the caching allocator runs out it frees its cache and retries (a sync, slow)."
    fix = (
        "Lower peak memory: smaller batch with gradient accumulation, activation checkpointing, or\n"
        "```bash\nPYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py\n```"
    )

    def not_measurable(self, record, facts):
        return super().not_measurable(record, facts) or (
            None if record.cuda_memory else "CUDA memory statistics were not available")

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        mem = record.cuda_memory
        if mem is None or not mem.device_total_bytes:
            return []
        use = mem.peak_reserved_bytes / mem.device_total_bytes
        if mem.alloc_retries == 0 and mem.ooms == 0 and use < PRESSURE_MIN_USE:
            return []
        return [
            self.finding(
                title=f"{mem.alloc_retries} allocator retries; peak {use:.0%} of the card",
                message="The caching allocator had to free and retry allocations during the run.",
                location=None,
                evidence={"alloc_retries": mem.alloc_retries, "ooms": mem.ooms, "peak_share": round(use, 3)},
                speedup=None,
                basis="the cost of a retry is a device sync plus cudaFree/cudaMalloc; see the trace",
                severity=Severity.MEDIUM,
            )
        ]
