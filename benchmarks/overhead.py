"""Overhead benchmark: steady-state step time of a CPU workload with and without the
doctor, alternating runs in one session. The workload times its own steps, so both
sides use the same clock. Writes benchmarks/results/overhead.json.

Outside the sampled steps (DESIGN.md §5 budget: ≤ 2 %) and the sampled steps' own cost
are reported separately.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "benchmarks" / "overhead_workload.py"
RESULTS = ROOT / "benchmarks" / "results" / "overhead.json"
ROUNDS = 4
STEPS, WARMUP = 100, 3
SAMPLED = set(range(WARMUP + 2, WARMUP + 5))  # the session's dispatch-sampled steps (1-based)


def run_once(with_doctor: bool, tmp: Path, n: int) -> list[float]:
    out = tmp / f"times-{with_doctor}-{n}.json"
    if with_doctor:
        cmd = [sys.executable, "-m", "torchdoctor", "run", "--steps", str(STEPS), "--warmup", str(WARMUP),
               "--out", str(tmp / f"run-{n}"), str(WORKLOAD), str(out)]
    else:
        cmd = [sys.executable, str(WORKLOAD), str(out)]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    return json.loads(out.read_text())


def main() -> int:
    plain, doctor, sampled = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(ROUNDS):  # alternate, so drifts in machine load hit both sides
            times = run_once(False, Path(tmp), n)
            plain += times[WARMUP + 5: WARMUP + STEPS]
            times = run_once(True, Path(tmp), n)
            doctor += [t for i, t in enumerate(times, 1) if i > WARMUP + 5 and i not in SAMPLED]
            sampled += [t for i, t in enumerate(times, 1) if i in SAMPLED]
    p, d, s = statistics.median(plain), statistics.median(doctor), statistics.median(sampled)
    result = {
        "date": _dt.date.today().isoformat(),
        "device": f"CPU ({platform.machine()}, {platform.python_version()})",
        "workload": "MLP 256-512-512-10, batch 64, AdamW, DataLoader, 1 torch thread",
        "rounds": ROUNDS,
        "median_step_ms_plain": round(p * 1e3, 4),
        "median_step_ms_with_doctor": round(d * 1e3, 4),
        "overhead_outside_sampled_steps": round(d / p - 1, 4),
        "median_sampled_step_ms": round(s * 1e3, 4),
        "sampled_step_cost_ratio": round(s / p, 2),
        "target": "overhead_outside_sampled_steps <= 0.02",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result["overhead_outside_sampled_steps"] <= 0.02 else 1


if __name__ == "__main__":
    sys.exit(main())
