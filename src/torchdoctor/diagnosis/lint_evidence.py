"""Runtime findings checked against what `torchdoctor lint` says about the same files: a
measured cause that the source also shows is marked confirmed, and both sides link."""

from __future__ import annotations


from torchdoctor.model.paths import recorded_path, typed_path
from torchdoctor.model.findings import Report, Table
from torchdoctor.model.location import Location
from torchdoctor.model.record import RunRecord, StaticFinding

# A static code that names the same cause as a different runtime code.
STATIC_TO_RUNTIME = {"TD105": "TD101"}


def _place_by_lint(finding, record: RunRecord) -> None:
    """A runtime finding measured without a line (TF32 off is a global setting) takes the line
    lint found for the same cause, when the executed files hold exactly one."""
    same = [sf for sf in record.static_findings if STATIC_TO_RUNTIME.get(sf.code, sf.code) == finding.code]
    if len(same) == 1:
        finding.location = Location(typed_path(same[0].path, record.run.cwd), same[0].line)


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
    rows = [[sf.code, sf.slug, f"{typed_path(sf.path, cwd)}:{sf.line}", sf.severity,
             "confirmed by this run" if id(sf) in confirmed else "not measured in this run"]
            for sf in record.static_findings if sf.severity != "info"]
    if rows:
        report.tables.append(Table(
            title="Static findings in the files this run executed",
            columns=["code", "slug", "where", "severity", "at runtime"],
            rows=rows,
            caption="From `torchdoctor lint` on the script and the user modules it imported, read after the run.",
        ))
