"""The live panel's content (run/follow/panel.py); its place on a terminal is tested in a
pseudo-terminal (tests/integration/test_follow_panel.py)."""

import io
from types import SimpleNamespace

from torchdoctor.run.follow.panel import ERASE_UP, LivePanel, _gpu_line

STATE = {"steps": 12345, "t": 321.0, "step_ms": 10.5, "wait_ms": 0.3, "samples_s": 6100.0, "mem": 2**31,
         "changes": 1, "last_change": "step-time changed at step 300", "windows": 3, "gpu": None}


def test_the_panel_shows_the_runs_figures():
    text = LivePanel(io.StringIO(), width=90).render(STATE)
    for shown in ("12,345", "10.50 ms", "0.30 ms", "6,100", "2.00 GiB", "step-time changed at step 300"):
        assert shown in text


def test_gpu_figures_when_nvml_answers():
    from helpers.gpu_fakes import GIB, FakeCuda, FakeNvml, sampled_probe

    probes = SimpleNamespace(gpu=sampled_probe(FakeCuda(), FakeNvml(figures={0: (87, 250_000, 30 * GIB)})))
    line = _gpu_line(probes)
    assert line == "util 87% · power 250/450 W · memory 30.0/80.0 GiB"
    assert "util 87%" in LivePanel(io.StringIO()).render({**STATE, "gpu": line})
    assert _gpu_line(SimpleNamespace(gpu=sampled_probe(FakeCuda(), FakeNvml(init_error=True)))) is None


def test_each_ranks_row_has_its_own_gpu_or_says_it_is_not_measurable():
    state = {"ranks": [{"rank": 0, "step": 1200, "step_ms": 33.0, "wait_ms": 0.1, "comm_ms": 0.9, "samples_s": 480.0,
                        "mem": 2**30, "gpu_util": 97.0, "gpu_power_w": 310.0, "gpu_mem": 41 * 2**30},
                       {"rank": 1, "step": 1199, "step_ms": 33.1, "wait_ms": 0.1, "comm_ms": 0.9, "samples_s": 480.0,
                        "mem": 2**30, "gpu_util": None, "gpu_power_w": None, "gpu_mem": None}],
             "t": 40.0, "changes": 0, "last_change": None}
    text = LivePanel(io.StringIO(), width=100).render(state)
    rows = {line.strip("│ ")[:1]: line for line in text.splitlines() if line.strip("│ ")[:2] in ("0 ", "1 ")}
    assert "97% · 310W · 41.0GiB" in rows["0"] and "1,200" in rows["0"]  # a 100-column terminal: nothing cut
    assert "not measurable" in rows["1"] and "%" not in rows["1"]


def test_the_current_top_findings_are_a_line_each_cut_at_the_panels_width():
    top = ["TD902 From step 301, steps became 2.26x slower and stayed so",
           "TD101 from step 301: Steps wait 17.6 ms for data (70% of each step) " + "and so on " * 20]
    text = LivePanel(io.StringIO(), width=80).render({**STATE, "top": top})
    lines = text.splitlines()
    assert any("1. TD902 From step 301, steps became 2.26x slower and stayed so" in line for line in lines)
    assert any("2. TD101 from step 301" in line and line.rstrip(" │").endswith("…") for line in lines)
    assert max(len(line) for line in lines) <= 80 + len("\x1b[1m\x1b[0m")  # cut, not folded onto more lines
    assert "top findings" not in LivePanel(io.StringIO(), width=80).render(STATE)


def test_the_script_printing_erases_the_panel_first():
    stream = io.StringIO()
    panel = LivePanel(stream)
    panel._state = STATE
    panel.on_step(None)
    drawn = panel._lines
    assert drawn > 3
    panel.on_output()
    assert stream.getvalue().endswith(ERASE_UP.format(n=drawn)) and panel._lines == 0
    panel.on_output()  # nothing on screen: nothing written
    assert stream.getvalue().endswith(ERASE_UP.format(n=drawn))


def test_no_panel_where_stderr_is_not_a_terminal():
    assert LivePanel.for_terminal(io.StringIO()) is None
    assert LivePanel.for_terminal(io.StringIO(), force=True) is None
