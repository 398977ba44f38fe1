"""GPU check step `fixtures`: small real fixtures, each tagged with device, driver, CUDA and
torch versions (meta.json beside them), for the twins of the generated-trace unit tests.

- per example in FIXTURE_EXAMPLES: the 2-step profiler window of `torchdoctor run` on CUDA
  (trace.json.gz, a few hundred KB; one over MAX_TRACE_BYTES is left out and its size noted),
  with the run's record.json and report.json;
- nvml.json: a few seconds of NVML samples (the doctor's own sampler) across idle and busy;
- cuda_memory.json: torch.cuda.memory_stats() and the doctor's CudaMemory after that load;
- nvidia-smi-topo.txt, nvidia-smi-q.txt, nccl-info.txt (a one-rank NCCL all-reduce, NCCL_DEBUG=INFO).
Whatever cannot be recorded here is listed in meta.json's "skipped" with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.gpucheck.plan import FIXTURE_EXAMPLES, REHEARSAL_FIXTURE_EXAMPLES, ROOT

MAX_TRACE_BYTES = 1024 * 1024
RUN_TIMEOUT_S = 20  # a run takes ~5-10 s; four of them share the step's 50 s
NVML_IDLE_S, NVML_BUSY_S = 0.5, 3.0
NCCL_TIMEOUT_S = 15  # last in the step: what is left of its 50 s
NCCL_SCRIPT = """
import sys, torch, torch.distributed as dist
dist.init_process_group("nccl", init_method="file://" + sys.argv[1], rank=0, world_size=1)
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
print("all_reduce of 4 MiB on one rank:", "ok" if x[0].item() == 1.0 else "wrong result")
dist.destroy_process_group()
"""


class Recorder:
    def __init__(self, out: Path, tags: dict) -> None:
        self.out, self.tags = out, tags
        self.meta = {"kind": "torchdoctor real fixtures", "tags": tags, "files": {}, "skipped": {}}
        out.mkdir(parents=True, exist_ok=True)
        self.save()

    def save(self) -> None:  # after every item: a step stopped at its budget keeps what it recorded
        (self.out / "meta.json").write_text(json.dumps(self.meta, indent=2) + "\n")

    def keep(self, name: str, data: bytes, what: str) -> None:
        path = self.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.meta["files"][name] = {"bytes": len(data), "what": what}
        self.save()

    def skip(self, name: str, reason: str) -> None:
        self.meta["skipped"][name] = reason
        self.save()

    def text(self, name: str, body: str, what: str) -> None:
        header = "".join(f"# {k}: {v}\n" for k, v in self.tags.items())
        self.keep(name, (header + body).encode(), what)

    def json(self, name: str, payload: dict, what: str) -> None:
        self.keep(name, (json.dumps({"tags": self.tags, **payload}, indent=2) + "\n").encode(), what)


def tags_from(machine: dict) -> dict:
    prepared = machine.get("prepared") or {}
    return {"device": machine.get("device_name") or "cpu", "compute_capability": machine.get("compute_capability"),
            "driver": machine.get("driver"), "cuda": machine.get("cuda"), "torch": machine.get("torch"),
            "python": machine.get("python"), "recorded_at": machine.get("recorded_at"),
            "commit": prepared.get("commit"), "cuda_used": bool(machine.get("cuda_available")),
            "recorded_by": "python3 dev.py gpu (benchmarks/gpucheck/record_fixtures.py)"}


def record_runs(rec: Recorder, examples: tuple[str, ...], cuda: bool, work: Path) -> None:
    for example in examples:
        stem = Path(example).stem
        run_dir = work / stem
        cmd = [sys.executable, "-m", "torchdoctor", "run", "--steps", "10", "--warmup", "3", "--format", "json",
               "--out", str(run_dir), *([] if cuda else ["--trace"]), f"examples/{example}"]
        try:
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rec.skip(f"{stem}/trace.json.gz", f"`torchdoctor run` took over {RUN_TIMEOUT_S} s")
            continue
        trace = run_dir / "trace.json.gz"
        if not trace.is_file():
            rec.skip(f"{stem}/trace.json.gz", f"no trace written (exit {done.returncode}): {done.stderr.strip()[-300:]}")
            continue
        if trace.stat().st_size > MAX_TRACE_BYTES:
            rec.skip(f"{stem}/trace.json.gz", f"{trace.stat().st_size / 1024:.0f} KB, over the {MAX_TRACE_BYTES // 1024}"
                                              " KB kept for a fixture")
            continue
        rec.keep(f"{stem}/trace.json.gz", trace.read_bytes(), f"the 2-step profiler window of `torchdoctor run` on {example}")
        for name in ("record.json", "report.json"):
            if (run_dir / name).is_file():
                rec.keep(f"{stem}/{name}", (run_dir / name).read_bytes(), f"that run's {name}")


def record_nvml_and_memory(rec: Recorder) -> None:
    import torch

    from torchdoctor.run.probes.cuda_memory import read_cuda_memory
    from torchdoctor.run.probes.nvml import sample_device
    from torchdoctor.model.serialize import to_plain

    sampler = sample_device(0, interval_s=0.05)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    time.sleep(NVML_IDLE_S)
    busy_from = time.perf_counter()
    while time.perf_counter() - busy_from < NVML_BUSY_S:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    time.sleep(NVML_IDLE_S)
    record = sampler.stop() if hasattr(sampler, "stop") else sampler
    if record.available:
        rec.json("nvml.json", {"idle_s": NVML_IDLE_S, "busy_s": NVML_BUSY_S, "load": "bf16 8192x8192 matmuls",
                               "record": to_plain(record)}, "NVML samples every 50 ms: idle, 3 s of matmuls, idle")
    else:
        rec.skip("nvml.json", f"NVML unavailable: {record.reason}")
    memory = read_cuda_memory(0)
    free, total = torch.cuda.mem_get_info()
    rec.json("cuda_memory.json", {"memory_stats": torch.cuda.memory_stats(), "mem_get_info": [free, total],
                                  "doctor": to_plain(memory) if memory else None},
             "CUDA memory statistics after the NVML load")


def record_smi(rec: Recorder) -> None:
    smi = shutil.which("nvidia-smi")
    for name, args in (("nvidia-smi-topo.txt", ["topo", "-m"]), ("nvidia-smi-q.txt", ["-q"])):
        if not smi:
            rec.skip(name, "nvidia-smi is not on PATH")
            continue
        done = subprocess.run([smi, *args], capture_output=True, text=True, timeout=30)
        rec.text(name, f"$ nvidia-smi {' '.join(args)}  (exit {done.returncode})\n{done.stdout}{done.stderr}",
                 f"nvidia-smi {' '.join(args)}")


def record_nccl(rec: Recorder, work: Path) -> None:
    env = dict(os.environ, NCCL_DEBUG="INFO")
    try:
        done = subprocess.run([sys.executable, "-c", NCCL_SCRIPT, str(work / "nccl-store")], capture_output=True,
                              text=True, timeout=NCCL_TIMEOUT_S, env=env)
        body = f"(exit {done.returncode})\n{done.stdout}{done.stderr}"
    except subprocess.TimeoutExpired as exc:
        body = f"(stopped after {NCCL_TIMEOUT_S} s)\n{exc.stdout or ''}{exc.stderr or ''}"
    rec.text("nccl-info.txt", body, "NCCL_DEBUG=INFO output of a one-rank all_reduce")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpucheck.record_fixtures")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--machine", type=Path, required=True, help="machine.json of this run (the tags)")
    p.add_argument("--rehearse", action="store_true")
    args = p.parse_args(argv)
    import torch

    machine = json.loads(args.machine.read_text()) if args.machine.is_file() else {}
    cuda = torch.cuda.is_available()
    tags = tags_from(machine)
    tags.update(cuda_used=cuda, torch=torch.__version__, cuda=torch.version.cuda)  # this process's own, to be sure
    if cuda:
        tags["device"] = torch.cuda.get_device_name(0)
    rec = Recorder(args.out, tags)
    examples = REHEARSAL_FIXTURE_EXAMPLES if args.rehearse else FIXTURE_EXAMPLES
    with tempfile.TemporaryDirectory() as tmp:
        parts = [("nvidia-smi", lambda: record_smi(rec)), ("nvml.json", lambda: record_nvml_and_memory(rec)),
                 ("traces", lambda: record_runs(rec, examples, cuda, Path(tmp))),
                 ("nccl-info.txt", lambda: record_nccl(rec, Path(tmp)))]
        for name, record in parts:
            if not cuda and name in ("nvml.json", "nccl-info.txt"):
                for skipped in ("nvml.json", "cuda_memory.json") if name == "nvml.json" else (name,):
                    rec.skip(skipped, "no CUDA device")
                continue
            try:
                record()
            except Exception as exc:  # one part failing must not cost the others
                rec.skip(name, f"failed: {type(exc).__name__}: {exc}")
    print(json.dumps(rec.meta, indent=2))
    return 0 if cuda or args.rehearse else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
