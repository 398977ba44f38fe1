"""report.html as a person sees it: the demo's run opened in a real headless Chromium; the
first cause's card is on the first screen (1280x900).

The browser is the system's (Debian's `chromium` package; `.ci/run` installs it where it
can), driven by Playwright; no browser is ever downloaded. Without either, the test skips
and says which is missing. `pytest --update-screenshots` saves the light and dark
screenshots and the page's facts into benchmarks/results/.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = "examples/demo_prompt_encoder.py"
CHROMIUM = os.environ.get("TORCHDOCTOR_CHROMIUM", "/usr/bin/chromium")
# Headless, offline and quiet: no sandbox (CI runs as root), no GPU, nothing fetched in the background.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
MAX_PAGE_BYTES = 3 * 2**20  # the budget for one self-contained page

pytestmark = pytest.mark.slow

# Every drawn chart and what it has to show, from the page itself: its section, its size on
# screen, how many data points it says it drew, and how many marks have a visible box.
CHARTS_JS = """() => [...document.querySelectorAll('svg.chart')].map(svg => {
  const box = svg.getBoundingClientRect();
  const marks = [...svg.querySelectorAll('path.series, circle, rect')].filter(e => {
    const b = e.getBBox(); return b.width > 0 || b.height > 0; });
  return {section: svg.closest('section').id, width: box.width, height: box.height,
          points: Number(svg.dataset.points), marks: marks.length};
})"""


@pytest.fixture(scope="module")
def sync_playwright():
    """Playwright's entry point, or a skip saying what is missing (before the demo runs for nothing)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed: pip install -e '.[test]'")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (.ci/run does where it can), "
                    "or set TORCHDOCTOR_CHROMIUM")
    return sync_playwright


@pytest.fixture(scope="module")
def demo_dir(demo_run) -> Path:
    """The demo, run as a user would (a fresh process; shared with the README test: conftest.py)."""
    return demo_run[1]


def test_the_demo_report_in_a_real_browser(sync_playwright, demo_dir, tmp_path, update_screenshots):
    page_file = demo_dir / "report.html"
    size = page_file.stat().st_size
    assert size < MAX_PAGE_BYTES
    report = json.loads((demo_dir / "report.json").read_text())
    shots = ROOT / "benchmarks" / "results" if update_screenshots else tmp_path
    url = page_file.resolve().as_uri()
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=ARGS,
            viewport={"width": 1100, "height": 900}, color_scheme="light")
        try:
            requests, problems = [], []
            context.route("**/*", lambda route: (requests.append(route.request.url),
                                                 route.continue_() if route.request.url == url else route.abort()))
            page = context.new_page()
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in
                    ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.goto(url, wait_until="load")

            assert problems == [] and requests == [url]  # one request: the file itself
            charts = page.evaluate(CHARTS_JS)
            # memory: the run's own storage accounting is drawn on CPU too
            assert {c["section"] for c in charts} == {"split", "steps", "data-wait", "memory"}
            assert all(c["width"] > 500 and c["height"] > 40 and c["points"] > 0 and c["marks"] > 0 for c in charts)
            steps_chart = next(c for c in charts if c["section"] == "steps")
            assert steps_chart["points"] == report["summary"]["steps_total"]  # every step, warm-up included
            gpu_text = page.locator("section#gpu").inner_text()  # a CPU run: said, not drawn as an empty chart
            assert "not measured: not measurable on CPU" in gpu_text
            assert page.locator("section#gpu svg").count() == 0
            assert "not measurable on CPU" in page.locator("section#memory").inner_text()  # the device-level figures

            cards = page.locator("article.finding")
            assert cards.count() == len(report["findings"]) >= 2
            demo_lines = (ROOT / DEMO).read_text().splitlines()
            for i, finding in enumerate(report["findings"]):
                line = finding["location"] and finding["location"]["line"]
                if line and finding["location"]["path"] == DEMO:
                    hit = cards.nth(i).locator("figure.source .line.hit")
                    assert hit.inner_text().split(None, 1)[1].strip() == demo_lines[line - 1].strip()
                assert "Estimated speedup" in cards.nth(i).inner_text()

            # what to change first, first: on a 1280x900 screen, without scrolling, the first cause's card
            # shows its heading and the line to change
            page.set_viewport_size({"width": 1280, "height": 900})
            page.evaluate("window.scrollTo(0, 0)")
            first = cards.first
            for part in (first, first.locator("header"), first.locator("figure.source .line.hit")):
                box = part.bounding_box()
                assert box is not None and 0 <= box["y"] and box["y"] + (0 if part is first else box["height"]) <= 900
            assert page.locator("section").first.get_attribute("id") == "findings"
            page.set_viewport_size({"width": 1100, "height": 900})

            light = page.evaluate("getComputedStyle(document.querySelector('.tdr')).backgroundColor")
            page.screenshot(path=str(shots / "html_report-light.png"), full_page=True)
            page.emulate_media(color_scheme="dark")
            dark = page.evaluate("getComputedStyle(document.querySelector('.tdr')).backgroundColor")
            page.screenshot(path=str(shots / "html_report-dark.png"), full_page=True)
            assert (light, dark) == ("rgb(255, 255, 255)", "rgb(13, 17, 23)")
            page.emulate_media(media="print")
            assert page.evaluate("getComputedStyle(document.querySelector('.tdr')).backgroundColor") == light
            pdf = page.pdf(format="A4")
            assert pdf.startswith(b"%PDF") and problems == []
            version = context.browser.version if context.browser else "unknown"
        finally:
            context.close()
    if update_screenshots:
        facts = {"page_bytes": size, "steps": report["summary"]["steps_total"], "charts": charts,
                 "findings": len(report["findings"]), "sections": page_sections(page_file), "chromium": version,
                 "print_pdf_bytes": len(pdf)}
        (shots / "html_report.json").write_text(json.dumps(facts, indent=2) + "\n")


def page_sections(page_file: Path) -> list[str]:
    return re.findall(r'<section id="([a-z-]+)">', page_file.read_text(encoding="utf-8"))
