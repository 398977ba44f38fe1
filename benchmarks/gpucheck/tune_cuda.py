"""GPU check step `tune`: `torchdoctor tune` on the examples where a CUDA knob applies (plan.TUNE_PLAN):
each trial's measured gain next to the estimate of the finding it tests, and which trials the
tune would have planned from the baseline's findings on its own. The examples share the
budget; the file is rewritten after each one, so a step stopped at its budget keeps the rest."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.gpucheck.plan import REHEARSAL_TUNE_PLAN, ROOT, TUNE_PLAN
from torchdoctor.diagnosis.run import analyze
from torchdoctor.tune.report import ESTIMATE_TOLERANCE, estimate_checks
from torchdoctor.tune.plan import FIX, Trial, plan_trials
from torchdoctor.tune.trials import TrialSettings
from torchdoctor.tune.tuner import Tuner

MIN_SHARE_S = 20.0  # less than this per example cannot fit a baseline and one trial
# A baseline and one trial on the H200 (2026-11-28): ~15 s each. An even share of a short budget
# gave every example less than that, and the plan's first examples were skipped for it.
ONE_TRIAL_S = 32.0


def share_of(remaining_s: float, examples_left: int) -> float:
    """The next example's seconds: an even share, or a baseline and one trial if that is more
    and the budget still holds it (the plan lists its examples most wanted first)."""
    return max(remaining_s / max(1, examples_left), min(remaining_s, ONE_TRIAL_S))


def _requires_cuda(example: str) -> bool:
    return "# torchdoctor-requires: cuda" in (ROOT / "examples" / example).read_text()


def _trials(spec) -> list[Trial]:
    return [Trial(text, dict(part.split("=", 1) for part in text.split()), FIX, list(codes)) for text, codes in spec]


def tune_row(example: str, spec, budget_s: float, steps: int, warmup: int, work: Path) -> dict:
    settings = TrialSettings(str(ROOT / "examples" / example), [], False, steps=steps, warmup=warmup, max_seconds=min(90.0, budget_s))
    outcome = Tuner(settings, work, budget_s=budget_s, trials=_trials(spec)).run()
    if not outcome.baseline.ok:
        return {"example": example, "error": f"baseline failed: {outcome.baseline.result.error}"}
    record = outcome.baseline.record
    report = analyze(record)
    trials = []
    for t in outcome.trials:
        gain = outcome.gain(t)
        trials.append({"trial": t.result.trial.name, "tests": t.result.trial.addresses, "ok": t.ok,
                       "seconds": round(t.result.seconds, 1),
                       "speedup": round(gain.ratio, 3) if gain else None,
                       "noise": round(gain.noise, 3) if gain and gain.noise is not None else None,
                       "significant": bool(gain and gain.significant), "measured": gain.describe() if gain else None,
                       "error": None if t.ok else (t.result.error or "")[-400:]})
    return {
        "example": example, "cuda_used": record.environment.cuda_used, "device": record.environment.device_name,
        "baseline_findings": [f"{f.code}@{f.location.line if f.location else '-'}:{f.severity.value}:"
                              f"{f.estimated_speedup}" for f in report.findings],
        "planned_by_findings": [t.name for t in plan_trials(report, record, cuda=record.environment.cuda_used)],
        "trials": trials,
        "estimates": [{"finding": c.code, "where": c.where, "trial": c.trial, "estimated": c.estimated,
                       "measured": round(c.measured, 3) if c.measured else None, "significant": c.significant,
                       "agreement": round(c.agreement, 3) if c.agreement else None,
                       "within_tolerance": c.agreement <= ESTIMATE_TOLERANCE if c.agreement else None}
                      for c in estimate_checks(outcome)],
        "skipped_trials": outcome.skipped,
        "baseline_drift": (outcome.gain(outcome.baseline_repeat).describe()
                           if outcome.baseline_repeat is not None and outcome.gain(outcome.baseline_repeat) else None),
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpucheck.tune_cuda")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--budget", type=float, default=110.0, help="seconds for all examples together")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rehearse", action="store_true", help="the small CPU plan (REHEARSAL_TUNE_PLAN)")
    args = p.parse_args(argv)
    plan = REHEARSAL_TUNE_PLAN if args.rehearse else TUNE_PLAN
    cuda = torch.cuda.is_available()
    result = {"date": _dt.date.today().isoformat(), "device": torch.cuda.get_device_name() if cuda else "cpu",
              "torch": torch.__version__, "estimate_tolerance": ESTIMATE_TOLERANCE,
              "method": f"`tune` with the trials of plan.py, {args.steps} steps after {args.warmup} warmup per trial, "
                        "each trial a fresh process; speedups are throughput ratios to the baseline with the "
                        "95 % noise band of the two runs; one tune per example",
              "complete": False, "rows": []}
    deadline = time.monotonic() + args.budget
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (example, spec) in enumerate(plan):
            share = share_of(deadline - time.monotonic(), len(plan) - i)
            if _requires_cuda(example) and not cuda:
                result["rows"].append({"example": example, "skipped": "needs CUDA"})
            elif share < MIN_SHARE_S:
                result["rows"].append({"example": example, "skipped": f"no time left ({share:.0f} s for it)"})
            else:
                print(f"tuning {example} ({share:.0f} s)", flush=True)
                result["rows"].append(tune_row(example, spec, share, args.steps, args.warmup, Path(tmp) / example))
            args.out.write_text(json.dumps(result, indent=2) + "\n")
    result["complete"] = True
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if all("error" not in r for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
