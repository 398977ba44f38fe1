"""The live panel's content (run/follow/panel.py); its place on a terminal is tested in a
pseudo-terminal (tests/integration/test_follow_panel.py)."""

import io
from types import SimpleNamespace

from torchdoctor.model.record import NvmlSample
from torchdoctor.run.follow.panel import ERASE_UP, LivePanel, _gpu_line

STATE = {"steps": 12345, "t": 321.0, "step_ms": 10.5, "wait_ms": 0.3, "samples_s": 6100.0, "mem": 2**31,
         "changes": 1, "last_change": "step-time changed at step 300", "windows": 3, "gpu": None}


def test_the_panel_shows_the_runs_figures():
    text = LivePanel(io.StringIO(), width=90).render(STATE)
    for shown in ("12,345", "10.50 ms", "0.30 ms", "6,100", "2.00 GiB", "step-time changed at step 300"):
        assert shown in text


def test_gpu_figures_when_nvml_answers():
    probes = SimpleNamespace(gpu=SimpleNamespace(sampler=SimpleNamespace(samples=[
        NvmlSample(t=1.0, gpu_util=87.0, power_w=250.0, power_limit_w=400.0, mem_used_bytes=30 * 2**30,
                   mem_total_bytes=80 * 2**30)])))
    line = _gpu_line(probes)
    assert line == "util 87% · power 250/400 W · memory 30.0/80.0 GiB"
    assert "util 87%" in LivePanel(io.StringIO()).render({**STATE, "gpu": line})
    assert _gpu_line(SimpleNamespace(gpu=SimpleNamespace(sampler=None))) is None


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
