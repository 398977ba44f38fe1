"""A busy machine is said first, in every format, with its numbers and what it does to the
estimates."""

import json

from helpers.records import record

from torchdoctor.diagnosis.run import analyze
from torchdoctor.model.record import Contention
from torchdoctor.report import RENDERERS


def _busy():
    rec = record(steps=20)
    rec.contention = Contention(window_s=2.0, thread_runqueue_s=0.6, involuntary_switches=900, load_start=3.1,
                                load_end=3.6, cpus=2)
    return analyze(rec)


def test_a_busy_machine_is_the_first_thing_every_format_says():
    report = _busy()
    [warning] = report.warnings
    assert "waited for a CPU 30%" in warning and "load average 3.6 on 2 CPUs" in warning
    assert "1.43x" in warning and "noise band to at least 10 %" in warning  # 1 / (1 - 0.3)
    text = RENDERERS["text"](report)
    first, second = text.splitlines()[:2]  # the run's one line, then the busy machine, before any cause
    assert first.startswith("torchdoctor · train.py") and second.strip().startswith("busy machine: other processes")
    assert text.count("Busy machine") + text.count("busy machine") == 1  # said once, not as a warning too
    md = RENDERERS["md"](report)
    assert md.index("**Busy machine:** other processes") < md.index("## Causes, ranked")
    html = RENDERERS["html"](report)
    assert html.index('class="busy"') < html.index('id="summary"') and 'class="warning"' not in html
    assert json.loads(RENDERERS["json"](report))["warnings"] == [warning]


def test_a_quiet_machine_gets_no_warning():
    rec = record(steps=20)
    rec.contention = Contention(window_s=2.0, thread_runqueue_s=0.01, load_start=0.2, load_end=0.3, cpus=2)
    report = analyze(rec)
    assert report.warnings == [] and "warning" not in RENDERERS["text"](report).splitlines()[0]
