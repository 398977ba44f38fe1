"""The Python API: what `torchdoctor run`, `report` and `lint` do, from a notebook or a
custom loop. The same code paths as the command line (`run.inprocess` around
`run.probed.ProbedRun`, `pipeline.diagnose_run_dir`, `lint.api.lint_text`).

    with torchdoctor.watch(steps=30, warmup=3, out="runs/try1") as doc:
        train()                      # ends after warmup + 30 optimizer steps
    doc.report                       # the ranked findings, as objects; doc.report.to_json()
    doc                              # in a notebook: the HTML report inline

    report = torchdoctor.diagnose("runs/try1")          # a run directory's report
    torchdoctor.lint_source(text, path="train.py")      # lint findings of source text

Importing this module loads no torch: `watch` loads the probes when its block starts.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Sequence

from torchdoctor.model.limits import DEFAULT_WARMUP
from torchdoctor.errors import InputError, UsageError
from torchdoctor.model.findings import Report

if TYPE_CHECKING:
    from torchdoctor.lint.engine import LintFinding
    from torchdoctor.model.record import RunRecord
    from torchdoctor.run.inprocess import InProcessRun


def diagnose(run_dir: str | os.PathLike[str]) -> Report:
    """The report of a run directory, re-made from its record.json (`torchdoctor report RUN_DIR`).
    Raises InputError (one line) for a folder that is not a run directory."""
    from torchdoctor.pipeline import diagnose_run_dir

    return diagnose_run_dir(Path(run_dir))


def lint_source(text: str, path: str = "<string>", *, select: Sequence[str] | None = None,
                ignore: Sequence[str] | None = None, min_severity: str = "low") -> list[LintFinding]:
    """`torchdoctor lint` on source text: its findings, in line order. `path` names the text
    (and finds its pyproject.toml settings, as if the file were there); `# noqa` applies.
    Raises InputError (one line: where and why) when the text cannot be parsed."""
    from torchdoctor.lint.api import LintOptions, lint_text
    from torchdoctor.lint.config import SEVERITIES
    from torchdoctor.lint.selection import parse_codes

    if not isinstance(text, str):
        raise UsageError(f"lint_source takes the source as a str, not {type(text).__name__}; "
                         "read a file with Path(...).read_text()")
    if min_severity not in SEVERITIES:
        raise UsageError(f"min_severity must be one of {', '.join(SEVERITIES)}, not {min_severity!r}")
    options = LintOptions(select=parse_codes(_codes(select), "select"), ignore=parse_codes(_codes(ignore), "ignore"),
                          min_severity=min_severity, jobs=1)
    result = lint_text(text, path, options)
    fatal = [p for p in result.problems if p.fatal]
    if fatal:
        raise InputError(f"cannot lint {fatal[0]}")
    return result.findings


def _codes(values: Sequence[str] | str | None) -> list[str] | None:
    return None if values is None else [values] if isinstance(values, str) else list(values)


def watch(steps: int | None = None, warmup: int = DEFAULT_WARMUP, out: str | os.PathLike[str] | None = None, *,
          max_seconds: float | None = None, stop: bool = True, trace: bool | None = None,
          knobs: Sequence[str] = (), follow: bool = False, follow_every_s: float = 10.0) -> Watch:
    """Measure the code in a `with` block as `torchdoctor run` measures a script.

    `warmup` optimizer steps run unmeasured, then up to `steps` are measured. With `stop=True`
    the block ends there (the rest of the block is skipped, the code after it runs); with
    `stop=False` training goes on and measuring ends at the next batch taken from a DataLoader
    (or at the end of the block). `max_seconds` ends the measuring the same way. The run
    directory is written to `out` (default ./torchdoctor-runs/<time>-<file>/); `knobs` are
    `--set` values ("workers=4"); `trace` as `--trace`. `steps` defaults to DEFAULT_STEPS and
    `max_seconds` to DEFAULT_MAX_SECONDS.

    `follow=True` follows the whole block as `run --follow` does: no step or time limit unless
    given, the timeline and live.json written every `follow_every_s` seconds, changes found along
    the way, the black box on an exception or a SIGTERM.
    """
    from torchdoctor.run.inprocess import MeasureSpec

    spec = MeasureSpec.of(steps, warmup, out, max_seconds, trace, knobs, follow=follow, follow_every_s=follow_every_s)
    return Watch(spec, stop=bool(stop), caller=sys._getframe(1).f_code.co_filename)


class Watch:
    """What `watch()` returns: the context manager, then the run's results (`report`,
    `record`, `run_dir`). In a notebook it shows as the HTML report."""

    def __init__(self, spec, stop: bool, caller: str | None) -> None:
        self._spec, self._stop, self._caller = spec, stop, caller
        self._run: InProcessRun | None = None

    def __enter__(self) -> Watch:
        from torchdoctor.run.inprocess import InProcessRun, script_label

        if self._run is not None:
            raise UsageError("this watch() block has run already; call torchdoctor.watch(...) again for a new run")
        label, script_path = script_label(self._caller)
        self._run = run = InProcessRun(self._spec, label, script_path, stop="raise" if self._stop else "flag")
        run.start(optimizers=_existing_optimizers())
        if self._stop:
            run.probed.enter_code()
        else:
            run.probed.session.subscribe(_FinishAfterStop(run))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        from torchdoctor.pipeline import finish_in_process
        from torchdoctor.run.outcome import Outcome

        run = self._run
        if run is None or run.finished:  # stop=False: measuring ended inside the block already
            return False
        swallowed = run.stop_probes(exc_type, exc, tb)
        # the block raised: what was measured is kept, and the exception goes on to the caller
        outcome = Outcome() if exc_type is None or swallowed else Outcome.of(exc)
        finish_in_process(run, *outcome.astuple())
        return swallowed

    # ---- results ---------------------------------------------------------------------
    @property
    def report(self) -> Report:
        return self._result("report")

    @property
    def record(self) -> RunRecord:
        return self._result("record")

    @property
    def run_dir(self) -> Path:
        if self._run is None or self._run.run_dir is None:
            raise UsageError("the watch() block has not started; use it as `with torchdoctor.watch() as doc:`")
        return self._run.run_dir

    def _result(self, name: str):
        value = getattr(self._run, name, None) if self._run is not None else None
        if value is None:
            raise UsageError(f"doc.{name} is ready once the watch() block has ended; read it after the `with` block")
        return value

    def _repr_html_(self) -> str:
        if self._run is None or self._run.report is None:
            return "<p>torchdoctor: the watch() block has not ended yet.</p>"
        return self._run.report._repr_html_()

    def __repr__(self) -> str:
        run = self._run
        if run is None or run.record is None:
            return f"<torchdoctor.Watch steps={self._spec.steps} warmup={self._spec.warmup}: not finished>"
        codes = ", ".join(f.code for f in run.report.findings[:5]) if run.report else ""
        return (f"<torchdoctor.Watch {run.record.run.status} after {len(run.record.steps)} steps, "
                f"findings: {codes or 'none'}; run directory: {run.run_dir}>")


class _FinishAfterStop:
    """`watch(stop=False)`: the loop goes on after the limit, so measuring ends at the first
    safe point after it: a batch taken from a DataLoader (outside every torch hook)."""

    def __init__(self, run: InProcessRun) -> None:
        self.run = run

    def on_batch(self, in_eval: bool) -> None:
        from torchdoctor.pipeline import finish_in_process

        if self.run.stop_requested and not self.run.finished:
            finish_in_process(self.run, "completed")


def _existing_optimizers() -> int:
    """How many torch optimizers exist already (made in an earlier cell, before the block)."""
    from torch.optim import Optimizer

    # type(), not isinstance(): isinstance reads `__class__`, which some of torch's deprecated
    # module proxies answer with a warning
    return sum(1 for obj in gc.get_objects() if issubclass(type(obj), Optimizer))
