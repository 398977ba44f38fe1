"""diagnosis/figures.py: the series a report draws, from a RunRecord, downsampled for long runs."""

import json

import pytest
from helpers.records import loader, record

from torchdoctor.diagnosis.figures import MAX_GPU_POINTS, MAX_STEP_POINTS, buckets, gpu_series, step_series
from torchdoctor.diagnosis.run import analyze
from torchdoctor.model.figures import CHECKPOINT, EPOCH, EVAL, MEASURED, SAMPLED, WARMUP
from torchdoctor.model.findings import Report
from torchdoctor.model.record import NvmlRecord, NvmlSample
from torchdoctor.model.serialize import SchemaError


def test_a_short_run_has_one_point_per_step_of_the_right_kind():
    rec = record(steps=6, warmup=2)
    rec.steps[3].sampled = True
    rec.steps[4].data_wait_s = 0.02
    series = step_series(rec)
    assert series.bucket == 1 and series.steps_total == 8
    assert [p.kind for p in series.points] == [WARMUP, WARMUP, MEASURED, SAMPLED, MEASURED, MEASURED, MEASURED,
                                               MEASURED]
    assert [p.step for p in series.points] == list(range(1, 9))
    assert series.points[4].data_wait_s == 0.02 and series.points[4].time_s == pytest.approx(0.1)


def test_ten_thousand_steps_are_bucketed_keeping_spikes_and_the_mean():
    rec = record(steps=10_000, warmup=3)
    spike = rec.steps[5_000]
    spike.end = spike.start + 2.5  # one 2.5 s step among 0.1 s ones
    series = step_series(rec)
    assert len(series.points) <= MAX_STEP_POINTS + 2 and series.bucket == 21
    assert sum(p.steps for p in series.points) == 10_003
    assert max(p.time_max_s for p in series.points) == pytest.approx(2.5)
    holding = next(p for p in series.points if p.step <= spike.index < p.step + p.steps)
    assert holding.time_max_s == pytest.approx(2.5) and holding.time_min_s == pytest.approx(0.1)
    mean = sum(p.time_s * p.steps for p in series.points) / 10_003
    assert mean == pytest.approx(sum(s.duration_s for s in rec.steps) / 10_003, rel=1e-4)
    assert series.points[0].kind == WARMUP and series.points[0].steps == 3  # warm-up never averaged with the rest
    assert len(json.dumps([p.__dict__ for p in series.points])) < 100_000


def test_buckets_fall_back_to_fixed_groups_when_kinds_alternate():
    items = list(range(1000))
    groups = buckets(items, 10, key=lambda i: str(i % 2))  # every item a new kind
    assert len(groups) == 10 and [i for g in groups for i in g] == items


def test_markers_for_evaluation_checkpoint_and_epochs_of_the_training_loader():
    rec = record(steps=30, warmup=2)
    rec.steps[9].eval_s = 0.3
    rec.steps[19].eval_s = 0.2
    rec.steps[14].checkpoint_s = 0.5
    rec.loaders = [loader(epoch_start_steps=[0, 12, 24]),
                   loader(loader_id=1, batches=4, batches_in_eval=4, epoch_start_steps=[9, 19])]
    markers = {(m.kind, m.step, m.count, m.seconds) for m in step_series(rec).markers}
    assert markers == {(EVAL, 10, 1, 0.3), (EVAL, 20, 1, 0.2), (CHECKPOINT, 15, 1, 0.5), (EPOCH, 13, 1, 0.0),
                       (EPOCH, 25, 1, 0.0)}


def test_markers_of_a_bucket_are_counted_once_with_their_total_time():
    rec = record(steps=5_000, warmup=0)
    for step in rec.steps:
        step.checkpoint_s = 0.001
    series = step_series(rec)
    assert len(series.markers) == len(series.points)
    assert sum(m.count for m in series.markers) == 5_000
    assert sum(m.seconds for m in series.markers) == pytest.approx(5.0)


def nvml(samples: int, **kw) -> NvmlRecord:
    return NvmlRecord(available=True, device_name="A100", interval_s=0.1, samples=[
        NvmlSample(t=0.1 * i, gpu_util=float(i % 100), power_w=100.0 + i % 7, power_limit_w=400.0,
                   sm_clock_mhz=1400.0, sm_clock_max_mhz=1410.0, mem_used_bytes=2**30, mem_total_bytes=2**35, **kw)
        for i in range(samples)])


def test_gpu_series_carries_limits_and_the_measured_window():
    rec = record(steps=10, warmup=2, cuda=True)
    rec.nvml = nvml(30)
    gpu = gpu_series(rec)
    assert gpu.device == "A100" and gpu.power_limit_w == 400.0 and gpu.sm_clock_max_mhz == 1410.0
    assert gpu.mem_total_bytes == 2**35 and len(gpu.points) == 30 and gpu.bucket == 1
    assert (gpu.measured_from_s, gpu.measured_to_s) == pytest.approx((0.2, 1.2))  # after the 2 warm-up steps


def test_an_hour_of_nvml_samples_is_downsampled_to_means():
    rec = record(steps=10, warmup=2, cuda=True)
    rec.nvml = nvml(36_000)
    gpu = gpu_series(rec)
    assert len(gpu.points) <= MAX_GPU_POINTS and gpu.samples_total == 36_000 and gpu.bucket == 72
    assert gpu.points[0].util == pytest.approx(sum(range(72)) / 72)


def test_no_gpu_series_without_nvml_samples_and_the_reason_is_kept():
    report = analyze(record(steps=5, warmup=1))
    assert report.figures.gpu is None
    assert report.figures.gpu_missing == "not measurable on CPU: this run used the CPU"
    rec = record(steps=5, warmup=1, cuda=True)
    rec.nvml = NvmlRecord(available=False, reason="pynvml is not installed")
    assert "pynvml is not installed" in analyze(rec).figures.gpu_missing


def test_report_json_of_schema_1_still_loads_and_a_newer_one_is_refused(tmp_path):
    report = analyze(record(steps=5, warmup=1))
    report.save(tmp_path / "report.json")
    assert Report.load(tmp_path / "report.json") == report  # figures and sources round-trip
    old = json.loads((tmp_path / "report.json").read_text())
    old["schema_version"] = 1
    del old["figures"], old["sources"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    loaded = Report.load(tmp_path / "old.json")
    assert loaded.figures is None and loaded.sources == [] and loaded.findings == report.findings
    old["schema_version"] = 5
    (tmp_path / "new.json").write_text(json.dumps(old))
    with pytest.raises(SchemaError, match="schema_version 5; this torchdoctor reads 1..4"):
        Report.load(tmp_path / "new.json")
