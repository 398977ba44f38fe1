"""The environment table of a report, one for every report that has one: the run's facts
(versions, device, precision flags, the CPUs it could use, performance environment variables)
and a profiler trace's (its files, GPUs, world size, steps), under the same names whichever
report shows them; a run with a profiler window shows both."""

from __future__ import annotations

from torchdoctor.model.record import RunRecord
from torchdoctor.model.trace_summary import TraceSummary


def environment_table(record: RunRecord | None = None, trace: TraceSummary | None = None) -> dict:
    table: dict = {}
    if record is not None:
        env = record.environment
        table.update({
            "python": env.python, "platform": env.platform, "torch": env.torch,
            "device": env.device_name or "cpu", "cuda": env.cuda_version or "none",
            "cuda used": env.cuda_used, "torch threads": env.num_threads, "cpus usable": env.cpu_count,
            "float32 matmul precision": env.float32_matmul_precision,
        })
        if env.compute_capability:
            table["compute capability"] = ".".join(map(str, env.compute_capability))
            table["tf32 (matmul / cudnn)"] = f"{env.tf32_matmul} / {env.tf32_cudnn}"
            table["cudnn.benchmark"] = env.cudnn_benchmark
    if trace is not None:
        table.update(_trace_facts(trace, with_device=record is None))
    if record is not None:
        table.update(record.environment.env_vars)
    return table


def _trace_facts(summary: TraceSummary, with_device: bool) -> dict:
    facts: dict = {"trace files": ", ".join(r.path for r in summary.ranks)}
    devices = {(d.name, tuple(d.compute_capability or ())) for r in summary.ranks for d in r.devices}
    if devices and with_device:  # a run's own facts already name its device
        facts["device"] = "; ".join(f"{name or 'unknown GPU'}" for name, _ in sorted(devices, key=str))
        caps = {".".join(map(str, cap)) for _, cap in devices if cap}
        if caps:
            facts["compute capability"] = ", ".join(sorted(caps))
    world = next((r.world_size for r in summary.ranks if r.world_size), None)
    if world:
        facts["world size"] = world
    facts["profiled steps"] = ", ".join(f"rank {r.rank}: {r.steps} ({r.window_kind})" for r in summary.ranks)
    return facts
