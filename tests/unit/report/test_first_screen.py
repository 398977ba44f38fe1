"""What to change first, first: every format opens with one line on the run (and a busy
machine, when it was), then the ranked causes, then the measurement tables; a stalled or
crashed run leads with how it ended; table headers never break inside a word at any width;
evidence reads as labels; the HTML page shows no literal backtick."""

import re

import pytest
from helpers.reports import full_report

from torchdoctor.model.findings import Table
from torchdoctor.report import render
from torchdoctor.report.common import evidence_label, evidence_value
from torchdoctor.report.terminal import render_text

HEADERS = ["rank", "step", "step ms", "compute ms", "comm", "copy", "idle", "main idle cause", "kernels",
           "median kernel µs", "step-limit", "est. speedup"]


def _report():
    report = full_report()
    report.tables.append(Table(title="GPU time per step", columns=HEADERS,
                               rows=[[0, "ProfilerStep#1", 10.0, "20%", "0%", "0%", "80%", "host CPU work 79%", 1,
                                      2000, "yes", "1.2x"]], caption="Shares of each step."))
    return report


def _first(text: str, *needles: str) -> int:
    found = [text.index(n) for n in needles if n in text]
    assert found, needles
    return min(found)


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_the_causes_come_before_the_measurement_tables(fmt):
    out = render(_report(), fmt)
    assert _first(out, "30 of 33 steps measured") < _first(out, "TD301")  # the run's one line opens it
    body = out.split("</nav>")[-1]  # the page's table of contents lists every section first
    causes = _first(body, "TD301")
    for table in ("GPU time per step", "Run summary", "Not measured in this run"):
        assert causes < body.index(table), (fmt, table)


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_a_busy_machine_is_said_above_the_causes(fmt):
    report = _report()
    report.summary.machine_busy = "The machine was busy during the measured steps (load 5.2 on 2 CPUs)."
    out = render(report, fmt)
    assert out.index("load 5.2 on 2 CPUs") < out.index("TD301")


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_a_stalled_run_leads_with_the_stall_not_with_a_step_time(fmt):
    report = _report()
    report.summary.status, report.summary.ranks = "stalled", 2
    report.summary.ended = "rank 1 made no progress for 3 s at ddp_job.py:24 in train"
    out = render(report, fmt)
    first = " ".join(out.split("TD301")[0].split())  # the terminal wraps the line
    assert "stalled: rank 1 made no progress for 3 s at ddp_job.py:24" in first and "2 ranks" in first
    assert "ms/step" not in first


@pytest.mark.parametrize("width", range(24, 161, 4))
def test_table_headers_never_break_inside_a_word(width):
    text = render_text(_report(), width=width)
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.startswith("┏"):
            continue
        header_lines = []
        for row in lines[i + 1:]:
            if row.startswith("┡"):
                break
            header_lines.append([cell.strip() for cell in row.strip("┃").split("┃")])
        joined = [" ".join(part for part in column if part) for column in zip(*header_lines)]
        for header in joined:
            for word in header.split():
                assert any(word in h.split() for h in HEADERS + ["#", "code", "cause", "severity", "where"]), \
                    (width, header, word)
    for header in HEADERS:  # and every header is shown, whole, as a grid column or a list's label
        assert all(word in text for word in header.split())


def test_a_table_too_wide_for_the_terminal_becomes_one_line_per_row():
    text = render_text(_report(), width=40)
    assert "GPU time per step" in text and "main idle cause: host CPU work 79%" in text.replace("\n  ", " ")


def test_evidence_reads_as_labels_with_units_and_shares_as_percentages():
    assert evidence_label("idle_ms_per_step") == "idle per step (ms)"
    assert evidence_label("busbw_gbps") == "bus bandwidth (GB/s)"
    assert evidence_label("peak_reserved_bytes") == "peak reserved"
    assert evidence_value("peak_reserved_bytes", 26214400) == "25.0 MiB"
    assert evidence_value("share_of_step_time", 0.4123) == "41.2%"
    assert evidence_value("steps", 12) == "12"


def test_the_html_page_shows_no_literal_backtick():
    report = _report()
    report.notes.append("Run `torchdoctor memory SCRIPT` to size it.")
    report.tables[-1].title = "From `torchdoctor lint`"
    page = render(report, "html")
    outside_code_blocks = re.sub(r"<pre>.*?</pre>", "", page, flags=re.S)
    assert "`" not in outside_code_blocks
    assert "<code>torchdoctor memory SCRIPT</code>" in page and "From <code>torchdoctor lint</code>" in page
