"""TD604 at run time: nn.DataParallel, with what each replica costs in memory."""

from __future__ import annotations

from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.memory_record import GRADIENTS, OPTIMIZER_STATES
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.base import Rule
from torchdoctor.rules.facts import RunFacts
from torchdoctor.model.units import format_bytes


class DataParallelUsed(Rule):
    code = "TD604"
    slug = "dataparallel"
    title = "nn.DataParallel instead of DistributedDataParallel"
    rationale = (
        "`nn.DataParallel` runs one Python thread per GPU, copies the model to every GPU on "
        "every forward and gathers outputs on GPU 0; PyTorch's documentation recommends "
        "DistributedDataParallel, which is faster even on a single machine."
    )
    fix = (
        "Use one process per GPU with DistributedDataParallel (launch with `torchrun`):\n"
        "```python\ndist.init_process_group(\"nccl\")\nmodel = DDP(model.to(local_rank), "
        "device_ids=[local_rank])\n```"
    )
    example = "model = nn.DataParallel(model)"

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        memory = record.memory
        parallel = memory.parallel if memory is not None else None
        if parallel is None or parallel.wrapper != "DataParallel":
            return []
        replicas = parallel.replicas
        on_first = memory.parts.get(GRADIENTS, 0) + memory.parts.get(OPTIMIZER_STATES, 0)
        copies = (f"every forward copies its {format_bytes(parallel.parameter_bytes)} of parameters and buffers to each of "
                  f"its {replicas} GPUs, then gathers the outputs on the first" if replicas > 1 else
                  f"it had at most one device in this run; on several GPUs every forward copies its "
                  f"{format_bytes(parallel.parameter_bytes)} of parameters and buffers to each")
        return [self.finding(
            title=f"nn.DataParallel: a {format_bytes(parallel.parameter_bytes)} model replica per GPU, rebuilt every step",
            message=(f"The model runs under nn.DataParallel: {copies}. The first GPU also holds every gradient and "
                     f"the optimizer's states ({format_bytes(on_first)} in the accounted steps), so it fills up first. "
                     "DistributedDataParallel keeps one replica per process for the whole run and balances them."),
            location=parallel.location,
            evidence={"replicas": replicas, "per_replica_bytes": parallel.parameter_bytes,
                      "first_gpu_extra_bytes": on_first},
            speedup=None,
            basis="not estimated: what DDP gains depends on the GPUs and the link between them",
            severity=Severity.MEDIUM,
        )]
