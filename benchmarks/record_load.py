"""How long `report` takes to read a long run's record: RunRecord.load of a 10,000-step
record.json (every bound checked, decoded by msgspec into the typed model), and its save.

The record is made here: 10,000 steps, ~4.1 MB as written. Before msgspec (serialize.py's own
dataclass converter, commit b542f70) the same record took 3.92 s to load and 1.18 s to save on
this project's busy 2-core machine (best of 5, load average ~3); that number is kept below as
`before`, measured once, since the old code is gone.

    python3 dev.py bench record_load      # writes benchmarks/results/record_load.json
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from torchdoctor.model.record import Environment, RunInfo, RunRecord, StepSample  # noqa: E402

STEPS = 10_000
REPEATS = 5
BEFORE = {"load_s_best": 3.924, "save_s_best": 1.183, "commit": "b542f70"}


def long_record() -> RunRecord:
    info = RunInfo(script="train.py", argv=[], cwd="/w", started_at="2026-01-01T00:00:00+00:00",
                   torchdoctor_version="bench", warmup=3, steps_requested=STEPS, max_seconds=3600.0)
    env = Environment(python="3.11", platform="Linux", torch="2.13", cuda_available=False)
    steps = [StepSample(index=i, start=(i - 1) * 0.05, end=i * 0.05 - 0.001, warmup=i <= 3, sampled=i % 97 == 0,
                        micro_batches=1, samples=128, data_wait_s=0.001, backward_s=0.02, optimizer_s=0.002,
                        zero_grad_s=0.0001) for i in range(1, STEPS + 1)]
    return RunRecord(run=info, environment=env, steps=steps)


def timed(fn) -> list[float]:
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def main() -> int:
    record = long_record()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "record.json"
        save = timed(lambda: record.save(path))
        size = path.stat().st_size
        load = timed(lambda: RunRecord.load(path))
        assert RunRecord.load(path) == record
    result = {"steps": STEPS, "bytes": size, "repeats": REPEATS,
              "load_s_best": round(min(load), 3), "load_s_median": round(statistics.median(load), 3),
              "save_s_best": round(min(save), 3), "save_s_median": round(statistics.median(save), 3),
              "before": BEFORE, "load_speedup_best": round(BEFORE["load_s_best"] / min(load), 1),
              "load_average": round(os.getloadavg()[0], 2)}
    out = ROOT / "benchmarks" / "results" / "record_load.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
