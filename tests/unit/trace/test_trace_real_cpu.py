"""A real trace: torch.profiler records a small CPU training loop in this test."""

import gzip
import json
import time

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, Dataset

from torchdoctor.model.serialize import from_plain, to_plain
from torchdoctor.diagnosis.trace import trace_report
from torchdoctor.trace import analyze_trace_files, trace_findings
from torchdoctor.model.trace_summary import TraceSummary
from torchdoctor.trace.loader import load_trace


class SlowDataset(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.001)  # slow per-sample work: the step waits for it
        return torch.randn(16), torch.randn(1)


def train_step(model, opt, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()  # a host read every step: free on CPU, a sync on CUDA


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("trace")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowDataset(), batch_size=8)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
                 schedule=schedule(wait=0, warmup=1, active=4, repeat=1)) as prof:
        for step, (x, y) in enumerate(loader):
            train_step(model, opt, x, y)
            prof.step()
            if step >= 5:
                break
    path = out / "cpu.json"
    prof.export_chrome_trace(str(path))
    gz = out / "cpu.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    return path, gz


def test_real_cpu_trace_is_read_with_steps_stacks_and_no_gpu(cpu_trace):
    path, _ = cpu_trace
    raw = json.loads(path.read_text())
    loaded = load_trace(path)
    ev = loaded.events
    assert ev.events == len(raw["traceEvents"])
    assert len(ev.ops) == sum(1 for e in raw["traceEvents"] if e.get("cat") == "cpu_op")
    assert len(ev.python) == sum(1 for e in raw["traceEvents"] if e.get("cat") == "python_function")
    assert ev.gpu == [] and loaded.device_properties == []
    summary = analyze_trace_files([path])
    (rank,) = summary.ranks
    assert rank.cpu_only and rank.has_stacks
    assert rank.window_kind == "ProfilerStep" and rank.steps >= 3
    assert "CPU-only trace" in rank.notes[0]
    assert rank.host.sync_ops["aten::item"] == rank.steps  # one loss.item() per step, inner ops not counted twice
    assert rank.host.sync_locations["aten::item"].function == "train_step"
    assert all(d > 0 for d in rank.host.dataloader_us)


def test_real_cpu_trace_findings_say_what_a_cpu_trace_can(cpu_trace):
    summary = analyze_trace_files([cpu_trace[0]])
    found = {f.code: f for f in trace_findings(summary)}
    data = found["TD101"]  # 8 samples x 1 ms sleep per step: measurable on the CPU
    step, wait = data.evidence["step_ms"], data.evidence["data_ms_per_step"]
    # sized from this trace's own timeline, whatever the machine's speed: Amdahl on its numbers
    assert wait >= 8 * 1.0 and data.estimated_speedup == pytest.approx(step / (step - wait), rel=1e-2)
    assert data.location.path.endswith("test_trace_real_cpu.py")
    sync = found["TD201"]  # a GPU-only cost: reported as a hazard, no invented number
    assert sync.estimated_speedup is None and "not measurable on CPU" in sync.estimate_basis
    assert sync.location.function == "train_step"
    report = trace_report(summary)
    assert report.source == "trace" and report.tables[0].title.startswith("Host time per step")


def test_real_cpu_trace_gzip_matches_plain_json_and_summary_round_trips(cpu_trace):
    plain, gz = cpu_trace
    a, b = analyze_trace_files([plain]), analyze_trace_files([gz])
    b.ranks[0].path = a.ranks[0].path
    assert to_plain(a) == to_plain(b)
    assert from_plain(TraceSummary, json.loads(json.dumps(to_plain(a)))) == a
