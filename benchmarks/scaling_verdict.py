"""Scaling verdict (TD606): what the model claims against what one rank alone measures.

For each DDP example and rank count (2 and 4 CPU ranks under gloo), `torchdoctor run
--nproc-per-node N --one-rank always` runs the job, then one rank alone in the same command.
The report's TD606 carries both numbers: `modelled_ratio`, the job's throughput over the model's
one rank (a rank's step minus its exposed communication: what TD606 printed before issue 23,
which assumes the ranks share no compute), and `throughput_vs_one_rank`, the job's samples/s over
the one-rank run's (measured). A second, separate `torchdoctor run --nproc-per-node 1` of the
same script gives an independent one-rank figure to check the in-command one against.

Writes benchmarks/results/scaling_verdict.json with the machine's load and CPU count: on a
machine with fewer cores than ranks the model's error is the point, and the load says how far
the measured numbers can move between runs.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "scaling_verdict.json"
WORKLOADS = ["examples/ddp_clean.py", "examples/ddp_grad_accum.py"]
RANKS = [2, 4]
LIMITS = ["--steps", "20", "--warmup", "2", "--max-seconds", "120"]


def doctor(*args: str) -> dict:
    # the job's ranks run one thread each (torchrun's default, which `run` applies); the separate
    # one-rank run must too, or it measures a different thing (two threads contending on a busy core)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    env.pop("TORCHDOCTOR_SIMULATED_LINK_GBPS", None)
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", *LIMITS, "--format", "json", *args],
                          capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout)


def samples_per_s(report: dict) -> float | None:
    return report["summary"]["samples_per_s"]


def main() -> int:
    load_before, rows = os.getloadavg(), []
    with tempfile.TemporaryDirectory(prefix="td-scaling-") as tmp:
        for workload in WORKLOADS:
            alone = doctor("--nproc-per-node", "1", "--out", f"{tmp}/alone-{Path(workload).stem}", workload)
            for n in RANKS:
                started = time.monotonic()
                report = doctor("--nproc-per-node", str(n), "--one-rank", "always", "--out",
                                f"{tmp}/{Path(workload).stem}-{n}", workload)
                verdict = next(f for f in report["findings"] if f["code"] == "TD606")
                ev = verdict["evidence"]
                separate = samples_per_s(report) / samples_per_s(alone) if samples_per_s(alone) else None
                row = {"workload": workload, "ranks": n, "claimed_by_model": ev["modelled_ratio"],
                       "measured": ev["throughput_vs_one_rank"], "band": ev.get("band"),
                       "measured_separately": round(separate, 3) if separate else None,
                       "model_over_measured": round(ev["modelled_ratio"] / ev["throughput_vs_one_rank"], 2),
                       "severity": verdict["severity"], "shared_compute": ev.get("shared_compute"),
                       "seconds": round(time.monotonic() - started, 1)}
                rows.append(row)
                print(f"{workload} x{n}: model claims {row['claimed_by_model']:.2f}x, measured {row['measured']:.2f}x "
                      f"(separately {row['measured_separately']}), {row['severity']}", flush=True)
    result = {"date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
              "usable_cpus": len(os.sched_getaffinity(0)), "torch": __import__("torch").__version__,
              "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "limits": " ".join(LIMITS), "rows": rows}
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
