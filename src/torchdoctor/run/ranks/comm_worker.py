"""One rank of `torchdoctor comm`, started by torch.distributed.run:

    python -m torchdoctor.run.ranks.comm_worker --out RESULT.json --backend gloo --sizes 4194304,26214400 ...

It meets the other ranks on the launcher's store, times all-reduce at each size on a process
group of its own (comm/bench.py), finds the path between the ranks (comm/discover.py), and
rank 0 writes the CommResult. A rank that cannot finish writes why to RESULT.json.rank-K.err.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

GROUP_TIMEOUT_S = 60.0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--backend", required=True)
    p.add_argument("--sizes", required=True)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budget", type=float, default=120.0)
    opts = p.parse_args(argv)
    from torchdoctor.run.ranks.identity import agent_store, launch_env
    from torchdoctor.run.signals import StopSignals

    StopSignals().install()  # the launcher's SIGTERM ends the sizes; the ones done are written
    launch = launch_env()
    if launch is None:
        sys.stderr.write("torchdoctor.run.ranks.comm_worker runs under torch.distributed.run (torchdoctor comm starts it)\n")
        return 2
    try:
        result = measure(opts, launch, agent_store(launch, timeout_s=GROUP_TIMEOUT_S))
    except KeyboardInterrupt as stop:  # stopped before the first size: nothing to write
        return getattr(stop, "exit_code", 130)
    except Exception as exc:  # the launcher reports it; the traceback is for a bug report
        Path(f"{opts.out}.rank-{launch.rank}.err").write_text(
            f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}", encoding="utf-8")
        return 1
    if launch.rank == 0:
        result.save(opts.out)
    return 0


def measure(opts, launch, store):
    import torch

    from torchdoctor.comm.bench import measure_all_reduce

    if store is None:
        raise RuntimeError("no launcher store to meet the other ranks on")
    if opts.backend == "nccl":
        torch.cuda.set_device(launch.local_rank)
    started = time.perf_counter()
    sizes = [int(s) for s in opts.sizes.split(",")]
    gpus = list(range(launch.local_world_size)) if opts.backend == "nccl" else None
    result = measure_all_reduce(store, launch.rank, launch.world_size, opts.backend, sizes, timeout_s=GROUP_TIMEOUT_S,
                                tag="comm", warmup=opts.warmup, repeats=opts.repeats, budget_s=opts.budget,
                                started=started, gpus=gpus)
    result.seconds = time.perf_counter() - started
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
