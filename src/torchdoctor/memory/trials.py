"""Batch-size trials in fresh processes: `python -m torchdoctor.memory.child` per size (under
`torch.distributed.run` with `--nproc-per-node`).

A fresh process per trial, as `tune` does: a trial that runs out of memory, or leaves the
allocator's cache full, cannot change the next one's numbers, and every rank of a DDP trial
starts and ends together (the launcher stops all ranks when one fails).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from torchdoctor.model.limits import Limits
from torchdoctor.run.children import output_tail, run_bounded, torchrun_command
from torchdoctor.rules.noise import throughput
from torchdoctor.diagnosis.ranks import rank_record_paths
from torchdoctor.memory.child import VERDICT_FILE
from torchdoctor.memory.search import Unreachable
from torchdoctor.model.memory_record import FAILED, FITS, OOM, BatchTrial
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.facts import training_loader
from torchdoctor.model.serialize import SchemaError

BACKSTOP_S = 30.0  # after --max-seconds a trial stops itself; past this more, it is stopped
ERROR_TAIL_CHARS = 400
NO_LOADER = ("no DataLoader fed the training steps (batches made by the script itself, e.g. a get_batch() "
             "function): the batch_size knob changes DataLoader(batch_size=...); the batch measured here is the model "
             "input's first dimension. To try other sizes, run `torchdoctor memory` once per value of the script's own "
             "batch-size argument")


@dataclass
class TrialSettings(Limits):  # the limits are keywords; `memory` passes its own (short trials)
    target: str
    args: list[str]
    module: bool = False
    limit_bytes: int | None = None  # made real in the trial process (see child.py)
    limit_mode: str | None = None  # rlimit | cuda | measure (benchmarks: the address space's growth)
    nproc_per_node: int = 1
    estimate: bool = False  # on fake tensors (estimate.py): memory without a device, no timings


class ProcessTrials:
    """A `TrialRunner` (search.py): one fresh process (or one DDP job) per batch size."""

    def __init__(self, settings: TrialSettings, out_dir: Path,
                 on_trial: Callable[[int | None, BatchTrial], None] | None = None) -> None:
        self.settings = settings
        self.out_dir = out_dir
        self.on_trial = on_trial or (lambda batch, trial: None)
        self.records: dict[int, RunRecord] = {}  # by batch size, for the summary run directory
        self.partial: RunRecord | None = None  # what the trial that was interrupted wrote
        self._count = 0

    def baseline(self) -> tuple[BatchTrial, str | None]:
        record, trial = self._run(None)
        if record is None:
            return trial, None
        loader = training_loader(record)
        if loader is None:
            return trial, NO_LOADER
        if loader.batch_size is None:
            where = f" at {loader.created_at}" if loader.created_at else ""
            return trial, (f"the training DataLoader{where} batches with its own batch_sampler, so its batch size "
                           "is not a DataLoader argument the knob can change")
        return trial, None

    def at(self, batch: int) -> BatchTrial:
        record, trial = self._run(batch)
        if record is not None:
            knob = next((k for k in record.knobs if k.name == "batch_size"), None)
            if knob is not None and not knob.applied:
                raise Unreachable(knob.detail)
        return trial

    # ---- one trial ----------------------------------------------------------------------
    def command(self, batch: int | None, run_dir: Path) -> list[str]:
        s = self.settings
        child = "torchdoctor.memory.child"
        cmd = torchrun_command(s.nproc_per_node, child) if s.nproc_per_node > 1 else [sys.executable, "-m", child]
        cmd += ["--out", str(run_dir), *s.limits().argv()]
        if batch is not None:
            cmd += ["--batch-size", str(batch)]
        if s.limit_mode:
            cmd += ["--limit-bytes", str(s.limit_bytes or 0), "--limit-mode", s.limit_mode]
        if s.module:
            cmd.append("--module")
        if s.estimate:
            cmd.append("--estimate")
        return cmd + [s.target, *s.args]

    def _run(self, batch: int | None) -> tuple[RunRecord | None, BatchTrial]:
        self._count += 1
        run_dir = self.out_dir / "trials" / f"{self._count:02d}-batch-{batch if batch is not None else 'script'}"
        run_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        limit = self.settings.max_seconds + BACKSTOP_S
        try:
            code = _run_process(self.command(batch, run_dir), run_dir / "output.log", limit)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the trial was stopped the same way and wrote what it had
            self.partial = _load(run_dir, _rank_records(run_dir) if self.settings.nproc_per_node > 1 else None)
            raise
        seconds = time.monotonic() - started
        ranks = _rank_records(run_dir) if self.settings.nproc_per_node > 1 else None
        record = _load(run_dir, ranks)
        relative = str(run_dir.relative_to(self.out_dir))
        if record is None:
            if code is None:
                outcome, detail = FAILED, f"the trial did not end within {limit:.0f} s and was stopped"
            elif code == -signal.SIGKILL:  # the kernel's out-of-memory killer sends SIGKILL
                outcome, detail = OOM, "the trial was killed (SIGKILL): the system's out-of-memory killer?"
            else:
                outcome, detail = FAILED, _log_tail(run_dir / "output.log") or f"the trial exited with code {code}"
            trial = BatchTrial(batch_size=batch or 0, outcome=outcome, seconds=round(seconds, 2), run_dir=relative,
                               detail=detail)
        else:
            trial = to_trial(record, batch, seconds, relative)
            if self.settings.estimate:  # fake tensors compute nothing: their step times mean nothing
                trial.samples_per_s = trial.step_s = trial.relative_sem = None
            self.records[trial.batch_size] = record
            if ranks is not None:
                _apply_verdict(trial, run_dir, ranks)
        self.on_trial(batch, trial)
        return record, trial


def to_trial(record: RunRecord, requested: int | None, seconds: float, run_dir: str) -> BatchTrial:
    loader = training_loader(record)
    memory = record.memory
    # no loader (a get_batch() of the script's own): the model input's first dimension, as TD503 reads it
    batch = requested or (loader.batch_size if loader and loader.batch_size else 0) or (
        memory.batch_size if memory is not None and memory.batch_size else 0)
    trial = BatchTrial(batch_size=batch, outcome=FITS, seconds=round(seconds, 2), run_dir=run_dir)
    if memory is not None:
        trial.samples = memory.batch_size
        trial.peak_bytes, trial.phase_peaks = memory.peak_bytes, dict(memory.phase_peaks)
        trial.device_peak_bytes = memory.peak_reserved_bytes
    if memory is not None and memory.failure is not None:
        trial.outcome, trial.detail = OOM, memory.failure.message
        trial.samples = trial.samples or memory.failure.batch_size
    elif record.run.status == "crashed" or (record.run.status == "exited" and record.run.exit_code):
        trial.outcome, trial.detail = FAILED, _last_line(record.run.error) or f"exited with code {record.run.exit_code}"
    elif not record.steps:
        trial.outcome, trial.detail = FAILED, "no optimizer step completed"
    rate = throughput(record)
    if rate is not None and trial.outcome == FITS:
        trial.samples_per_s, trial.step_s, trial.relative_sem = rate.samples_per_s, rate.step_s, rate.relative_sem
    if loader is not None and loader.dataset_len and batch:
        per_epoch = loader.dataset_len / batch
        trial.epoch_steps = int(per_epoch) if loader.drop_last else math.ceil(per_epoch)
        if trial.epoch_steps < record.run.warmup + record.run.steps_requested and trial.outcome == FITS:
            trial.detail = (f"an epoch is {trial.epoch_steps} steps at this size: the trial's steps cross epoch "
                            "ends (loader restarts, evaluation), so its samples/s is not a steady step's")
    return trial


def _apply_verdict(trial: BatchTrial, run_dir: Path, ranks: list[tuple[int, RunRecord]]) -> None:
    """A DDP trial fits only if every rank fitted; its peak is the largest rank's. Without the
    ranks' verdict a rank failed: its own record (`ranks`: each rank's, by rank) says how."""
    import json

    try:
        verdict = json.loads((run_dir / VERDICT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        verdict = None
    if verdict is not None and verdict.get("all_fit"):
        trial.outcome = FITS
        if isinstance(verdict.get("max_peak_bytes"), int):
            trial.peak_bytes = verdict["max_peak_bytes"]
        phases = verdict.get("max_phase_peaks")
        if isinstance(phases, dict) and all(isinstance(v, int) for v in phases.values()):
            trial.phase_peaks = dict(phases)
        trial.device_peak_bytes = verdict.get("max_device_peak_bytes") or trial.device_peak_bytes
        return
    # a rank that ran out of memory explains the others (they lost their peer in a collective)
    judged = sorted(((to_trial(record, trial.batch_size, 0.0, ""), rank) for rank, record in ranks),
                    key=lambda tr: (tr[0].outcome != OOM, tr[1]))
    for failed, rank in judged:
        if failed.outcome != FITS:
            trial.outcome, trial.detail = failed.outcome, f"rank {rank}: {failed.detail}"
            trial.samples_per_s = trial.step_s = None
            return
    trial.outcome, trial.detail = FAILED, "the ranks did not reach a verdict (a rank ended without a record)"


def _rank_records(run_dir: Path) -> list[tuple[int, RunRecord]]:
    """Each rank's record that can be read, by rank."""
    found = []
    for path in rank_record_paths(run_dir):
        try:
            found.append((int(path.parent.name.split("-", 1)[1]), RunRecord.load(path)))
        except (SchemaError, ValueError):
            continue
    return found


def _load(run_dir: Path, ranks: list[tuple[int, RunRecord]] | None) -> RunRecord | None:
    """`ranks` (a DDP trial's, None for one process): the rank that ran out of memory, else
    rank 0's (or the first there is)."""
    if ranks is not None:
        records = [record for _, record in ranks]
        failed = [r for r in records if r.memory is not None and r.memory.failure is not None]
        return (failed or records or [None])[0]
    try:
        return RunRecord.load(run_dir / "record.json")
    except SchemaError:
        return None


def _run_process(cmd: list[str], log_path: Path, timeout_s: float) -> int | None:
    """The exit code; None when it had to be stopped at `timeout_s`."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    with open(log_path, "w", encoding="utf-8") as log:
        return run_bounded(cmd, timeout_s, stdout=log, stderr=subprocess.STDOUT, env=env)


def _last_line(text: str | None) -> str:
    return output_tail(text, ERROR_TAIL_CHARS, last_line=True)


def _log_tail(path: Path) -> str:
    try:
        return _last_line(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return ""
