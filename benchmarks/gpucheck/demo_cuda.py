"""GPU check step `demo`: the seed's nested-loop prompt encoder (examples/demo_prompt_encoder.py)
on CUDA. The doctor's estimate for the loop (TD301) and its other findings, next to the gain
measured for examples/demo_prompt_encoder_fixed.py. The first reference report measured 2.2x
for this fix on an RTX 4090; that is a reference point, not a target this step asserts.

The original and the fixed script run alternately, each a fresh `torchdoctor run` process;
the runs of each are pooled (tune_accuracy does the same), and the ratio carries the 95 %
noise band of the pooled runs."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks.gpucheck.plan import DEMO, ROOT
from torchdoctor.rules.noise import change, throughput
from torchdoctor.diagnosis.run import analyze
from torchdoctor.pipeline import load_record
from torchdoctor.tune.plan import FIX, Trial
from torchdoctor.tune.trials import TrialSettings, run_trial

REFERENCE = {"speedup": 2.2, "device": "RTX 4090",
             "source": "reference report 001: the user's measurement after the fix (loop, .item(), eval transfers)"}


def _finding(f) -> dict:
    return {"code": f.code, "line": f.location.line if f.location else None, "severity": f.severity.value,
            "estimated_speedup": f.estimated_speedup, "estimate_basis": f.estimate_basis}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpucheck.demo_cuda")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args(argv)
    result = {"date": _dt.date.today().isoformat(),
              "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
              "torch": torch.__version__, "reference": REFERENCE, "runs": [], "complete": False,
              "method": f"the original and the fixed script alternately, {args.repeats} `torchdoctor run` process(es) "
                        f"each, {args.steps} steps after {args.warmup} warmup; measured steps pooled per script"}
    records: dict[str, list] = {"original": [], "fixed": []}
    args.out.write_text(json.dumps(result, indent=2) + "\n")  # stopped before the first run ends: it says so
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):  # the result is complete after each pair: a stopped step keeps it
            for name, script in zip(records, DEMO):
                settings = TrialSettings(str(ROOT / "examples" / script), [], False, steps=args.steps, warmup=args.warmup, max_seconds=120.0)
                print(f"running {script} ({r + 1}/{args.repeats})", flush=True)
                run = run_trial(Trial(name, {}, FIX), settings, Path(tmp) / f"{name}{r}")
                result["runs"].append({"script": script, "ok": run.ok, "seconds": round(run.seconds, 1),
                                       "error": None if run.ok else (run.error or "")[-400:]})
                if run.ok:
                    records[name].append(load_record(run.run_dir))
                args.out.write_text(json.dumps(result, indent=2) + "\n")
            if records["original"] and records["fixed"]:
                pairs = min(len(records["original"]), len(records["fixed"]))
                result.update(compare(records), pairs=pairs, complete=pairs == args.repeats)
                args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result["complete"] else 1


def compare(records: dict[str, list]) -> dict:
    """The doctor's estimates on the original runs, and the measured gain of the fixed script."""
    reports = [analyze(record) for record in records["original"]]
    loop = [f.estimated_speedup for rep in reports for f in rep.findings if f.code == "TD301" and f.estimated_speedup]
    gain = change(throughput(*records["original"]), throughput(*records["fixed"]))
    return {
        "cuda_used": all(r.environment.cuda_used for rs in records.values() for r in rs),
        "findings": [_finding(f) for f in reports[0].findings],
        "loop_estimate": round(statistics.median(loop), 3) if loop else None,
        "loop_estimates_per_run": [round(v, 3) for v in loop],
        "measured": {"ratio": round(gain.ratio, 3), "noise": round(gain.noise, 3) if gain.noise is not None else None,
                     "significant": gain.significant, "measure": gain.measure, "describe": gain.describe()},
        "step_ms": {name: round(statistics.median(s.duration_s for r in rs for s in r.measured_steps) * 1e3, 3)
                    for name, rs in records.items()},
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
