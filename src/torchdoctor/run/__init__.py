"""The run stage: everything that executes inside the user's process.

`runner.execute` runs the script under a `probeset.ProbeSet` (the probes in `probes/`, the
`--set` knobs in `knobs/`) and returns a RunRecord; `afterwards.add_evidence` adds the lint
and trace evidence to it once the script has ended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported inside `measure`: `tune` uses run.target without loading torch
    from pathlib import Path

    from torchdoctor.record import RunRecord
    from torchdoctor.run.runner import RunRequest


def measure(request: RunRequest, run_dir: Path) -> RunRecord:
    """The whole run stage: the script under the probes, then the evidence read after it."""
    from torchdoctor.run.afterwards import add_evidence
    from torchdoctor.run.runner import execute

    record = execute(request, run_dir)
    add_evidence(record, run_dir)
    return record
