"""`torchdoctor memory [OPTIONS] SCRIPT.py [ARGS...]`: peak memory and samples/s at several batch
sizes (a fresh process each), the fit peak(b) = fixed + b * per_sample, and the largest batch
that fits the device, a `--device-memory` or a `--for-gpu`. `--estimate` runs one step on fake
tensors instead: no memory used, the device need not exist."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from torchdoctor.commands.parser import CommandParser, non_negative
from torchdoctor.errors import EXIT_OK, ScriptFailed, UsageError
from torchdoctor.memory.sizes import gpu_memory, parse_size
from torchdoctor.model.units import SIZE_RULE, format_bytes
from torchdoctor.report import RENDERERS, emit

HELP = "measure memory and samples/s at several batch sizes; find the largest batch that fits"
DEFAULT_PARENT = Path("torchdoctor-memory")


def parser() -> CommandParser:
    p = CommandParser(prog="torchdoctor memory", description=HELP)
    target = p.add_mutually_exclusive_group()
    target.add_argument("--device-memory", metavar="SIZE", help=f"memory to fit in, e.g. 24GiB; {SIZE_RULE} (default: this GPU's)")
    target.add_argument("--for-gpu", metavar="NAME", help="fit a GPU by name, e.g. H100-80GB, A100-40GB, RTX4090-24GB")
    p.add_argument("--headroom", metavar="SIZE",
                   help="memory to keep free for what PyTorch does not see (default: measured on CUDA; "
                        "0.5 GiB + 5%% of the device when the trials run on the CPU); 0 for none")
    p.add_argument("--nproc-per-node", type=int, default=1, metavar="N",
                   help="DDP: every trial runs N ranks (torch.distributed.run); a size fits when every rank fits")
    p.add_argument("--estimate", action="store_true",
                   help="no real step: run one step on fake tensors (parameters, gradients, optimizer states exact; "
                        "activations where the ops allow)")
    p.add_argument("--steps", type=non_negative(int), default=6, help="timed steps per trial (default 6)")
    p.add_argument("--warmup", type=non_negative(int), default=2, help="accounted warmup steps per trial (default 2)")
    p.add_argument("--max-seconds", type=non_negative(float), default=120.0, help="limit per trial (default 120)")
    p.add_argument("--max-trials", type=int, default=8, help="batch sizes to try at most (default 8)")
    p.add_argument("--out", type=Path, help="memory directory (default ./torchdoctor-memory/<time>-<script>/)")
    p.add_argument("--format", choices=sorted(RENDERERS), default="text")
    p.add_argument("-m", dest="module", action="store_true", help="the target is a module, as with python -m")
    p.add_argument("target", help="the training script (or module with -m)")
    p.add_argument("args", nargs="...", help="arguments for the script")
    return p


def _requested_capacity(opts) -> tuple[int | None, str]:
    if opts.device_memory:
        return parse_size(opts.device_memory), f"--device-memory {opts.device_memory}"
    if opts.for_gpu:
        name, total = gpu_memory(opts.for_gpu)
        return total, f"{name} (nvidia-smi's Memory Total)"
    return None, ""


def main(argv: Sequence[str]) -> int:
    opts = parser().parse_args(list(argv))
    total, source = _requested_capacity(opts)  # a bad size or GPU name fails before anything runs
    headroom = None
    if opts.headroom is not None:
        headroom = 0 if opts.headroom.strip() == "0" else parse_size(opts.headroom, "--headroom")
        if total is not None and headroom >= total:
            raise UsageError(f"--headroom {opts.headroom} leaves nothing of {source}; keep it below the capacity")
    if opts.nproc_per_node < 1:
        raise UsageError("--nproc-per-node must be at least 1")
    if opts.warmup < 1:
        raise UsageError("--warmup must be at least 1: the accounted steps are the warmup steps")
    if opts.steps < 1 or not 2 <= opts.max_trials <= 20:
        raise UsageError("--steps must be at least 1 and --max-trials between 2 and 20")
    from torchdoctor.run.target import check_target
    from torchdoctor.model.layout import create_run_dir

    check_target(opts.target, opts.module)
    out = create_run_dir(opts.out, opts.target, parent=DEFAULT_PARENT)
    from torchdoctor.memory.summary import measure_batch_scaling

    record, report = measure_batch_scaling(opts, out, total, source, headroom, progress=_progress)
    emit(report, opts.format)
    sys.stderr.write(f"torchdoctor memory: {len(record.batch_scaling.trials)} trials; memory directory: {out}\n")
    if record.run.status == "crashed" and (record.memory is None or record.memory.failure is None):
        if opts.estimate:  # the fake tensors stopped, not the script: never blamed on it
            from torchdoctor.memory.estimate import why_the_estimate_stopped

            raise ScriptFailed(f"{why_the_estimate_stopped(record)}; run without --estimate to measure it on this "
                               f"machine (the trial's output: {out / 'trials'})")
        raise ScriptFailed(f"{opts.target} failed at its own batch size before memory could be measured; "
                           f"see {out / 'trials'}")
    return EXIT_OK


def _progress(batch: int | None, trial) -> None:
    size = "the script's own batch" if batch is None else f"batch {batch}"
    peak = f", peak {format_bytes(trial.peak_bytes)}" if trial.peak_bytes else ""
    rate = f", {trial.samples_per_s:.1f} samples/s" if trial.samples_per_s else ""
    sys.stderr.write(f"torchdoctor memory: {size}: {trial.outcome}{peak}{rate} ({trial.seconds:.1f} s)\n")
    sys.stderr.flush()
