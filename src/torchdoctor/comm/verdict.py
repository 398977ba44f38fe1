"""The path between the ranks, what it should carry, and whether the measured all-reduce
reaches it. Torch-free: the facts are gathered in the ranks (comm/probe.py)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from torchdoctor.model.units import MIB, format_bytes
from torchdoctor.comm import links
from torchdoctor.comm.environment import WSL2_NOTE, crippling_settings, what_it_does
from torchdoctor.comm.nccl_log import NcclChoice
from torchdoctor.comm.topology import GpuTopology
from torchdoctor.model.distributed_record import CommResult, LinkInfo

# A link delivering under this share of its expected bus bandwidth is slow. nccl-tests reach
# 80-90 % of NCCL's link figures on large messages (NVIDIA/nccl-tests doc/PERFORMANCE.md), so
# half is far outside normal. Over loopback TCP gloo both sends and receives every byte and
# reduces on the CPU: it measured 0.55-0.60 of one-way raw TCP on the 2-core test machine,
# so only a quarter of it counts as slow there.
SLOW_SHARE = 0.5
SLOW_SHARE_LOOPBACK = 0.25
# The size the verdict reads: DDP's default bucket, where a training step's all-reduces are.
VERDICT_BYTES = 25 * MIB


def gloo_link(same_host: bool, loopback_gbps: float | None, nic_speed_mbit: int | None) -> LinkInfo:
    if same_host:
        return LinkInfo(kind="loopback-tcp", description="loopback TCP on one host (gloo's transport)",
                        expected_gbps=round(loopback_gbps, 3) if loopback_gbps else None,
                        expected_source=links.SOURCE_LOOPBACK if loopback_gbps else "")
    expected = links.nic_gbps(nic_speed_mbit)
    return LinkInfo(kind="net-socket", description="TCP between hosts (gloo's transport)",
                    expected_gbps=expected, expected_source=links.SOURCE_NIC if expected else "")


def nccl_link(topology: GpuTopology, gpus: list[int], choice: NcclChoice | None, env: dict[str, str],
              wsl2: bool, same_host: bool, nic_speed_mbit: int | None = None) -> LinkInfo:
    """The GPU path, what NCCL's link model says it carries, and what NCCL actually chose."""
    level = topology.worst_level(gpus) if same_host else None
    crippled = crippling_settings(env)
    if choice is not None:
        crippled.update({k: v for k, v in crippling_settings(choice.env).items() if k not in crippled})
    link = LinkInfo(kind="unknown", description="", topology_level=level,
                    transport=choice.slowest if choice else None, crippling_env=crippled, wsl2=wsl2)
    if not same_host:
        link.kind = "net-ib" if link.transport == "NET/IB" else "net-socket"
        link.description = "network between hosts"
        link.expected_gbps = links.nic_gbps(nic_speed_mbit) or links.NET_100GBIT_GBPS
        link.expected_source = links.SOURCE_NIC if nic_speed_mbit else links.SOURCE_NCCL + " (NET_BW, 100 Gbit)"
    elif level is not None:
        link.kind = "nvlink" if level.startswith("NV") else "pcie"
        link.description = _level_text(level, topology)
        link.expected_gbps = links.gpu_path_gbps(level, topology.pcie_generation or 3, topology.pcie_width,
                                                 topology.nvlinks_up, topology.capability)
        generation = f"PCIe Gen{topology.pcie_generation or '3 (assumed)'}"
        link.expected_source = f"{links.SOURCE_NCCL}; {generation} x{topology.pcie_width or 16}"
    else:
        link.description = "GPUs on one host (topology not readable: " + (topology.note or "unknown") + ")"
    for name, value in crippled.items():
        link.notes.append(f"{name}={value}: {what_it_does(name)}")
    if wsl2:
        link.notes.append(WSL2_NOTE)
    if same_host and link.transport and link.transport.startswith("NET"):
        link.notes.append(f"NCCL sent GPU-to-GPU traffic through {link.transport} on one host: the slowest path it has")
    return link


def _level_text(level: str, topology: GpuTopology) -> str:
    if level.startswith("NV"):
        return f"NVLink ({level}: {level[2:] or topology.nvlinks_up} links)"
    return {
        "PIX": "PCIe through one bridge (PIX)", "PXB": "PCIe through several bridges (PXB)",
        "PHB": "PCIe through the CPU's host bridge (PHB)", "NODE": "PCIe across host bridges in one NUMA node (NODE)",
        "SYS": "PCIe between NUMA nodes, across the CPU socket link (SYS)",
    }.get(level, level)


@dataclass
class Verdict:
    measured_gbps: float | None
    expected_gbps: float | None
    share: float | None  # measured / expected
    slow: bool
    text: str


def judge(result: CommResult, nbytes: int = VERDICT_BYTES) -> Verdict:
    row = result.at(nbytes)
    link = result.link
    measured = row.busbw_gbps if row else None
    expected = link.expected_gbps if link else None
    if measured is None:
        return Verdict(None, expected, None, False, "no all-reduce size was measured")
    size = f"{format_bytes(row.bytes)}"
    simulated = (f" (simulated link: TORCHDOCTOR_SIMULATED_LINK_GBPS={result.simulated_link_gbps:g} delayed every "
                 "collective)") if result.simulated_link_gbps else ""
    if not expected:
        return Verdict(measured, None, None, False,
                       f"all-reduce of {size}: {measured:.2f} GB/s bus bandwidth{simulated}; "
                       "no expected figure for this path")
    share = measured / expected
    threshold = SLOW_SHARE_LOOPBACK if link.kind == "loopback-tcp" else SLOW_SHARE
    best = _fastest_repeat_gbps(row, measured)
    # slow only when every repeat is: a path carries what it carries, and a repeat that reached the
    # threshold shows it can; a median below it with such a repeat is a machine that was busy for some
    # of them (a loopback all-reduce measured 0.92 GB/s against 3.9 on a shared VM whose pace moved)
    slow = share < threshold and best / expected < threshold
    what = f"{link.description}: expected {expected:.1f} GB/s ({link.expected_source})"
    text = (f"all-reduce of {size} reached {measured:.2f} GB/s bus bandwidth, {share:.0%} of what the path should "
            f"carry{simulated}; {what}")
    if share < threshold and not slow:
        text += (f"; its fastest repeat reached {best:.2f} GB/s ({best / expected:.0%}), so the path carries more: "
                 "the machine was busy during the others")
    if slow:
        text = "SLOW LINK: " + text
        if link.notes:
            text += "; likely cause: " + link.notes[0]
    return Verdict(measured, expected, share, slow, text)


def _fastest_repeat_gbps(row, median_gbps: float) -> float:
    """The bus bandwidth of the row's fastest repeat (bandwidth goes as 1 / time)."""
    times = [t for t in (row.times_s or []) if t > 0]
    if not times:
        return median_gbps
    return median_gbps * statistics.median(times) / min(times)
