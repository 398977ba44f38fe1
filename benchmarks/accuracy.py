"""Accuracy benchmark: run `torchdoctor run` on every example and check each planted
cause is found at its annotated line, that no trap is reported, and that nothing else is
reported at high or medium.

Two sets: `examples/*.py` (written with the doctor) and `examples/real_shapes/*.py` (written
in the shapes of third-party projects, without reading the detectors). Annotations, on the
exact line (see examples/real_shapes/README.md):
  `# expect: CODE`  a cause: reported there at high or medium (TD901 hot-line: at any severity)
  `# trap: CODE`    looks like it, is not: never reported there at high or medium
  `# verdict: CODE` a judgement of the machine more than of the script (TD606 scaling verdict: its
                    severity follows how well this machine's ranks scale; TD306: AdamW left at its
                    defaults runs the for-loop update on a CPU, foreach on CUDA): reported there at any
                    severity or not at all, neither a cause nor a false positive
  `# torchdoctor-helpers: a.py, b.py`  annotations in those files count for this script
  `# torchdoctor-requires: cuda|lightning`  skipped (and said so) where that is missing
  `# torchdoctor-nproc: N`  a DDP script: run with `torchdoctor run --nproc-per-node N` (its ranks
                            through torch.distributed.run); with cuda required, N GPUs are needed
  `# torchdoctor-env: NAME=VALUE`  set for that run (e.g. the simulated slow link's test hook)
  `# torchdoctor-follow`  run with `torchdoctor run --follow` (to its end: a change along the run)

Writes benchmarks/results/accuracy.json (or --out FILE, rewritten after every example) and
prints a table. `--only a.py,b.py` runs some; `--jobs N` runs N examples at a time.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SETS = {"examples": EXAMPLES, "real_shapes": EXAMPLES / "real_shapes"}
RESULTS = ROOT / "benchmarks" / "results" / "accuracy.json"
EXPECT = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)")
TRAP = re.compile(r"#\s*trap:\s*([A-Z0-9, ]+)")
VERDICT = re.compile(r"#\s*verdict:\s*([A-Z0-9, ]+)")
STEPS = ["--steps", "20", "--warmup", "3"]
ANY_SEVERITY = {"TD901"}  # reported at low by design: found at any severity
STRONG = ("high", "medium")

Mark = tuple[str, str, int]  # (file name, code, line)


@dataclass
class Example:
    path: Path
    set: str
    kind: str
    requires: list[str]
    nproc: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    follow: bool = False
    expected: set[Mark] = field(default_factory=set)
    traps: set[Mark] = field(default_factory=set)
    verdicts: set[Mark] = field(default_factory=set)
    files: set[str] = field(default_factory=set)  # the script and its helpers

    @classmethod
    def read(cls, path: Path, set_name: str) -> "Example":
        text = path.read_text()
        kind = re.search(r"#\s*torchdoctor-example:\s*(\w+)", text)
        requires = re.findall(r"#\s*torchdoctor-requires:\s*(\w+)", text)
        helpers = re.search(r"#\s*torchdoctor-helpers:\s*([\w., ]+)", text)
        nproc = re.search(r"#\s*torchdoctor-nproc:\s*(\d+)", text)
        env = dict(m.split("=", 1) for m in re.findall(r"#\s*torchdoctor-env:\s*(\S+=\S+)", text))
        example = cls(path, set_name, kind.group(1) if kind else "unknown", requires,
                      int(nproc.group(1)) if nproc else None, env, follow=bool(re.search(r"#\s*torchdoctor-follow", text)))
        for file in [path] + [path.parent / h.strip() for h in (helpers.group(1).split(",") if helpers else [])]:
            example.files.add(file.name)
            for lineno, line in enumerate(file.read_text().splitlines(), 1):
                for pattern, into in ((EXPECT, example.expected), (TRAP, example.traps), (VERDICT, example.verdicts)):
                    match = pattern.search(line)
                    if match:
                        into |= {(file.name, c.strip(), lineno) for c in match.group(1).split(",") if c.strip()}
        return example

    def missing(self) -> str | None:
        for need in self.requires:
            if need == "cuda" and not torch.cuda.is_available():
                return "needs CUDA: not run on this machine"
            if need == "cuda" and self.nproc and torch.cuda.device_count() < self.nproc:
                return f"needs {self.nproc} GPUs: not run on this machine"
            if need != "cuda" and importlib.util.find_spec(need) is None:
                return f"needs {need}: not installed here"
        return None


def _mark(m: Mark) -> str:
    return f"{m[0]}:{m[1]}@{m[2]}"


def diagnose(example: Example, out: Path) -> list[dict]:
    env = dict(os.environ)
    if example.set == "real_shapes":
        env.setdefault("OMP_NUM_THREADS", "1")  # their README's advice for a shared 2-core machine
    env.update(example.env)
    ranks = ["--nproc-per-node", str(example.nproc)] if example.nproc else []
    limits = ["--follow", "--no-live"] if example.follow else STEPS
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", *limits, *ranks, "--out", str(out), "--format",
                           "json", str(example.path.relative_to(ROOT))], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)
    try:
        return json.loads((out / "report.json").read_text())["findings"]
    except OSError as exc:  # what the doctor said on its way out is the evidence of why
        tail = " | ".join(done.stderr.strip().splitlines()[-6:])[-800:]
        raise OSError(f"{exc.strerror}: {out / 'report.json'} (exit {done.returncode}; stderr: {tail or 'empty'})") \
            from None


def judge(example: Example, tmp: Path) -> dict | None:
    if example.kind not in ("planted", "clean"):
        return None
    row = {"example": str(example.path.relative_to(EXAMPLES)), "set": example.set, "kind": example.kind,
           "expected": sorted(map(_mark, example.expected)), "traps": sorted(map(_mark, example.traps))}
    missing = example.missing()
    if missing:
        return {**row, "status": missing}
    try:
        findings = diagnose(example, tmp / example.path.stem)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:  # the run died: a miss, said plainly
        return {**row, "found": [], "missed": row["expected"], "false_positives": [], "traps_hit": [],
                "status": "FAIL", "error": f"the doctor's run wrote no report: {type(exc).__name__}: {exc}"}
    located = [(Path(f["location"]["path"]).name, f["code"], f["location"]["line"], f["severity"])
               for f in findings if f["location"]]
    reported = {(n, c, l) for n, c, l, s in located if n in example.files and (s in STRONG or c in ANY_SEVERITY)}
    strong = {(n, c, l) for n, c, l, s in located if n in example.files and s in STRONG}
    found = example.expected & reported
    traps_hit = example.traps & strong
    false_pos = strong - example.expected - example.verdicts
    return {
        **row,
        "found": sorted(map(_mark, found)),
        "missed": sorted(map(_mark, example.expected - found)),
        "false_positives": sorted(map(_mark, false_pos)),
        "traps_hit": sorted(map(_mark, traps_hit)),
        "status": "ok" if found == example.expected and not false_pos else "FAIL",
        "findings": [f"{n}:{c}@{l}:{s}" for n, c, l, s in located],
        # why each miss and false positive was judged so, as the report said it: what a GPU run
        # brings back is all there is to go on until the next one
        "details": _details(findings, example.expected - found, false_pos),
        **({"scaling_verdict": verdict} if (verdict := _scaling_verdict(findings)) else {}),
    }


def _details(findings: list[dict], missed: set[Mark], false_pos: set[Mark]) -> list[dict]:
    wanted = {(m[1], m[2]) for m in missed | false_pos}
    return [{"code": f["code"], "line": f["location"]["line"], "severity": f["severity"], "title": f["title"],
             "message": f["message"][:600], "basis": (f.get("estimate_basis") or "")[:400],
             "estimate": f.get("estimated_speedup")}
            for f in findings if f["location"] and (f["code"], f["location"]["line"]) in wanted]


def _scaling_verdict(findings: list[dict]) -> str | None:
    """The TD606 verdict of a multi-rank example, as printed (for the closing notes)."""
    return next((f["message"] for f in findings if f["code"] == "TD606"), None)


def _set_summary(rows: list[dict]) -> dict:
    judged = [r for r in rows if "found" in r]
    expected = sum(len(r["expected"]) for r in judged)
    found = sum(len(r["found"]) for r in judged)
    false_pos = sum(len(r["false_positives"]) for r in judged)
    return {
        "scripts": len(rows), "judged": len(judged), "planted_causes": expected, "found": found,
        "false_positives": false_pos, "traps": sum(len(r["traps"]) for r in judged),
        "traps_hit": sum(len(r["traps_hit"]) for r in judged),
        "recall": round(found / expected, 3) if expected else None,
        "precision": round(found / (found + false_pos), 3) if found + false_pos else None,
        "not_run": [f"{r['example']}: {r['status']}" for r in rows if "found" not in r],
    }


def summarize(rows: list[dict], complete: bool) -> dict:
    return {
        "date": _dt.date.today().isoformat(),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({platform.machine()})",
        "torch": torch.__version__,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "complete": complete,
        "sets": {name: _set_summary([r for r in rows if r["set"] == name]) for name in SETS},
        # the examples set's totals, as earlier versions of this file had them
        **{k: _set_summary([r for r in rows if r["set"] == "examples"])[k]
           for k in ("planted_causes", "found", "false_positives")},
        "rows": sorted(rows, key=lambda r: r["example"]),
    }


def collect(only: str | None) -> list[Example]:
    examples = [Example.read(path, name) for name, folder in SETS.items()
                for path in sorted(folder.glob("*.py")) if not path.name.startswith("_")]
    if only:
        names = set(only.split(","))
        examples = [e for e in examples if e.path.name in names or str(e.path.relative_to(EXAMPLES)) in names]
    return sorted(examples, key=gpu_first) if torch.cuda.is_available() else examples


def gpu_first(example: Example) -> tuple:
    """The order on a GPU, where the check's budget runs out before the list does (the H200's first
    run reached 6 examples in 130 s, three of them compiling): what only a GPU can show first (the
    CUDA-only examples, then planted causes), torch.compile's examples last (Dynamo and Inductor
    behave as on a CPU, and compiling is the slowest part), then by name."""
    text = example.path.read_text()
    return ("cuda" not in example.requires, example.kind != "planted", "torch.compile" in text,
            example.set, example.path.name)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--only", help="comma-separated example file names")
    p.add_argument("--jobs", type=int, default=1)
    opts = p.parse_args(argv)
    rows = []
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max(1, opts.jobs)) as pool:
        for row in pool.map(lambda example: judge(example, Path(tmp)), collect(opts.only)):
            if row is not None:
                rows.append(row)
                print(f"{row['example']}: {row['status']}" + (f" ({row['error']})" if "error" in row else ""),
                      flush=True)  # progress: a run stopped at its limit still shows how far it got
                opts.out.write_text(json.dumps(summarize(rows, complete=False), indent=2) + "\n")
    result = summarize(rows, complete=True)
    opts.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'example':40} {'status':10} found/expected  false positives (traps hit)")
    for r in result["rows"]:
        if "found" in r:
            print(f"{r['example']:40} {r['status']:10} {len(r['found'])}/{len(r['expected'])}"
                  f"             {', '.join(r['false_positives']) or '-'}"
                  + (f" ({', '.join(r['traps_hit'])})" if r["traps_hit"] else ""))
        else:
            print(f"{r['example']:40} {r['status']}")
    for name, s in result["sets"].items():
        print(f"{name}: {s['found']}/{s['planted_causes']} found, {s['false_positives']} high/medium false positives "
              f"({s['traps_hit']} of {s['traps']} traps hit)")
    return 0 if all(r["status"] != "FAIL" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
