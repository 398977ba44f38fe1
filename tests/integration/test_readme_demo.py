"""The README's demo output is what the demo prints today: the demo runs as `python3 dev.py demo`
runs it, and the README's block has the run's shape (the order of its parts, the causes'
codes, slugs and severities, the lines they point at). Timings differ from machine to
machine and are not compared. The same run's report, in every format, puts the causes
before the measurement tables."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = "examples/demo_prompt_encoder.py"
pytestmark = pytest.mark.slow

FINDING = re.compile(r"^(\d+)\. (TD\d+) ([\w-]+) · (\w+)$")
WHERE = re.compile(r"^ +where: (\S+:\d+)(?: in (\S+))?$")


def readme_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    after = text.split("Real output of `python3 dev.py demo`", 1)[1]
    return after.split("```\n", 1)[1].split("\n```", 1)[0]


def shape(text: str) -> list[tuple]:
    """The parts of a printed report, in order: the run's line, each cause's heading and
    location, each titled part after them. A busy machine's line is left out (it depends on the
    machine, and the README's run had a quiet one)."""
    parts: list[tuple] = []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("torchdoctor · "):
            parts.append(("run", line.split(" · ")[1]))
        elif m := FINDING.match(line):
            parts.append(("cause", int(m.group(1)), m.group(2), m.group(3), m.group(4)))
        elif m := WHERE.match(line):
            parts.append(("where", m.group(1), m.group(2)))
        elif line and not line.startswith((" ", "┏", "┃", "┡", "│", "└", "note:", ".")) and (
                i + 1 < len(lines) and lines[i + 1].startswith("┏") or line in ("Causes, ranked", "Run summary", "Not measured in this run")):
            parts.append(("part", line))
    return parts


@pytest.fixture(scope="module")
def demo(demo_run) -> tuple[str, Path]:
    """`python3 dev.py demo`: the demo's own command line, from the repository root (conftest.py)."""
    return demo_run


def _unranked(parts: list[tuple]) -> list[tuple]:
    return [part[:1] + part[2:] if part[0] == "cause" else part for part in parts]


def _in_order(wanted: list, found: list) -> bool:
    rest = iter(found)
    return all(item in rest for item in wanted)


def _measured(run_dir: Path) -> str:
    """What the run measured for its top causes, and whether the machine was busy: a failure
    on a CI machine then says why the ranking moved (a severity, an estimate, the step it sizes on)."""
    report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    summary = report["summary"]
    keys = ("share_of_step_time", "step_ms", "line_ms_per_step", "backward_ms_per_step", "line_samples",
            "sampled_steps", "estimate_if_steady", "estimate_range")
    causes = [(f["code"], f["severity"], f["estimated_speedup"], {k: f["evidence"][k] for k in keys if k in f["evidence"]})
              for f in report["findings"][:4]]
    return (f"step mean {summary['step_time_s']}, p50 {summary['step_time_p50_s']}, p90 {summary['step_time_p90_s']} s; "
            f"busy: {summary['machine_busy']}; causes: {causes}")


SEVERITIES = ("high", "medium", "low", "info")


def _busy(run_dir: Path) -> bool:
    """The run's own report said the machine was busy (other processes took its CPU)."""
    return bool(json.loads((run_dir / "report.json").read_text(encoding="utf-8"))["summary"]["machine_busy"])


def _causes(parts: list[tuple]) -> dict[str, tuple]:
    """code -> (severity, the where line after it)."""
    return {p[2]: (p[4], parts[i + 1] if i + 1 < len(parts) and parts[i + 1][0] == "where" else None)
            for i, p in enumerate(parts) if p[0] == "cause"}


def test_the_readme_demo_block_has_the_shape_of_a_real_demo_run(demo):
    printed, run_dir = demo
    documented, real = shape(readme_block()), shape(printed)
    assert documented, "no demo block found in the README"
    assert ("cause", 1, "TD301", "python-loop-ops", "high") in documented
    found = _causes(real)
    if _busy(run_dir) and found.get("TD301", ("",))[0] == "medium":
        # A machine the run itself found busy can lower the loop's estimate under the 1.25x of a
        # high (a run whose steps took 0.7 to 23 s: 1.24x if steady, withheld as too spread). TD301
        # then ties with the block's two other mediums (GPU hazards, not timed on a CPU), and ties
        # rank by code. What holds: every documented part in order but the causes' ranks, every
        # documented cause at its line, and TD301 at the run's top severity.
        others = [p for p in _unranked(documented) if p[0] not in ("cause", "where")]
        assert _in_order(others, _unranked(real)), (documented, real, _measured(run_dir))
        for code, (_, where) in _causes(documented).items():
            assert code in found and found[code][1] == where, (code, real, _measured(run_dir))
        top = min(SEVERITIES.index(severity) for severity, _ in found.values())
        assert SEVERITIES.index("medium") == top, (real, _measured(run_dir))
        return
    # the same parts in the same order; a busy machine may add a cause between them (a phase it slowed)
    assert _in_order(_unranked(documented), _unranked(real)), (documented, real, _measured(run_dir))
    # the run, the heading, the top cause and its line: a busy machine too, as long as TD301 stays
    # high (sized on the median step, which steps another process slowed do not pull up)
    assert real[:4] == documented[:4], (real[:4], _measured(run_dir))


def test_the_readme_demo_block_lines_are_printed_lines(demo):
    """Every line of the block, but for numbers that are timings, is a line the run printed."""
    printed, _ = demo
    def skeleton(line: str) -> str:
        return re.sub(r"\d[\d,.]*", "N", line.rstrip())
    printed_lines = {skeleton(line) for line in printed.split("\n")}
    documented = [line for line in readme_block().split("\n") if line.strip() and line.strip() != "..."]
    fixed = [line for line in documented if not re.search(r"\d", line) and not line.startswith("  ")]
    missing = [line for line in fixed if skeleton(line) not in printed_lines]
    assert not missing, missing


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_the_demo_report_puts_the_causes_before_the_measurement_tables(demo, fmt):
    _, run_dir = demo
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "report", str(run_dir), "--format", fmt], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    body = done.stdout.split("</nav>")[-1]  # the page's table of contents names every section first
    causes = body.index("TD301")
    for title in ("Run summary", "Where the wall time went", "Memory at the peak", "Not measured in this run"):
        assert causes < body.index(title), (fmt, title)
