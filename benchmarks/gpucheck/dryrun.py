"""`dev.py gpu --dry-run`: the plan, then everything about it that a machine without a GPU can
check: every path a step reads exists, every step script imports under the interpreter the
check will use, the gpu-marked tests are collected with no test module failing to import, the
prepared wheels (if any) fit the GPU machine, and the working tree fits what a copying tool
takes along. Exit 0 when all of that holds."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from benchmarks.gpucheck import wheels
from benchmarks.gpucheck.plan import REAL_FIXTURES, ROOT, STEPS, TOTAL_BUDGET_S, WHEELS_DIR, Context

TREE_LIMIT_BYTES = 64 * 2**20  # what the copying tool takes to the GPU machine
ALWAYS_NEEDED = ("dev.py", "pyproject.toml", "src/torchdoctor/__init__.py", f"{REAL_FIXTURES}/README.md")


def plan_lines(budgets: dict[str, float], rehearse: bool = False) -> list[str]:
    ctx = Context(ROOT, "python3", Path("WORK"), rehearse)
    lines = []
    for n, step in enumerate(STEPS, 1):
        lines.append(f"{n}. {step.name} ({budgets[step.name]:.0f} s): {step.title}")
        lines.append(f"     runs: {' '.join(step.command(ctx, budgets[step.name]))}")
        if step.needs:
            lines.append(f"     reads: {', '.join(step.needs)}")
    lines.append(f"Budgets add up to {sum(budgets.values()):.0f} s; the check stops itself at {TOTAL_BUDGET_S:.0f} s. "
                 "A step that overruns is stopped and reported; the rest still run. --out receives at most 8 files.")
    return lines


def needed_paths() -> list[str]:
    return sorted({*ALWAYS_NEEDED, *(p for s in STEPS for p in (*s.scripts, *s.needs))})


def files_to_resolve() -> list[str]:
    """Scripts that train at import: compiled and their imports resolved, never run."""
    found = set()
    for rel in (p for s in STEPS for p in s.needs if p.endswith(".py") and not p.startswith("tests/")):
        found.add(rel)
    found |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "examples").glob("*.py")}
    return sorted(found)


def _env() -> dict[str, str]:
    src = str(ROOT / "src")  # the working tree's torchdoctor, as the GPU run will install it
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))


def check_imports(python: str) -> tuple[list[str], bool]:
    scripts = sorted({p for s in STEPS for p in s.scripts})
    done = subprocess.run([python, "-m", "benchmarks.gpucheck.importcheck", "--import", *scripts,
                           "--resolve", *files_to_resolve()], cwd=ROOT, env=_env(), capture_output=True, text=True)
    lines, ok, seen = [], True, 0
    for raw in done.stdout.splitlines():
        row = json.loads(raw)
        seen += 1
        verb = "imports" if row["how"] == "import" else "compiles, imports resolve"
        lines.append(f"  {'ok  ' if row['ok'] else 'FAIL'} {verb}: {row['path']}" + (f"  ({row['error']})" if
                                                                                      row["error"] else ""))
        ok &= row["ok"]
    if seen != len(scripts) + len(files_to_resolve()):
        lines.append(f"  FAIL the import check stopped early: {done.stderr.strip()[-400:]}")
        ok = False
    return lines, ok


def check_collection(python: str) -> tuple[list[str], bool]:
    done = subprocess.run([python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "gpu", "tests"],
                          cwd=ROOT, env=_env(), capture_output=True, text=True)
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    files = sorted({i.split("::")[0] for i in ids})
    ok = done.returncode == 0 and bool(ids)
    tail = done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else [done.stderr.strip()[-300:]]
    return [f"  {'ok  ' if ok else 'FAIL'} gpu-marked tests collected: {len(ids)} in {', '.join(files) or 'no file'}; "
            f"every test module imported ({tail[0] if tail else ''})"], ok


def check_wheels() -> tuple[list[str], bool]:
    found = sorted(p.name for p in (ROOT / WHEELS_DIR).glob("*.whl"))
    if not found:
        return [f"  info {WHEELS_DIR}/ holds no wheels: run `python3 dev.py gpu --prepare` where the package index is "
                "reachable before the GPU run"], True
    wrong = [f for f in found if not wheels.fits_gpu_machine(f)]
    lacking = sorted({wheels.requirement_name(r) for r in wheels.missing_on_gpu(wheels.project_requirements())}
                     - {wheels.wheel_parts(f)[0] for f in found})
    dup = wheels.duplicates(found)
    ok = not (wrong or lacking or dup)
    detail = "; ".join(filter(None, [f"not for CPython 3.12 manylinux x86_64: {', '.join(wrong)}" if wrong else "",
                                     f"missing: {', '.join(lacking)}" if lacking else "",
                                     f"two versions of {', '.join(dup)}" if dup else ""]))
    return [f"  {'ok  ' if ok else 'FAIL'} wheels in {WHEELS_DIR}/: {', '.join(found)}" + (f" ({detail})" if detail else "")], ok


def tree_bytes() -> int | None:
    try:
        done = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    files = [ROOT / f for f in done.stdout.decode().split("\0") if f]
    files += list((ROOT / WHEELS_DIR).glob("*"))
    return sum(f.stat().st_size for f in files if f.is_file())


def dry_run(python: str, budgets: dict[str, float], echo=print) -> int:
    echo("GPU check plan (python3 dev.py gpu --out DIR, on the GPU machine):")
    for line in plan_lines(budgets):
        echo("  " + line)
    echo(f"Checks on this machine, with {python}:")
    missing = [p for p in needed_paths() if not (ROOT / p).exists()]
    echo(f"  {'ok  ' if not missing else 'FAIL'} paths: {len(needed_paths())} checked, "
         + ("all exist" if not missing else f"missing: {', '.join(missing)}"))
    results = [not missing]
    for check in (check_imports, check_collection):
        lines, ok = check(python)
        for line in lines:
            echo(line)
        results.append(ok)
    lines, ok = check_wheels()
    for line in lines:
        echo(line)
    results.append(ok)
    size = tree_bytes()
    fits = size is None or size <= TREE_LIMIT_BYTES
    echo(f"  {'ok  ' if fits else 'FAIL'} working tree that travels: " + (
        "not measured (no git here)" if size is None else f"{size / 2**20:.1f} MiB of {TREE_LIMIT_BYTES // 2**20} MiB"))
    results.append(fits)
    echo("dry run: " + ("every check passed" if all(results) else "some checks FAILED (above)"))
    return 0 if all(results) else 1

