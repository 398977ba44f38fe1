"""Accuracy benchmark: run `torchdoctor run` on every example and check each planted
cause is found at its annotated line as a high or medium finding, and that clean
scripts get no high or medium finding.

Writes benchmarks/results/accuracy.json (or --out FILE, rewritten after every example) and
prints a table. Examples marked `# torchdoctor-requires: cuda` are reported as "needs CUDA" on
a machine without one. `--only a.py,b.py` runs some; `--jobs N` runs N examples at a time.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
RESULTS = ROOT / "benchmarks" / "results" / "accuracy.json"
EXPECT = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)")
STEPS = ["--steps", "20", "--warmup", "3"]


def expectations(path: Path) -> tuple[str, bool, set[tuple[str, int]]]:
    text = path.read_text()
    kind = re.search(r"#\s*torchdoctor-example:\s*(\w+)", text)
    needs_cuda = "# torchdoctor-requires: cuda" in text
    expected = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        match = EXPECT.search(line)
        if match:
            expected |= {(code.strip(), lineno) for code in match.group(1).split(",") if code.strip()}
    return (kind.group(1) if kind else "unknown"), needs_cuda, expected


def diagnose(path: Path, out: Path) -> list[dict]:
    subprocess.run([sys.executable, "-m", "torchdoctor", "run", *STEPS, "--out", str(out), "--format", "json",
                    str(path.relative_to(ROOT))], cwd=ROOT, capture_output=True, text=True, timeout=600)
    report = json.loads((out / "report.json").read_text())
    return report["findings"]


def judge(path: Path, tmp: Path) -> dict | None:
    kind, needs_cuda, expected = expectations(path)
    if kind not in ("planted", "clean"):
        return None
    if needs_cuda and not torch.cuda.is_available():
        return {"example": path.name, "kind": kind, "expected": sorted(f"{c}@{l}" for c, l in expected),
                "status": "needs CUDA: not run on this machine"}
    try:
        findings = diagnose(path, tmp / path.stem)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:  # the run died: a miss, said plainly
        return {"example": path.name, "kind": kind, "expected": sorted(f"{c}@{l}" for c, l in expected), "found": [],
                "missed": sorted(f"{c}@{l}" for c, l in expected), "false_positives": [], "status": "FAIL",
                "error": f"the doctor's run wrote no report: {type(exc).__name__}: {exc}"}
    strong = {(f["code"], f["location"]["line"]) for f in findings
              if f["severity"] in ("high", "medium") and f["location"]
              and Path(f["location"]["path"]).name == path.name}
    found = expected & strong
    false_pos = sorted(f"{c}@{l}" for c, l in strong - expected)
    return {
        "example": path.name, "kind": kind,
        "expected": sorted(f"{c}@{l}" for c, l in expected),
        "found": sorted(f"{c}@{l}" for c, l in found),
        "missed": sorted(f"{c}@{l}" for c, l in expected - found),
        "false_positives": false_pos,
        "status": "ok" if expected <= strong and not false_pos else "FAIL",
        "findings": [f"{f['code']}@{f['location']['line'] if f['location'] else '-'}:{f['severity']}:"
                     f"{f['estimated_speedup']}" for f in findings],
    }


def summarize(rows: list[dict], complete: bool) -> dict:
    planted = [r for r in rows if r["kind"] == "planted" and "found" in r]
    return {
        "date": _dt.date.today().isoformat(),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({platform.machine()})",
        "torch": torch.__version__,
        "planted_causes": sum(len(r["expected"]) for r in planted),
        "found": sum(len(r["found"]) for r in planted),
        "false_positives": sum(len(r.get("false_positives", [])) for r in rows),
        "complete": complete,
        "rows": sorted(rows, key=lambda r: r["example"]),
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--only", help="comma-separated example file names")
    p.add_argument("--jobs", type=int, default=1)
    opts = p.parse_args(argv)
    paths = sorted(EXAMPLES.glob("*.py"))
    if opts.only:
        paths = [EXAMPLES / name for name in opts.only.split(",")]
    rows = []
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max(1, opts.jobs)) as pool:
        for row in pool.map(lambda path: judge(path, Path(tmp)), paths):
            if row is not None:
                rows.append(row)
                opts.out.write_text(json.dumps(summarize(rows, complete=False), indent=2) + "\n")
    result = summarize(rows, complete=True)
    opts.out.write_text(json.dumps(result, indent=2) + "\n")
    rows = result["rows"]
    print(f"{'example':32} {'status':10} found / expected   false positives")
    for r in rows:
        if "found" in r:
            print(f"{r['example']:32} {r['status']:10} {len(r['found'])}/{len(r['expected'])}"
                  f"                {', '.join(r['false_positives']) or '-'}")
        else:
            print(f"{r['example']:32} {r['status']}")
    print(f"planted causes found: {result['found']}/{result['planted_causes']}; "
          f"high/medium false positives: {result['false_positives']}")
    return 0 if all(r["status"] != "FAIL" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
