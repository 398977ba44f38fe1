"""One batch-size trial, in its own process: `python -m torchdoctor.memory.child ...`.

The script runs under the probes as in `torchdoctor run`, with only the memory window (the
warmup steps, accounted) and plain timed steps after it; the batch size comes from the
batch_size knob. The record is written to OUT/record.json whatever happens to the script (an
out-of-memory error is a result here, not a failure of the trial). Under torch.distributed.run
every rank writes OUT/rank-K/record.json and rank 0 writes OUT/verdict.json once all ranks have
agreed (see agreement.py).

A limit, when given, is made real for this process at the first training activity, so that a
batch that does not fit fails the way it would on the device:
- `rlimit`: RLIMIT_AS at the address space in use then plus the limit (CPU: the allocator's
  own failure; everything the process maps counts, BLAS buffers and malloc's cache included);
- `cuda`: torch.cuda.set_per_process_memory_fraction(limit / device memory);
- `tensors`: an emulated device holding the accounted tensors: the allocation that takes them
  past the limit fails with an out-of-memory error (in the accounted steps).
`measure` imposes nothing and writes the address space's growth to OUT/address_space.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# a trial measures memory alone: every warm-up step accounted whole, whatever it costs (no budgets)
TRIAL_SCHEDULE = {"sampled_steps": 0, "backward_steps": 0, "profiled_steps": 0, "line_steps": 0, "budgets": False}
VERDICT_FILE = "verdict.json"


class _Limit:
    """Imposes the trial's memory limit at the first training activity (mode `measure`: none,
    but the address space's growth from there is written to OUT/address_space.json, for
    benchmarks that set a limit on it)."""

    def __init__(self, mode: str, limit_bytes: int) -> None:
        self.mode, self.limit_bytes = mode, limit_bytes
        self.applied = ""
        self.start: int | None = None
        self.largest_growth = 0

    def on_step(self, step) -> None:
        now = _address_space_bytes()
        if self.start is not None and now is not None:
            self.largest_growth = max(self.largest_growth, now - self.start)

    def on_training_start(self, kind: str) -> None:
        self.start = _address_space_bytes()
        if self.mode == "rlimit":
            import resource

            in_use = _address_space_bytes()
            if in_use is None:
                return
            soft = in_use + self.limit_bytes
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            if hard != resource.RLIM_INFINITY:
                soft = min(soft, hard)
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
            self.applied = f"RLIMIT_AS {soft} (address space at training start {in_use} + {self.limit_bytes})"
        elif self.mode == "cuda":
            import torch

            if torch.cuda.is_available() and torch.cuda.is_initialized():
                device = torch.cuda.current_device()
                total = torch.cuda.get_device_properties(device).total_memory
                torch.cuda.set_per_process_memory_fraction(min(1.0, self.limit_bytes / total), device)
                self.applied = f"CUDA memory fraction {self.limit_bytes / total:.4f} of {total}"


def _address_space_bytes() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m torchdoctor.memory.child")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--max-seconds", type=float, default=120.0)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--limit-bytes", type=int)
    p.add_argument("--limit-mode", choices=("rlimit", "cuda", "measure", "tensors"))
    p.add_argument("--module", action="store_true")
    p.add_argument("--estimate", action="store_true", help="run on fake tensors: no memory, no device")
    p.add_argument("target")
    p.add_argument("args", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str]) -> int:
    opts = parser().parse_args(argv)
    from torchdoctor.run.outcome import exit_code_of
    from torchdoctor.run.ranks.child import die_with_parent, rank_dir_of
    from torchdoctor.run.runner import RunRequest, execute
    from torchdoctor.run.signals import handling_stop_signals

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        die_with_parent()  # a rank never outlives the launcher of its trial
    out = rank_dir_of(opts.out, rank) if world > 1 else opts.out
    out.mkdir(parents=True, exist_ok=True)
    listeners = []
    schedule = dict(TRIAL_SCHEDULE)
    if opts.limit_mode == "tensors":  # the memory probe fails an allocation beyond it, as a device would
        schedule["memory_limit_bytes"] = opts.limit_bytes
    limit = _Limit(opts.limit_mode, opts.limit_bytes or 0) if opts.limit_mode not in (None, "tensors") else None
    if limit is not None:
        listeners.append(limit)
    knobs = {"batch_size": opts.batch_size} if opts.batch_size else {}
    if opts.estimate:
        knobs["workers"] = 0  # a worker process would make real tensors outside the fake mode
    request = RunRequest(target=opts.target, args=list(opts.args), module=opts.module, warmup=opts.warmup,
                         steps=opts.steps, max_seconds=opts.max_seconds, trace=False, knobs=knobs,
                         listeners=listeners, schedule=schedule)
    with handling_stop_signals():  # the parent's SIGTERM or Ctrl-C ends the steps; the record is written
        if opts.estimate:
            from torchdoctor.memory.estimate import on_fake_tensors

            record = on_fake_tensors(lambda: execute(request, out))
        else:
            record = execute(request, out)
    if limit is not None and limit.applied:
        from torchdoctor.model.record import ProbeNote

        record.probe_notes.append(ProbeNote("memory", f"limit imposed for this trial: {limit.applied}"))
    record.save(out / "record.json")
    if limit is not None and limit.mode == "measure":
        (out / "address_space.json").write_text(json.dumps({"growth_at_step_ends": limit.largest_growth}))
    if record.run.error:
        sys.stderr.write(record.run.error)
    if record.run.status == "interrupted":  # no verdict to agree on: the ranks were stopped
        return exit_code_of(record.run.status, record.run.exit_code)
    if world > 1:
        from torchdoctor.memory.agreement import agree, fits

        if not fits(record):
            return 1  # the launcher stops the ranks still waiting for this one in a collective
        verdict = agree(record, rank, world)
        if rank == 0:
            (opts.out / VERDICT_FILE).write_text(json.dumps(verdict), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
