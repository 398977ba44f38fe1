"""Speed of `torchdoctor lint`, written to benchmarks/results/lint_speed.json:

1. Generated worst cases (`benchmarks/lint_gen.py`: many loaders, one reused name, many loops,
   deep nesting, a whole project in one file), each at 10,000 and 50,000 lines (and any other
   `--sizes`): seconds per 10,000 lines of the whole command (start-up included). Every
   analysis must grow linearly with the file: the target is at most 1 s per 10,000 lines on the
   worst of them at 10,000 lines or more (below that the ~0.3 s start-up dominates).
2. torch's own source tree (the installed `torch/` package, ~2,300 files, ~46 MB): files per
   second with 1 and with N worker processes.
3. Optionally TorchFix 0.7.0 on the same tree (installed for this benchmark only, `pip install
   --target` into a temporary folder); it checks other rules, so this compares throughput.

The machine may be shared: each measurement is repeated, runs of the compared programs are
interleaved, medians are reported with every run, and the load average is recorded before and
after each measurement. `--baseline-src DIR` measures another checkout's `src/` (e.g. the main
branch) the same way, interleaved with this one, for before/after numbers; a run that exceeds
`--timeout` is recorded as timed out.

    .venv/bin/python benchmarks/lint_speed.py [--tree DIR] [--jobs N] [--repeats R]
        [--baseline-src DIR] [--skip-tree] [--skip-generated] [--torchfix]
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
SIZES = (10_000, 50_000)
TARGET_S_PER_10K = 1.0

sys.path.insert(0, str(ROOT / "benchmarks"))
from lint_gen import SHAPES, generate  # noqa: E402


def default_tree() -> Path:
    spec = importlib.util.find_spec("torch")  # finds the package without importing it
    return Path(next(iter(spec.submodule_search_locations)))


def tree_size(tree: Path) -> tuple[int, int]:
    from torchdoctor.lint.discovery import discover

    files = [path for path, _ in discover([tree]).files]
    return len(files), sum(p.stat().st_size for p in files)


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def lint_once(src: Path, paths: list[Path], jobs: int, timeout: float) -> dict:
    """One `torchdoctor lint` run of the package in `src`: wall seconds (None if it timed out)."""
    command = [sys.executable, "-m", "torchdoctor", "lint", "--isolated", "--exit-zero", "--format", "json",
               "--min-severity", "info", "--jobs", str(jobs), *map(str, paths)]
    env = dict(os.environ, PYTHONPATH=str(src))
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"seconds": None, "timed_out": True}
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"torchdoctor lint failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return {"seconds": round(seconds, 2), "findings": len(json.loads(done.stdout))}


def measure(programs: dict[str, Path], paths: list[Path], jobs: int, repeats: int, timeout: float) -> dict:
    """Each program `repeats` times, interleaved; a program that times out is not run again."""
    runs: dict[str, list] = {name: [] for name in programs}
    load_before = _load()
    for _ in range(repeats):
        for name, src in programs.items():
            if runs[name] and runs[name][-1]["seconds"] is None:
                continue
            runs[name].append(lint_once(src, paths, jobs, timeout))
    out = {"load_average_before": load_before, "load_average_after": _load()}
    for name, entries in runs.items():
        times = [r["seconds"] for r in entries if r["seconds"] is not None]
        out[name] = {
            "runs": [r["seconds"] for r in entries],
            "median_s": round(statistics.median(times), 2) if times else None,
            "timed_out_after_s": timeout if len(times) < len(entries) else None,
            "spread": round((max(times) - min(times)) / statistics.median(times), 2) if len(times) > 1 else None,
            "findings": entries[-1].get("findings") if times else None,
        }
    return out


def generated(programs: dict[str, Path], repeats: int, timeout: float, sizes) -> dict:
    results = {}
    with tempfile.TemporaryDirectory(prefix="lint-speed-") as folder:
        for shape in SHAPES:
            for lines in sizes:
                path = Path(folder) / f"{shape}_{lines}.py"
                text = generate(shape, lines)
                path.write_text(text)
                actual = text.count("\n")
                entry = measure(programs, [path], 1, repeats, timeout)
                for name in programs:
                    median = entry[name]["median_s"]
                    entry[name]["s_per_10k_lines"] = round(median / actual * 10_000, 3) if median else None
                entry["lines"] = actual
                entry["megabytes"] = round(len(text.encode()) / 1e6, 2)
                results[f"{shape}_{lines}"] = entry
                shown = ", ".join(f"{name} {entry[name]['median_s']} s ({entry[name]['s_per_10k_lines']} s/10k)"
                                  if entry[name]["median_s"] else f"{name} timed out"
                                  for name in programs)
                print(f"{shape:14} {actual:6} lines: {shown}")
    return results


def install_torchfix(target: Path) -> None:
    if (target / "torchfix").is_dir():
        return
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--target", str(target), TORCHFIX], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"pip install {TORCHFIX} failed:\n{done.stderr[-2000:]}")


def run_torchfix(tree: Path, jobs: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="torchfix-bench-") as site:
        install_torchfix(Path(site))
        env = dict(os.environ, PYTHONPATH=site)
        command = [sys.executable, "-m", "torchfix", "--select", "ALL", "--jobs", str(jobs), str(tree)]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
        seconds = time.perf_counter() - start
    checked = re.search(r"Finished checking (\d+) files", done.stdout + done.stderr)
    return {"jobs": jobs, "seconds": round(seconds, 2), "version": TORCHFIX.split("==")[1],
            "files_checked": int(checked.group(1)) if checked else None, "exit_code": done.returncode}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=None, help="folder to lint (default: the installed torch/)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes on the tree")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement (medians reported)")
    parser.add_argument("--baseline-src", type=Path, help="another checkout's src/ to measure the same way")
    parser.add_argument("--timeout", type=float, default=300, help="seconds before one run is stopped")
    parser.add_argument("--skip-tree", action="store_true")
    parser.add_argument("--skip-generated", action="store_true")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="lines of the generated files")
    parser.add_argument("--torchfix", action="store_true", help="also time TorchFix 0.7.0 on the tree (slow)")
    opts = parser.parse_args()
    programs = {"this": ROOT / "src"}
    if opts.baseline_src:
        programs["baseline"] = opts.baseline_src.resolve()
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    result = {
        "date": _dt.date.today().isoformat(),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(), "python": platform.python_version(), "load_average_start": _load()},
        "programs": {name: str(src) for name, src in programs.items()},
        "note": ("wall clock of each command, start-up included, medians of interleaved runs; `spread` is "
                 "(max - min) / median over the runs; the load average says how busy the shared machine was"),
    }
    if not opts.skip_generated:
        sizes = [int(s) for s in opts.sizes.split(",")]
        result["generated"] = generated(programs, opts.repeats, opts.timeout, sizes)
        # Files under 10,000 lines show the start-up (~0.3 s), not the analysis: the target is on the large ones.
        worst = max((e["this"]["s_per_10k_lines"] or 0, name) for name, e in result["generated"].items()
                    if e["lines"] >= 10_000)
        result["worst_s_per_10k_lines"] = {"case": worst[1], "seconds": worst[0], "target": TARGET_S_PER_10K}
        print(f"worst case: {worst[1]} at {worst[0]} s per 10,000 lines (target <= {TARGET_S_PER_10K})")
    else:
        result["generated"] = previous.get("generated")
    if not opts.skip_tree:
        tree = (opts.tree or default_tree()).resolve()
        files, size = tree_size(tree)
        print(f"tree: {tree} ({files} Python files, {size / 1e6:.1f} MB)")
        result["tree"] = {"path": str(tree), "files": files, "megabytes": round(size / 1e6, 1)}
        for jobs in sorted({1, opts.jobs}):
            entry = measure(programs, [tree], jobs, opts.repeats, opts.timeout)
            for name in programs:
                median = entry[name]["median_s"]
                entry[name]["files_per_s"] = round(files / median, 1) if median else None
                print(f"--jobs {jobs} {name}: {median} s, {entry[name]['files_per_s']} files/s, runs {entry[name]['runs']}")
            result["tree"][f"jobs_{jobs}"] = entry
    else:
        result["tree"] = previous.get("tree")
    if opts.torchfix:
        result["torchfix"] = run_torchfix((opts.tree or default_tree()).resolve(), opts.jobs, 3600)
    else:
        result["torchfix"] = previous.get("torchfix")  # kept from the run that measured it, with its date
        if result["torchfix"] and "date" not in result["torchfix"]:
            result["torchfix"]["date"] = previous.get("date")
    result["machine"]["load_average_end"] = _load()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
