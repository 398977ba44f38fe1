"""The diagnose stage: findings from every engine → one ranked Report.

`run.analyze` (RunRecord → Report) runs the runtime rules and merges the evidence of the
other engines: the profiler trace's findings (`trace_evidence`) and what `lint` says about
the executed files (`lint_evidence`). `trace.trace_report` and `tune.tune_report` build the
reports of those commands.
"""

from __future__ import annotations

import os
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchdoctor.findings import Report


class _CallableStage(types.ModuleType):
    """`torchdoctor.diagnose` names two things: this package (the diagnose stage, imported as
    `torchdoctor.diagnose.run`, ...) and the API's `torchdoctor.diagnose(RUN_DIR)`. Python sets a
    package as an attribute of its parent when it is imported, so a function of that name in
    `torchdoctor/__init__.py` would be replaced by this module on the first such import. So the
    module itself is made callable (through its `__class__`, which Python lets a module change),
    and both names work whichever is used first."""

    def __call__(self, run_dir: str | os.PathLike[str]) -> Report:
        from torchdoctor.api import diagnose

        return diagnose(run_dir)


sys.modules[__name__].__class__ = _CallableStage
