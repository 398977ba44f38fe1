"""report.html: self-contained, escaped, every section drawn or said "not measured"."""

import re
from html.parser import HTMLParser

import pytest
from helpers.records import loader, record
from helpers.reports import empty_report, full_report, hostile_report

from torchdoctor.diagnosis.run import analyze
from torchdoctor.model.figures import Figures, RunBar, StepSeries
from torchdoctor.model.findings import Report
from torchdoctor.model.record import CudaMemory, NvmlRecord, NvmlSample
from torchdoctor.report.html import render_html, render_html_fragment
from torchdoctor.report.html.sections import SECTIONS
from torchdoctor.report.html.svg import nice_ticks

# Every element the renderer writes. A user string that became markup would add another
# (script, img, iframe, ...) or an attribute outside ATTRIBUTES.
ELEMENTS = {"html", "head", "meta", "title", "style", "body", "div", "header", "h1", "h2", "h3", "h4", "p", "nav",
            "ol", "ul", "li", "a", "section", "footer", "dl", "dt", "dd", "table", "thead", "tbody", "tr", "th", "td",
            "code", "pre", "span", "strong", "article", "figure", "figcaption", "svg", "path", "rect", "circle",
            "text", "g"}
ATTRIBUTES = {"lang", "charset", "http-equiv", "content", "name", "class", "id", "href", "viewbox", "role",
              "aria-label", "data-points", "d", "x", "y", "width", "height", "cx", "cy", "r", "text-anchor"}


class Page(HTMLParser):
    """The parsed page: elements with their attributes, the visible text, sections by id."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(markup)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    @property
    def visible(self) -> str:
        return "".join(self.text)


def section(markup: str, section_id: str) -> str:
    match = re.search(rf'<section id="{section_id}">(.*?)</section>', markup, flags=re.S)
    assert match, f"no section {section_id}"
    return match.group(1)


def cpu_run(steps=12, **per_step) -> Report:
    rec = record(steps=steps, warmup=2, **per_step)
    rec.loaders = [loader()]
    return analyze(rec)


def gpu_run() -> Report:
    rec = record(steps=20, warmup=2, cuda=True)
    rec.nvml = NvmlRecord(available=True, device_name="NVIDIA GeForce RTX 4090", samples=[
        NvmlSample(t=0.1 * i, gpu_util=30.0 + i, power_w=200.0, power_limit_w=450.0, sm_clock_mhz=2400.0,
                   sm_clock_max_mhz=2520.0, mem_used_bytes=(6 + i % 2) * 2**30, mem_total_bytes=24 * 2**30)
        for i in range(22)])
    rec.cuda_memory = CudaMemory(device_total_bytes=24 * 2**30, peak_allocated_bytes=5 * 2**30,
                                 peak_reserved_bytes=6 * 2**30, alloc_retries=0, ooms=0)
    return analyze(rec)


def test_hostile_strings_stay_text_everywhere():
    markup = render_html(hostile_report())
    page = Page(markup)
    assert {tag for tag, _ in page.elements} <= ELEMENTS
    assert {name for _, attrs in page.elements for name in attrs} <= ATTRIBUTES
    classes = [token for _, attrs in page.elements for token in (attrs.get("class") or "").split()]
    assert all(re.fullmatch(r"[a-z0-9-]+", token) for token in classes), classes
    assert all(attrs["href"].startswith("#") for tag, attrs in page.elements if tag == "a")
    # ... and each hostile string is on the page as the text it is, in the card, tables and charts.
    assert page.visible.count("<script>alert(1)</script>") >= 4
    assert "[red]x[/red] <script>" in page.visible
    assert "could not be drawn" not in markup


def test_the_page_loads_nothing_and_runs_nothing():
    markup = render_html(gpu_run())
    page = Page(markup)
    tags = {tag for tag, _ in page.elements}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed"}
    assert not re.search(r"https?:|//[a-z]|url\(|@import", markup)
    csp = next(a["content"] for t, a in page.elements if t == "meta" and a.get("http-equiv"))
    assert "default-src 'none'" in csp


def test_a_cpu_run_says_not_measured_for_gpu_sections_and_draws_the_rest():
    markup = render_html(cpu_run(eval_s=0.0))
    for sid in ("gpu", "memory"):
        body = section(markup, sid)
        assert "not measured: not measurable on CPU" in body and "<svg" not in body
    for sid in ("split", "steps", "data-wait"):
        body = section(markup, sid)
        assert "<svg" in body and "not measured" not in body
        points = [int(n) for n in re.findall(r'data-points="(\d+)"', body)]
        assert points and min(points) > 0


def test_a_gpu_run_draws_utilization_power_against_its_limit_clock_and_memory():
    markup = render_html(gpu_run())
    gpu = section(markup, "gpu")
    assert gpu.count("<svg") == 3
    assert "mean power 200 W of its 450 W limit (44%)" in gpu
    assert "power limit 450 W" in gpu and "maximum SM clock 2520 MHz" in gpu
    memory = section(markup, "memory")
    assert memory.count("<svg") == 1 and "PyTorch peak allocated 5.00 GiB" in memory
    assert "device total 24.00 GiB" in memory


def test_memory_peaks_without_nvml_memory_are_drawn_as_bars():
    report = gpu_run()
    for point in report.figures.gpu.points:
        point.mem_used_bytes = None
    memory = section(render_html(report), "memory")
    assert 'data-points="3"' in memory and "peak reserved" in memory


def test_no_steps_says_so_instead_of_an_empty_chart():
    rec = record(steps=0, warmup=0)
    markup = render_html(analyze(rec))
    for sid in ("steps", "data-wait"):
        assert "not measured: no optimizer step was observed" in section(markup, sid)
    assert "<svg" not in section(markup, "steps")


def test_a_run_without_dataloaders_has_no_data_wait_chart():
    body = section(render_html(analyze(record(steps=6, warmup=1))), "data-wait")
    assert "not measured: no DataLoader was iterated" in body and "<svg" not in body


def test_a_report_from_before_figures_existed_asks_for_a_re_render():
    markup = render_html(full_report())  # a summary but no figures: a schema-1 report.json
    assert "older torchdoctor" in section(markup, "steps") and "<svg" not in section(markup, "steps")
    assert "<svg" in section(markup, "split")  # the split comes from the summary, which it has


def test_ten_thousand_steps_stay_small_and_say_they_were_downsampled():
    report = cpu_run(steps=10_000, eval_s=0.0)
    markup = render_html(report)
    assert len(markup.encode()) < 400_000  # the page: ~2 charts of <= 500 points, not 10,000
    steps = section(markup, "steps")
    assert "10,002 steps are drawn as" in steps and "downsampled" in steps
    assert int(re.search(r'data-points="(\d+)"', steps).group(1)) <= 2 * 500


def test_many_markers_become_ticks_along_the_top():
    rec = record(steps=400, warmup=2)
    evaluated = rec.steps[::5]
    for step in evaluated:
        step.eval_s = 0.01
    steps = section(render_html(analyze(rec)), "steps")
    assert 'class="rug mk-eval"' in steps and f"evaluation ({len(evaluated)}×, ticks along the top)" in steps
    few = record(steps=40, warmup=2)
    few.steps[20].eval_s = 0.01
    steps = section(render_html(analyze(few)), "steps")
    assert steps.count('class="mk mk-eval"') == 1 and "rug" not in steps


def test_finding_cards_in_ranked_order_with_evidence_fix_and_estimate():
    markup = render_html(full_report())
    cards = re.findall(r'<article class="finding sev-(\w+)" id="finding-(\d)">.*?<code>(TD\d+)</code>', markup)
    assert [(sev, code) for sev, _, code in cards] == [("medium", "TD301"), ("high", "TD101"), ("high", "TD201"),
                                                      ("low", "TD703")]
    first = section(markup, "findings").split('id="finding-2"')[0]
    assert "Estimated speedup: 1.72x" in first and "basis of TD301" in first
    assert "<th>share of step time</th><td>41.2%</td>" in first  # a readable label, a share as one
    # the fix's fenced block is a code block, its `<this>` shown literally
    assert "<pre><code>for x, y in loader:  # keep &lt;this&gt; | intact" in markup


def test_renders_every_report_shape_without_a_broken_section():
    for report in (empty_report(), full_report(), hostile_report(), cpu_run(), gpu_run()):
        assert "could not be drawn" not in render_html(report)
    assert "No findings." in render_html(empty_report())


def test_a_failing_section_is_reported_on_the_page_not_raised(monkeypatch):
    report = full_report()
    report.figures = Figures(steps=StepSeries())
    report.figures.steps = "not a series"  # what a bug elsewhere could hand a section
    markup = render_html(report)
    assert "this section could not be drawn: AttributeError" in markup
    assert "Causes, ranked" in markup  # the other sections are still there


def test_comparison_bars_show_each_runs_band_and_verdict():
    report = Report(source="compare", tool_version="0", figures=Figures(comparison=[
        RunBar("before", "samples/s", 100.0, 95.0, 105.0, "baseline"),
        RunBar("after", "samples/s", 221.0, 216.0, 226.0, "2.21x samples/s (±2.0%)", True, 2.21, 0.02),
        RunBar("noise", "samples/s", 101.0, None, None, "no measurable change (1.01x, ±5.0%)", False, 1.01, 0.05)]))
    body = section(render_html(report), "comparison")
    assert body.count('class="whisker"') == 2  # the run without a noise estimate has no band to draw
    assert ">2.21x (±2.0%)<title>2.21x samples/s (±2.0%)</title>" in body  # short on the chart, full on hover
    assert ">no change (1.01x, ±5.0%)<" in body and "noise unknown (too few steps)" in body
    assert 'class="bar-run"' in body and 'class="bar-same"' in body and 'class="bar-base"' in body


def test_the_fragment_is_the_page_body_with_its_scoped_style():
    fragment = render_html_fragment(full_report())
    assert fragment.startswith("<style>") and "<html" not in fragment and "<body" not in fragment
    assert '<div class="tdr">' in fragment and "Causes, ranked" in fragment


def test_every_section_is_a_function_of_the_report_alone():
    for build in SECTIONS:
        assert build(empty_report()) is None or build.__name__ == "findings"


@pytest.mark.parametrize("lo,hi,expected", [(0, 1, [0, 0.2, 0.4, 0.6, 0.8, 1.0]), (0, 0.108, [0, 0.025, 0.05, 0.075,
                                                                                                    0.1])])
def test_ticks_are_round_numbers_inside_the_range(lo, hi, expected):
    assert nice_ticks(lo, hi) == pytest.approx(expected)


def test_a_gpu_run_whose_nvml_returned_nothing_says_so():
    rec = record(steps=6, warmup=1, cuda=True)
    rec.nvml = NvmlRecord(available=True, device_name="A100", samples=[])
    markup = render_html(analyze(rec))
    for sid in ("gpu", "memory"):
        assert "not measured: NVML returned no samples" in section(markup, sid)
        assert "<svg" not in section(markup, sid)


def test_a_damaged_record_never_puts_nan_into_the_svg():
    rec = record(steps=8, warmup=1)
    rec.steps[4].end = float("nan")
    rec.steps[5].data_wait_s = float("inf")
    markup = render_html(analyze(rec))
    geometry = [v for tag, attrs in Page(markup).elements if tag in ("path", "rect", "circle", "text")
                for k, v in attrs.items() if k in ("d", "x", "y", "width", "height", "cx", "cy")]
    assert geometry and not [v for v in geometry if re.search(r"nan|inf", v, flags=re.I)]
