"""The memory command's work after parsing: what to fit in, the search, and the memory
directory (the script's own batch's record with the trials added, diagnosed like a run, so
`torchdoctor report DIR` re-renders it)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from torchdoctor.model.units import format_bytes
from torchdoctor.errors import ScriptFailed, UsageError
from torchdoctor.model.findings import Report
from torchdoctor.memory.search import BatchSearch, Capacity, TrialRunner
from torchdoctor.memory.trials import ProcessTrials, TrialSettings
from torchdoctor.model.memory_record import FITS, BatchTrial
from torchdoctor.model.record import ProbeNote, RunRecord
from torchdoctor.rules.facts import training_loader
from torchdoctor.rules.memory import recommended_batch
from torchdoctor.run.signals import current as current_signals

# A CUDA context and the libraries it loads take 0.3-0.6 GiB depending on the GPU, driver and
# CUDA version, and the caching allocator rounds blocks up and keeps a cache: without a GPU in
# the run these are kept free, stated as assumptions.
ASSUMED_CONTEXT_BYTES = 2**29
ASSUMED_ALLOCATOR_SHARE = 0.05


class _Baseline:
    """The runner with its first trial done once: the capacity depends on what it measured."""

    def __init__(self, runner: ProcessTrials) -> None:
        self.runner = runner
        self._first: tuple[BatchTrial, str | None] | None = None

    def baseline(self) -> tuple[BatchTrial, str | None]:
        if self._first is None:
            self._first = self.runner.baseline()
        return self._first

    def at(self, batch: int) -> BatchTrial:
        return self.runner.at(batch)


def capacity_for(record: RunRecord | None, total: int | None, source: str,
                 headroom: int | None = None) -> Capacity | None:
    """What a batch must fit in. `headroom`: the user's own (--headroom), else measured or assumed."""
    memory = record.memory if record is not None else None
    on_cuda = memory is not None and memory.device_total_bytes is not None
    if total is None:
        if not on_cuda:
            return None
        total = memory.device_total_bytes
        source = f"this GPU ({record.environment.device_name or memory.device})"
    if headroom is not None:
        return Capacity(total, headroom, source, "given with --headroom")
    if on_cuda:
        outside = memory.outside_pytorch_bytes or 0
        return Capacity(total, outside, source,
                        "measured in the first trial: device memory in use outside PyTorch's allocator (CUDA "
                        "context, libraries, other processes); the allocator's own overhead is in its reserved peak")
    assumed = ASSUMED_CONTEXT_BYTES + int(ASSUMED_ALLOCATOR_SHARE * total)
    if assumed >= total:
        raise UsageError(f"{source} is smaller than the {format_bytes(assumed)} torchdoctor keeps free for a CUDA "
                         "context when the trials run on the CPU; pass --headroom SIZE (0 for none)")
    return Capacity(total, assumed, source,
                    "assumed, not measured (the trials ran on the CPU): 0.5 GiB for a CUDA context and 5 % of the "
                    "device for the caching allocator's rounding and cache; run this on the GPU to measure them")


def measure_batch_scaling(opts, out: Path, total: int | None, source: str, headroom: int | None,
                          progress: Callable[[int | None, BatchTrial], None]) -> tuple[RunRecord, Report]:
    settings = TrialSettings(opts.target, list(opts.args), opts.module, warmup=opts.warmup, steps=opts.steps,
                             max_seconds=opts.max_seconds, nproc_per_node=opts.nproc_per_node,
                             estimate=opts.estimate)
    runner = ProcessTrials(settings, out, on_trial=progress)
    search_runner: TrialRunner = _Baseline(runner)
    try:
        first, _ = search_runner.baseline()
    except KeyboardInterrupt:  # during the script's own batch: its partial record is the directory
        if runner.partial is not None:
            runner.partial.probe_notes.append(ProbeNote(
                "memory", "interrupted during the first trial (the script's own batch size): no other batch size "
                          "was tried"))
            _write(out, runner.partial)
        raise
    record = runner.records.get(first.batch_size)
    if record is None:
        raise ScriptFailed(f"the first trial (the script's own batch size) left no record: {first.detail}; "
                           f"see {out / first.run_dir / 'output.log'}")
    capacity = capacity_for(record, total, source, headroom)
    memory = record.memory
    if capacity is not None and memory is not None and memory.device_total_bytes and capacity.total_bytes < memory.device_total_bytes:
        settings.limit_bytes, settings.limit_mode = capacity.total_bytes, "cuda"  # a real limit from the next trial
    bound, basis = data_bound(record)
    search = BatchSearch(search_runner, None if opts.estimate else capacity, max_trials=opts.max_trials,
                         data_bound=bound, data_bound_basis=basis)
    scaling = search.run()
    if opts.estimate:  # nothing to verify on fake tensors: the points of the fit, then its prediction
        _predict_only(scaling, capacity)
    scaling.recommended_batch = recommended_batch(scaling)
    scaling.nproc_per_node = opts.nproc_per_node
    scaling.loader = _knob_detail(runner)
    if scaling.trials and capacity is not None and not any(t.outcome == FITS for t in scaling.trials):
        scaling.notes.append(_nothing_fits(scaling, runner, capacity))
    record.batch_scaling = scaling
    report = _write(out, record)
    if search.stopped is not None:  # written: now the command ends as interrupted (130) or terminated (143)
        raise search.stopped
    return record, report


def _write(out: Path, record: RunRecord) -> Report:
    from torchdoctor.diagnosis.run import analyze
    from torchdoctor.pipeline import write_run

    signals = current_signals()
    if signals is not None:  # after Ctrl-C or SIGTERM, a second one must not cut the writing short
        signals.quiet = True
    report = analyze(record)
    write_run(out, record, report)
    return report


def data_bound(record: RunRecord) -> tuple[int | None, str]:
    """The most rows one step can take from the training loader, and why: what its sampler yields
    per epoch (a DistributedSampler: this rank's shard; a sampler drawing with replacement: as
    many as it is asked for), else the dataset's length."""
    loader = training_loader(record)
    if loader is None:
        return None, ""
    dataset = f"{loader.dataset_len:,}-row dataset" if loader.dataset_len else "dataset"
    if loader.sampler_len and loader.sampler_type == "DistributedSampler":
        return loader.sampler_len, (f"the training loader's DistributedSampler gives each rank {loader.sampler_len:,} "
                                    f"rows per epoch (its shard of the {dataset})")
    if loader.sampler_len and loader.dataset_len and loader.sampler_len != loader.dataset_len:
        return loader.sampler_len, (f"the training loader's {loader.sampler_type or 'sampler'} gives "
                                    f"{loader.sampler_len:,} rows per epoch (of the {dataset})")
    if loader.dataset_len:
        return loader.dataset_len, f"the training loader's dataset has {loader.dataset_len:,} rows"
    return None, ""


def _knob_detail(runner: ProcessTrials) -> str:
    for record in runner.records.values():
        knob = next((k for k in record.knobs if k.name == "batch_size" and k.applied), None)
        if knob is not None:
            return knob.detail.split(" batch_size ")[0]
    return ""


def _predict_only(scaling, capacity: Capacity | None) -> None:
    from torchdoctor.rules.memory_fit import grid_step, max_batch

    scaling.notes.insert(0, "estimate on fake tensors: every step ran without memory or a device; samples/s is not "
                            "measured and no batch size was checked by a real step")
    if capacity is None:
        return
    scaling.capacity_bytes, scaling.capacity_source = capacity.total_bytes, capacity.source
    scaling.headroom_bytes, scaling.headroom_basis = capacity.headroom_bytes, capacity.headroom_basis
    scaling.predicted_max_batch = max_batch(scaling.fits, capacity.usable_bytes)
    if scaling.predicted_max_batch:
        scaling.search_step = grid_step(scaling.predicted_max_batch)


def _nothing_fits(scaling, runner: ProcessTrials, capacity: Capacity) -> str:
    """Not even the smallest batch fits: what its memory was made of."""
    smallest = min(scaling.trials, key=lambda t: t.batch_size)
    record = runner.records.get(smallest.batch_size)
    memory = record.memory if record is not None else None
    parts = (memory.failure.parts if memory is not None and memory.failure is not None else
             memory.parts if memory is not None else {})
    held = ", ".join(f"{name.replace('_', ' ')} {format_bytes(value)}" for name, value in parts.items() if value)
    return (f"not even batch {smallest.batch_size} fits in {format_bytes(capacity.usable_bytes)} usable: "
            f"{held or 'no breakdown'}; what does not shrink with the batch must shrink first (an optimizer with "
            f"fewer states, bf16 parameters, sharding): the trial's run directory is {smallest.run_dir}")
