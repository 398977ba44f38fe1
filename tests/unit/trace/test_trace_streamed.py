"""A trace larger than its memory budget is streamed: analysed in groups of steps, one at a
time, with the same per-step numbers as in memory; several rank files run in parallel."""

import dataclasses
import tracemalloc

import pytest
from helpers.trace_builder import trace_gen

from torchdoctor.trace import analyze_trace_files
from torchdoctor.trace.analyze import analyze_path
from torchdoctor.trace import loader
from torchdoctor.trace.loader import fits_in_memory

BIG = 1 << 40  # a budget nothing exceeds: analysed in memory


def _trace(tmp_path, name="rank0.json", events=60_000, plan=None, **kw):
    path = tmp_path / name
    trace_gen.training_trace(path, events=events, plan=plan or trace_gen.Plan(layers=40, item_per_step=True), **kw)
    return path


def _steps(device):
    return [(s.label, round(s.start_us, 3), dataclasses.astuple(s.breakdown), s.kernels) for s in device.steps]


def test_a_streamed_trace_has_the_same_steps_totals_and_sites_as_in_memory(tmp_path):
    path = _trace(tmp_path)
    budget = 2_000_000  # ~4,000 events: a few steps a group
    assert fits_in_memory(path, BIG) and not fits_in_memory(path, budget)
    whole = analyze_path(path, BIG).summary
    streamed = analyze_path(path, budget).summary
    assert any(n.startswith("streamed: ") and "groups" in n for n in streamed.notes)
    assert (streamed.events, streamed.steps, streamed.window_kind) == (whole.events, whole.steps, whole.window_kind)
    (dev_w,), (dev_s,) = whole.devices, streamed.devices
    assert len(dev_s.steps) == len(dev_w.steps) > 4
    assert _steps(dev_s) == _steps(dev_w)
    assert dev_s.total.window_us == pytest.approx(dev_w.total.window_us)
    assert dev_s.total.idle_by_cause_us == pytest.approx(dev_w.total.idle_by_cause_us)
    assert (dev_s.kernels, dev_s.busy_us) == (dev_w.kernels, pytest.approx(dev_w.busy_us))
    assert {(s.cause, s.op, s.count) for s in dev_s.idle_sites} == {(s.cause, s.op, s.count) for s in dev_w.idle_sites}
    assert [(t.direction, t.count, t.bytes) for t in dev_s.transfers] == \
        [(t.direction, t.count, t.bytes) for t in dev_w.transfers]
    assert [k.name for k in dev_s.top_kernels[:3]] == [k.name for k in dev_w.top_kernels[:3]]
    assert streamed.host.sync_ops == whole.host.sync_ops and streamed.host.step_us == whole.host.step_us


def test_streaming_keeps_memory_bounded_by_the_budget_not_the_file(tmp_path, monkeypatch):
    # Chunks of 1 MiB of JSON instead of 8, so the files can be 8x smaller (tracemalloc slows every
    # allocation): both larger than one chunk, the second four times the first.
    monkeypatch.setattr(loader, "CHUNK_BYTES", 1 << 20)
    small, large = _trace(tmp_path, "small.json", events=8_000), _trace(tmp_path, "large.json", events=32_000)
    assert small.stat().st_size > loader.CHUNK_BYTES and not fits_in_memory(small, 250_000)
    peaks = []
    for path in (small, large):
        tracemalloc.start()
        analyze_path(path, 250_000)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    # four times the events, about the same peak: one group and one chunk at a time
    assert peaks[1] < 1.3 * peaks[0]


def test_several_rank_files_are_analysed_in_parallel_processes_with_the_same_result(tmp_path):
    plan = trace_gen.Plan(layers=2, allreduce_bytes=8 << 20, link_gbps=1.0, dataloader_ns=20_000)
    paths = [_trace(tmp_path, f"rank{r}.json", events=20_000, plan=plan, rank=r, world=2, late_rank=1, max_steps=6)
             for r in range(2)]
    serial = analyze_trace_files(paths, max_memory_bytes=BIG, jobs=1)
    parallel = analyze_trace_files(paths, max_memory_bytes=BIG, jobs=2)
    assert [r.rank for r in parallel.ranks] == [0, 1]
    assert [_steps(r.devices[0]) for r in parallel.ranks] == [_steps(r.devices[0]) for r in serial.ranks]
    assert parallel.late_ranks == serial.late_ranks and parallel.late_ranks
