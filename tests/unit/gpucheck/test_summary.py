"""SUMMARY.md: the device, what passed, every number each step wrote, and every skip with its
reason; a result that cannot be read is said so, never filled in."""

import json
from pathlib import Path

from benchmarks.gpucheck.orchestrate import CheckState, StepOutcome
from benchmarks.gpucheck.summary import render

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1"
skipped="1" tests="3" time="9.1"><testcase classname="t" name="test_trace" time="4.2"/><testcase classname="t"
name="test_pageable" time="3.3"><failure message="assert 'TD103' in set()">long traceback</failure></testcase>
<testcase classname="t" name="test_tf32" time="0.0"><skipped message="TF32 needs compute capability 8.0+"/>
</testcase></testsuite></testsuites>"""


def write(work: Path, name: str, payload) -> None:
    path = work / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))


def gpu_run(work: Path) -> CheckState:
    """A GPU run's work folder, as its steps leave it (inputs made up for the renderer)."""
    write(work, "machine.json", {"device_name": "NVIDIA H100 80GB HBM3", "compute_capability": [9, 0],
                                 "multiprocessors": 132, "device_memory_bytes": 85 * 2**30, "driver": "580.159.04",
                                 "cuda": "13.0", "cudnn": 91200, "nccl": "2.27.3", "torch": "2.11.0+cu130",
                                 "python": "3.12.3", "packages": {"msgspec": {"ok": True, "version": "0.22.0",
                                                                               "from": "/tmp/site"}}})
    write(work, "gpu-tests.xml", JUNIT)
    write(work, "accuracy.json", {"found": 17, "planted_causes": 21, "false_positives": 2, "complete": False, "rows": [
        {"example": "gpu_fp32_matmul.py", "status": "ok", "found": ["TD402@22"], "expected": ["TD402@22"],
         "false_positives": [], "findings": ["TD402@22:high:1.83"]},
        {"example": "slow_storage.py", "status": "FAIL", "found": [], "expected": ["TD101@30"],
         "false_positives": ["TD201@12"], "findings": []}]})
    write(work, "overhead.json", {"overhead_outside_sampled_steps": 0.0137, "median_step_ms_plain": 0.8123})
    write(work, "tune.json", {"method": "tune with plan.py trials", "complete": True, "rows": [
        {"example": "gpu_fp32_matmul.py", "baseline_findings": ["TD402@22:high:1.83"],
         "planned_by_findings": ["amp=bf16", "tf32=true"], "baseline_drift": "no measurable change (1.01x, ±1.2%)",
         "trials": [{"trial": "amp=bf16", "tests": ["TD402"], "speedup": 2.417, "noise": 0.031, "significant": True,
                     "seconds": 6.8, "error": None}],
         "estimates": [{"finding": "TD402", "where": "examples/gpu_fp32_matmul.py:22", "trial": "amp=bf16",
                        "estimated": 1.83, "measured": 2.417, "agreement": 1.321, "within_tolerance": True}],
         "skipped_trials": ["tf32=true (budget: 3 s left, a trial takes ~7 s)"]},
        {"example": "python_loop_ops.py", "skipped": "no time left (12 s for it)"}]})
    write(work, "demo.json", {"method": "2 alternating runs", "pairs": 2, "complete": True,
                              "runs": [{"script": "demo_prompt_encoder.py", "ok": True, "seconds": 7.5}],
                              "reference": {"speedup": 2.2, "device": "RTX 4090", "source": "report 001"},
                              "loop_estimate": 1.94, "loop_estimates_per_run": [1.91, 1.97],
                              "measured": {"describe": "2.36x samples/s (±3.1%)"}, "cuda_used": True,
                              "step_ms": {"original": 21.4, "fixed": 9.07},
                              "findings": [{"code": "TD301", "line": 44, "severity": "high",
                                            "estimated_speedup": 1.94, "estimate_basis": "from the trace"}]})
    write(work, "fixtures/meta.json", {"tags": {"device": "NVIDIA H100 80GB HBM3", "driver": "580.159.04"},
                                       "files": {"host_sync_item/trace.json.gz": {"bytes": 181248, "what": "window"}},
                                       "skipped": {"nccl-info.txt": "failed: DistBackendError: no socket"}})
    write(work, "fixture-twins.xml", "<testsuite tests='1'><testcase name='test_twin'>")  # cut off mid-write
    s = CheckState(1, False, "2026-12-01T10:00:00+00:00", "/usr/bin/python3", 480.0, tag="nvidia-h100-2026-12-01",
                   cuda=True, finished=True, seconds=431.7)
    names = ["machine", "gpu-tests", "accuracy", "overhead", "tune", "demo", "fixtures", "fixture-twins"]
    s.steps = [StepOutcome(n, f"the {n} step", "passed", 60, 10.0, 0) for n in names]
    s.steps[1].status, s.steps[1].reason = "failed", "exit code 1: some tests failed (below)"
    s.steps.append(StepOutcome("install", "install", "skipped", 40, reason="no time left"))
    return s


def test_every_number_and_every_skip_reaches_the_summary(tmp_path):
    text = render(gpu_run(tmp_path), tmp_path, [tmp_path / "SUMMARY.md"])
    assert text.startswith("# GPU check: nvidia-h100-2026-12-01") and "CPU rehearsal" not in text
    assert "NVIDIA H100 80GB HBM3 (compute capability [9, 0], 132 SMs, 85.0 GiB)" in text
    assert "580.159.04 / 13.0 / 91200 / 2.27.3" in text and "432 s of the 480 s" in text
    assert "3 tests: 1 passed, 1 failed, 0 errors, 1 skipped." in text and "assert 'TD103' in set()" in text
    assert "17/21; high/medium false positives: 2; complete: False" in text and "TD201@12" in text
    assert "0.0137" in text and "0.8123" in text
    assert "| amp=bf16 | TD402 | 2.417 | 0.031 | True | 6.8 |" in text and "| 1.83 | 2.417 | 1.321 | True |" in text
    assert "1.94 (per run: [1.91, 1.97])" in text and "2.36x samples/s (±3.1%)" in text and "21.4 ms -> 9.07 ms" in text
    assert "2.2x on an RTX 4090" in text
    assert "| host_sync_item/trace.json.gz | 177.0 | window |" in text
    assert "Its result could not be read: ParseError" in text  # the twins' XML, cut off
    skips = text.split("## Skipped, and why")[1]
    for line in ("- step: install: no time left", "- gpu-tests: test_tf32: TF32 needs compute capability 8.0+",
                 "- tune: python_loop_ops.py: no time left (12 s for it)",
                 "- tune: gpu_fp32_matmul.py, trial tf32=true: budget: 3 s left, a trial takes ~7 s",
                 "- fixture: nccl-info.txt: failed: DistBackendError: no socket"):
        assert line in skips


def test_a_run_in_progress_and_a_missing_result_are_said_so(tmp_path):
    s = CheckState(1, True, "2026-12-01T10:00:00+00:00", "python3", 480.0, tag="cpu-rehearsal-2026-12-01")
    s.steps = [StepOutcome("overhead", "overhead", "overran", 30, 30.0, -15, "stopped after 30 s (its budget)",
                           log_tail="round 3 of 8")]
    text = render(s, tmp_path, [])
    assert "CPU rehearsal: no GPU was used" in text and "**Incomplete:**" in text
    assert "no CUDA device (torch.cuda.is_available() is False)" not in text  # machine.json absent: said so instead
    assert "machine.json was not written" in text
    assert "No result file was written." in text and "round 3 of 8" in text
