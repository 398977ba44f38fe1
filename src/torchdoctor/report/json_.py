"""report.json: the Report as plain JSON (DESIGN.md §3)."""

from __future__ import annotations

import json

from torchdoctor.findings import Report
from torchdoctor.serialize import to_plain


def render_json(report: Report) -> str:
    return json.dumps(to_plain(report), indent=2, allow_nan=False) + "\n"
