"""GPU-only rules judged from CUDA records built by hand (no GPU needed to test the logic)."""

from helpers.records import call, loader, record, sampled, site

from torchdoctor.model.record import CudaMemory, NvmlRecord, NvmlSample
from torchdoctor.rules.compute import NoMixedPrecision, NoTf32, SmallBatch
from torchdoctor.rules.data import BlockingTransfer, PageableTransfer
from torchdoctor.rules.facts import RunFacts
from torchdoctor.rules.gpu import ClockThrottle, GpuUnderutilized
from torchdoctor.rules.memory import MemoryHeadroom, MemoryPressure
from torchdoctor.rules.sync import ExplicitSync

GIB = 2**30


def run(rule, rec):
    return rule().check(rec, RunFacts.of(rec))


def cuda_record(cap=(9, 0), **kw):
    rec = record(cuda=True, **kw)
    rec.environment.compute_capability = list(cap)
    rec.environment.float32_matmul_precision = "highest"
    rec.environment.tf32_matmul = False
    return rec


def test_rules_need_cuda_and_say_so_on_cpu():
    cpu = record()
    for rule in (PageableTransfer, BlockingTransfer, NoMixedPrecision, NoTf32, SmallBatch, MemoryHeadroom):
        assert "CUDA" in rule().not_measurable(cpu, RunFacts.of(cpu))
    nvml_off = cuda_record()
    nvml_off.nvml = NvmlRecord(available=False, reason="pynvml is not installed")
    assert "pynvml" in GpuUnderutilized().not_measurable(nvml_off, RunFacts.of(nvml_off))


def test_pageable_copies_point_at_the_unpinned_loader():
    rec = sampled(cuda_record(), calls=[call(30, ".to()", "transfer-h2d", 3, device="cpu", pinned=0,
                                             non_blocking=0, bytes=3 * 8 * 2**20)])
    rec.loaders = [loader(pin_memory=False)]
    (f,) = run(PageableTransfer, rec)
    assert f.location.line == 5 and f.evidence["bytes_per_step"] == 8 * 2**20
    rec.dispatch.api_calls[0].detail["pinned"] = 3
    assert run(PageableTransfer, rec) == []


def test_blocking_copy_of_pinned_memory_points_at_the_copy():
    rec = sampled(cuda_record(), calls=[call(30, ".to()", "transfer-h2d", 3, pinned=3, non_blocking=0, bytes=100)])
    (f,) = run(BlockingTransfer, rec)
    assert f.location.line == 30
    rec.dispatch.api_calls[0].detail["non_blocking"] = 3
    assert run(BlockingTransfer, rec) == []


def test_explicit_sync_every_step_and_launch_blocking():
    rec = sampled(cuda_record(), calls=[call(40, "torch.cuda.synchronize", "explicit-sync", 3, device="cuda")])
    rec.environment.env_vars["CUDA_LAUNCH_BLOCKING"] = "1"
    found = {(f.location.line if f.location else None, f.severity.value) for f in run(ExplicitSync, rec)}
    assert found == {(40, "medium"), (None, "high")}


def test_fp32_matmuls_without_autocast_on_tensor_core_gpu():
    rec = cuda_record()
    rec.dispatch.fp32_matmul_ops_cuda, rec.dispatch.sampled_steps = 30, 3
    rec.dispatch.sites = [site(22, 60), site(31, 40), site(0, 90)]
    rec.dispatch.sites[0].fp32_matmul_ops_cuda, rec.dispatch.sites[1].fp32_matmul_ops_cuda = 18, 12
    rec.dispatch.sites[2].fp32_matmul_ops_cuda = 40  # the autograd engine's backward matmuls: no user line
    rec.dispatch.sites[2].location.line = 0
    (mixed,) = run(NoMixedPrecision, rec)
    assert mixed.location.line == 22  # the line whose forward issued the most fp32 matmuls
    assert [f.code for f in run(NoTf32, rec)] == ["TD403"]
    rec.dispatch.autocast_seen = True
    rec.environment.tf32_matmul = True
    assert run(NoMixedPrecision, rec) == [] and run(NoTf32, rec) == []
    old = cuda_record(cap=(6, 1))
    old.dispatch.fp32_matmul_ops_cuda = 30
    assert run(NoMixedPrecision, old) == [] and run(NoTf32, old) == []


def test_small_matmuls_with_low_utilization():
    rec = cuda_record()
    rec.loaders = [loader(batch_size=4)]
    rec.dispatch.matmul_flops_per_op = 2e6
    rec.nvml = NvmlRecord(available=True, samples=[NvmlSample(t=0.1, gpu_util=20.0)])
    (f,) = run(SmallBatch, rec)
    assert f.evidence["batch_size"] == 4
    rec.dispatch.matmul_flops_per_op = 5e9
    assert run(SmallBatch, rec) == []


def test_memory_headroom_and_pressure():
    rec = cuda_record()
    rec.cuda_memory = CudaMemory(device_total_bytes=80 * GIB, peak_allocated_bytes=4 * GIB,
                                 peak_reserved_bytes=5 * GIB, alloc_retries=0, ooms=0)
    assert [f.code for f in run(MemoryHeadroom, rec)] == ["TD501"] and run(MemoryPressure, rec) == []
    rec.cuda_memory.peak_reserved_bytes, rec.cuda_memory.alloc_retries = 79 * GIB, 4
    assert run(MemoryHeadroom, rec) == [] and [f.code for f in run(MemoryPressure, rec)] == ["TD502"]


def test_underused_gpu_and_throttling_from_nvml_samples():
    rec = cuda_record()
    busy = [NvmlSample(t=i * 0.1, gpu_util=95.0, power_w=420.0, power_limit_w=450.0) for i in range(10)]
    rec.nvml = NvmlRecord(available=True, samples=busy)
    assert run(GpuUnderutilized, rec) == [] and run(ClockThrottle, rec) == []
    idle = [NvmlSample(t=i * 0.1, gpu_util=40.0, power_w=200.0, power_limit_w=450.0,
                       throttle_reasons=["hw_thermal_slowdown"]) for i in range(10)]
    rec.nvml = NvmlRecord(available=True, samples=idle)
    (under,) = run(GpuUnderutilized, rec)
    assert under.evidence["power_mean_w"] == 200.0
    (throttle,) = run(ClockThrottle, rec)
    assert throttle.evidence["reasons"] == ["hw_thermal_slowdown"]


def test_summary_says_why_gpu_metrics_are_missing():
    from torchdoctor.diagnosis.run import analyze
    from torchdoctor.model.record import NvmlRecord

    assert "used the CPU" in analyze(record()).summary.gpu_metrics_missing
    no_driver = record(cuda=True)
    no_driver.nvml = NvmlRecord(available=False, reason="libnvidia-ml.so.1 not found")
    assert analyze(no_driver).summary.gpu_metrics_missing == "NVML not available: libnvidia-ml.so.1 not found"
