"""The path between this job's ranks, found from inside the ranks: which hosts they are on,
the GPU topology, what NCCL chose (its INFO log, when the launcher captured it), the
environment, and for CPU ranks on one host what raw loopback TCP carries.

Every rank calls `discover_link` with the same arguments (it exchanges host names through the
job's store); rank 0's answer is the one the report uses.
"""

from __future__ import annotations

import glob
import os
import socket
from datetime import timedelta
from pathlib import Path

from torchdoctor.comm.environment import is_wsl2
from torchdoctor.comm.nccl_log import NcclChoice, parse_nccl_info
from torchdoctor.comm.topology import nvml_topology, read_nvidia_smi_topology
from torchdoctor.comm.verdict import gloo_link, nccl_link
from torchdoctor.model.distributed_record import LinkInfo

NCCL_LOG_ENV = "TORCHDOCTOR_NCCL_LOG_DIR"  # set by the launcher when it turned NCCL's INFO log on
NCCL_LOG_PATTERN = "nccl-%h-%p.log"  # NCCL_DEBUG_FILE: %h host name, %p process id
HOSTS_PREFIX = "torchdoctor/hosts"


def exchange_hosts(store, rank: int, world_size: int, timeout_s: float = 20.0) -> list[str]:
    import torch.distributed as dist

    prefixed = dist.PrefixStore(HOSTS_PREFIX, store)
    prefixed.set(str(rank), socket.gethostname())
    prefixed.set_timeout(timedelta(seconds=timeout_s))
    return [prefixed.get(str(r)).decode() for r in range(world_size)]


def discover_link(backend: str, store, rank: int, world_size: int, gpus: list[int] | None = None,
                  environ: dict[str, str] | None = None) -> LinkInfo:
    from torchdoctor.comm.bench import loopback_tcp_gbps

    environ = dict(os.environ if environ is None else environ)
    hosts = exchange_hosts(store, rank, world_size)
    same_host = len(set(hosts)) == 1
    if backend != "nccl":
        loopback = loopback_tcp_gbps(store, rank) if same_host and world_size > 1 else None
        return gloo_link(same_host, loopback, None if same_host else nic_speed_mbit())
    topology = read_nvidia_smi_topology()
    if not topology.levels:
        fallback = nvml_topology(gpus or list(range(world_size)))
        if fallback.levels:
            topology = fallback
    else:
        extra = nvml_topology(gpus or [0, 1])
        topology.pcie_generation, topology.pcie_width = extra.pcie_generation, extra.pcie_width
        topology.capability, topology.nvlinks_up = extra.capability, extra.nvlinks_up
    return nccl_link(topology, gpus or list(range(world_size)), read_nccl_choice(environ), environ,
                     is_wsl2(), same_host, nic_speed_mbit())


def read_nccl_choice(environ: dict[str, str]) -> NcclChoice | None:
    """NCCL's INFO lines of this process, when the launcher pointed NCCL_DEBUG_FILE at a folder."""
    folder = environ.get(NCCL_LOG_ENV)
    if not folder:
        return None
    text = ""
    for path in glob.glob(os.path.join(folder, f"nccl-*-{os.getpid()}.log")):
        try:
            text += Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return parse_nccl_info(text) if text else None


def nic_speed_mbit() -> int | None:
    """The link speed of the interface of the default route (sysfs, Mb/s), or None."""
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 1 and fields[1] == "00000000":
            try:
                return int(Path(f"/sys/class/net/{fields[0]}/speed").read_text().strip())
            except (OSError, ValueError):
                return None
    return None
