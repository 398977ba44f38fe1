"""A script measured in this process as `torchdoctor run` measures it, before the diagnosis:
the run stage, then the evidence read after it (the first two steps of `torchdoctor.pipeline`)."""

from __future__ import annotations

from pathlib import Path

from torchdoctor.diagnosis.evidence import add_evidence
from torchdoctor.model.record import RunRecord
from torchdoctor.run.runner import RunRequest, execute


def measure(request: RunRequest, run_dir: Path) -> RunRecord:
    record = execute(request, run_dir)
    add_evidence(record, run_dir)
    return record
