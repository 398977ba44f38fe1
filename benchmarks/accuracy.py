"""Accuracy benchmark: run `torchdoctor run` on every example and check each planted
cause is found at its annotated line as a high or medium finding, and that clean
scripts get no high or medium finding.

Writes benchmarks/results/accuracy.json and prints a table. Examples marked
`# torchdoctor-requires: cuda` are reported as "needs CUDA" on a machine without one.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import re
import subprocess
import sys
import tempfile
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


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted(EXAMPLES.glob("*.py")):
            kind, needs_cuda, expected = expectations(path)
            if kind not in ("planted", "clean"):
                continue
            if needs_cuda and not torch.cuda.is_available():
                rows.append({"example": path.name, "kind": kind, "expected": sorted(f"{c}@{l}" for c, l in expected),
                             "status": "needs CUDA: not run on this machine"})
                continue
            findings = diagnose(path, Path(tmp) / path.stem)
            strong = {(f["code"], f["location"]["line"]) for f in findings
                      if f["severity"] in ("high", "medium") and f["location"]
                      and Path(f["location"]["path"]).name == path.name}
            found = expected & strong
            false_pos = sorted(f"{c}@{l}" for c, l in strong - expected)
            rows.append({
                "example": path.name, "kind": kind,
                "expected": sorted(f"{c}@{l}" for c, l in expected),
                "found": sorted(f"{c}@{l}" for c, l in found),
                "missed": sorted(f"{c}@{l}" for c, l in expected - found),
                "false_positives": false_pos,
                "status": "ok" if expected <= strong and not false_pos else "FAIL",
                "findings": [f"{f['code']}@{f['location']['line'] if f['location'] else '-'}:{f['severity']}:"
                             f"{f['estimated_speedup']}" for f in findings],
            })
    planted = [r for r in rows if r["kind"] == "planted" and "found" in r]
    result = {
        "date": _dt.date.today().isoformat(),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({platform.machine()})",
        "torch": torch.__version__,
        "planted_causes": sum(len(r["expected"]) for r in planted),
        "found": sum(len(r["found"]) for r in planted),
        "false_positives": sum(len(r.get("false_positives", [])) for r in rows),
        "rows": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
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
    sys.exit(main())
