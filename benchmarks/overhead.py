"""Overhead benchmark: steady-state step time of real-shaped CPU workloads with and without
the doctor. Targets (issue 12): per workload, the median per-round ratio doctor/plain
outside the sampled steps <= 1.02 and the worst round <= 1.04; for the 2-rank DDP workload
(issue 15) the median <= 1.03. That workload runs as two ranks of torch.distributed.run,
alternating plain and doctor runs in step (DDP's all-reduce couples them); each doctor run is
`measure` in the rank with every probe a rank has (DDP, collectives).

Each workload (benchmarks/overhead_workloads/*.py) times its own steps and writes them to
the JSON file named on its command line, so both sides use the same clock. Each workload
runs in a process of its own (so one workload's imports and allocator state do not touch
another's), and inside it alternates plain and doctor runs for `--rounds` rounds (plain,
doctor, plain, doctor, ...): separate processes differ by ~10 % on this machine, which
would hide a 2 % effect. The doctor side is the public run stage:
`torchdoctor.run.runner.execute(RunRequest(...), run_dir)`.

A round's ratio compares the same step indices on both sides: the measured steps that the
doctor did not sample (its record flags warm-up and sampled steps). The targets apply to
wall time. The machine's load average, CPU count and each run's CPU share (process CPU
time over wall time) are written next to the ratios, since other processes on a shared
machine move them far more than 2 %; the same ratios on process CPU time per step are
written too, as a contention-robust view of what the doctor's own code costs.

Writes benchmarks/results/overhead.json; exits 1 when a workload misses a target.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import platform
import random
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD_DIR = ROOT / "benchmarks" / "overhead_workloads"
RESULTS = ROOT / "benchmarks" / "results" / "overhead.json"
WARMUP = 3
MEDIAN_TARGET, WORST_TARGET = 1.02, 1.04


@dataclass(frozen=True)
class Workload:
    name: str
    steps: int  # measured steps per run (after WARMUP)
    describe: str
    needs: str | None = None  # an importable module the workload requires
    cuda: bool = False  # takes the device as its third argument
    ranks: int = 1  # >1: each rank is a process of torch.distributed.run, alternating in step
    median_target: float = MEDIAN_TARGET

    @property
    def path(self) -> Path:
        return WORKLOAD_DIR / f"{self.name}.py"


WORKLOADS = (
    Workload("synthetic_mlp", 200, "MLP 256-512-512-10, batch 64, AdamW, DataLoader over tensors, 1 torch thread",
             cuda=True),
    Workload("small_gpt", 100, "GPT, 4 blocks, width 64, context 64, batch 8, AdamW, grad clipping, 1 torch thread"),
    Workload("cnn_dataloader", 150, "CNN conv-BN-ReLU x3, batch 32, SGD momentum, DataLoader(num_workers=0) over a "
             "map-style Dataset with per-sample normalise/flip, 1 torch thread"),
    Workload("lightning_loop", 200, "Lightning Trainer, MLP 128-512-512-10, batch 64, Adam in automatic optimization "
             "(closure), step times from a callback, 1 torch thread", needs="lightning"),
    Workload("ddp_mlp", 150, "2 ranks (torch.distributed.run, gloo): DDP MLP 256-512-512-10, batch 64 per rank, "
             "DistributedSampler, AdamW, 1 torch thread per rank; rank 0's step times", ranks=2,
             median_target=1.03),
)


# ---- one workload, in its own process ---------------------------------------------------
def _args(workload: Workload, out: Path, n_steps: int, device: str) -> list[str]:
    return [str(out), str(n_steps), *([device] if workload.cuda else [])]


def _run_plain(workload: Workload, out: Path, n_steps: int, device: str) -> dict:
    saved = sys.argv[:]
    sys.argv[:] = [str(workload.path), *_args(workload, out, n_steps, device)]
    try:
        runpy.run_path(str(workload.path), run_name="__main__")
    finally:
        sys.argv[:] = saved
    return json.loads(out.read_text())


def _run_doctor(workload: Workload, out: Path, run_dir: Path, n_steps: int, device: str) -> tuple[dict, set, set]:
    from torchdoctor.run.runner import RunRequest, execute

    run_dir.mkdir()
    request = RunRequest(target=str(workload.path), args=_args(workload, out, n_steps, device), steps=workload.steps,
                         warmup=WARMUP)
    record = execute(request, run_dir)  # the run stage alone: the evidence after it is not timed
    if record.run.status != "step-limit":
        raise RuntimeError(f"{workload.name}: doctor run ended {record.run.status!r}: {record.run.error}")
    counted = {s.index for s in record.steps if not s.warmup and not s.sampled}
    sampled = {s.index for s in record.steps if s.sampled}
    return json.loads(out.read_text()), counted, sampled


def _at(times: list[float], indices: set[int]) -> list[float]:
    """Step times at 1-based step indices (times[i] is step i + 1)."""
    return [times[i - 1] for i in sorted(indices) if i <= len(times)]


def measure_workload(workload: Workload, rounds: int, device: str = "cpu") -> list[dict]:
    """Per round, the plain and doctor step times (wall and process CPU) at the same indices."""
    sys.path.insert(0, str(WORKLOAD_DIR))  # the workloads' shared step clock, for both sides alike
    n_steps = WARMUP + workload.steps + 5  # more than the doctor's limit: it stops the run itself
    per_round = []
    with tempfile.TemporaryDirectory(prefix=f"overhead-{workload.name}-") as tmp:
        tmp = Path(tmp)
        # A discarded round first: imports, the allocator and the doctor's own modules warm up
        # (the synthetic workload's first round came out 7-16 % in the doctor's favour in 4 runs of 4).
        _run_plain(workload, tmp / "warm.json", n_steps, device)
        _run_doctor(workload, tmp / "warm-doctor.json", tmp / "warm-run", n_steps, device)
        for n in range(rounds):
            load = os.getloadavg()[0]
            plain = _run_plain(workload, tmp / f"plain{n}.json", n_steps, device)
            doctor, counted, sampled = _run_doctor(workload, tmp / f"doctor{n}.json", tmp / f"run{n}", n_steps, device)
            counted = {i for i in counted if i <= min(len(plain["wall"]), len(doctor["wall"]))}
            sides = (("plain", plain), ("doctor", doctor))
            per_round.append({
                "load1_before": round(load, 2),
                **{f"{side}_{clock}": _at(times[clock], counted) for side, times in sides for clock in ("wall", "cpu")},
                **{f"sampled_{side}": _at(times["wall"], sampled) for side, times in sides},
            })
    return per_round


# ---- statistics ---------------------------------------------------------------------------
def _ratio(doctor: list[float], plain: list[float]) -> float:
    return statistics.median(doctor) / statistics.median(plain)


def bootstrap_median_ratio(rounds: list[dict], clock: str, n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % interval of the median per-round ratio: resample rounds, and steps inside each
    chosen round, with replacement (so both the round-to-round drift and the step noise count)."""
    rng = random.Random(seed)
    medians = []
    for _ in range(n):
        ratios = []
        for r in rng.choices(rounds, k=len(rounds)):
            doctor, plain = r[f"doctor_{clock}"], r[f"plain_{clock}"]
            ratios.append(_ratio(rng.choices(doctor, k=len(doctor)), rng.choices(plain, k=len(plain))))
        medians.append(statistics.median(ratios))
    medians.sort()
    return medians[int(0.025 * n)], medians[int(0.975 * n) - 1]


def _clock_summary(rounds: list[dict], clock: str) -> dict:
    ratios = [_ratio(r[f"doctor_{clock}"], r[f"plain_{clock}"]) for r in rounds]
    low, high = bootstrap_median_ratio(rounds, clock)
    pooled_plain = [t for r in rounds for t in r[f"plain_{clock}"]]
    pooled_doctor = [t for r in rounds for t in r[f"doctor_{clock}"]]
    return {
        "per_round_ratio": [round(x, 4) for x in ratios],
        "median_ratio": round(statistics.median(ratios), 4),
        "worst_ratio": round(max(ratios), 4),
        "median_ratio_95ci": [round(low, 4), round(high, 4)],
        "pooled_ratio": round(_ratio(pooled_doctor, pooled_plain), 4),
        "median_step_ms_plain": round(statistics.median(pooled_plain) * 1e3, 3),
        "median_step_ms_doctor": round(statistics.median(pooled_doctor) * 1e3, 3),
    }


def summarize(workload: Workload, rounds: list[dict]) -> dict:
    wall = _clock_summary(rounds, "wall")
    sampled_doctor = [t for r in rounds for t in r["sampled_doctor"]]
    sampled_plain = [t for r in rounds for t in r["sampled_plain"]]
    # Process CPU time over wall time for each side's counted steps: 1.0 is a core of its own
    # (one torch thread), much less means other processes took the core.
    cpu_share = {side: [round(sum(r[f"{side}_cpu"]) / sum(r[f"{side}_wall"]), 3) for r in rounds]
                 for side in ("plain", "doctor")}
    return {
        "workload": workload.describe,
        "rounds": len(rounds),
        "steps_compared_per_round": [len(r["plain_wall"]) for r in rounds],
        **wall,
        "median_target": workload.median_target,
        "meets_median_target": wall["median_ratio"] <= workload.median_target,
        "meets_worst_target": wall["worst_ratio"] <= WORST_TARGET,
        "sampled_step_cost_ratio": round(_ratio(sampled_doctor, sampled_plain), 2) if sampled_doctor else None,
        "load1_before_each_round": [r["load1_before"] for r in rounds],
        "cpu_share_per_round": cpu_share,
        # The same comparison on process CPU time per step: it leaves out the time other
        # processes took the core (and any wait of ours for the GIL), so it shows what the
        # doctor's own code costs when the wall-time ratio is drowned by contention.
        "process_cpu_time": _clock_summary(rounds, "cpu"),
    }


# ---- driver -------------------------------------------------------------------------------
def _child(name: str, rounds: int, out: Path, device: str) -> int:
    workload = next(w for w in WORKLOADS if w.name == name)
    summary = summarize(workload, measure_workload(workload, rounds, device))
    if int(os.environ.get("RANK", "0")) == 0:  # ranks run in step; rank 0 reports
        out.write_text(json.dumps(summary))
    return 0


def _child_command(workload: Workload) -> list[str]:
    if workload.ranks > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(workload.ranks),
                "--standalone", __file__]
    return [sys.executable, __file__]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6,
                        help="alternating plain/doctor rounds per workload (5 or more for the worst-round target)")
    parser.add_argument("--only", action="append", choices=[w.name for w in WORKLOADS], help="run these workloads only")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cuda runs the workloads that take a device (the GPU check)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the result file")
    parser.add_argument("--note", default="", help="what else was running on the machine, stored with the results")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, args.rounds, args.child_out, args.device)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    import torch  # only for the device line

    results, skipped = {}, {}
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
        for workload in WORKLOADS:
            if args.only and workload.name not in args.only:
                continue
            if args.device == "cuda" and not workload.cuda:
                skipped[workload.name] = "runs on the CPU only"
                continue
            if workload.needs and importlib.util.find_spec(workload.needs) is None:
                skipped[workload.name] = f"needs {workload.needs} (pip install {workload.needs})"
                continue
            out = Path(tmp) / f"{workload.name}.json"
            started = time.perf_counter()
            env = dict(os.environ) if workload.ranks == 1 else dict(os.environ, OMP_NUM_THREADS="1")  # as torchrun
            subprocess.run([*_child_command(workload), "--child", workload.name, "--rounds", str(args.rounds),
                            "--child-out", str(out), "--device", args.device], check=True, cwd=ROOT, env=env)
            results[workload.name] = json.loads(out.read_text())
            results[workload.name]["wall_s"] = round(time.perf_counter() - started, 1)
            print(f"{workload.name}: median {results[workload.name]['median_ratio']:.4f}, "
                  f"worst {results[workload.name]['worst_ratio']:.4f}", flush=True)
    load_end = os.getloadavg()
    result = {
        "date": _dt.date.today().isoformat(),
        "device": (torch.cuda.get_device_name() if args.device == "cuda" else f"CPU ({platform.machine()})")
        + f", Python {platform.python_version()}, torch {torch.__version__}",
        "cpu_count": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in load_start],
        "load_average_at_end": [round(x, 2) for x in load_end],
        "note": args.note,
        "method": (f"per workload one process; {args.rounds} rounds of a plain run then a doctor run "
                   f"(torchdoctor.run.runner.execute, warmup {WARMUP}); a round's ratio is median(doctor)/median(plain) "
                   "over the same step indices, the measured steps the doctor did not sample"),
        "targets": {"median_ratio": MEDIAN_TARGET, "worst_ratio": WORST_TARGET},
        "workloads": results,
        "skipped": skipped,
        "all_meet_targets": all(r["meets_median_target"] and r["meets_worst_target"] for r in results.values()),
        "worst_target_judged": args.rounds >= 5,  # fewer rounds say little about the worst one
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "workloads"}, indent=2))
    missing = {k for k in skipped if args.device == "cpu"}
    return 0 if result["all_meet_targets"] and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
