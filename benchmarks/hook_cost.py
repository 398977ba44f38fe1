"""Hook cost benchmark: where an unmeasured step's added time goes, call by call.

benchmarks/overhead.py measures what the doctor adds to a whole step; this one splits the null step
(benchmarks/overhead_workloads/null_step.py's loop: a DataLoader batch of 1, one parameter, SGD) into
the calls the doctor hooks, timed from the loop around them with the same clock on both sides:

    next(loader)   the forward   opt.zero_grad()   loss.backward()   opt.step()   (and the whole step)

In one process, `--rounds` rounds of plain A, doctor, plain B (N steps each; the doctor: every probe
of a run installed as `torchdoctor run` installs them, ProbedRun, with no probe window planned, so
every step after the first is an unmeasured one). Each figure is the median over steps of a call's
time, the doctor's minus the mean of the two plain runs', with the A/A difference (plain B minus
plain A) beside it; then the median over rounds. The doctor's own measure inside its hooks
(StepSample.doctor_s) goes with it: what the calls add beyond it is the hooks' cost outside what they
can time (their own call, torch calling them, caches).

    python benchmarks/hook_cost.py [--rounds 5] [--steps 3000] [--out benchmarks/results/hook_cost.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor.run.probed import ProbedRun, ProbeOptions

CALLS = ("next", "forward", "zero_grad", "backward", "step", "whole_step")
SKIP = 200  # the first steps of each run: the allocator and the interpreter's caches settle
NO_WINDOWS = {"sampled_steps": 0, "backward_steps": 0, "profiled_steps": 0, "line_steps": 0, "memory_steps": 0}


def null_steps(n: int) -> dict[str, list[float]]:
    """The null step's loop, each hooked call timed from outside."""
    clock = time.perf_counter
    loader = DataLoader(TensorDataset(torch.randn(4096, 1)), batch_size=1)
    weight = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([weight], lr=1e-6)
    times: dict[str, list[float]] = {c: [] for c in CALLS}
    done = 0
    while done < n:
        it = iter(loader)
        while done < n:
            t0 = clock()
            try:
                (x,) = next(it)
            except StopIteration:
                break
            t1 = clock()
            loss = (weight * x).sum()
            t2 = clock()
            opt.zero_grad()
            t3 = clock()
            loss.backward()
            t4 = clock()
            opt.step()
            t5 = clock()
            for call, seconds in zip(CALLS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t5 - t0)):
                times[call].append(seconds)
            done += 1
    return times


def medians_us(times: dict[str, list[float]]) -> dict[str, float]:
    return {call: statistics.median(v[SKIP:]) * 1e6 for call, v in times.items()}


def doctor_steps(n: int) -> tuple[dict[str, list[float]], float]:
    options = ProbeOptions(warmup=3, steps=n + 10, max_seconds=3600, stop="flag", schedule=NO_WINDOWS)
    probed = ProbedRun(options, Path(tempfile.mkdtemp(prefix="hook-cost-")), "null_step.py")
    with probed:
        times = null_steps(n)
    hooks = [s.doctor_s for s in probed.session.steps[SKIP:] if not s.warmup and not s.probes]
    return times, statistics.median(hooks) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "hook_cost.json"))
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load_start = os.getloadavg()
    null_steps(300), doctor_steps(300)  # warm: imports, the allocator
    added: dict[str, list[float]] = {c: [] for c in CALLS}
    a_a: dict[str, list[float]] = {c: [] for c in CALLS}
    hooks, loads = [], []
    for _ in range(args.rounds):
        loads.append(round(os.getloadavg()[0], 2))
        plain_a = null_steps(args.steps)
        doctor, hook_us = doctor_steps(args.steps)
        plain_b = null_steps(args.steps)
        a, b, d = medians_us(plain_a), medians_us(plain_b), medians_us(doctor)
        for call in CALLS:
            added[call].append(round(d[call] - (a[call] + b[call]) / 2, 2))
            a_a[call].append(round(b[call] - a[call], 2))
        hooks.append(round(hook_us, 2))
    result = {
        "benchmark": "hook_cost",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": f"CPU, Python {sys.version.split()[0]}, torch {torch.__version__}",
        "cpu_count": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in load_start],
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "load1_before_each_round": loads,
        "note": args.note,
        "steps_per_run": args.steps,
        "added_us": {call: {"median": statistics.median(added[call]), "a_a": statistics.median(a_a[call]),
                            "per_round": added[call]} for call in CALLS},
        "doctor_reported_hook_us": {"median": statistics.median(hooks), "per_round": hooks},
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print("  ".join(f"{c} +{result['added_us'][c]['median']:.1f} (A/A {result['added_us'][c]['a_a']:+.1f})"
                    for c in CALLS), f"hooks' own {result['doctor_reported_hook_us']['median']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
