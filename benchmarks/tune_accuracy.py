"""Tune accuracy: on each planted example that has a hand-fixed version (`*_fixed.py`), does
`torchdoctor tune` find knobs that recover at least 80 % of the hand fix's speedup, and is
each tested estimate within a factor 1.5 of the measured gain?

Every run is a fresh process with the same steps. Writes benchmarks/results/tune.json and
prints a table. Run on an idle machine: the numbers are timings.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import re
import sys
import tempfile
from pathlib import Path

import torch

from torchdoctor.compare.noise import change, throughput
from torchdoctor.rundir import load_record
from torchdoctor.tune.plan import COMBINED, FIX, UPPER_BOUND, Trial
from torchdoctor.tune.report import ESTIMATE_TOLERANCE, estimate_checks
from torchdoctor.tune.trials import TrialSettings, run_trial
from torchdoctor.tune.tuner import Tuner

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
RESULTS = ROOT / "benchmarks" / "results" / "tune.json"
STEPS, WARMUP = 60, 5
RECOVERY_TARGET = 0.8


def pairs() -> list[tuple[Path, Path]]:
    found = []
    for fixed in sorted(EXAMPLES.glob("*_fixed.py")):
        match = re.search(r"#\s*torchdoctor-fixes:\s*(\S+)", fixed.read_text())
        if match and "# torchdoctor-requires: cuda" not in fixed.read_text():
            found.append((EXAMPLES / match.group(1), fixed))
    return found


def best_trial(outcome, kinds):
    best, best_gain = None, None
    for trial in outcome.trials:
        gain = outcome.gain(trial)
        if trial.result.trial.kind in kinds and gain is not None and (best_gain is None or gain.ratio > best_gain.ratio):
            best, best_gain = trial, gain
    return best, best_gain


def measure(planted: Path, fixed: Path, work: Path) -> dict:
    settings = TrialSettings(str(planted), [], False, STEPS, WARMUP, 300.0)
    outcome = Tuner(settings, work / "tune").run()
    if not outcome.baseline.ok:
        return {"example": planted.name, "error": outcome.baseline.result.error}
    fixed_result = run_trial(Trial("fixed", {}, "fixed"), TrialSettings(str(fixed), [], False, STEPS, WARMUP, 300.0),
                             work / "fixed")
    fixed_gain = change(throughput(outcome.baseline.record), throughput(load_record(fixed_result.run_dir)))
    trial, gain = best_trial(outcome, (FIX, COMBINED))
    kind = "fix"
    if trial is None or not gain.significant:
        trial, gain = best_trial(outcome, (UPPER_BOUND,))
        kind = "upper bound"
    recovered = None
    if gain is not None and fixed_gain.ratio > 1.0 and fixed_gain.significant:
        recovered = (gain.ratio - 1.0) / (fixed_gain.ratio - 1.0)
    if not (fixed_gain.significant and fixed_gain.ratio > 1.0):
        verdict = "n/a: the hand fix itself gives no measurable gain on this device"
    elif recovered is not None and recovered >= RECOVERY_TARGET:
        verdict = "recovered" + (" (by an upper-bound knob)" if kind == "upper bound" else "")
    else:
        verdict = "not recovered"
    checks = [
        {"finding": c.code, "trial": c.trial, "estimated": c.estimated,
         "measured": round(c.measured, 3) if c.measured else None,
         "agreement": round(c.agreement, 3) if c.agreement else None,
         "within_tolerance": c.agreement <= ESTIMATE_TOLERANCE if c.agreement else None}
        for c in estimate_checks(outcome)
    ]
    return {
        "example": planted.name, "fixed": fixed.name,
        "fixed_speedup": round(fixed_gain.ratio, 3), "fixed_noise": fixed_gain.noise,
        "tune_best": trial.result.trial.name if trial else None, "tune_best_kind": kind,
        "tune_speedup": round(gain.ratio, 3) if gain else None,
        "recovered": round(recovered, 3) if recovered is not None else None,
        "meets_recovery_target": recovered is not None and recovered >= RECOVERY_TARGET,
        "verdict": verdict,
        "trials": [{"trial": t.result.trial.name, "kind": t.result.trial.kind, "ok": t.ok,
                    "speedup": round(outcome.gain(t).ratio, 3) if outcome.gain(t) else None,
                    "error": None if t.ok else (t.result.error or "")[-300:]} for t in outcome.trials],
        "estimates": checks,
    }


def main() -> int:
    rows = []
    for planted, fixed in pairs():
        with tempfile.TemporaryDirectory() as tmp:
            print(f"tuning {planted.name} (reference {fixed.name}) ...", file=sys.stderr, flush=True)
            rows.append(measure(planted, fixed, Path(tmp)))
    judged = [r for r in rows if "verdict" in r and not r["verdict"].startswith("n/a")]
    checks = [e for r in rows for e in r.get("estimates", []) if e["within_tolerance"] is not None]
    result = {
        "date": _dt.date.today().isoformat(),
        "summary": {
            "recovered": f"{sum(r['meets_recovery_target'] for r in judged)}/{len(judged)} examples whose hand fix "
                         f"is measurable here (target: at least {RECOVERY_TARGET:.0%} of its speedup)",
            "estimates_within_tolerance": f"{sum(e['within_tolerance'] for e in checks)}/{len(checks)} "
                                          f"(within a factor {ESTIMATE_TOLERANCE} of the measured gain)",
        },
        "device": f"CPU ({platform.machine()}, Python {platform.python_version()}, torch {torch.__version__})",
        "method": f"`tune` with default planning, {STEPS} steps after {WARMUP} warmup per trial, each trial a fresh "
                  "process; the fixed script run the same way; speedups are throughput ratios to tune's baseline",
        "rows": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'example':<26} {'fixed':>7} {'tune best':<42} {'tune':>7} {'recovered':>9}  estimates (est/measured)")
    print("summary:", json.dumps(result["summary"]))
    for r in rows:
        if "error" in r:
            print(f"{r['example']:<26} baseline failed: {r['error'][-120:]}")
            continue
        est = "; ".join(f"{e['finding']} {e['estimated'] or '-'}/{e['measured']}" for e in r["estimates"]) or "-"
        rec = f"{r['recovered']:.0%}" if r["recovered"] is not None else "n/a"
        best = f"{r['tune_best']} [{r['tune_best_kind']}]"
        print(f"{r['example']:<26} {r['fixed_speedup']:>6.2f}x {best:<42} {r['tune_speedup'] or 0:>6.2f}x {rec:>9}  "
              f"{est}  [{r['verdict']}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
