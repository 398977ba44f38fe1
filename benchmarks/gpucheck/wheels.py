"""`dev.py gpu --prepare`: wheels for what the GPU machine's python3 lacks, downloaded here
(the GPU machine has no network), and the command to run there.

The GPU machine's python3 is 3.12 on x86-64 Linux with torch, rich, nvidia-ml-py, numpy and
pytest; the project's other requirements (msgspec, libcst) and whatever they need that the
machine does not have travel as wheels in WHEELS_DIR, one version of each.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.gpucheck.plan import ROOT, WHEELS_DIR

TARGET_PYTHON = "3.12"
# pip matches manylinux versions exactly, so name each one the GPU machine accepts (glibc 2.39).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
MAX_GLIBC = (2, 39)
# Installed on the GPU machine (its image's package list, and what transformers and torch need):
# a requirement in this set is never carried. Names as normalized by PEP 503.
GPU_MACHINE_HAS = frozenset({
    "torch", "rich", "nvidia-ml-py", "numpy", "pytest", "lightning", "transformers", "pyyaml", "typing-extensions",
    "packaging", "setuptools", "wheel", "pip", "markdown-it-py", "mdurl", "pygments", "iniconfig", "pluggy",
    "filelock", "fsspec", "jinja2", "networkx", "sympy", "regex", "requests", "tqdm", "safetensors", "tokenizers",
})
# Test requirements the GPU check never uses, so never carried: Playwright drives the system
# Chromium in the HTML report's browser test, which the GPU machine lacks (the test skips there);
# accelerate serves only the Hugging Face callback's CPU tests, which are not `-m gpu` (they skip without it).
# The follow exporters' readers (tensorboard, prometheus_client, OpenTelemetry) serve CPU tests that skip without them.
NOT_NEEDED_ON_GPU = frozenset({"playwright", "accelerate", "tensorboard", "prometheus-client", "opentelemetry-sdk",
                               "opentelemetry-exporter-otlp-proto-http"})
PREPARED = "prepared.json"
PROJECT_VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
DEVICE_COMMAND = 'PYTHONUNBUFFERED=1 python3 dev.py gpu --out "$OUT"'


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project_requirements(root: Path = ROOT) -> list[str]:
    """[project] dependencies plus the gpu and test extras, as written in pyproject.toml."""
    text = (root / "pyproject.toml").read_text()
    blocks = re.findall(r"^(?:dependencies|gpu|test)\s*=\s*\[(.*?)\]", text, re.S | re.M)
    return [req for block in blocks for req in re.findall(r'"([^"]+)"', block)]


def requirement_name(req: str) -> str:
    return normalize(re.match(r"[A-Za-z0-9._-]+", req).group(0))


def missing_on_gpu(requirements: list[str]) -> list[str]:
    return [req for req in requirements if requirement_name(req) not in GPU_MACHINE_HAS | NOT_NEEDED_ON_GPU]


# ---- wheel tags -------------------------------------------------------------------------------

def wheel_parts(filename: str) -> tuple[str, str, set[str], set[str], set[str]]:
    """(name, version, python tags, abi tags, platform tags) of a wheel file name."""
    parts = filename.removesuffix(".whl").split("-")
    if len(parts) not in (5, 6) or not filename.endswith(".whl"):
        raise ValueError(f"{filename} is not a wheel file name")
    py, abi, plat = parts[-3:]
    return normalize(parts[0]), parts[1], set(py.split(".")), set(abi.split(".")), set(plat.split("."))


def _platform_ok(plat: str) -> bool:
    if plat == "any":
        return True
    legacy = {"manylinux1_x86_64": (2, 5), "manylinux2010_x86_64": (2, 12), "manylinux2014_x86_64": (2, 17)}
    if plat in legacy:
        return legacy[plat] <= MAX_GLIBC
    match = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", plat)
    return bool(match) and (int(match.group(1)), int(match.group(2))) <= MAX_GLIBC


def _python_fits(py: set[str], abi: set[str], version: tuple[int, int]) -> bool:
    here = f"cp{version[0]}{version[1]}"
    if py & {here, "py3", f"py{version[0]}{version[1]}"} and abi & {"none", "abi3", here}:
        return True
    stable = [int(m.group(1)) for t in py if (m := re.fullmatch(r"cp3(\d+)", t))]  # cp39-abi3 runs on 3.9+
    return "abi3" in abi and any(minor <= version[1] for minor in stable)


def fits_gpu_machine(filename: str) -> bool:
    """Installable by CPython 3.12 on manylinux x86-64 (glibc ≤ 2.39)."""
    _, _, py, abi, plat = wheel_parts(filename)
    return _python_fits(py, abi, (3, 12)) and any(_platform_ok(p) for p in plat)


def fits_interpreter(filename: str, version: tuple[int, int] = sys.version_info[:2]) -> bool:
    """Importable by this interpreter: the GPU machine's python3 yes, a rehearsal's 3.11 not a cp312 wheel."""
    _, _, py, abi, _ = wheel_parts(filename)
    return _python_fits(py, abi, version)


def duplicates(filenames: list[str]) -> list[str]:
    names = [wheel_parts(f)[0] for f in filenames]
    return sorted({n for n in names if names.count(n) > 1})


# ---- prepare ------------------------------------------------------------------------------------

def _pip(fallback_python) -> list[str]:
    ok = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0
    return [sys.executable if ok else fallback_python(), "-m", "pip"]


def _installed_version(python: str, name: str) -> str | None:
    code = f"import importlib.metadata as m\ntry: print(m.version({name!r}))\nexcept Exception: pass"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return done.stdout.strip() or None


def pinned(requirements: list[str], venv_python: Path) -> list[str]:
    """Each requirement at the version `dev.py test` runs with (the project's .venv, which pip
    filled from these requirements), else as written: the newest release that satisfies it.
    Never another interpreter's: a system python's old libcst may not satisfy the requirement."""
    out = []
    for req in requirements:
        version = _installed_version(str(venv_python), requirement_name(req)) if venv_python.exists() else None
        out.append(f"{requirement_name(req)}=={version}" if version else req)
    return out


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def prepare(fallback_python, echo=print) -> int:
    """Download, keep what the GPU machine lacks, check tags, write prepared.json, print the command."""
    pip = _pip(fallback_python)
    wanted = pinned(missing_on_gpu(project_requirements()), PROJECT_VENV_PYTHON)
    dest = ROOT / WHEELS_DIR
    platforms = [flag for p in PLATFORMS for flag in ("--platform", p)]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [*pip, "download", "--disable-pip-version-check", "--only-binary=:all:", "--python-version",
               TARGET_PYTHON, "--implementation", "cp", *platforms, "-d", tmp, *wanted]
        echo("+ " + " ".join(cmd), flush=True)
        if subprocess.run(cmd).returncode != 0:
            echo("dev.py gpu --prepare: pip could not download the wheels (above); it needs the package index")
            return 1
        files = sorted(p.name for p in Path(tmp).glob("*.whl"))
        keep = [f for f in files if wheel_parts(f)[0] not in GPU_MACHINE_HAS]
        wrong = [f for f in keep if not fits_gpu_machine(f)]
        if wrong or duplicates(keep):
            echo(f"dev.py gpu --prepare: unusable wheels for CPython {TARGET_PYTHON} manylinux x86_64: "
                 f"{', '.join(wrong or duplicates(keep))}")
            return 1
        dest.mkdir(exist_ok=True)
        for old in dest.glob("*.whl"):  # one version of each: two stop the whole install there
            old.unlink()
        for f in keep:
            shutil.move(str(Path(tmp) / f), dest / f)
    manifest = {
        "prepared_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": _git("rev-parse", "HEAD"), "uncommitted_changes": bool(_git("status", "--porcelain")),
        "python": TARGET_PYTHON, "platforms": list(PLATFORMS), "requested": wanted,
        "left_out_already_on_gpu_machine": [f for f in files if f not in keep],
        "wheels": [{"file": f, "bytes": (dest / f).stat().st_size,
                    "sha256": hashlib.sha256((dest / f).read_bytes()).hexdigest()} for f in keep],
    }
    (dest / PREPARED).write_text(json.dumps(manifest, indent=2) + "\n")
    echo(instructions(manifest))
    return 0


def instructions(manifest: dict) -> str:
    names = ", ".join(" ".join(wheel_parts(w["file"])[:2]) for w in manifest["wheels"]) or "none needed"
    size = sum(w["bytes"] for w in manifest["wheels"]) / 2**20
    return "\n".join([
        f"Prepared {WHEELS_DIR}/: {names} ({size:.1f} MiB, CPython {TARGET_PYTHON} manylinux x86_64); left out as "
        f"already on the GPU machine: {', '.join(manifest['left_out_already_on_gpu_machine']) or 'nothing'}.",
        "",
        "On the GPU machine (python3 3.12 with its own CUDA torch; no network needed), from the repository root,",
        f"with {WHEELS_DIR}/ copied along with the working tree:",
        "",
        "    PYTHONUNBUFFERED=1 python3 dev.py gpu --out OUT_DIR",
        "",
        "Through a device tool that copies the working tree and brings back one output folder:",
        f"    command: {DEVICE_COMMAND}",
        f"    carry:   {WHEELS_DIR}        timeout: 600 s (the check stops itself within 9 minutes)",
        "",
        "Then here: python3 dev.py gpu --unpack THE_FOLDER_THAT_CAME_BACK, read SUMMARY.md, commit",
        "benchmarks/results/gpu/ and tests/fixtures/real/.",
    ])
