"""Runtime findings confirmed by the static findings of the files a run executed."""


from helpers.records import record

from torchdoctor.diagnosis.lint_evidence import link_static_findings
from torchdoctor.model.findings import Finding, Report, Severity
from torchdoctor.model.record import Location, StaticFinding


def _finding(code, line):
    return Finding(code=code, slug="s", severity=Severity.MEDIUM, title="t", message="Measured.",
                   location=Location("train.py", line, "f"), evidence={}, fix="f",
                   estimated_speedup=None, estimate_basis="b")


def test_same_cause_same_line_is_confirmed_and_both_sides_link():
    rec = record()  # cwd /w
    rec.static_findings = [StaticFinding("TD201", "host-sync", "medium", "/w/train.py", 12, "loss.item()"),
                           StaticFinding("TD105", "dataloader-sync-loading", "medium", "/w/train.py", 5, "nw=0"),
                           StaticFinding("TD303", "grad-zero-not-none", "low", "/w/train.py", 30, "z")]
    report = Report(source="run", tool_version="0",
                    findings=[_finding("TD201", 12), _finding("TD101", 5), _finding("TD202", 12)])
    link_static_findings(report, rec)
    host, stall, mask = report.findings
    assert host.evidence["confirmed_by_lint"] == "TD201 host-sync at train.py:12"
    assert stall.evidence["confirmed_by_lint"].startswith("TD105")  # the static name of the same cause
    assert "confirmed_by_lint" not in mask.evidence  # same line, different cause
    rows = {r[0]: r[-1] for r in report.tables[0].rows}
    assert rows == {"TD201": "confirmed by this run", "TD105": "confirmed by this run",
                    "TD303": "not measured in this run"}


def test_no_static_findings_adds_nothing():
    report = Report(source="run", tool_version="0", findings=[_finding("TD201", 12)])
    link_static_findings(report, record())
    assert report.tables == [] and report.findings[0].evidence == {}


def test_a_global_setting_takes_the_one_line_lint_found_for_it():
    """TF32 off is measured as a setting (no line); lint saw the line that set it."""
    rec = record()
    rec.static_findings = [StaticFinding("TD403", "no-tf32", "medium", "/w/train.py", 15, "allow_tf32 = False")]
    unplaced = _finding("TD403", 1)
    unplaced.location = None
    report = Report(source="run", tool_version="0", findings=[unplaced])
    link_static_findings(report, rec)
    assert (str(unplaced.location), unplaced.evidence["confirmed_by_lint"]) == ("train.py:15", "TD403 no-tf32 at train.py:15")
    rec.static_findings.append(StaticFinding("TD403", "no-tf32", "medium", "/w/other.py", 3, "again"))
    twice = _finding("TD403", 1)
    twice.location = None
    link_static_findings(Report(source="run", tool_version="0", findings=[twice]), rec)
    assert twice.location is None  # two candidate lines: none is guessed


def test_a_read_lint_follows_to_a_host_use_is_information_in_the_run_too():
    """`actions = actions.detach().cpu().numpy()` then `envs.step(actions)` on a later line: the
    run reads one line and calls it a habit; lint follows the name to the environment's step and
    says the host needs it. The run's finding takes lint's judgement."""
    from torchdoctor.rules.value_use import HOST_NEEDS_VALUE

    rec = record()
    rec.static_findings = [StaticFinding("TD201", "host-sync", "info", "/w/train.py", 230,
                                         f"`.cpu()` reads a value the program acts on right away: {HOST_NEEDS_VALUE}")]
    read = _finding("TD201", 230)
    report = Report(source="run", tool_version="0", findings=[read])
    link_static_findings(report, rec)
    assert read.severity == Severity.INFO and read.evidence["value_needed_on_host"]
    rec.static_findings[0] = StaticFinding("TD201", "host-sync", "medium", "/w/train.py", 230, "`.item()` every step")
    kept = _finding("TD201", 230)
    link_static_findings(Report(source="run", tool_version="0", findings=[kept]), rec)
    assert kept.severity == Severity.MEDIUM


def test_a_run_with_no_step_still_shows_what_the_source_shows():
    """A script that trains by hand (no backward(), no optimizer) ran to its end: no step to time,
    but lint's findings on the code that ran are still ranked, static and low."""
    rec = record(steps=0, warmup=0)
    rec.static_findings = [StaticFinding("TD201", "host-sync", "medium", "/w/train.py", 45, "`loss.item()` every step")]
    report = Report(source="run", tool_version="0", findings=[])
    link_static_findings(report, rec)
    (f,) = report.findings
    assert (f.code, f.location.line, f.severity) == ("TD201", 45, Severity.LOW) and f.title.startswith("From the source")
