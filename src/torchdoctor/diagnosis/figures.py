"""RunRecord → Figures: the series a report draws, built once here so renderers never read a
record. Long runs are downsampled into buckets of consecutive steps (or NVML samples): a
point keeps the bucket's mean, minimum and maximum, so a spike stays visible."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypeVar

from torchdoctor.diagnosis.memory import memory_figure, scaling_figure
from torchdoctor.model.figures import (CHECKPOINT, EPOCH, EVAL, MEASURED, SAMPLED, WARMUP, Figures, GpuPoint, GpuSeries,
                                 MemoryPeaks, StepMarker, StepPoint, StepSeries)
from torchdoctor.model.record import NvmlSample, RunRecord, StepSample

# A chart is about 900 px wide: more points than this cannot be told apart, they only make
# the page and report.json bigger. A 10,000-step run is drawn as buckets of 20 steps.
MAX_STEP_POINTS = 500
MAX_GPU_POINTS = 500
DIGITS = 6  # seconds to the microsecond: finer is noise for a step time, and costs bytes

Item = TypeVar("Item")


def run_figures(record: RunRecord, gpu_missing: str | None) -> Figures:
    """`gpu_missing`: why the run has no GPU readings (the summary's reason), or None."""
    gpu = gpu_series(record)
    memory = record.cuda_memory
    return Figures(
        steps=step_series(record),
        gpu=gpu,
        gpu_missing=None if gpu else (gpu_missing or "NVML returned no samples"),
        memory_peaks=MemoryPeaks(memory.device_total_bytes, memory.peak_allocated_bytes,
                                 memory.peak_reserved_bytes) if memory else None,
        memory=memory_figure(record),
        scaling=scaling_figure(record),
    )


def _kind(step: StepSample) -> str:
    return WARMUP if step.warmup else SAMPLED if step.sampled else MEASURED


def buckets(items: Sequence[Item], limit: int, key: Callable[[Item], str] | None = None) -> list[list[Item]]:
    """Consecutive items in groups of equal size, about `limit` groups at most. With `key`, a
    group also ends where the key changes (warm-up and sampled steps are never averaged with
    measured ones), unless that would give more than twice `limit` groups."""
    size = max(1, math.ceil(len(items) / limit))
    groups: list[list[Item]] = []
    for item in items:
        if groups and len(groups[-1]) < size and (key is None or key(groups[-1][-1]) == key(item)):
            groups[-1].append(item)
        else:
            groups.append([item])
    if len(groups) > 2 * limit:
        return buckets(items, limit)
    return groups


def step_series(record: RunRecord) -> StepSeries | None:
    steps = sorted(record.steps, key=lambda s: s.index)
    if not steps:
        return None
    groups = buckets(steps, MAX_STEP_POINTS, key=_kind)
    epoch_starts = _epoch_starts(record)
    series = StepSeries(steps_total=len(steps), bucket=max(len(g) for g in groups))
    for group in groups:
        times = [s.duration_s for s in group]
        waits = [s.data_wait_s for s in group]
        kind = Counter(_kind(s) for s in group).most_common(1)[0][0]
        series.points.append(StepPoint(
            step=group[0].index, steps=len(group), kind=kind,
            time_s=_r(statistics.fmean(times)), time_min_s=_r(min(times)), time_max_s=_r(max(times)),
            data_wait_s=_r(statistics.fmean(waits)), data_wait_max_s=_r(max(waits)),
        ))
        series.markers += _markers(group, epoch_starts)
    if not record.loaders:
        series.data_wait_missing = "no DataLoader was iterated: data wait is measured on DataLoader iterators"
    return series


def _markers(group: list[StepSample], epoch_starts: set[int]) -> list[StepMarker]:
    markers = []
    for kind, attr in ((EVAL, "eval_s"), (CHECKPOINT, "checkpoint_s")):
        hits = [getattr(s, attr) for s in group if getattr(s, attr) > 0]
        if hits:
            markers.append(StepMarker(group[0].index, kind, len(hits), _r(sum(hits))))
    epochs = sum(1 for s in group if s.index in epoch_starts)
    if epochs:
        markers.append(StepMarker(group[0].index, EPOCH, epochs))
    return markers


def _epoch_starts(record: RunRecord) -> set[int]:
    """First step of each epoch after the first, from the loaders that feed training
    (an evaluation loader's restarts are evaluations, marked as such)."""
    starts = set()
    for loader in record.loaders:
        if loader.batches and loader.batches_in_eval >= loader.batches:
            continue
        # `epoch_start_steps` holds the steps done when __iter__ ran: the epoch's first is the next
        starts.update(done + 1 for done in loader.epoch_start_steps if done > 0)
    return starts


def gpu_series(record: RunRecord) -> GpuSeries | None:
    nvml = record.nvml
    if nvml is None or not nvml.available or not nvml.samples:
        return None
    samples = sorted(nvml.samples, key=lambda s: s.t)
    groups = buckets(samples, MAX_GPU_POINTS)
    window = [s for s in record.steps if not s.warmup]
    return GpuSeries(
        device=nvml.device_name or record.environment.device_name or "GPU",
        points=[_gpu_point(g) for g in groups],
        samples_total=len(samples),
        bucket=max(len(g) for g in groups),
        interval_s=nvml.interval_s,
        power_limit_w=_largest(samples, "power_limit_w"),
        sm_clock_max_mhz=_largest(samples, "sm_clock_max_mhz"),
        mem_total_bytes=_largest(samples, "mem_total_bytes"),
        measured_from_s=_r(min(s.start for s in window)) if window else None,
        measured_to_s=_r(max(s.end for s in window)) if window else None,
    )


def _gpu_point(group: list[NvmlSample]) -> GpuPoint:
    memory = _mean(group, "mem_used_bytes")
    return GpuPoint(t=_r(statistics.fmean(s.t for s in group)), util=_mean(group, "gpu_util"),
                    power_w=_mean(group, "power_w"), sm_clock_mhz=_mean(group, "sm_clock_mhz"),
                    mem_used_bytes=None if memory is None else int(memory))


def _mean(samples: list[NvmlSample], attr: str) -> float | None:
    values = [v for v in (getattr(s, attr) for s in samples) if v is not None]
    return round(statistics.fmean(values), 2) if values else None


def _largest(samples: list[NvmlSample], attr: str):
    return max((v for v in (getattr(s, attr) for s in samples) if v is not None), default=None)


def _r(seconds: float) -> float:
    return round(seconds, DIGITS)
