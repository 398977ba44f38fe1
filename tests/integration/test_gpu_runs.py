"""On a real CUDA device: `run` profiles a window, analyses its Kineto trace, and the GPU-only
causes come out measured (skipped without CUDA; run them on the GPU machine)."""

from pathlib import Path

import pytest

from torchdoctor.diagnosis.run import analyze
from helpers.measure import measure
from torchdoctor.run.probeset import TRACE_FILE
from torchdoctor.run.runner import RunRequest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.gpu


def _run(tmp_path, name, steps=20):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = measure(RunRequest(target=str(EXAMPLES / name), args=[], warmup=3, steps=steps), run_dir)
    assert record.environment.cuda_used, "the example should have used CUDA"
    return record, analyze(record)


def test_cuda_run_saves_and_analyses_a_trace_with_gpu_activity(tmp_path):
    record, report = _run(tmp_path, "host_sync_item.py")
    assert record.trace_file == TRACE_FILE and (tmp_path / "run" / TRACE_FILE).exists()
    (rank,) = record.trace.ranks
    assert not rank.cpu_only and rank.devices and rank.devices[0].kernels > 0
    assert rank.devices[0].compute_capability is not None
    assert any(t.title == "Profiler trace: GPU time per step" for t in report.tables)


def test_per_step_item_on_cuda_is_sized_from_gpu_idle_time(tmp_path):
    _, report = _run(tmp_path, "host_sync_item.py")
    (sync,) = [f for f in report.findings if f.code == "TD201" and f.location and f.location.line == 40]
    assert sync.estimated_speedup is not None and sync.estimated_speedup > 1.0
    assert sync.estimate_basis.startswith("from the profiler trace")


def test_pageable_copies_are_found_in_the_trace(tmp_path):
    record, report = _run(tmp_path, "gpu_pageable_copy.py")
    transfers = [t for d in record.trace.ranks[0].devices for t in d.transfers]
    assert any(t.direction == "HtoD" and "Pageable" in t.memory for t in transfers)
    assert any(f.code == "TD103" for f in report.findings)


def test_fp32_matmuls_on_tensor_cores_are_flagged(tmp_path):
    record, report = _run(tmp_path, "gpu_fp32_matmul.py")
    (device,) = record.trace.ranks[0].devices
    if device.compute_capability[0] < 8:
        pytest.skip("TF32/bf16 tensor cores need compute capability 8.0+")
    assert device.matmul_fp32_us > 0
    found = {f.code: f for f in report.findings}
    # placed where the user acts: the forward line (the most fp32 matmuls), the line that set TF32 off
    assert (found["TD402"].location.line, found["TD403"].location.line) == (22, 15)


def test_launch_bound_loop_is_found_at_its_line(tmp_path):
    _, report = _run(tmp_path, "python_loop_ops.py")
    (loop,) = [f for f in report.findings if f.code == "TD301"]
    assert loop.location.line == 25 and loop.estimated_speedup is not None
