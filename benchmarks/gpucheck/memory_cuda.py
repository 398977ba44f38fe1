"""GPU check step `memory`: `torchdoctor memory` on examples/clean_cnn.py on CUDA, the search
held to 1 GiB of the card by the trials' memory fraction, so that a batch that does not fit
fails with a real CUDA out-of-memory error and the next size is tried. Records what the
CPU cannot: the allocator's reserved peak against the accounted tensors, the memory outside
PyTorch, the fit's prediction against the batches verified on the device. Writes one JSON,
which goes into the logs archive and SUMMARY.md."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.gpucheck.plan import ROOT

EXAMPLE = "examples/clean_cnn.py"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpucheck.memory_cuda")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rehearse", action="store_true", help="on the CPU: 64 MiB of tensors, nothing kept free")
    args = p.parse_args(argv)
    limit = ["--device-memory", "64MiB", "--headroom", "0"] if args.rehearse else ["--device-memory", "1GiB"]
    result: dict = {"date": _dt.date.today().isoformat(), "example": EXAMPLE, "limit": " ".join(limit),
                    "complete": False}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "memory"
        cmd = [sys.executable, "-m", "torchdoctor", "memory", *limit, "--max-trials", "5", "--steps", "2",
               "--warmup", "2", "--max-seconds", "60", "--format", "json", "--out", str(out), EXAMPLE]
        # streamed into this step's log as it runs: a step stopped at its budget still shows how far it got
        done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=None, text=True)
        result["exit_code"] = done.returncode
        result["stdout_tail"] = done.stdout[-1500:]
        record = json.loads((out / "record.json").read_text()) if (out / "record.json").exists() else None
    if record is not None:
        memory, scaling = record.get("memory") or {}, record.get("batch_scaling") or {}
        result["device"] = {k: memory.get(k) for k in ("device", "peak_bytes", "peak_allocated_bytes",
                                                      "peak_reserved_bytes", "reserved_unused_bytes",
                                                      "outside_pytorch_bytes", "device_total_bytes",
                                                      "device_missing")}
        result["trials"] = [{k: t.get(k) for k in ("batch_size", "outcome", "peak_bytes", "device_peak_bytes",
                                                   "samples_per_s", "detail")} for t in scaling.get("trials", [])]
        result.update({k: scaling.get(k) for k in ("predicted_max_batch", "verified_max_batch", "search_step",
                                                   "headroom_bytes", "headroom_basis", "notes")})
        result["complete"] = done.returncode == 0
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result.get(k) for k in ("predicted_max_batch", "verified_max_batch", "complete")}))
    return 0 if result["complete"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
