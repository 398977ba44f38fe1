"""report.json: the Report as plain JSON (DESIGN.md §3), findings in ranked order."""

from __future__ import annotations

import dataclasses
import json

from torchdoctor.model.findings import Report
from torchdoctor.report.common import ranked_findings
from torchdoctor.model.serialize import to_plain


def render_json(report: Report) -> str:
    # The contract promises ranked findings; rank a copy so the caller's Report is untouched.
    ranked = dataclasses.replace(report, findings=ranked_findings(report))
    # Same encoding as Report.save (serialize.write_json), so printed and saved files agree.
    return json.dumps(to_plain(ranked), indent=2, allow_nan=False) + "\n"
