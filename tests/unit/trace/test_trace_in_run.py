"""`run` analyses its profiler window: trace findings confirm, size or add to the runtime ones."""


import pytest
from helpers.trace_builder import sync_steps
from helpers.trace_builder import TraceBuilder

from torchdoctor.diagnosis.run import analyze
from torchdoctor.model.findings import Finding, NotMeasured, Report, Severity
from torchdoctor.model.location import Location
from torchdoctor.model.record import Environment, RunInfo, RunRecord
from torchdoctor.pipeline import load_record, write_run
from helpers.measure import measure
from torchdoctor.run.probeset import TRACE_FILE
from torchdoctor.run.runner import RunRequest
from torchdoctor.diagnosis.trace_evidence import merge_trace_findings
from torchdoctor.trace import analyze_trace_files

SCRIPT = """
import torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
def train(steps):
    total = 0.0
    for _ in range(steps):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
train(40)
"""


def test_cpu_run_with_trace_stores_the_analysis_and_confirms_the_runtime_finding(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = measure(RunRequest(target=str(script), args=[], warmup=2, steps=20, trace=True), run_dir)
    assert record.trace_file == TRACE_FILE and (run_dir / TRACE_FILE).exists()
    (rank,) = record.trace.ranks
    assert rank.cpu_only and rank.steps == 2 and rank.has_stacks
    report = analyze(record)
    (sync,) = [f for f in report.findings if f.code == "TD201"]  # one finding, not one per source
    assert sync.location.line == 12 and sync.evidence["trace"]["calls_per_step"] >= 1
    assert "The profiler trace shows it too" in sync.message
    assert any(t.title.startswith("Profiler trace: Host time per step") for t in report.tables)
    # the record alone re-renders the same report: the trace file is not needed again
    write_run(run_dir, record, report)
    (run_dir / TRACE_FILE).unlink()
    again = analyze(load_record(run_dir))
    assert [(f.code, f.location, f.message) for f in again.findings] == [
        (f.code, f.location, f.message) for f in report.findings]


def _runtime_sync(line: int, function: str) -> Finding:
    return Finding(code="TD201", slug="host-sync", severity=Severity.MEDIUM, title=".item() every step",
                   message="seen by the op sampler.", location=Location("train.py", line, function),
                   evidence={}, fix="", estimated_speedup=None, estimate_basis="sized on the GPU timeline")


@pytest.fixture
def gpu_record(tmp_path):
    """A CUDA run's record holding a generated GPU trace: 30 % of each step idle behind an
    `.item()` in train_step (test_trace_idle's known-answer trace)."""
    tb = TraceBuilder(tmp_path / "t.json")
    sync_steps(tb)
    info = RunInfo(script="train.py", argv=[], cwd=str(tmp_path), started_at="2026-01-01T00:00:00+00:00",
                   torchdoctor_version="0", warmup=0, steps_requested=2, max_seconds=60)
    rec = RunRecord(run=info, environment=Environment(python="3.11", platform="Linux", torch="2.13",
                                                      cuda_available=True, cuda_used=True))
    rec.source_files = [str(tmp_path / "train.py")]
    rec.trace = analyze_trace_files([tb.close()])
    return rec


def test_generated_gpu_trace_sizes_the_runtime_finding_in_the_same_function(gpu_record):
    report = Report(source="run", tool_version="0", findings=[_runtime_sync(12, "Trainer.train_step")])
    report.not_measured = [NotMeasured("TD402", "no-mixed-precision", "no trace"),
                           NotMeasured("TD802", "clock-throttle", "no NVML")]
    merge_trace_findings(report, gpu_record)
    (sync,) = [f for f in report.findings if f.code == "TD201"]
    assert sync.location == Location("train.py", 12, "Trainer.train_step")  # the sampler's exact line stays
    assert sync.estimated_speedup == pytest.approx(1 / 0.7, abs=1e-3)  # 300 of 1000 µs idle removed
    assert sync.estimate_basis.startswith("from the profiler trace: ")
    assert sync.severity is Severity.HIGH
    (fp32,) = [f for f in report.findings if f.code == "TD402"]  # no runtime rule saw this: added
    assert fp32.message.startswith("From the profiler trace (2 steps): ")
    assert [n.code for n in report.not_measured] == ["TD802"]  # the trace measured TD402
    assert any(t.title == "Profiler trace: GPU time per step" for t in report.tables)


def test_generated_gpu_trace_finding_elsewhere_is_added_with_the_users_path(gpu_record):
    report = Report(source="run", tool_version="0", findings=[_runtime_sync(50, "evaluate")])
    merge_trace_findings(report, gpu_record)
    syncs = [f for f in report.findings if f.code == "TD201"]
    assert len(syncs) == 2 and syncs[0].estimated_speedup is None
    assert syncs[1].location == Location("train.py", 10, "train_step")  # resolved from the run's files
    assert syncs[1].evidence["source"] == "profiler trace"


def test_runs_without_a_trace_are_left_alone(gpu_record):
    gpu_record.trace = None
    report = Report(source="run", tool_version="0", findings=[_runtime_sync(12, "f")])
    merge_trace_findings(report, gpu_record)
    assert len(report.findings) == 1 and report.tables == [] and report.findings[0].estimated_speedup is None


def test_a_trace_that_cannot_be_analysed_is_a_note_and_the_run_is_kept(tmp_path, monkeypatch):
    import torchdoctor.trace
    from torchdoctor.errors import InputError

    def broken(paths):
        raise InputError(f"{paths[0]} is truncated")

    monkeypatch.setattr(torchdoctor.trace, "analyze_trace_files", broken)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = measure(RunRequest(target=str(script), args=[], warmup=2, steps=10, trace=True), run_dir)
    assert record.trace is None and record.trace_file == TRACE_FILE and len(record.measured_steps) > 0
    (note,) = [n for n in record.probe_notes if n.probe == "profiler"]
    assert note.message.startswith(f"could not analyse {TRACE_FILE}: InputError:") and "truncated" in note.message
