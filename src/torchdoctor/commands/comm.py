"""`torchdoctor comm [--nproc-per-node N] [--sizes 4M,25M,40M,200M,1G] [--backend nccl|gloo]
[--format text|md|json]`: all-reduce latency and bandwidth between N ranks on this machine,
the path between them, and whether it delivers what it should.

The ranks are started through torch.distributed.run (run/ranks/comm_worker.py); the table is nccl-tests'
(algbw, busbw = algbw·2(n−1)/n) with warm-up, repeats and their spread.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from torchdoctor.model.units import SIZE_RULE, parse_bytes
from torchdoctor.commands.parser import CommandParser, non_negative
from torchdoctor.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_SCRIPT_FAILED, UsageError

HELP = "measure all-reduce bandwidth between ranks on this machine, and what the link should give"
DEFAULT_SIZES = "4M,25M,40M,200M,1G"
FORMATS = ("text", "md", "json")


def parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="torchdoctor comm", description=HELP)
    p.add_argument("--nproc-per-node", type=int, metavar="N", help="ranks (default: the GPUs here, or 2 on CPU)")
    p.add_argument("--sizes", default=DEFAULT_SIZES,
                   help=f"all-reduce sizes, comma-separated; {SIZE_RULE} (default {DEFAULT_SIZES})")
    p.add_argument("--backend", choices=("nccl", "gloo"), help="default: nccl with CUDA, gloo without")
    p.add_argument("--warmup", type=non_negative(int), default=2, help="untimed all-reduces per size (default 2)")
    p.add_argument("--repeats", type=int, default=5, help="timed all-reduces per size (default 5)")
    p.add_argument("--max-seconds", type=non_negative(float), default=120.0,
                   help="leave out the larger sizes after this long (default 120)")
    p.add_argument("--format", choices=FORMATS, default="text")
    return p


def main(argv: Sequence[str]) -> int:
    opts = parser().parse_args(list(argv))
    try:
        sizes = sorted({parse_bytes(s) for s in opts.sizes.split(",") if s.strip()})
    except ValueError as exc:
        raise UsageError(f"--sizes {exc}; e.g. --sizes 4M,25M,1G") from None
    if not sizes:
        raise UsageError("--sizes is empty; e.g. --sizes 4M,25M,200M")
    if opts.repeats < 1:
        raise UsageError("--repeats must be at least 1")
    backend, nproc = _backend_and_ranks(opts)
    from torchdoctor.run.children import torchrun_entry, torchrun_options
    from torchdoctor.run.ranks.launch import LaunchOutcome, capture_nccl_log, run_elastic

    with tempfile.TemporaryDirectory(prefix="torchdoctor-comm-") as tmp:
        out = Path(tmp) / "comm.json"
        argv = [*torchrun_options(nproc), *torchrun_entry("torchdoctor.run.ranks.comm_worker"), "--out", str(out),
                "--backend", backend,
                "--sizes", ",".join(map(str, sizes)), "--warmup", str(opts.warmup), "--repeats", str(opts.repeats),
                "--budget", str(opts.max_seconds)]
        outcome = LaunchOutcome()
        _as_torchrun_would()
        capture_nccl_log(Path(tmp))  # on GPUs: the transport NCCL chose, from its INFO lines
        run_elastic(argv, outcome)
        if outcome.interrupted and not out.exists():
            sys.stderr.write("torchdoctor: interrupted before a size was measured\n")
            return outcome.signal_exit or EXIT_INTERRUPTED
        if not out.exists():
            errors = sorted(Path(tmp).glob("comm.json.rank-*.err"))
            why = errors[0].read_text(encoding="utf-8").splitlines()[0] if errors else (outcome.error or "no result")
            sys.stderr.write(f"torchdoctor: error: the all-reduce check failed: {why}\n")
            return EXIT_SCRIPT_FAILED
        from torchdoctor.model.distributed_record import CommResult

        result = CommResult.load(out)
    # interrupted (Ctrl-C 130, SIGTERM 143): the sizes measured before it, with a note saying so
    code = (outcome.signal_exit or EXIT_INTERRUPTED) if outcome.interrupted else EXIT_OK
    if opts.format == "json":
        from torchdoctor.model.serialize import to_plain

        sys.stdout.write(json.dumps(to_plain(result), indent=2) + "\n")
        return code
    from torchdoctor.diagnosis.comm import comm_report
    from torchdoctor.report import emit

    emit(comm_report(result), opts.format)
    return code


def _backend_and_ranks(opts) -> tuple[str, int]:
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = opts.backend or ("nccl" if gpus else "gloo")
    if backend == "nccl" and not gpus:
        raise UsageError("--backend nccl needs CUDA GPUs and this machine has none; use --backend gloo")
    nproc = opts.nproc_per_node or (gpus if gpus >= 2 else 2)
    if nproc < 2:
        raise UsageError("--nproc-per-node must be at least 2: an all-reduce needs two ranks")
    if backend == "nccl" and nproc > gpus:
        raise UsageError(f"--nproc-per-node {nproc} with nccl needs {nproc} GPUs; this machine has {gpus} "
                         f"(NCCL cannot put two ranks on one GPU); use --nproc-per-node {gpus} or --backend gloo")
    return backend, nproc


def _as_torchrun_would() -> None:
    """torchrun sets OMP_NUM_THREADS=1 for several ranks (with a banner): set it quietly."""
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
