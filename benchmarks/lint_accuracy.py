"""Accuracy of `torchdoctor lint`: precision and recall per rule on the project's examples and
on the golden cases, written to benchmarks/results/lint_accuracy.json and printed as tables.

Examples (examples/*.py marked `# torchdoctor-example: planted|clean`): what a line should
give statically is its runtime `# expect:` codes that lint detects, plus its `# lint-expect:`
codes (static habits the runtime example was not planted for, e.g. a loader without
pin_memory). A prediction is a high or medium finding, as in benchmarks/accuracy.py; `low`
and `info` findings are listed but not counted.

Golden cases (tests/lint_golden/tdNNN_*/case.py): every line commented `# triggers`, `# low`
or `# info` must give the folder's code (at any severity), and no other line may; the
`clean_*` cases count as negatives for every code.

Real shapes (tests/lint_golden/realN_*/case.py, one per item 1-6 of issue 13: training loops
in the shapes third-party code takes). A comment `# want: TD201, TD204` says the line must be
reported with those codes at low or above; `# trap` marks code that looks like a habit but is
not one (or is off by default): nothing at low or above may be reported there. Every other
finding at low or above counts as a false positive too; `info` findings are listed, not counted.

    .venv/bin/python benchmarks/lint_accuracy.py
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import sys
import tokenize
from collections import Counter
from pathlib import Path

from torchdoctor.lint import LintOptions, lint_paths
from torchdoctor.rules.registry import detected_codes

DETECTED_CODES = detected_codes("lint")

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "lint_accuracy.json"
RUNTIME_EXPECT = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)")
LINT_EXPECT = re.compile(r"#\s*lint-expect:\s*([A-Z0-9, ]+)")
GOLDEN_MARK = re.compile(r"#\s*(triggers|low|info)\b")
STRONG = ("high", "medium")
AT_LEAST_LOW = ("high", "medium", "low")
WANT = re.compile(r"#\s*want:\s*((?:TD\d{3}[,\s]*)+)")
TRAP = re.compile(r"#.*\btrap\b")


def _codes(match: re.Match | None) -> set[str]:
    return {c.strip() for c in match.group(1).split(",") if c.strip()} if match else set()


def example_expectations(path: Path) -> tuple[str, set[tuple[str, int]]]:
    text = path.read_text(encoding="utf-8")
    kind = re.search(r"#\s*torchdoctor-example:\s*(\w+)", text)
    expected = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        codes = (_codes(RUNTIME_EXPECT.search(line)) & DETECTED_CODES) | _codes(LINT_EXPECT.search(line))
        expected |= {(code, lineno) for code in codes}
    return (kind.group(1) if kind else "unknown"), expected


def lint_one(path: Path) -> list:
    options = LintOptions(isolated=True, min_severity="info", jobs=1)
    result = lint_paths([path], options, cwd=path.parent)
    assert not result.problems, [str(p) for p in result.problems]
    return result.findings


def score_examples() -> tuple[list[dict], Counter, Counter, Counter]:
    rows, hits, misses, false = [], Counter(), Counter(), Counter()
    for path in sorted((ROOT / "examples").glob("*.py")):
        kind, expected = example_expectations(path)
        if kind not in ("planted", "clean"):
            continue
        findings = lint_one(path)
        strong = {(f.code, f.line) for f in findings if f.finding.severity.value in STRONG}
        weak = sorted(f"{f.code}@{f.line}:{f.finding.severity.value}" for f in findings
                      if f.finding.severity.value not in STRONG)
        found, missed, extra = expected & strong, expected - strong, strong - expected
        hits.update(c for c, _ in found)
        misses.update(c for c, _ in missed)
        false.update(c for c, _ in extra)
        rows.append({"example": path.name, "kind": kind, "expected": _fmt(expected), "found": _fmt(found),
                     "missed": _fmt(missed), "false_positives": _fmt(extra), "low_or_info": weak})
    return rows, hits, misses, false


def score_goldens() -> tuple[list[dict], Counter, Counter, Counter]:
    rows, hits, misses, false = [], Counter(), Counter(), Counter()
    for case in sorted((ROOT / "tests" / "lint_golden").glob("*/case.py")):
        folder = case.parent.name
        if folder.startswith("real"):
            continue  # scored on their own, by their markers
        code = folder[:5].upper() if folder.startswith("td") else None
        expected = set()
        if code:
            for lineno, line in enumerate(case.read_text(encoding="utf-8").splitlines(), 1):
                if GOLDEN_MARK.search(line):
                    expected.add((code, lineno))
        predicted = {(f.code, f.line) for f in lint_one(case) if code is None or f.code == code}
        found, missed, extra = expected & predicted, expected - predicted, predicted - expected
        hits.update(c for c, _ in found)
        misses.update(c for c, _ in missed)
        false.update(c for c, _ in extra)
        rows.append({"case": folder, "expected": _fmt(expected), "missed": _fmt(missed),
                     "false_positives": _fmt(extra)})
    return rows, hits, misses, false


def shape_markers(path: Path) -> tuple[set[tuple[str, int]], set[int]]:
    """(wanted (code, line) pairs, trap lines) from the case's comments (not its docstring)."""
    wanted, traps = set(), set()
    with path.open("rb") as stream:
        for token in tokenize.tokenize(stream.readline):
            if token.type != tokenize.COMMENT:
                continue
            line = token.start[0]
            want = WANT.search(token.string)
            if want:
                wanted |= {(code, line) for code in re.findall(r"TD\d{3}", want.group(1))}
            if TRAP.search(token.string):
                traps.add(line)
    return wanted, traps


def score_real_shapes() -> tuple[list[dict], Counter, Counter, Counter, int, int]:
    rows, hits, misses, false = [], Counter(), Counter(), Counter()
    trap_lines = trap_hits = 0
    for case in sorted((ROOT / "tests" / "lint_golden").glob("real*/case.py")):
        wanted, traps = shape_markers(case)
        findings = lint_one(case)
        reported = {(f.code, f.line) for f in findings if f.finding.severity.value in AT_LEAST_LOW}
        found, missed, extra = wanted & reported, wanted - reported, reported - wanted
        sprung = sorted(f"{c}@{line}" for c, line in extra if line in traps)
        hits.update(c for c, _ in found)
        misses.update(c for c, _ in missed)
        false.update(c for c, _ in extra)
        trap_lines += len(traps)
        trap_hits += len({line for _, line in extra if line in traps})
        info = sorted(f"{f.code}@{f.line}" for f in findings if f.finding.severity.value == "info")
        rows.append({"case": case.parent.name, "wanted": _fmt(wanted), "missed": _fmt(missed),
                     "false_positives": _fmt(extra), "traps": len(traps), "traps_reported": sprung,
                     "info": info})
    return rows, hits, misses, false, trap_lines, trap_hits


def per_code(hits: Counter, misses: Counter, false: Counter) -> list[dict]:
    table = []
    for code in sorted(set(hits) | set(misses) | set(false)):
        tp, fn, fp = hits[code], misses[code], false[code]
        table.append({"code": code, "expected": tp + fn, "found": tp, "missed": fn, "false_positives": fp,
                      "precision": _ratio(tp, tp + fp), "recall": _ratio(tp, tp + fn)})
    tp, fn, fp = sum(hits.values()), sum(misses.values()), sum(false.values())
    table.append({"code": "all", "expected": tp + fn, "found": tp, "missed": fn, "false_positives": fp,
                  "precision": _ratio(tp, tp + fp), "recall": _ratio(tp, tp + fn)})
    return table


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None


def _fmt(pairs) -> list[str]:
    return sorted(f"{c}@{line}" for c, line in pairs)


def print_table(title: str, table: list[dict]) -> None:
    print(f"\n{title}")
    print(f"{'code':6} {'expected':>8} {'found':>6} {'missed':>7} {'false +':>8} {'precision':>10} {'recall':>7}")
    for row in table:
        shown = [("-" if row[k] is None else f"{row[k]:.2f}") for k in ("precision", "recall")]
        print(f"{row['code']:6} {row['expected']:>8} {row['found']:>6} {row['missed']:>7} "
              f"{row['false_positives']:>8} {shown[0]:>10} {shown[1]:>7}")


def main() -> int:
    example_rows, *example_counts = score_examples()
    golden_rows, *golden_counts = score_goldens()
    shape_rows, *shape_counts, trap_lines, trap_hits = score_real_shapes()
    examples_table, golden_table = per_code(*example_counts), per_code(*golden_counts)
    shapes_table = per_code(*shape_counts)
    result = {
        "date": _dt.date.today().isoformat(),
        "examples": {"per_code": examples_table, "rows": example_rows},
        "golden_cases": {"per_code": golden_table, "rows": golden_rows},
        "real_shapes": {"per_code": shapes_table, "trap_lines": trap_lines, "traps_reported": trap_hits,
                        "rows": shape_rows},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print_table("examples/ (planted and clean; high/medium findings)", examples_table)
    for row in example_rows:
        if row["missed"] or row["false_positives"]:
            print(f"  {row['example']}: missed {row['missed'] or '-'}, false positives {row['false_positives'] or '-'}")
    print_table("tests/lint_golden (marked lines, any severity)", golden_table)
    for row in golden_rows:
        if row["missed"] or row["false_positives"]:
            print(f"  {row['case']}: missed {row['missed'] or '-'}, false positives {row['false_positives'] or '-'}")
    print_table("tests/lint_golden/real* (real shapes; wanted lines at low or above)", shapes_table)
    print(f"  traps: {trap_hits} of {trap_lines} reported at low or above")
    for row in shape_rows:
        if row["missed"] or row["false_positives"]:
            print(f"  {row['case']}: missed {row['missed'] or '-'}, false positives {row['false_positives'] or '-'}"
                  f"{', traps reported ' + str(row['traps_reported']) if row['traps_reported'] else ''}")
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
