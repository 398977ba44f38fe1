"""GPU check step `machine`: what this run is evidence of. Device, compute capability, driver,
CUDA, cuDNN, NCCL, torch and Python versions, and every package the check imports (with where
it came from). Writes --out (machine.json); exits 1 when a required package does not import."""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.gpucheck.plan import ROOT, WHEELS_DIR
from benchmarks.gpucheck.wheels import PREPARED

# (distribution, module); nvidia-ml-py is optional: without it the NVML probe says why it is off
REQUIRED = (("torch", "torch"), ("torchdoctor", "torchdoctor"), ("msgspec", "msgspec"), ("libcst", "libcst"),
            ("rich", "rich"), ("pyyaml", "yaml"), ("numpy", "numpy"), ("pytest", "pytest"))
OPTIONAL = (("nvidia-ml-py", "pynvml"),)


def _package(dist: str, module: str) -> dict:
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # a missing wheel, or a broken binary: say which
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        version = getattr(mod, "__version__", "?")
    return {"ok": True, "version": version, "from": str(Path(getattr(mod, "__file__", "?") or "?").parent)}


def _driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        pass
    if shutil.which("nvidia-smi"):
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None
    return None


def _torch_facts() -> dict:
    import torch

    facts = {"torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
             "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
             "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0}
    if facts["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        facts.update(device_name=props.name, compute_capability=[props.major, props.minor],
                     device_memory_bytes=props.total_memory, multiprocessors=props.multi_processor_count)
        try:
            facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as exc:
            facts["nccl"] = f"unknown: {type(exc).__name__}"
    return facts


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpucheck.machine")
    p.add_argument("--out", type=Path, required=True)
    out = p.parse_args(argv).out
    info: dict = {"recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                  "python": platform.python_version(), "executable": sys.executable, "platform": platform.platform(),
                  "cpu_count": os.cpu_count()}
    info["packages"] = {dist: _package(dist, module) for dist, module in REQUIRED + OPTIONAL}
    if info["packages"]["torch"]["ok"]:
        info.update(_torch_facts())
    info["driver"] = _driver()
    prepared = ROOT / WHEELS_DIR / PREPARED
    info["prepared"] = json.loads(prepared.read_text()) if prepared.is_file() else None  # commit the wheels were made at
    out.write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))
    missing = [dist for dist, _ in REQUIRED if not info["packages"][dist]["ok"]]
    if missing:
        print(f"not importable: {', '.join(missing)} (see above); run `python3 dev.py gpu --prepare` and carry "
              f"{WHEELS_DIR}/", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
