"""What a path between two ranks should carry: the expected all-reduce bus bandwidth.

GPU paths follow NCCL's own link model, the numbers NCCL itself uses to plan its rings and
trees (NVIDIA/nccl, src/graph/topo.h: `PCI_BW 12.0 // PCI Gen3 x16`, `SM80_NVLINK_BW 20.0`,
`SM90_NVLINK_BW 20.6`, `SM86_NVLINK_BW 12.0`, `SM100_NVLINK_BW 40.1`, `SKL_QPI_BW 10.0`,
`QPI_BW 6.0`, `AMD_BW 16.0`, `NET_BW 12.0 // 100Gbit`; all GB/s per direction). NCCL scales
the PCIe figure with the link's generation and width (src/graph/xml.cc reads
`max_link_speed`/`max_link_width` from sysfs): x16 Gen3/4/5 = 12/24/48 GB/s.

A path is as fast as its slowest hop: GPU-to-GPU through the CPU root complex (PHB) costs
nothing extra, but between NUMA nodes (SYS) the traffic crosses the inter-socket link.

CPU ranks (gloo) on one host talk over loopback TCP; its capacity is measured, not modelled
(`comm.bench.loopback_tcp_gbps`). Between hosts the NIC's speed (sysfs `speed`, Mb/s) bounds it.
"""

from __future__ import annotations

# GB/s per direction, from NCCL src/graph/topo.h (see the module docstring).
PCIE_GBPS_BY_GEN = {1: 3.0, 2: 6.0, 3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0}  # x16; NCCL doubles per generation
NVLINK_GBPS_PER_LINK = {  # by compute capability (major, minor) of the GPUs
    (6, 0): 18.0, (7, 0): 20.0, (8, 0): 20.0, (8, 6): 12.0, (9, 0): 20.6, (10, 0): 40.1,
}
INTER_SOCKET_GBPS = {"intel": 10.0, "intel-pre-skylake": 6.0, "amd": 16.0}  # SKL_QPI_BW, QPI_BW, AMD_BW
NET_100GBIT_GBPS = 12.0  # NET_BW

# `nvidia-smi topo -m` levels, nearest first (its legend: X = self, NV# = NVLink bond of #
# links, PIX = one PCIe bridge, PXB = several bridges, PHB = through the CPU's root complex,
# NODE = across root complexes in one NUMA node, SYS = across NUMA nodes via the socket link).
TOPOLOGY_LEVELS = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")

SOURCE_NCCL = "NCCL's link model (NVIDIA/nccl src/graph/topo.h, PCIe scaled by generation as src/graph/xml.cc does)"
SOURCE_LOOPBACK = "measured now: raw TCP between two ranks over loopback (what gloo's transport runs on)"
SOURCE_NIC = "the network interface's link speed (/sys/class/net/IFACE/speed)"


def pcie_gbps(generation: int | None, width: int | None = 16) -> float | None:
    if generation is None or generation not in PCIE_GBPS_BY_GEN:
        return None
    return PCIE_GBPS_BY_GEN[generation] * (width or 16) / 16


def nvlink_gbps(links: int, capability: tuple[int, int] | None) -> float | None:
    if links <= 0:
        return None
    per_link = NVLINK_GBPS_PER_LINK.get(tuple(capability)) if capability else None
    if per_link is None and capability:
        older = [cc for cc in NVLINK_GBPS_PER_LINK if cc <= tuple(capability)]
        per_link = NVLINK_GBPS_PER_LINK[max(older)] if older else None
    return None if per_link is None else per_link * links


def gpu_path_gbps(level: str, pcie_generation: int | None, pcie_width: int | None = 16,
                  nvlinks: int = 0, capability: tuple[int, int] | None = None) -> float | None:
    """Expected bandwidth between two GPUs whose `nvidia-smi topo -m` level is `level`."""
    if level.startswith("NV"):
        count = nvlinks or _int(level[2:]) or 1
        return nvlink_gbps(count, capability)
    pcie = pcie_gbps(pcie_generation, pcie_width)
    if pcie is None:
        return None
    if level == "SYS":
        return min(pcie, INTER_SOCKET_GBPS["intel"])  # the CPU is not identified: Skylake-era Intel's link
    return pcie


def nic_gbps(speed_mbit: int | None) -> float | None:
    """A NIC's payload bandwidth in GB/s from its link speed in Mb/s (sysfs reports Mb/s)."""
    if not speed_mbit or speed_mbit <= 0:
        return None
    return speed_mbit / 8 / 1000


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None
