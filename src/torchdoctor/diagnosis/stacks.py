"""The tables of the stacks a run used: what torch.compile compiled (each compiled code, the line
that called it, its compiles, recompiles and breaks), and what FSDP did (each unit's settings and
bytes per rank, and the all-gathers and reduce-scatters per step against the measured link)."""

from __future__ import annotations

import statistics

from torchdoctor.model.findings import Table
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.base import MB, ms
from torchdoctor.rules.compile import compiled_frames, graphs_per_step


def stack_tables(record: RunRecord) -> list[Table]:
    return [t for t in (compile_table(record), fsdp_units_table(record), fsdp_comm_table(record)) if t is not None]


def compile_table(record: RunRecord) -> Table | None:
    info = record.compile
    if info is None or not info.events:
        return None
    rows = []
    for frame in compiled_frames(info):
        called = frame.first.called_from
        breaks = [b for b in info.breaks if frame.first.location is not None and b.location.path == frame.first.location.path]
        rows.append([frame.name(), f"{called.path}:{called.line}" if called else "—", len(frame.events),
                     len(frame.recompiles), round(frame.seconds(frame.events), 2),
                     "yes" if frame.limit is not None else "no", len(breaks)])
    graphs = graphs_per_step(record)
    measured = {str(st.index) for st in record.measured_steps}
    in_eval = sum(n for step, n in info.eval_graph_calls.items() if step in measured)
    caption = ("Dynamo's own compile events: each compiled code (a module's forward, a function, or the code after a "
               "graph break), the user line that called it when it first compiled, and the time compiling it with its "
               "backward graphs." + (f" A measured training step ran {graphs:.1f} compiled graphs." if graphs is not None
                                     else "")
               + (f" Evaluation ran {in_eval} more in the measured steps, not counted in that." if in_eval else "")
               + (f" Not measurable here: {'; '.join(info.unavailable)}." if info.unavailable else ""))
    return Table(title="Compiled code", columns=["compiled", "called at", "compiles", "recompiles", "compile s",
                                                 "hit the recompile limit", "graph breaks in its file"],
                 rows=rows, caption=caption)


def fsdp_units_table(record: RunRecord) -> Table | None:
    info = record.distributed
    if info is None or not info.fsdp:
        return None
    rows = []
    for unit in info.fsdp[:40]:
        prefetch = f"fwd {unit.forward_prefetch}, bwd {unit.backward_prefetch}"
        rows.append([unit.module or "(root)", unit.kind, f"FSDP{unit.version}", round(unit.unsharded_bytes / MB, 3),
                     round(unit.sharded_bytes / MB, 3), unit.sharding,
                     "yes" if unit.reshard_after_forward else "no",
                     unit.param_dtype or "off", unit.offload or "no", prefetch,
                     f"{unit.created_at.path}:{unit.created_at.line}" if unit.created_at else "—"])
    whole = sum(u.unsharded_bytes for u in info.fsdp)
    mine = sum(u.sharded_bytes for u in info.fsdp)
    caption = (f"{len(info.fsdp)} units; parameters {whole / MB:.1f} MB whole, {mine / MB:.1f} MB held by this rank "
               f"(gradients are sharded the same way; optimizer states follow the shards)."
               + (" First 40 units shown." if len(info.fsdp) > 40 else ""))
    return Table(title="FSDP units", columns=["unit", "module", "API", "params MB", "this rank MB", "sharding",
                                              "reshard after forward", "mixed precision", "CPU offload", "prefetch",
                                              "made at"], rows=rows, caption=caption)


def fsdp_comm_table(record: RunRecord) -> Table | None:
    info = record.distributed
    measured = {s.index: s for s in record.measured_steps}
    steps = [s for s in (info.fsdp_steps if info else []) if s.step in measured]
    if not steps:
        return None
    world = max(info.identity.world_size, 2)
    step_s = statistics.fmean(measured[s.step].duration_s for s in steps)
    rows = []
    for name, count, nbytes, seconds in (
            ("all-gather", "all_gathers", "all_gather_bytes", "all_gather_s"),
            ("reduce-scatter", "reduce_scatters", "reduce_scatter_bytes", "reduce_scatter_s")):
        calls = statistics.fmean(getattr(s, count) for s in steps)
        size = statistics.fmean(getattr(s, nbytes) for s in steps)
        time_s = statistics.fmean(getattr(s, seconds) for s in steps)
        busbw = size * (world - 1) / world / time_s / 1e9 if time_s > 0 else None
        link = info.comm.at(int(size / calls)) if info.comm is not None and calls else None
        rows.append([name, round(calls, 1), round(size / MB, 2), ms(time_s), f"{time_s / step_s:.0%}",
                     round(busbw, 3) if busbw else "—", link.busbw_gbps if link and link.busbw_gbps else "—"])
    blocking = all(s.host_blocking for s in steps)
    caption = ("Per measured step, means. The time is the host's inside FSDP's collectives: "
               + ("on a CPU (gloo) they block the host, so it is the time the step waited (exposed)."
                  if blocking else "on a GPU the host only issues them; the profiler window's trace tells how much "
                  "the step waited.")
               + " busbw: bytes x (n-1)/n / time, as nccl-tests define it for these collectives; 'link' is the "
               "all-reduce check's bus bandwidth after the script, at the closest size.")
    return Table(title="FSDP communication", columns=["collective", "per step", "MB per step", "ms per step",
                                                      "share of step", "busbw GB/s", "link busbw GB/s"],
                 rows=rows, caption=caption)
