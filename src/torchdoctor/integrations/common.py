"""What the Lightning and Hugging Face callbacks share: a measured fit on every rank (the same
`InProcessRun` as `torchdoctor.watch()`, stopped by flag), a stop that all ranks agree on, the
framework's own count of micro-steps, and the lines that tell the user what was found.

Every rank runs the probes, so a sampled step costs every rank the same and every rank
reaches the step limit at the same step; rank 0 alone writes the run directory.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchdoctor.model.record import ProbeNote
from torchdoctor.pipeline import finish_in_process
from torchdoctor.run.outcome import Outcome
from torchdoctor.run.inprocess import InProcessRun, MeasureSpec, main_script, script_label

if TYPE_CHECKING:
    from torchdoctor.model.findings import Finding, Report

TOP_FINDINGS = 3  # findings logged through the trainer's logger and printed


class FrameworkRun:
    def __init__(self, spec: MeasureSpec, framework: str, rank: int = 0, world_size: int = 1) -> None:
        label, script_path = script_label(main_script())
        self.framework = framework
        self.run = InProcessRun(spec, label, script_path, stop="flag", writes=rank == 0)
        self.vote = StopVote() if world_size > 1 else None
        self.world_size = world_size
        self.micro_steps = 0  # batches the framework ran (forward + backward each) while measuring

    @property
    def measuring(self) -> bool:
        return self.run.started and not self.run.finished

    def start(self, optimizers: int) -> None:
        self.run.start(optimizers=optimizers)

    def should_stop(self) -> bool:
        """At a point every rank reaches at the same batch: has the limit come (on any rank)?"""
        local = self.run.stop_requested
        return self.vote.any(local) if self.vote is not None else local

    def end(self, status: str = "completed", exc: BaseException | None = None) -> Report | None:
        if not self.measuring:
            return self.run.report
        outcome = Outcome.of(exc) if exc is not None else Outcome(status)
        self.run.stop_probes()
        notes = self._micro_step_note() + self._one_rank_of_many_note()
        return finish_in_process(self.run, *outcome.astuple(), notes=notes)

    def _one_rank_of_many_note(self) -> list[ProbeNote]:
        """Under DDP the callback's report is rank 0's alone: say what that leaves out."""
        if self.world_size < 2:
            return []
        return [ProbeNote("ranks", f"this report is rank 0's of {self.world_size} ranks: every rank measured and "
                                   f"stopped together, but the callback does not gather their records, so the Ranks, "
                                   f"DDP and all-reduce sections and the cross-rank rules (TD601-TD607) are missing, "
                                   f"and samples/s is rank 0's alone, not the job's. For all of it, run the unchanged "
                                   f"script as `torchdoctor run --nproc-per-node {self.world_size} train.py`")]

    def _micro_step_note(self) -> list[ProbeNote]:
        """The framework's count of micro-steps against the probes' `backward()` calls: they
        differ when backward runs where the probes cannot see it (a custom engine)."""
        seen = self.run.probed.session.backward_calls if self.run.probed else 0
        if self.micro_steps <= 0 or abs(seen - self.micro_steps) <= 1:  # the stop may fall between the two
            return []
        return [ProbeNote("steps", f"{self.framework} ran {self.micro_steps} micro-steps while measuring, but "
                                   f"{seen} backward() calls were seen: micro-batch counts per step may be off")]

    def summary_line(self) -> str:
        report, record, run_dir = self.run.report, self.run.record, self.run.run_dir
        if report is None or record is None:
            return ""
        found = "; ".join(finding_line(f) for f in report.findings[:TOP_FINDINGS]) or "no findings"
        more = f" (+{len(report.findings) - TOP_FINDINGS} more)" if len(report.findings) > TOP_FINDINGS else ""
        return (f"torchdoctor: {record.run.status} after {len(record.steps)} steps of {self.framework}: {found}{more}; "
                f"run directory: {run_dir} (open {Path(run_dir) / 'report.html'} for the charts)")

    def print_summary(self) -> None:
        line = self.summary_line()
        if line:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()


class CallbackResults:
    """What a callback measured, on the rank that writes: `report`, `record`, `run_dir` (None
    until the measuring has ended, and on every other rank)."""

    _measured: FrameworkRun | None = None

    @property
    def report(self) -> Report | None:
        return self._measured.run.report if self._measured else None

    @property
    def record(self):
        return self._measured.run.record if self._measured and self._measured.run.writes else None

    @property
    def run_dir(self) -> Path | None:
        return self._measured.run.run_dir if self._measured and self._measured.run.writes else None


def finding_line(finding: Finding) -> str:
    where = f" at {finding.location.path}:{finding.location.line}" if finding.location else ""
    estimate = f", est. {finding.estimated_speedup:.2f}x" if finding.estimated_speedup else ""
    return f"{finding.code} {finding.slug} ({finding.severity.value}{estimate}){where}"


def summary_metrics(report: Report) -> dict[str, float]:
    """Numbers a trainer's logger can plot, from the report's summary."""
    out: dict[str, float] = {"torchdoctor/findings": float(len(report.findings))}
    summary = report.summary
    if summary is None:
        return out
    for name, value in (("step_time_ms", summary.step_time_s and summary.step_time_s * 1e3),
                        ("steps_per_s", summary.steps_per_s), ("samples_per_s", summary.samples_per_s)):
        if value is not None:
            out[f"torchdoctor/{name}"] = float(value)
    return out


def summary_params(report: Report, run_dir: Path | None) -> dict[str, Any]:
    """The top findings as text a logger keeps with the run's hyperparameters."""
    params: dict[str, Any] = {"torchdoctor/run_dir": str(run_dir)}
    for i, finding in enumerate(report.findings[:TOP_FINDINGS], 1):
        params[f"torchdoctor/finding_{i}"] = f"{finding_line(finding)}: {finding.title}"
    return params


class StopVote:
    """Any rank's stop stops every rank, decided at the same batch on all of them: a rank that
    left the loop alone would leave the others waiting in their next collective. The vote is a
    one-number all-reduce on the CPU (gloo), so it adds no GPU synchronization, and it runs
    outside the op sampler's modes, so the sampler does not count it as the framework's ops."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.group = None
        if dist.is_available() and dist.is_initialized() and dist.get_backend() != "gloo":
            self.group = dist.new_group(backend="gloo")  # every rank makes it, in the same order

    def any(self, local: bool) -> bool:
        import torch
        from torch.utils._python_dispatch import _disable_current_modes

        if not (self.dist.is_available() and self.dist.is_initialized()):
            return local
        with _disable_current_modes(), torch._C.DisableTorchFunction():
            flag = torch.tensor([1 if local else 0], dtype=torch.int32)
            self.dist.all_reduce(flag, op=self.dist.ReduceOp.MAX, group=self.group)
            return bool(flag[0])
