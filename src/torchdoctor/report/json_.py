"""report.json: the Report as plain JSON (DESIGN.md §3), findings in ranked order."""

from __future__ import annotations

import dataclasses

from torchdoctor.model.findings import Report
from torchdoctor.model.serialize import dumps
from torchdoctor.report.common import ranked_findings


def render_json(report: Report) -> str:
    # The contract promises ranked findings; rank a copy so the caller's Report is untouched.
    ranked = dataclasses.replace(report, findings=ranked_findings(report))
    # The same encoding as Report.save (serialize.write_json), so printed and saved files agree.
    return dumps(ranked)
