"""Terminal rendering: stable plain text, user strings printed literally."""

from helpers.reports import FIX_WITH_CODE, empty_report, finding, full_report, hostile_report

from torchdoctor.model.findings import NotMeasured, Report
from torchdoctor.model.record import Location
from torchdoctor.report.terminal import render_text

ANSI_ESC = "\x1b"


def test_markup_in_user_strings_prints_literally():
    text = render_text(hostile_report())
    assert "[bold]a|b [red]x[/red] <script>.py:9" in text  # the path, unrendered, on one line
    assert "[red]x[/red] <script>" in text


def test_a_trailing_backslash_is_printed_once():
    # rich.markup.escape would double it when no tag follows; Text pieces leave it alone.
    report = Report(source="run", tool_version="0",
                    findings=[finding("TD201", None, location=Location("C:\\data\\", 3, "f\\"))])
    assert "where: C:\\data\\:3 in f\\\n" in render_text(report)


def test_emoji_codes_and_control_characters_stay_text():
    report = Report(source="run", tool_version="0",
                    findings=[finding("TD201", None, message=":fire: done \x1b[2J")])
    text = render_text(report)
    assert ":fire: done \\x1b[2J" in text
    assert ANSI_ESC not in text


def test_plain_output_has_no_colour_codes_and_colour_output_does(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # must not leak into the plain rendering
    assert ANSI_ESC not in render_text(full_report())
    assert ANSI_ESC in render_text(full_report(), color=True)


def test_lines_fit_the_width_and_carry_no_trailing_blanks():
    text = render_text(full_report(), width=72)
    assert all(len(line) <= 72 for line in text.split("\n"))
    assert all(line == line.rstrip() for line in text.split("\n"))


def test_summary_table_and_details_for_each_finding():
    text = render_text(full_report())
    assert text.startswith("torchdoctor · train.py · step-limit · 30 of 33 steps measured · 95.0 ms/step (p50) · cpu\n")
    assert "steps measured / run: 30 / 33" in text
    assert "data wait 40.0 ms (40%)" in text
    assert "GPU utilization" not in text  # a CPU run leaves the unmeasured GPU rows out
    assert "More causes, ranked (1 after the top 3)" in text  # the fourth cause is a row of a table
    table_row = next(line for line in text.split("\n") if "TD703" in line)
    assert "slug-td703" in table_row and "log.py:3" in table_row and "low" in table_row
    assert "1. TD301 slug-td301 · medium\n   title of TD301\n" in text
    assert "where: model.py:42 in _apply_prompt" in text
    assert "estimated speedup: 1.72x — basis of TD301" in text
    assert "estimated speedup: not estimated — basis of TD201" in text


def test_fix_code_is_printed_verbatim_and_indented():
    text = render_text(full_report())
    for line in FIX_WITH_CODE.split("\n"):
        assert f"     {line}\n" in text


def test_not_measured_and_notes_are_listed():
    text = render_text(full_report())
    assert "TD402 no-mixed-precision: CPU run: tensor cores are GPU-only" in text
    assert "note: Only 33 steps ran." in text


def test_rules_not_measured_for_the_same_reason_are_grouped():
    gpu_only = "needs a CUDA device; this run used the CPU"
    report = Report(source="run", tool_version="0", not_measured=[
        NotMeasured("TD103", "pageable-transfer", gpu_only), NotMeasured("TD999", "other", "no trace"),
        NotMeasured("TD402", "no-mixed-precision", gpu_only)])
    text = render_text(report)
    assert text.count(gpu_only) == 1
    assert f"  {gpu_only}:\n    TD103 pageable-transfer, TD402 no-mixed-precision\n" in text
    assert "  TD999 other: no trace\n" in text


def test_empty_report_prints_only_no_findings():
    assert render_text(empty_report()) == "No findings.\n"


def test_the_terminal_width_comes_from_columns_and_paths_are_never_cut(monkeypatch):
    import io

    from torchdoctor.model.findings import Table
    from torchdoctor.report import emit

    report = full_report()
    path = "examples/a_rather_long_directory_name/and_a_long_training_script_name.py:1234"
    report.tables.append(Table(title="Static findings", columns=["code", "where", "severity"],
                               rows=[["TD201", path, "medium"]]))
    for columns in ("70", "160"):
        monkeypatch.setenv("COLUMNS", columns)
        out = io.StringIO()
        emit(report, "text", out)
        lines = out.getvalue().splitlines()
        assert max(len(line) for line in lines) <= int(columns)
        assert "…" not in out.getvalue()
        assert "1234" in out.getvalue().replace("\n", "").replace("│", "").replace(" ", "")
