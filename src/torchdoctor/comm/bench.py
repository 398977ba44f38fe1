"""The all-reduce timing loop, run in every rank at once (`torchdoctor comm`, and the short
check after a multi-rank `run`).

Bandwidth as nccl-tests define it (NVIDIA/nccl-tests, doc/PERFORMANCE.md): algbw = bytes /
time; for all-reduce, busbw = algbw * 2(n-1)/n, the rate each rank's link carried in a ring,
comparable to the link's own bandwidth whatever n is. As nccl-tests do, a repeat times a batch
of back-to-back all-reduces and divides (enough of them to last BATCH_S, so the ranks' skew
leaving the line-up does not count against small sizes). A repeat's time is the slowest
rank's (the collective is done when the last rank is); the table shows the median of the
repeats and their spread.

Runs on a `ProcessGroup` object used directly (`Communicator`), never on the script's own
default group: a check after the script cannot pair its calls with collectives the script
left pending.
"""

from __future__ import annotations

import socket
import statistics
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from torchdoctor.model.distributed_record import CommResult, CommSize
from torchdoctor.model.units import MIB, format_bytes

DDP_BUCKET_BYTES = 25 * MIB  # DDP's default bucket_cap_mb=25
LATENCY_BYTES = 8 * 1024  # small enough that the time is the collective's latency
LOOPBACK_BYTES = 64 * MIB
BATCH_S = 0.05  # a timed repeat lasts about this long
MAX_BATCH = 20
STORE_PREFIX = "torchdoctor/comm"


INTERRUPTED = "interrupted"  # how a stopped check's note begins


def bus_bandwidth(algbw: float, world_size: int) -> float:
    """nccl-tests' all-reduce bus bandwidth."""
    return algbw * 2 * (world_size - 1) / world_size if world_size > 1 else algbw


@dataclass
class Communicator:
    """A process group of our own, on the job's store under a prefix of our own."""

    group: Any  # a ProcessGroup (gloo or nccl)
    rank: int
    world_size: int
    device: torch.device
    delay: Callable[[int], None] | None = None  # the slow-link test hook (comm/slow_link.py)

    def all_reduce(self, tensor: torch.Tensor, op=dist.ReduceOp.SUM) -> None:
        options = dist.AllreduceOptions()
        options.reduceOp = op
        self.group.allreduce([tensor], options).wait()
        if tensor.is_cuda:
            torch.cuda.synchronize(tensor.device)
        if self.delay is not None:
            self.delay(tensor.numel() * tensor.element_size())

    def slowest(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        self.all_reduce(t, dist.ReduceOp.MAX)
        return t.cpu().tolist()


def open_communicator(store, rank: int, world_size: int, backend: str, timeout_s: float,
                      tag: str = "check") -> Communicator:
    prefixed = dist.PrefixStore(f"{STORE_PREFIX}/{tag}", store)
    timeout = timedelta(seconds=timeout_s)
    if backend == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        group = dist.ProcessGroupNCCL(prefixed, rank, world_size, options)
    else:
        device = torch.device("cpu")
        group = dist.ProcessGroupGloo(prefixed, rank, world_size, timeout)
    return Communicator(group, rank, world_size, device)


def measure_all_reduce(store, rank: int, world_size: int, backend: str, sizes: list[int], *, timeout_s: float,
                       tag: str, warmup: int, repeats: int, budget_s: float, started: float | None = None,
                       gpus: list[int] | None = None) -> CommResult:
    """The all-reduce table and the path between the ranks, on a group of our own (`torchdoctor
    comm`'s ranks, and the check after a multi-rank run). Every rank calls it with the same
    arguments. The sizes stop `budget_s` after `started` (a `time.perf_counter()` reading;
    by default, once the group is open). Under the slow-link test hook every all-reduce is
    delayed as that link would (comm/slow_link.py)."""
    from torchdoctor.comm.discover import discover_link
    from torchdoctor.comm import slow_link

    comm = open_communicator(store, rank, world_size, backend, timeout_s, tag=tag)
    gbps = slow_link.simulated_gbps()
    if gbps is not None:
        comm.delay = lambda nbytes: time.sleep(slow_link.transfer_s(nbytes, world_size, gbps))
    deadline = (time.perf_counter() if started is None else started) + budget_s
    result = time_all_reduce(comm, sizes, warmup=warmup, repeats=repeats, deadline=deadline)
    result.simulated_link_gbps = gbps
    if not result.note.startswith(INTERRUPTED):  # stopped: the path is not worth the scheduler's grace
        result.link = discover_link(backend, store, rank, world_size, gpus)
    return result


def time_all_reduce(comm: Communicator, sizes: list[int], warmup: int = 1, repeats: int = 3,
                    deadline: float | None = None, clock=time.perf_counter) -> CommResult:
    """Every rank calls this with the same arguments. `deadline` (a `clock` time) leaves the
    larger sizes out when the budget runs short; every rank agrees on where to stop."""
    result = CommResult(backend=_backend_name(comm), world_size=comm.world_size, warmup=warmup, repeats=repeats)
    started = clock()
    latency = _timed(comm, LATENCY_BYTES, warmup=max(warmup, 2), repeats=max(repeats, 5))
    result.latency_s = statistics.median(latency) if latency else None
    try:
        for nbytes in sizes:
            if deadline is not None and not _all_agree_in_time(comm, deadline, clock):
                result.note = f"stopped before {format_bytes(nbytes)}: the check's time budget ran out"
                break
            times = _timed(comm, nbytes, warmup, repeats)
            result.sizes.append(size_row(nbytes, times, comm.world_size))
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (the rank's handler raises it): keep the sizes done
        result.note = f"{INTERRUPTED} after {len(result.sizes)} of {len(sizes)} sizes"
    result.seconds = clock() - started
    return result


def size_row(nbytes: int, times: list[float], world_size: int) -> CommSize:
    row = CommSize(bytes=nbytes, times_s=[round(t, 6) for t in times])
    if times:
        median = statistics.median(times)
        if median > 0:
            row.algbw_gbps = round(nbytes / median / 1e9, 4)
            row.busbw_gbps = round(bus_bandwidth(nbytes / median / 1e9, world_size), 4)
            row.spread = round((max(times) - min(times)) / median, 4)
    return row


def _timed(comm: Communicator, nbytes: int, warmup: int, repeats: int) -> list[float]:
    """Per repeat, the time of one all-reduce: a batch of them timed together, divided."""
    tensor = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=comm.device)
    for _ in range(warmup):
        comm.all_reduce(tensor)
    start = time.perf_counter()
    comm.all_reduce(tensor)
    one = comm.slowest([time.perf_counter() - start])[0]  # every rank agrees on the batch size
    batch = max(1, min(MAX_BATCH, round(BATCH_S / max(one, 1e-6))))
    line_up = torch.zeros(1, device=comm.device)
    local = []
    for _ in range(repeats):
        comm.all_reduce(line_up)
        start = time.perf_counter()
        for _ in range(batch):
            comm.all_reduce(tensor)
        local.append((time.perf_counter() - start) / batch)
    return comm.slowest(local)


def _all_agree_in_time(comm: Communicator, deadline: float, clock) -> bool:
    late = 1.0 if clock() > deadline else 0.0
    return comm.slowest([late])[0] == 0.0


def _backend_name(comm: Communicator) -> str:
    try:
        return comm.group.name()
    except Exception:
        return "gloo" if comm.device.type == "cpu" else "nccl"


# ---- what loopback TCP carries between two ranks of one host (gloo's transport) -----------
def loopback_tcp_gbps(store, rank: int, nbytes: int = LOOPBACK_BYTES, repeats: int = 3,
                      timeout_s: float = 20.0) -> float | None:
    """Ranks 0 and 1 (same host) send `nbytes` over a plain TCP socket; the median rate in
    GB/s, known to both (None on other ranks, or when the ranks are on different hosts)."""
    store = dist.PrefixStore(f"{STORE_PREFIX}/loopback", store)
    store.set(f"host{rank}", socket.gethostname())
    if rank > 1:
        return None
    other = store.get(f"host{1 - rank}").decode()
    if other != socket.gethostname():
        return None
    if rank == 0:
        with socket.create_server(("127.0.0.1", 0)) as server:
            server.settimeout(timeout_s)
            store.set("port", str(server.getsockname()[1]))
            conn, _ = server.accept()
            with conn:
                conn.settimeout(timeout_s)
                payload = bytearray(nbytes)
                rates = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    conn.sendall(payload)
                    conn.recv(1)
                    rates.append(nbytes / (time.perf_counter() - start) / 1e9)
        rate = statistics.median(rates)
        store.set("rate", f"{rate:.6f}")
        return rate
    port = int(store.get("port").decode())
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as conn:
        buffer = memoryview(bytearray(nbytes))
        for _ in range(repeats):
            got = 0
            while got < nbytes:
                got += conn.recv_into(buffer[got:], nbytes - got)
            conn.sendall(b"k")
    return float(store.get("rate").decode())
