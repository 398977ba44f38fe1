"""Runtime findings checked against what `torchdoctor lint` says about the same files: a
measured cause that the source also shows is marked confirmed, and both sides link."""

from __future__ import annotations


from torchdoctor.model.paths import recorded_path, typed_path
from torchdoctor.model.findings import Finding, Report, Severity, Table
from torchdoctor.model.location import Location
from torchdoctor.model.record import RunRecord, StaticFinding
from torchdoctor.rules.base import make_finding
from torchdoctor.rules.registry import rule_by_code
from torchdoctor.rules.value_use import HOST_NEEDS_VALUE

# A static code that names the same cause as a different runtime code.
STATIC_TO_RUNTIME = {"TD105": "TD101"}


def _place_by_lint(finding, record: RunRecord) -> None:
    """A runtime finding measured without a line (TF32 off is a global setting) takes the line
    lint found for the same cause, when the executed files hold exactly one."""
    same = [sf for sf in record.static_findings if STATIC_TO_RUNTIME.get(sf.code, sf.code) == finding.code]
    if len(same) == 1:
        finding.location = Location(typed_path(same[0].path, record.run.cwd), same[0].line)


AHEAD_SEVERITIES = ("high", "medium")  # lint's default ranks: what a reader of the code would act on


def _lines_seen(record: RunRecord) -> set[tuple[str, int]]:
    """(absolute path, line) of every call and op site the op sampler recorded."""
    cwd = record.run.cwd
    d = record.dispatch
    return {(recorded_path(x.location.path, cwd), x.location.line) for x in [*d.api_calls, *d.sites]}


NOT_REACHED = ("Not reached in this run", "The training loop calls this code, but the bounded run ended before it "
               "ran, so it was not measured")
NO_STEP = ("From the source, no step measured", "This run timed no training step (see the run line), so nothing "
           "here was measured")


def _not_reached(sf: StaticFinding, cwd: str, why: tuple[str, str] = NOT_REACHED) -> Finding:
    """A habit lint sees where the run could not measure it (a function the training loop
    calls that the bounded run did not reach; a run with no step): ranked, as static, below
    every measured cause (low, no estimate)."""
    rule = rule_by_code(STATIC_TO_RUNTIME.get(sf.code, sf.code)) or rule_by_code(sf.code)
    return make_finding(
        rule, title=f"{why[0]}: {sf.message.split('. ')[0].rstrip('.')}",
        message=f"{sf.message} {why[1]}: `torchdoctor lint` found it by reading the source.",
        location=Location(typed_path(sf.path, cwd), sf.line), evidence={"static": True, "lint_code": sf.code,
                                                                          "lint_severity": sf.severity},
        speedup=None, basis="static: read from the source, not measured (the run did not reach it)",
        severity=Severity.LOW)


def link_static_findings(report: Report, record: RunRecord) -> None:
    if not record.static_findings:
        return
    cwd = record.run.cwd
    by_key: dict[tuple, StaticFinding] = {}
    for sf in record.static_findings:
        by_key.setdefault((sf.path, sf.line, STATIC_TO_RUNTIME.get(sf.code, sf.code)), sf)
    confirmed: set[int] = set()
    for finding in report.findings:
        if finding.location is None:
            _place_by_lint(finding, record)
        loc = finding.location
        if loc is None:
            continue
        sf = by_key.get((recorded_path(loc.path, cwd), loc.line, finding.code))
        if sf is None:
            continue
        confirmed.add(id(sf))
        finding.evidence["confirmed_by_lint"] = f"{sf.code} {sf.slug} at {typed_path(sf.path, cwd)}:{sf.line}"
        finding.message += f" `torchdoctor lint` flags the same line ({sf.code} {sf.slug})."
        if HOST_NEEDS_VALUE in sf.message and finding.severity != Severity.INFO:
            # lint follows the value to its use (an action handed to `envs.step` on a later line),
            # which the run's one-line reading cannot: the read is required, information
            finding.severity = Severity.INFO
            finding.evidence["value_needed_on_host"] = True
            finding.title += f" ({HOST_NEEDS_VALUE})"
            finding.message += f" Lint follows the value to where it is used: {sf.message}"
    seen = _lines_seen(record)
    for sf in record.static_findings:
        if sf.severity in AHEAD_SEVERITIES and id(sf) not in confirmed and not (sf.reached and record.steps):
            report.findings.append(_not_reached(sf, cwd, NOT_REACHED if record.steps else NO_STEP))
    rows = [[sf.code, sf.slug, f"{typed_path(sf.path, cwd)}:{sf.line}", sf.severity,
             "confirmed by this run" if id(sf) in confirmed else
             "not reached in this run" if not sf.reached else
             "ran, below what the run's rule reports" if (sf.path, sf.line) in seen else "not measured in this run"]
            for sf in record.static_findings if sf.severity != "info"]
    if rows:
        report.tables.append(Table(
            title="Static findings in the files this run executed",
            columns=["code", "slug", "where", "severity", "at runtime"],
            rows=rows,
            caption="From `torchdoctor lint` on the script and the user modules it imported, read after the run.",
        ))
