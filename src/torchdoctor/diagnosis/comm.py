"""`torchdoctor comm`'s report: the all-reduce table, the path, and findings when the link is
slow (TD602) or NCCL transports are turned off (TD607). Torch-free: renderers print it."""

from __future__ import annotations

from torchdoctor.version import __version__
from torchdoctor.comm.verdict import judge
from torchdoctor.model.distributed_record import CommResult
from torchdoctor.model.findings import Report, Table
from torchdoctor.model.units import format_bytes
from torchdoctor.rules.base import ms
from torchdoctor.rules.link import link_findings


def comm_table(comm: CommResult) -> Table:
    rows = [[format_bytes(s.bytes), ms(min(s.times_s)) if s.times_s else None,
             ms(sorted(s.times_s)[len(s.times_s) // 2]) if s.times_s else None, s.algbw_gbps, s.busbw_gbps,
             f"{s.spread:.0%}" if s.spread is not None else "—"] for s in comm.sizes]
    verdict = judge(comm)
    latency = f"Small all-reduce (8 KiB) latency {ms(comm.latency_s):.2f} ms. " if comm.latency_s else ""
    caption = (f"{comm.backend}, {comm.world_size} ranks, {comm.warmup} warm-up + {comm.repeats} timed repeats per "
               f"size (each repeat timed as the slowest rank's; busbw = algbw·2(n−1)/n as nccl-tests define it). "
               f"{latency}Verdict: {verdict.text}.")
    if comm.link is not None and comm.link.notes:
        caption += " " + " ".join(comm.link.notes)
    if comm.note:
        caption += f" {comm.note}."
    return Table(title="All-reduce on this machine", caption=caption, rows=rows,
                 columns=["size", "best ms", "median ms", "algbw GB/s", "busbw GB/s", "spread"])


def comm_report(result: CommResult) -> Report:
    report = Report(source="comm", tool_version=__version__)
    report.tables.append(comm_table(result))
    link = result.link
    if link is not None:
        report.tables.append(Table(title="The path between the ranks", columns=["fact", "value"], rows=[
            ["path", link.description], ["topology level", link.topology_level or "—"],
            ["transport NCCL chose", link.transport or "—"],
            ["expected bus bandwidth", f"{link.expected_gbps:.2f} GB/s" if link.expected_gbps else "unknown"],
            ["source of that figure", link.expected_source or "—"],
            ["crippling settings", ", ".join(f"{k}={v}" for k, v in link.crippling_env.items()) or "none"],
            ["WSL2", "yes" if link.wsl2 else "no"]]))
    report.findings += link_findings(result)
    if result.simulated_link_gbps:
        report.notes.append(f"The link was simulated at {result.simulated_link_gbps:g} GB/s "
                            "(TORCHDOCTOR_SIMULATED_LINK_GBPS, a test hook).")
    if result.note:
        report.notes.append(result.note)
    return report.ranked()
