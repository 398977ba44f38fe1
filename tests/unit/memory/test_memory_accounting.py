"""The storage accounting of every run: exact bytes for what can be counted exactly, activations
charged to the module that saved them, views not counted as allocations, and an out-of-memory
error described where it happened (inside the window) or from what is held (after it)."""

from pathlib import Path

import pytest
import torch
from torch import nn

from torchdoctor.model.memory_record import (ACTIVATIONS, FORWARD, GRADIENTS, OPTIMIZER, OPTIMIZER_STATES,
                                       PARAMETERS)
from torchdoctor.run.probed import ProbedRun, ProbeOptions
from torchdoctor.run.session import StopRun

ONLY_MEMORY = {"sampled_steps": 0, "backward_steps": 0, "profiled_steps": 0, "line_steps": 0}
# More than any machine has: the CPU allocator refuses it at once, a real allocation failure
IMPOSSIBLE_ELEMENTS = 2**60


def measure(tmp_path: Path, train, warmup=2, steps=2):
    options = ProbeOptions(warmup=warmup, steps=steps, max_seconds=120, trace=False, schedule=dict(ONLY_MEMORY))
    probed = ProbedRun(options, tmp_path, script="in-process")
    outcome = ("completed", 0, None)
    with probed:
        probed.enter_code()
        try:
            train()
        except StopRun:
            outcome = ("step-limit", 0, None)
        except RuntimeError as exc:
            probed.note_failure(exc)
            outcome = ("crashed", 1, str(exc))
        finally:
            probed.leave_code()
    probed.settle(*outcome)
    return probed.record()


class TwoLayer(nn.Module):
    def __init__(self, fail_at_step=None):
        super().__init__()
        self.hidden, self.act, self.out = nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)
        self.calls, self.fail_at_step = 0, fail_at_step

    def forward(self, x):
        self.calls += 1
        if self.calls == self.fail_at_step:
            torch.empty(IMPOSSIBLE_ELEMENTS)  # the allocation that fails
        return self.out(self.act(self.hidden(x)))


def adam_loop(model, batch, steps=10, data=None):
    def train():
        opt = torch.optim.Adam(model.parameters())
        for i in range(steps):
            x = torch.randn(batch, 64) if data is None else data[i * batch:(i + 1) * batch]
            loss = nn.functional.cross_entropy(model(x), torch.zeros(batch, dtype=torch.long))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return train


def param_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_parameters_gradients_and_adam_states_are_counted_exactly(tmp_path):
    model = TwoLayer()
    memory = measure(tmp_path, adam_loop(model, batch=32)).memory
    params = param_bytes(model)
    assert memory.parts[PARAMETERS] == params
    assert memory.parts[GRADIENTS] == params  # the previous step's, alive until zero_grad or this step's
    # Adam: exp_avg and exp_avg_sq per parameter, and a 4-byte step counter per tensor
    assert memory.parts[OPTIMIZER_STATES] == 2 * params + 4 * len(list(model.parameters()))
    assert memory.peak_step in (1, 2) and [s.step for s in memory.steps] == [1, 2]
    assert memory.backward_event < memory.optimizer_event <= memory.timeline_events
    assert memory.device_missing and "not measurable on CPU" in memory.device_missing


def test_activations_are_charged_to_the_module_that_saved_them(tmp_path):
    model = TwoLayer()
    memory = measure(tmp_path, adam_loop(model, batch=1024)).memory
    modules = {m.module: m for m in memory.modules}
    assert modules["act"].own_saved_bytes == 1024 * 128 * 4  # ReLU keeps its output
    assert modules["hidden"].own_saved_bytes == 1024 * 64 * 4  # the Linear keeps its input (the weight is a parameter)
    assert modules[""].saved_bytes >= modules["act"].saved_bytes + modules["hidden"].saved_bytes
    # with a batch this large the peak comes as backward begins, with every activation live
    assert max(memory.phase_peaks, key=memory.phase_peaks.get) != OPTIMIZER
    assert memory.parts[ACTIVATIONS] >= 1024 * (128 + 64) * 4


def test_the_peak_grows_by_the_activations_of_the_extra_samples(tmp_path):
    small = measure(tmp_path / "a", adam_loop(TwoLayer(), batch=64)).memory
    large = measure(tmp_path / "b", adam_loop(TwoLayer(), batch=128)).memory
    grown = large.phase_peaks[FORWARD] - small.phase_peaks[FORWARD]
    per_sample = (64 + 128 + 128 + 10 + 10) * 4  # input, hidden out, relu out, logits, log-softmax
    assert 64 * per_sample * 0.8 <= grown <= 64 * per_sample * 1.5
    assert large.phase_peaks[OPTIMIZER] - small.phase_peaks[OPTIMIZER] < grown / 4  # the optimizer's peak barely moves


def test_slicing_a_dataset_held_in_memory_is_not_an_allocation(tmp_path):
    data = torch.randn(100_000, 64)  # 25.6 MB, alive before the steps
    memory = measure(tmp_path, adam_loop(TwoLayer(), batch=16, data=data)).memory
    assert memory.peak_bytes < 2 * 2**20
    assert all(a.bytes < 2**20 for a in memory.largest)


def test_an_allocation_failure_in_the_window_is_described_where_it_happened(tmp_path):
    model = TwoLayer(fail_at_step=2)
    record = measure(tmp_path, adam_loop(model, batch=32))
    failure = record.memory.failure
    assert record.run.status == "crashed" and failure is not None and failure.accounted
    assert failure.requested_bytes == IMPOSSIBLE_ELEMENTS * 4
    assert failure.location.path.endswith("test_memory_accounting.py") and failure.location.function == "TwoLayer.forward"
    assert failure.step == 2 and failure.phase == FORWARD and failure.batch_size == 32
    assert failure.parts[PARAMETERS] == param_bytes(model) and failure.parts[OPTIMIZER_STATES] > 0


def test_a_failure_after_the_window_is_described_from_what_training_holds(tmp_path):
    model = TwoLayer(fail_at_step=6)
    failure = measure(tmp_path, adam_loop(model, batch=32), steps=8).memory.failure
    assert failure is not None and not failure.accounted and failure.step == 6
    params = param_bytes(model)
    assert failure.parts[PARAMETERS] == params and failure.parts[GRADIENTS] == params
    assert failure.location.function == "TwoLayer.forward"


def test_an_error_that_is_not_about_memory_is_left_alone(tmp_path):
    def train():
        adam_loop(TwoLayer(), batch=8, steps=3)()
        raise RuntimeError("shape mismatch")

    memory = measure(tmp_path, train).memory
    assert memory is not None and memory.failure is None


def test_dataparallel_is_recorded_with_its_replica_size(tmp_path):
    model = nn.DataParallel(TwoLayer())
    memory = measure(tmp_path, adam_loop(model, batch=8)).memory
    assert memory.parallel.wrapper == "DataParallel"
    assert memory.parallel.parameter_bytes == param_bytes(model)
    assert memory.modules and any(m.module.startswith("module.") for m in memory.modules)


@pytest.mark.gpu
def test_cuda_runs_add_the_allocators_figures(tmp_path):
    model = TwoLayer().cuda()

    def train():
        opt = torch.optim.Adam(model.parameters())
        for _ in range(6):
            loss = model(torch.randn(256, 64, device="cuda")).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()

    memory = measure(tmp_path, train).memory
    assert memory.device.startswith("cuda") and memory.device_missing is None
    assert memory.peak_allocated_bytes >= memory.parts[PARAMETERS]
    assert memory.peak_reserved_bytes >= memory.peak_allocated_bytes
    assert memory.outside_pytorch_bytes > 0  # the CUDA context


@pytest.mark.gpu
def test_a_cuda_out_of_memory_error_is_described(tmp_path):
    model = TwoLayer().cuda()
    total = torch.cuda.get_device_properties(0).total_memory

    def train():
        opt = torch.optim.Adam(model.parameters())
        for i in range(4):
            x = torch.randn(16, 64, device="cuda")
            if i == 1:
                torch.empty(total, dtype=torch.uint8, device="cuda")
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()

    failure = measure(tmp_path, train).memory.failure
    assert failure.device == "cuda" and failure.requested_bytes and failure.device_total_bytes == total
