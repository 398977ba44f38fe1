"""Overhead benchmark: what the doctor costs a training script, against the machine's own noise.

For each workload (benchmarks/overhead_workloads/*.py, each timing its own steps with the same
clock on both sides), in a process of its own, `--rounds` rounds of four runs in one process:

    plain A (N steps), doctor at default settings, plain B (N steps), doctor over N steps

(odd rounds run B before A). The two plain runs are an A/A pair: the same script twice, so
their difference is the noise of this machine at that moment, and every figure is given beside
its A/A twin, measured the same way on the same rounds:

- unmeasured steps: the doctor's steps that no costly probe ran in (over N steps: its windows
  are behind) against the plain runs' steps at the same indices: added µs per step (median of
  the doctor's steps minus the mean of the two plain medians) and the ratio; A/A: plain B's
  median minus plain A's. Also in process CPU time, which leaves out other processes' use of
  the core. The doctor's own figure (`doctor_cost.hook_s_per_step`, measured inside its hooks)
  is written beside it.
- the whole run at default settings (warm-up 3, 30 steps): the script's wall time from the
  call (the doctor: `execute`, probes installed first) to the end of its last step, against the
  plain runs' time to the end of the same step; its steps alone (the sum of the 33 step times);
  and the first step against the plain first step. For the ≥ 10 ms workloads also at `--steps`
  (300 unless told): N grows to warm-up + 300, and the doctor's run over N steps is one at
  default settings but its step count, timed the same way to the end of its last step.
- for a workload with evaluations: each evaluation's time, the first (the doctor samples it,
  bounded) and the others (outside every window: plain speed expected).

Intervals are 95 % bootstrap intervals of the median over rounds (rounds resampled). The load
average before each round, the CPU count and each run's CPU share go with the results, since
other processes on a shared machine move step times by more than the effects measured here.

    python benchmarks/overhead.py [--rounds 5] [--only WORKLOAD ...] [--steps 300] [--note TEXT]

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
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD_DIR = ROOT / "benchmarks" / "overhead_workloads"
RESULTS = ROOT / "benchmarks" / "results" / "overhead.json"
WARMUP, DEFAULT_STEPS = 3, 30  # torchdoctor run's defaults (model/limits.py)
UNMEASURED_US_TARGET = 20.0  # added per unmeasured step, every workload
WHOLE_RUN_TARGET = 1.02  # median whole-run ratio, steps of 10 ms or more
FIRST_STEP_TARGET = 1.5  # the long-step workload's first step against plain
# The sampled windows cost about the same time whatever the run's length: the whole-run ratio
# falls as the run grows. The ≥ 10 ms workloads state it at `--steps 300` too.
LONG_RUN_STEPS = 300


@dataclass(frozen=True)
class Workload:
    name: str
    describe: str
    steady_steps: int  # N: the plain runs' steps, and the doctor's long run
    script: str = ""  # the workload file's stem (default: the name)
    args: tuple[str, ...] = ()  # after the output path and the step count (and the device, if it takes one)
    takes_device: bool = False  # its third argument is the device (`--device cuda` runs only these)
    device: str = "cpu"
    long_steps: bool = False  # ≥ 10 ms steps: the whole-run target applies
    # the whole run also at this many measured steps (`--steps N`; the steady runs grow to it):
    # the run length at which the whole-run target is judged too, beside the default 30
    long_run_steps: int | None = None
    first_step_target: bool = False  # the long-step (closure optimizer) workload
    needs: str | None = None  # an importable module the workload requires
    ranks: int = 1  # >1: each rank is a process of torch.distributed.run, alternating in step
    extra: dict = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return WORKLOAD_DIR / f"{self.script or self.name}.py"


WORKLOADS = (
    Workload("null_step", "null step: DataLoader over a 1-column tensor, batch 1, one parameter, SGD: the hooks' cost "
             "in full", 600),
    Workload("synthetic_mlp", "MLP 256-512-512-10, batch 64, AdamW, DataLoader over tensors, 1 torch thread (~2.5 ms)",
             300, takes_device=True),
    Workload("mlp_10ms", "MLP 512-640-640-10, batch 128, AdamW, DataLoader over tensors, 1 torch thread (~10 ms)", 150,
             script="mlp_wide", args=("640",), long_steps=True, long_run_steps=LONG_RUN_STEPS),
    Workload("mlp_50ms", "MLP 512-1600-1600-10, batch 128, AdamW, DataLoader over tensors, 1 torch thread (~50 ms)", 60,
             script="mlp_wide", args=("1600",), long_steps=True, long_run_steps=LONG_RUN_STEPS),
    Workload("lbfgs_long", "LBFGS, max_iter 20 (20 closure evaluations a step), MLP 128-256-256-1, full batch 256, "
             "1 torch thread (~100 ms steps)", 40, long_steps=True, first_step_target=True),
    Workload("generate_eval", "small GPT (2 blocks, width 64) with AdamW; every 5 steps an evaluation generating "
             "48 tokens for 2 prompts, one forward per token", 60),
    Workload("small_gpt", "GPT, 4 blocks, width 64, context 64, batch 8, AdamW, grad clipping, 1 torch thread", 150),
    Workload("cnn_dataloader", "CNN conv-BN-ReLU x3, batch 32, SGD momentum, DataLoader(num_workers=0) over a "
             "map-style Dataset with per-sample normalise/flip, 1 torch thread", 150),
    Workload("lightning_loop", "Lightning Trainer, MLP 128-512-512-10, batch 64, Adam in automatic optimization "
             "(closure), step times from a callback, 1 torch thread", 200, needs="lightning"),
    Workload("compiled_mlp", "the synthetic MLP under torch.compile (Inductor, C++ on a CPU), its first steps compiling: "
             "the compile probe's cost on a compiled step (issue 26)", 300, script="synthetic_mlp", args=("compile",),
             takes_device=True),
    Workload("ddp_mlp", "2 ranks (torch.distributed.run, gloo): DDP MLP 256-512-512-10, batch 64 per rank, "
             "DistributedSampler, AdamW, 1 torch thread per rank; rank 0's step times", 150, ranks=2),
)


# ---- one workload, in its own process ---------------------------------------------------
def _argv(workload: Workload, out: Path, n_steps: int) -> list[str]:
    return [str(out), str(n_steps), *([workload.device] if workload.takes_device else []), *workload.args]


def _plain(workload: Workload, out: Path, n_steps: int) -> dict:
    saved = sys.argv[:]
    sys.argv[:] = [str(workload.path), *_argv(workload, out, n_steps)]
    called = time.perf_counter()
    try:
        runpy.run_path(str(workload.path), run_name="__main__")
    finally:
        sys.argv[:] = saved
    times = json.loads(out.read_text())
    times["called"] = called
    return times


def _doctor(workload: Workload, out: Path, run_dir: Path, steps: int, script_steps: int) -> tuple[dict, object]:
    from torchdoctor.run.runner import RunRequest, execute

    run_dir.mkdir()
    request = RunRequest(target=str(workload.path), args=_argv(workload, out, script_steps), steps=steps,
                         warmup=WARMUP)
    called = time.perf_counter()
    record = execute(request, run_dir)  # the run stage alone: the evidence after it is not timed
    if record.run.status != "step-limit":
        raise RuntimeError(f"{workload.name}: doctor run ended {record.run.status!r}: {record.run.error}")
    times = json.loads(out.read_text())
    times["called"] = called
    return times, record


def _median_at(times: list[float], indices: list[int]) -> float:
    return statistics.median(times[i - 1] for i in indices)


def _steps_until(times: dict, k: int) -> float | None:
    """Wall time of steps 1..k: a run the doctor stopped inside step k ended with it."""
    wall = times["wall"]
    if len(wall) >= k:
        return sum(wall[:k])
    if len(wall) == k - 1:
        return times["end"] - times["start"]
    return None


def _to_step(times: dict, k: int) -> float | None:
    """Wall time from the call to the end of step k: the script's set-up (and the doctor's
    install) included."""
    steps = _steps_until(times, k)
    return None if steps is None else times["start"] - times["called"] + steps


def measure_round(workload: Workload, tmp: Path, n: int, flip: bool) -> dict:
    total = WARMUP + DEFAULT_STEPS
    load = os.getloadavg()[0]
    first, second = ("b", "a") if flip else ("a", "b")
    runs = {}
    runs[first] = _plain(workload, tmp / f"plain-{first}.json", n)
    default, default_record = _doctor(workload, tmp / "doctor-default.json", tmp / "run-default", DEFAULT_STEPS,
                                      total + 5)
    runs[second] = _plain(workload, tmp / f"plain-{second}.json", n)
    steady, steady_record = _doctor(workload, tmp / "doctor-steady.json", tmp / "run-steady", n - WARMUP, n + 5)
    a, b = runs["a"], runs["b"]
    shortest = min(len(a["wall"]), len(b["wall"]), len(steady["wall"]))
    unmeasured = [s.index for s in steady_record.steps if not s.probes and not s.sampled and not s.warmup
                  and s.index <= shortest]
    out = {"load1_before": round(load, 2), "unmeasured_steps": len(unmeasured)}
    for clock in ("wall", "cpu"):
        pa, pb, d = (_median_at(x[clock], unmeasured) for x in (a, b, steady))
        out[f"unmeasured_{clock}_s"] = {"a": pa, "b": pb, "doctor": d}
    cost = steady_record.doctor_cost
    out["doctor_reported_hook_s"] = cost.hook_s_per_step if cost is not None else None
    out["cpu_share"] = {side: round(sum(x["cpu"]) / sum(x["wall"]), 3) for side, x in
                        (("a", a), ("b", b), ("doctor", steady))}
    out["whole_run_s"] = {"a": _to_step(a, total), "b": _to_step(b, total), "doctor": _to_step(default, total)}
    out["steps_s"] = {side: _steps_until(x, total) for side, x in (("a", a), ("b", b), ("doctor", default))}
    out["first_step_s"] = {side: x["wall"][0] for side, x in (("a", a), ("b", b), ("doctor", default))}
    out["default_doctor_cost"] = _cost_summary(default_record)
    if workload.long_run_steps is not None:
        # the steady run is `--steps n - WARMUP` at default settings: the whole run at that length
        out["long_run_steps"] = n - WARMUP
        out["long_run_s"] = {"a": _to_step(a, n), "b": _to_step(b, n), "doctor": _to_step(steady, n)}
        out["long_run_doctor_cost"] = _cost_summary(steady_record)
    if "evals" in a:
        out["evals_s"] = {side: x.get("evals", []) for side, x in (("a", a), ("b", b), ("doctor", default))}
    return out


def _cost_summary(record) -> dict | None:
    cost = record.doctor_cost
    if cost is None:
        return None
    return {"hook_s_per_step": cost.hook_s_per_step, "first_step_ratio": cost.first_step_ratio,
            "added_s": cost.added_s, "steps_s": cost.steps_s,
            "probes": {p.probe: {"steps": len(p.steps), "partial": len(p.partial), "skipped": len(p.skipped),
                                 "step_ratio": p.step_ratio, "added_s": p.added_s} for p in cost.probes}}


def steady_steps(workload: Workload) -> int:
    """N: the plain runs' steps and the doctor's steady run (long enough for `long_run_steps`)."""
    if workload.long_run_steps is None:
        return workload.steady_steps
    return max(workload.steady_steps, WARMUP + workload.long_run_steps)


def measure_workload(workload: Workload, rounds: int) -> list[dict]:
    sys.path.insert(0, str(WORKLOAD_DIR))  # the workloads' shared step clock, for both sides alike
    out = []
    n = steady_steps(workload)
    with tempfile.TemporaryDirectory(prefix=f"overhead-{workload.name}-") as tmp:
        tmp = Path(tmp)
        # A discarded round first: imports, the allocator and the doctor's own modules warm up.
        measure_round(workload, _fresh(tmp / "warm"), n, False)
        for i in range(rounds):
            out.append(measure_round(workload, _fresh(tmp / f"round{i}"), n, flip=i % 2 == 1))
    return out


def _fresh(path: Path) -> Path:
    path.mkdir()
    return path


# ---- statistics ---------------------------------------------------------------------------
def _interval(values: list[float], n: int = 2000, seed: int = 0) -> list[float]:
    """95 % bootstrap interval of the median of `values` (one per round)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n))
    return [medians[int(0.025 * n)], medians[int(0.975 * n) - 1]]


def _figure(values: list[float], digits: int) -> dict:
    low, high = _interval(values)
    return {"median": round(statistics.median(values), digits), "ci95": [round(low, digits), round(high, digits)],
            "per_round": [round(v, digits) for v in values]}


def _pair(rounds: list[dict], key: str, diff_us: bool) -> dict:
    """The doctor against the plain pair, and the A/A pair against itself, per round."""
    doctor, aa = [], []
    for r in rounds:
        x = r[key]
        if x["a"] is None or x["b"] is None or x["doctor"] is None:
            continue
        plain = (x["a"] + x["b"]) / 2
        if diff_us:
            doctor.append((x["doctor"] - plain) * 1e6)
            aa.append((x["b"] - x["a"]) * 1e6)
        else:
            doctor.append(x["doctor"] / plain)
            aa.append(x["b"] / x["a"])
    if not doctor:
        return {}
    digits = 2 if diff_us else 4
    return {"doctor": _figure(doctor, digits), "a_a": _figure(aa, digits)}


def summarize(workload: Workload, rounds: list[dict]) -> dict:
    unmeasured_us = _pair(rounds, "unmeasured_wall_s", diff_us=True)
    summary = {
        "workload": workload.describe,
        "rounds": len(rounds),
        "plain_step_ms": round(statistics.median((r["unmeasured_wall_s"]["a"] + r["unmeasured_wall_s"]["b"]) / 2
                                                 for r in rounds) * 1e3, 3),
        "unmeasured_steps_per_round": [r["unmeasured_steps"] for r in rounds],
        "unmeasured_added_us": unmeasured_us,
        "unmeasured_ratio": _pair(rounds, "unmeasured_wall_s", diff_us=False),
        "unmeasured_added_cpu_us": _pair(rounds, "unmeasured_cpu_s", diff_us=True),
        "doctor_reported_hook_us": _figure([r["doctor_reported_hook_s"] * 1e6 for r in rounds
                                            if r["doctor_reported_hook_s"] is not None], 2),
        "whole_run_ratio": _pair(rounds, "whole_run_s", diff_us=False),
        "whole_run_added_ms": {k: {**v, "median": round(v["median"] / 1e3, 3), "ci95": [round(c / 1e3, 3) for c in
                                                                                      v["ci95"]],
                                   "per_round": [round(p / 1e3, 3) for p in v["per_round"]]}
                               for k, v in _pair(rounds, "whole_run_s", diff_us=True).items()},
        "steps_ratio": _pair(rounds, "steps_s", diff_us=False),
        "first_step_ratio": _pair(rounds, "first_step_s", diff_us=False),
        "plain_whole_run_s": round(statistics.median((r["whole_run_s"]["a"] + r["whole_run_s"]["b"]) / 2
                                                     for r in rounds), 3),
        "load1_before_each_round": [r["load1_before"] for r in rounds],
        "cpu_share_per_round": [r["cpu_share"] for r in rounds],
        "doctor_cost_at_default_settings": [r["default_doctor_cost"] for r in rounds],
    }
    if "evals_s" in rounds[0]:
        summary["evaluations"] = _evals(rounds)
    if "long_run_s" in rounds[0]:
        summary["long_run"] = {
            "steps": rounds[0]["long_run_steps"], "warmup": WARMUP,
            "whole_run_ratio": _pair(rounds, "long_run_s", diff_us=False),
            "plain_whole_run_s": round(statistics.median((r["long_run_s"]["a"] + r["long_run_s"]["b"]) / 2
                                                         for r in rounds), 3),
            "doctor_cost": [r["long_run_doctor_cost"] for r in rounds]}
    summary["meets_unmeasured_target"] = target_verdict(unmeasured_us, UNMEASURED_US_TARGET)
    if workload.long_steps:
        summary["meets_whole_run_target"] = target_verdict(summary["whole_run_ratio"], WHOLE_RUN_TARGET)
    if "long_run" in summary:
        summary[f"meets_whole_run_target_at_{summary['long_run']['steps']}_steps"] = \
            target_verdict(summary["long_run"]["whole_run_ratio"], WHOLE_RUN_TARGET)
    if workload.first_step_target:
        summary["meets_first_step_target"] = target_verdict(summary["first_step_ratio"], FIRST_STEP_TARGET)
    return summary


def target_verdict(pair: dict, target: float) -> str:
    """"met" only when the whole 95 % interval of the doctor's figure is within the target, "not met" when
    all of it is beyond; otherwise the machine's noise decides nothing, and the verdict says so with the
    interval and the A/A pair's beside it (a median of -9 µs inside an A/A spread of hundreds is no pass)."""
    doctor, a_a = pair.get("doctor"), pair.get("a_a") or {}
    if not doctor:
        return "not measured"
    low, high = doctor["ci95"]
    if high <= target:
        return "met"
    if low > target:
        return "not met"
    return (f"not decided: the interval {low:g} to {high:g} holds the target {target:g} "
            f"(A/A {a_a.get('ci95', [None, None])[0]} to {a_a.get('ci95', [None, None])[1]})")


def _evals(rounds: list[dict]) -> dict:
    """Each evaluation's time against the plain runs' same evaluation: the first (sampled by
    the doctor, within its bound) and the rest (outside every window)."""
    out = {}
    for name, pick in (("first", lambda e: e[:1]), ("later", lambda e: e[1:])):
        per_round = {"doctor": [], "a_a": []}
        for r in rounds:
            e = r["evals_s"]
            n = min(len(e["a"]), len(e["b"]), len(e["doctor"]))
            a, b, d = (pick(e[k][:n]) for k in ("a", "b", "doctor"))
            if not a:
                continue
            ma, mb, md = statistics.median(a), statistics.median(b), statistics.median(d)
            per_round["doctor"].append(md / ((ma + mb) / 2))
            per_round["a_a"].append(mb / ma)
        if per_round["doctor"]:
            out[f"{name}_ratio"] = {k: _figure(v, 4) for k, v in per_round.items()}
    return out


# ---- driver -------------------------------------------------------------------------------
def _child(name: str, rounds: int, out: Path, long_run_steps: int, device: str) -> int:
    workload = replace(next(w for w in WORKLOADS if w.name == name), device=device)
    if workload.long_run_steps is not None:
        workload = replace(workload, long_run_steps=long_run_steps or None)
    summary = summarize(workload, measure_workload(workload, rounds))
    if int(os.environ.get("RANK", "0")) == 0:  # ranks run in step; rank 0 reports
        out.write_text(json.dumps(summary))
    return 0


def _child_command(workload: Workload) -> list[str]:
    if workload.ranks > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(workload.ranks),
                "--standalone", __file__]
    return [sys.executable, __file__]


def _device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}), CPU {platform.machine()}"
    return f"CPU ({platform.machine()})"


def _verdicts(results: dict) -> dict:
    return {name: {k: v for k, v in r.items() if k.startswith("meets_")} for name, r in results.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of plain A, doctor, plain B, doctor per workload")
    parser.add_argument("--only", action="append", choices=[w.name for w in WORKLOADS], help="run these workloads only")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the result file")
    parser.add_argument("--note", default="", help="what else was running on the machine, stored with the results")
    parser.add_argument("--steps", type=int, default=LONG_RUN_STEPS,
                        help="the ≥ 10 ms workloads' whole run is also measured at this many steps (default "
                             f"{LONG_RUN_STEPS}; 0: only at the default {DEFAULT_STEPS})")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: only the workloads that take a device, on the GPU (the GPU check's form)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, args.rounds, args.child_out, args.steps, args.device)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (the intervals need rounds to resample)")

    import torch  # only for the device line

    results, skipped = {}, {}
    load_start = os.getloadavg()
    started_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
        for workload in WORKLOADS:
            if args.only and workload.name not in args.only:
                continue
            if args.device != "cpu" and not workload.takes_device:
                skipped[workload.name] = f"runs on the CPU only (--device {args.device})"
                continue
            if workload.needs and importlib.util.find_spec(workload.needs) is None:
                skipped[workload.name] = f"needs {workload.needs} (pip install {workload.needs})"
                continue
            out = Path(tmp) / f"{workload.name}.json"
            started = time.perf_counter()
            env = dict(os.environ) if workload.ranks == 1 else dict(os.environ, OMP_NUM_THREADS="1")  # as torchrun
            subprocess.run([*_child_command(workload), "--child", workload.name, "--rounds", str(args.rounds),
                            "--steps", str(args.steps), "--device", args.device, "--child-out", str(out)],
                           check=True, cwd=ROOT, env=env)
            r = results[workload.name] = json.loads(out.read_text())
            r["wall_s"] = round(time.perf_counter() - started, 1)
            u, aa = r["unmeasured_added_us"].get("doctor", {}), r["unmeasured_added_us"].get("a_a", {})
            w = r["whole_run_ratio"].get("doctor", {})
            long = r.get("long_run", {})
            at = (f"; at {long['steps']} steps x{long['whole_run_ratio'].get('doctor', {}).get('median')}"
                  if long else "")
            print(f"{workload.name}: unmeasured +{u.get('median')} µs/step {u.get('ci95')} (A/A {aa.get('median')} "
                  f"{aa.get('ci95')}); whole run x{w.get('median')} {w.get('ci95')}{at}", flush=True)
    load_end = os.getloadavg()
    verdicts = _verdicts(results)
    result = {
        "date": _dt.date.today().isoformat(),
        "device": f"{_device_name(args.device)}, Python {platform.python_version()}, torch {torch.__version__}",
        "cpu_count": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in load_start],
        "load_average_at_end": [round(x, 2) for x in load_end],
        "wall_s": round(time.perf_counter() - started_all, 1),
        "note": args.note,
        "method": __doc__.split("\n\n", 2)[1:3],
        "targets": {"unmeasured_added_us": UNMEASURED_US_TARGET, "whole_run_ratio_steps_10ms_or_more": WHOLE_RUN_TARGET,
                    "long_step_first_step_ratio": FIRST_STEP_TARGET},
        "whole_run_steps": {"default": DEFAULT_STEPS, "long_run": args.steps or None, "warmup": WARMUP},
        "verdicts": verdicts,
        "workloads": results,
        "skipped": skipped,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("workloads", "method")}, indent=2))
    return 0 if all(all(v.values()) for v in verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
