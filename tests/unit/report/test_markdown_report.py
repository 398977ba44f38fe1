"""report.md: its sections, its tables, and that user strings cannot break either."""

import re

from helpers.reports import FIX_WITH_CODE, HOSTILE, empty_report, full_report, hostile_report, summary

from torchdoctor.model.findings import Report
from torchdoctor.report.markdown import render_markdown

UNESCAPED_PIPE = re.compile(r"(?<!\\)(?:\\\\)*\|")  # a pipe after an even number of backslashes


def cells(row: str) -> list[str]:
    """The cells of a GFM table row, split the way GitHub splits them."""
    inner = row.strip()[1:-1]
    bounds = [m.end() - 1 for m in UNESCAPED_PIPE.finditer(inner)]
    starts = [0] + [b + 1 for b in bounds]
    ends = bounds + [len(inner)]
    return [inner[s:e].strip() for s, e in zip(starts, ends)]


def tables(md: str) -> list[list[str]]:
    """Each table as its list of lines (header, delimiter, rows)."""
    found, current = [], []
    for line in md.split("\n"):
        if line.startswith("|"):
            current.append(line)
        elif current:
            found.append(current)
            current = []
    return found + ([current] if current else [])


def section(md: str, heading: str) -> str:
    """From `heading` to the next heading of the same or a higher level."""
    start = md.index(heading)
    body = md.index("\n", start)
    level = len(heading.split(" ")[0])
    end = re.search(r"^#{1,%d} " % level, md[body:], flags=re.MULTILINE)
    return md[start:body + end.start()] if end else md[start:]


def row(md: str, heading: str, label: str) -> list[str]:
    for line in section(md, heading).split("\n"):
        if line.startswith("|") and cells(line)[0] == label:
            return cells(line)
    raise AssertionError(f"no row {label!r} under {heading!r}")


def test_sections_come_in_report_order():
    md = render_markdown(full_report())
    headings = [line for line in md.split("\n") if line.startswith("## ")]
    assert headings == ["## Causes, ranked", "## Run summary", "## Where a step's time goes",
                        "## Not measured in this run", "## Environment", "## Notes"]  # the causes first
    assert md.startswith("# torchdoctor report: `train.py`\n")


def test_run_summary_table_shows_the_summary_values():
    md = render_markdown(full_report())
    assert row(md, "## Run summary", "steps measured / run")[1] == "30 / 33"
    assert row(md, "## Run summary", "steps/s")[1] == "10.0"
    assert row(md, "## Run summary", "samples/s")[1] == "320.0"
    assert row(md, "## Run summary", "step time mean / p50 / p90")[1] == "100.0 ms / 95.0 ms / 120.0 ms"
    assert row(md, "## Run summary", "wall time")[1] == "12.3 s"


def test_gpu_rows_say_not_measured_when_absent_and_show_values_when_present():
    cpu = render_markdown(Report(source="run", tool_version="0", summary=summary()))
    for label in ("GPU utilization", "GPU power", "peak GPU memory"):
        assert row(cpu, "## Run summary", label)[1] == "not measured"
    gpu_summary = summary(device="NVIDIA H100", gpu_util_mean=45.2, power_mean_w=200.4, power_limit_w=400.0,
                          peak_memory_bytes=3 * 2**30)
    gpu = render_markdown(Report(source="run", tool_version="0", summary=gpu_summary))
    assert row(gpu, "## Run summary", "GPU utilization")[1] == "45 %"
    assert row(gpu, "## Run summary", "GPU power")[1] == "200 W of 400 W limit"
    assert row(gpu, "## Run summary", "peak GPU memory")[1] == "3.00 GiB"


def test_time_split_shows_each_part_and_its_share_of_the_step():
    md = render_markdown(full_report())
    assert row(md, "## Where a step's time goes", "data wait")[1:] == ["40.0 ms", "40%"]
    assert row(md, "## Where a step's time goes", "forward + other")[1:] == ["30.0 ms", "30%"]
    assert row(md, "## Where a step's time goes", "logging")[1:] == ["0.0 ms", "0%"]


def test_time_split_is_not_invented_without_measured_steps():
    md = render_markdown(Report(source="run", tool_version="0",
                                summary=summary(steps_measured=0, step_time_s=None)))
    assert "No measured steps" in md
    assert "data wait" not in md


def test_ranked_table_rows_show_location_and_speedup_or_a_dash():
    md = render_markdown(full_report())
    body = tables(section(md, "## Causes, ranked"))[0][2:]
    assert [cells(line) for line in body] == [
        ["1", "`TD301`", "`slug-td301`", "medium", "`model.py:42`", "1.72x"],
        ["2", "`TD101`", "`slug-td101`", "high", "—", "1.25x"],
        ["3", "`TD201`", "`slug-td201`", "high", "`train.py:7`", "—"],
        ["4", "`TD703`", "`slug-td703`", "low", "`log.py:3`", "—"],
    ]


def test_each_finding_has_where_evidence_fix_and_estimate():
    md = render_markdown(full_report())
    first = section(md, "### 1. TD301")
    assert "**Where:** `model.py:42` in `_apply_prompt`" in first
    assert "message of TD301" in first
    assert ["share of step time", "41.2%"] in [cells(line) for line in tables(first)[0]]  # a label, a share
    assert "**Estimated speedup:** 1.72x — basis: basis of TD301" in first
    unestimated = section(md, "### 3. TD201")
    assert "**Estimated speedup:** not estimated — basis: basis of TD201" in unestimated
    assert ["lines", "`[41, 42]`"] in [cells(line) for line in tables(unestimated)[0]]
    assert "**Where:**" not in section(md, "### 2. TD101")  # a run-wide finding has no location


def test_fenced_code_in_a_fix_is_kept_intact():
    md = render_markdown(full_report())
    assert FIX_WITH_CODE in md  # `<this> | intact` inside the fence untouched


def test_an_unclosed_fence_in_a_fix_is_closed_before_the_next_section():
    report = full_report()
    report.findings[0].fix = "Try:\n```python\nx = 1"
    md = render_markdown(report)
    fence_lines = [line for line in md.split("\n") if line.startswith("```")]
    assert len(fence_lines) % 2 == 0
    assert "## Environment" in md


def test_hostile_strings_cannot_break_a_table_row():
    md = render_markdown(hostile_report())
    for table in tables(md):
        width = len(cells(table[0]))
        assert all(len(cells(line)) == width for line in table), table
    # The hostile text survives, escaped, inside one cell of each table it appears in.
    assert row(md, "## Environment", "a\\|b \\[red\\]x\\[/red\\] \\<script\\>")[1].startswith("a\\|b")


def test_no_raw_html_reaches_the_markdown():
    md = render_markdown(hostile_report())
    # Outside code spans `<script>` must be escaped; inside one (`...`) it is inert text.
    outside_code = re.sub(r"(`+).+?\1", "", md)
    assert "<script>" not in outside_code
    assert "&lt;script>" in md and "\\<script\\>" in md


def test_hostile_strings_stay_on_their_line_in_headings():
    md = render_markdown(hostile_report())
    assert md.startswith("# torchdoctor report: `a|b [red]x[/red] <script>.py`\n")
    heading = next(line for line in md.split("\n") if line.startswith("### 1."))
    assert heading.endswith("a|b [red]x[/red] &lt;script>")


def test_empty_report_is_a_short_valid_document():
    md = render_markdown(empty_report())
    assert md.startswith("# torchdoctor report\n")
    assert "## Causes, ranked\n\nNo findings." in md
    assert "## Environment" not in md and "## Not measured" not in md


def test_not_measured_and_environment_tables():
    md = render_markdown(full_report())
    assert row(md, "## Not measured in this run", "`TD402`") == [
        "`TD402`", "`no-mixed-precision`", "CPU run: tensor cores are GPU-only"]
    assert row(md, "## Environment", "torch threads")[1] == "8"
    assert row(md, "## Environment", "NCCL_DEBUG")[1] == "INFO"  # intraword `_` needs no escape
    assert "- Only 33 steps ran." in section(md, "## Notes")


def test_hostile_constant_is_what_the_tests_think_it_is():
    # Guard: the checks above are only meaningful if the fixture really is hostile.
    assert "|" in HOSTILE and "\n" in HOSTILE and "[red]" in HOSTILE and "<script>" in HOSTILE


def test_gpu_rows_give_the_reason_they_are_empty():
    cpu = render_markdown(Report(source="run", tool_version="0",
                                 summary=summary(gpu_metrics_missing="not measurable on CPU: this run used the CPU")))
    assert (row(cpu, "## Run summary", "GPU utilization, power, memory")[1]
            == "not measured (not measurable on CPU: this run used the CPU)")
