#!/usr/bin/env python3
"""One entry point for a fresh machine with only Python: `python3 dev.py demo|test|bench|gpu`.

Creates `.venv`, installs torch (CPU build first, so the `torch>=2.2` requirement never
pulls a multi-GB CUDA build during setup), installs torchdoctor, then runs the command.
`gpu` is the exception: on the GPU machine it uses that python3 and its torch as they are
(see benchmarks/gpucheck/ and the README's "GPU check").
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PY = VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
TORCH = os.environ.get("TORCHDOCTOR_TORCH", "torch==2.13.0")
STAMP = VENV / ".torchdoctor-installed"
BENCH_HELPERS = {"trace_gen"}  # benchmarks/ modules that are inputs to a benchmark


def sh(*cmd: str) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def ensure_env() -> None:
    if not PY.exists():
        venv.create(VENV, with_pip=True)
    deps = (ROOT / "pyproject.toml").read_text()
    if STAMP.exists() and STAMP.read_text() == deps:
        return
    pip = [str(PY), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    probe = subprocess.run([str(PY), "-c", "import torch"], capture_output=True)
    if probe.returncode != 0:
        sh(*pip, TORCH)
    sh(*pip, "-e", ".[test]")
    STAMP.write_text(deps)


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "help"
    if command not in ("demo", "test", "bench", "gpu"):
        print("usage: python3 dev.py demo | test [--quick] [pytest args] | bench [NAME...] | gpu [--prepare|--dry-run|...]")
        return 2
    if command == "gpu":  # never builds .venv unless a form needs it (prepare without pip, dry run without torch)
        sys.path.insert(0, str(ROOT))
        from benchmarks.gpucheck.cli import main as gpu_main

        def venv_python() -> str:
            ensure_env()
            return str(PY)

        return gpu_main(argv[1:], venv_python)
    ensure_env()
    if command == "demo":
        return subprocess.call([str(PY), "-m", "torchdoctor", "run", "--steps", "20",
                                "examples/demo_prompt_encoder.py", *argv[1:]], cwd=ROOT)
    if command == "test":  # `test --quick`: the inner loop, without the tests that run example scripts end to end
        args = argv[1:]
        quick = ["-m", "not slow"] if "--quick" in args else []
        return subprocess.call([str(PY), "-m", "pytest", "-q", *quick, *(a for a in args if a != "--quick")],
                               cwd=ROOT)
    # `bench NAME...` runs some; plain `bench` runs every benchmarks/*.py that writes results.
    names = argv[1:] or sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if not p.stem.startswith("_")
                               and p.stem not in BENCH_HELPERS)
    code = 0
    for name in names:
        code |= subprocess.call([str(PY), f"benchmarks/{name.removesuffix('.py')}.py"], cwd=ROOT)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
