"""Reports built by hand for renderer tests: each one a shape a renderer must handle."""

from torchdoctor.model.figures import (Figures, GpuPoint, GpuSeries, RunBar, SourceExcerpt, StepMarker, StepPoint,
                                 StepSeries)
from torchdoctor.model.findings import Finding, NotMeasured, Report, RunSummary, Severity, Table, TimeSplit
from torchdoctor.model.record import Location

# Everything a Report carries may come from user code: pipes and newlines break Markdown
# tables, brackets are rich markup, angle brackets are HTML.
HOSTILE = "a|b\n[red]x[/red] <script>"
# What a source line, a run name or a device name could hold to break out of HTML markup.
HOSTILE_HTML = "\"'><script>alert(1)</script><img src=x onerror=alert(2)></code></pre>`x`"

FIX_WITH_CODE = (
    "Move the copy out of the loop:\n"
    "```python\n"
    "for x, y in loader:  # keep <this> | intact\n"
    "    x = x.to(device, non_blocking=True)\n"
    "```\n"
    "Then re-run."
)


def finding(code, speedup, severity=Severity.MEDIUM, location=Location("train.py", 7, "step"), **kw):
    base = dict(code=code, slug=f"slug-{code.lower()}", severity=severity, title=f"title of {code}",
                message=f"message of {code}", location=location, evidence={"ops_per_step": 768},
                fix=f"fix of {code}", estimated_speedup=speedup, estimate_basis=f"basis of {code}")
    base.update(kw)
    return Finding(**base)


def summary(**kw) -> RunSummary:
    base = dict(script="train.py", status="step-limit", wall_s=12.34, steps_total=33, steps_measured=30,
                step_time_s=0.1, step_time_p50_s=0.095, step_time_p90_s=0.12, steps_per_s=10.0,
                samples_per_s=320.0,
                split=TimeSplit(data_wait_s=0.04, forward_and_other_s=0.03, backward_s=0.02, optimizer_s=0.01))
    base.update(kw)
    return RunSummary(**base)


def full_report() -> Report:
    """Several findings in deliberately unranked order, with and without location/speedup."""
    findings = [
        finding("TD201", None, Severity.HIGH, evidence={"syncs_per_step": 12, "lines": [41, 42]}),
        finding("TD101", 1.25, Severity.HIGH, location=None, fix=FIX_WITH_CODE),
        finding("TD703", None, Severity.LOW, location=Location("log.py", 3, "")),
        finding("TD301", 1.72, Severity.MEDIUM, location=Location("model.py", 42, "_apply_prompt"),
                evidence={"ops_per_step": 768, "share_of_step_time": 0.4123456}),
    ]
    return Report(source="run", tool_version="0.1", summary=summary(), findings=findings,
                  not_measured=[NotMeasured("TD402", "no-mixed-precision", "CPU run: tensor cores are GPU-only")],
                  environment={"torch": "2.13", "torch threads": 8, "NCCL_DEBUG": "INFO"},
                  notes=["Only 33 steps ran."])


def empty_report() -> Report:
    return Report(source="run", tool_version="0.1")


def hostile_report() -> Report:
    """Every user-controllable string set to something that breaks naive rendering."""
    loc = Location(f"[bold]{HOSTILE}.py", 9, HOSTILE)
    point = StepPoint(step=1, steps=1, kind=HOSTILE, time_s=0.1, time_min_s=0.1, time_max_s=0.1, data_wait_s=0.01,
                      data_wait_max_s=0.01)
    return Report(
        source="run", tool_version="0.1",
        summary=summary(script=f"{HOSTILE}.py", device=HOSTILE),
        findings=[finding("TD201", 1.5, location=loc, title=HOSTILE, message=HOSTILE, slug=HOSTILE,
                          evidence={HOSTILE: HOSTILE}, fix=HOSTILE, estimate_basis=HOSTILE)],
        not_measured=[NotMeasured("TD402", HOSTILE, HOSTILE)],
        environment={HOSTILE: HOSTILE},
        notes=[HOSTILE],
        tables=[Table(title=HOSTILE_HTML, columns=[HOSTILE_HTML], rows=[[HOSTILE_HTML]], caption=HOSTILE_HTML)],
        figures=Figures(
            steps=StepSeries(points=[point], markers=[StepMarker(1, HOSTILE_HTML)], steps_total=1),
            gpu=GpuSeries(device=HOSTILE_HTML, points=[GpuPoint(0.0, 50.0, 120.0, 1500.0, 2**30),
                                                        GpuPoint(1.0, 60.0, 130.0, 1600.0, 2**30)],
                          power_limit_w=300.0, mem_total_bytes=2**32),
            comparison=[RunBar(HOSTILE_HTML, HOSTILE_HTML, 10.0, verdict=HOSTILE_HTML),
                        RunBar(HOSTILE, HOSTILE, 12.0, 11.0, 13.0, verdict=HOSTILE, significant=True)],
        ),
        sources=[SourceExcerpt(loc.path, 9, first_line=8, lines=[HOSTILE_HTML, HOSTILE], status=HOSTILE_HTML,
                               note=HOSTILE_HTML, sha256=HOSTILE)],
    )
