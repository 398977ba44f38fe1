"""Speed of `torchdoctor lint` on a large tree, side by side with TorchFix on the same tree in
the same run: files per second, wall clock of the whole command (start-up included).

The default tree is the installed `torch/` package (~2,300 files, ~46 MB of Python). TorchFix
0.7.0 is installed for this benchmark only (`pip install --target` into a temporary folder,
run with PYTHONPATH); it checks different rules (deprecated APIs and the like), so this
compares throughput, not findings. Both run with the same number of worker processes
(TorchFix's default: one per CPU); `torchdoctor lint --jobs 1` is measured too.

    .venv/bin/python benchmarks/lint_speed.py [--tree DIR] [--jobs N] [--skip-torchfix]

Writes benchmarks/results/lint_speed.json.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "lint_speed.json"
TORCHFIX = "torchfix==0.7.0"


def default_tree() -> Path:
    spec = importlib.util.find_spec("torch")  # finds the package without importing it
    return Path(next(iter(spec.submodule_search_locations)))


def tree_size(tree: Path) -> tuple[int, int]:
    from torchdoctor.lint.discovery import discover

    files = [path for path, _ in discover([tree]).files]
    return len(files), sum(p.stat().st_size for p in files)


def timed(command: list[str], env: dict | None = None, timeout: float | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    return time.perf_counter() - start, done


def run_torchdoctor(tree: Path, jobs: int, repeats: int) -> dict:
    command = [sys.executable, "-m", "torchdoctor", "lint", "--isolated", "--exit-zero", "--format", "json",
               "--min-severity", "info", "--jobs", str(jobs), str(tree)]
    times, findings = [], 0
    for _ in range(repeats):
        seconds, done = timed(command)
        if done.returncode != 0:
            raise SystemExit(f"torchdoctor lint failed ({done.returncode}):\n{done.stderr[-2000:]}")
        times.append(seconds)
        findings = len(json.loads(done.stdout))
    return {"jobs": jobs, "seconds": round(statistics.median(times), 2), "runs": [round(t, 2) for t in times],
            "findings": findings}


def install_torchfix(target: Path) -> None:
    if (target / "torchfix").is_dir():
        return
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--target", str(target), TORCHFIX], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"pip install {TORCHFIX} failed:\n{done.stderr[-2000:]}")


def run_torchfix(tree: Path, jobs: int, site: Path, timeout: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(site))
    command = [sys.executable, "-m", "torchfix", "--select", "ALL", "--jobs", str(jobs), str(tree)]
    seconds, done = timed(command, env=env, timeout=timeout)
    checked = re.search(r"Finished checking (\d+) files", done.stdout + done.stderr)
    findings = sum(1 for line in done.stdout.splitlines() if re.search(r":\d+:\d+: TOR\d+", line))
    return {"jobs": jobs, "seconds": round(seconds, 2), "files_checked": int(checked.group(1)) if checked else None,
            "findings": findings, "exit_code": done.returncode}


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=None, help="folder to lint (default: the installed torch/)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes for both tools")
    parser.add_argument("--repeats", type=int, default=3, help="runs of torchdoctor lint (median reported)")
    parser.add_argument("--skip-torchfix", action="store_true", help="measure torchdoctor only")
    parser.add_argument("--torchfix-timeout", type=float, default=3600, help="seconds before TorchFix is stopped")
    opts = parser.parse_args()
    load_start = _load()
    tree = (opts.tree or default_tree()).resolve()
    files, size = tree_size(tree)
    print(f"tree: {tree} ({files} Python files, {size / 1e6:.1f} MB)")

    ours = {"jobs_1": run_torchdoctor(tree, 1, opts.repeats)}
    if opts.jobs != 1:
        ours[f"jobs_{opts.jobs}"] = run_torchdoctor(tree, opts.jobs, opts.repeats)
    for entry in ours.values():
        entry["files_per_s"] = round(files / entry["seconds"], 1)
        print(f"torchdoctor lint --jobs {entry['jobs']}: {entry['seconds']:.1f} s, {entry['files_per_s']} files/s")

    torchfix = None
    if not opts.skip_torchfix:
        with tempfile.TemporaryDirectory(prefix="torchfix-bench-") as site:
            install_torchfix(Path(site))
            torchfix = run_torchfix(tree, opts.jobs, Path(site), opts.torchfix_timeout)
        torchfix["version"] = TORCHFIX.split("==")[1]
        torchfix["files_per_s"] = round(files / torchfix["seconds"], 1)
        if torchfix["files_checked"]:  # TorchFix skips some files; its own count gives a lower rate
            torchfix["files_per_s_own_count"] = round(torchfix["files_checked"] / torchfix["seconds"], 2)
        print(f"torchfix --jobs {opts.jobs}: {torchfix['seconds']:.1f} s, {torchfix['files_per_s']} files/s "
              f"(it reports {torchfix['files_checked']} files checked)")

    same_jobs = ours.get(f"jobs_{opts.jobs}", ours["jobs_1"])
    result = {
        "date": _dt.date.today().isoformat(),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(), "python": platform.python_version(),
                    # other work on a shared machine slows both tools; the load says how busy it was
                    "load_average_start": load_start, "load_average_end": _load()},
        "tree": str(tree), "files": files, "megabytes": round(size / 1e6, 1),
        "torchdoctor": ours, "torchfix": torchfix,
        "speedup_same_jobs": round(torchfix["seconds"] / same_jobs["seconds"], 1) if torchfix else None,
        "note": "wall clock of each command, start-up included; files = what torchdoctor's discovery lints",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    if torchfix:
        print(f"torchdoctor is {result['speedup_same_jobs']}x faster than TorchFix with {opts.jobs} job(s) each")
    print(f"written to {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
