"""GPU check step `install`: torchdoctor (--no-deps --no-index) and the carried wheels into
folders under --target, for this interpreter as it is: no venv, no torch install, no network.

Writes --out (install.json) with the PYTHONPATH the later steps use. When the wheels are for
another Python than this one (a rehearsal under 3.11 with the GPU machine's cp312 wheels), pip
still installs them for the GPU machine's tags, which checks them, but they stay off PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.gpucheck.plan import ROOT
from benchmarks.gpucheck.wheels import PLATFORMS, TARGET_PYTHON, fits_interpreter

PIP = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index", "--no-deps",
       "--no-compile", "--no-cache-dir", "--upgrade"]
IMPORTS = ("torchdoctor", "msgspec", "libcst")


def _pip(args: list[str], notes: list[str]) -> bool:
    done = subprocess.run([*PIP, *args], capture_output=True, text=True)
    if done.returncode != 0:
        notes.append(f"pip install {' '.join(args[-1:])} failed: " + (done.stderr or done.stdout).strip()[-600:])
    return done.returncode == 0


def install_wheels(wheels: list[Path], target: Path, report: dict) -> None:
    if not wheels:
        report["notes"].append("no wheels to install: run `python3 dev.py gpu --prepare` where the package index is "
                               "reachable, and copy .gpu-wheels/ along")
        return
    if all(fits_interpreter(w.name) for w in wheels):
        if _pip(["--target", str(target), *map(str, wheels)], report["notes"]):
            report["wheels_installed"] = True
            report["pythonpath"].append(str(target))
        return
    # another Python: install for the GPU machine's tags (pip checks them), keep them off the path
    flags = ["--python-version", TARGET_PYTHON, "--implementation", "cp", "--only-binary=:all:",
             *[f for p in PLATFORMS for f in ("--platform", p)]]
    if _pip([*flags, "--target", str(target), *map(str, wheels)], report["notes"]):
        report["wheels_installed"] = True
        report["notes"].append(f"the wheels are for CPython {TARGET_PYTHON} and this is {sys.version.split()[0]}: "
                               "installed for the GPU machine's tags only; this interpreter's own packages are used")


def install_torchdoctor(target: Path, report: dict) -> None:
    # Built from a copy of what a wheel holds: pip builds in the source folder, and a build/ left
    # there by an older tree would bring back modules deleted since. --no-build-isolation: the
    # build uses the installed setuptools (there is no index to fetch one from).
    source = target.parent / "torchdoctor-source"
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    if _pip(["--no-build-isolation", "--target", str(target), str(source)], report["notes"]):
        report["torchdoctor"] = f"installed into {target}"
        report["pythonpath"].insert(0, str(target))
    else:
        report["torchdoctor"] = "install failed: src/ put on PYTHONPATH instead"
        report["pythonpath"].insert(0, str(ROOT / "src"))


def check_imports(pythonpath: list[str]) -> dict[str, str]:
    code = ("import importlib, json, sys\nout = {}\nfor name in sys.argv[1:]:\n"
            "    try:\n        m = importlib.import_module(name); out[name] = getattr(m, '__file__', '?')\n"
            "    except Exception as exc:\n        out[name] = f'not importable: {type(exc).__name__}: {exc}'\n"
            "print(json.dumps(out))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(pythonpath))
    # from outside the repository, so the working tree's src/ cannot stand in for the install
    done = subprocess.run([sys.executable, "-c", code, *IMPORTS], capture_output=True, text=True, env=env, cwd="/")
    try:
        return json.loads(done.stdout)
    except ValueError:
        return {name: f"not checked: {done.stderr.strip()[-300:]}" for name in IMPORTS}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpucheck.install")
    p.add_argument("--wheels", type=Path, required=True)
    p.add_argument("--target", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    wheels_dir = args.wheels if args.wheels.is_absolute() else ROOT / args.wheels
    report = {"python": sys.executable, "version": sys.version.split()[0], "wheels": [],
              "wheels_installed": False, "torchdoctor": None, "pythonpath": [], "notes": []}
    wheels = sorted(wheels_dir.glob("*.whl")) if wheels_dir.is_dir() else []
    report["wheels"] = [w.name for w in wheels]
    install_wheels(wheels, args.target / "wheels", report)
    install_torchdoctor(args.target / "torchdoctor", report)
    report["imports"] = check_imports(report["pythonpath"])
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    ok = report["torchdoctor"].startswith("installed") and not any(
        v.startswith("not ") for v in report["imports"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
