"""Each knob takes effect, says so in the record, and leaves the numerics alone where it should."""

import json
import math
from pathlib import Path

import pytest
import torch

from torchdoctor.errors import UsageError
from torchdoctor.run.knobs.spec import parse_settings
from torchdoctor.run.runner import RunRequest, execute

SCRIPT = str(Path(__file__).with_name("train_probe_script.py"))


def run(tmp_path, *settings, conv=False, steps=40, warmup=2):
    out = tmp_path / "seen.json"
    args = [str(out)] + (["--conv"] if conv else [])
    record = execute(RunRequest(target=SCRIPT, args=args, warmup=warmup, steps=steps,
                                knobs=parse_settings(list(settings))), tmp_path)
    assert record.run.status in ("completed", "step-limit", "loader-only"), record.run.error
    seen = json.loads(out.read_text()) if out.exists() else None
    return record, seen


def outcome(record, name):
    return next(k for k in record.knobs if k.name == name)


# ---- parsing ------------------------------------------------------------------------
@pytest.mark.parametrize("settings, message", [
    (["wrokers=4"], "unknown knob 'wrokers'; valid knobs: workers, pin_memory"),
    (["workers=-1"], "bad value '-1' for knob workers"),
    (["amp=fp8"], "expected one of bf16, fp16, off"),
    (["workers"], "needs KNOB=VALUE"),
    (["fused=true", "foreach=true"], "conflict"),
    (["workers=2", "workers=4"], "set twice"),
    (["workers=0", "persistent_workers=true"], "need worker processes"),
    (["data=loader-only", "workers=2"], "drop the other knobs"),
])
def test_bad_knobs_are_usage_errors_that_name_the_fix(settings, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        parse_settings(settings)


def test_values_are_typed():
    assert parse_settings(["workers=4", "pin-memory=TRUE", "amp=BF16"]) == {
        "workers": 4, "pin_memory": True, "amp": "bf16"}


# ---- effects ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    return run(tmp_path_factory.mktemp("baseline"))


def test_loader_settings_reach_the_dataloaders_and_leave_training_unchanged(tmp_path, baseline):
    record, seen = run(tmp_path, "workers=2", "prefetch_factor=3")
    train = record.loaders[0]
    assert (train.num_workers, train.prefetch_factor) == (2, 3)
    assert outcome(record, "workers").applied and "num_workers 0 → 2" in outcome(record, "workers").detail
    assert seen["seen"] == baseline[1]["seen"]  # the sampler's order lives in the main process
    assert seen["params"] == baseline[1]["params"]


def test_persistent_workers_keep_the_first_epoch_order(tmp_path, baseline):
    record, seen = run(tmp_path, "workers=2", "persistent_workers=true")
    assert record.loaders[0].persistent_workers and len(record.loaders[0].iterator_starts_s) == 3
    # A persistent iterator draws its worker seed once instead of every epoch, so the shared
    # RNG (and the shuffle order) diverges from epoch 2 on, exactly as editing the script would.
    assert seen["seen"][:8] == baseline[1]["seen"][:8]


def test_batch_size_changes_samples_per_step(tmp_path):
    record, seen = run(tmp_path, "batch_size=16", steps=6)
    assert record.loaders[0].batch_size == 16
    assert {len(b) for b in seen["seen"]} == {16}
    assert "scale the learning rate" in outcome(record, "batch_size").detail


def test_zero_grad_none_sets_grads_to_none_without_changing_the_update(tmp_path, baseline):
    record, seen = run(tmp_path, "zero_grad=none")
    # (before the first backward there are no grads to zero either way)
    assert all(seen["grads_none_after_zero"]) and not any(baseline[1]["grads_none_after_zero"][1:])
    assert outcome(record, "zero_grad").applied
    assert seen["params"] == pytest.approx(baseline[1]["params"], rel=1e-6)


@pytest.mark.parametrize("knob, key", [("foreach=true", "foreach"), ("fused=true", "fused")])
def test_optimizer_kernels_switch_and_numerics_stay_close(tmp_path, baseline, knob, key):
    record, seen = run(tmp_path, knob)
    assert seen[key] is True and outcome(record, key).applied
    assert seen["params"] == pytest.approx(baseline[1]["params"], rel=1e-4)


def test_cached_data_replays_the_first_batches(tmp_path, baseline):
    record, seen = run(tmp_path, "data=cached", warmup=2)
    assert seen["seen"][2:8] == [seen["seen"][i % 2] for i in range(2, 8)]
    assert seen["seen"][:2] == baseline[1]["seen"][:2]
    assert len(seen["seen"]) == len(baseline[1]["seen"])  # epochs keep their length
    assert outcome(record, "data").applied


def test_loader_only_times_the_loader_and_stops_before_training(tmp_path):
    record, seen = run(tmp_path, "data=loader-only")
    assert record.run.status == "loader-only" and not record.steps and seen["seen"] == []
    assert record.loader_only.batches == 8  # one epoch of 64 samples in batches of 8, then exhausted
    assert record.loader_only.samples == 64 and record.loader_only.seconds > 0


def test_eval_off_cuts_evaluation_to_one_sample_and_leaves_training(tmp_path, baseline):
    record, seen = run(tmp_path, "eval=off")
    assert [len(p) for p in baseline[1]["eval_labels"]] == [4, 4, 4]
    assert seen["eval_labels"] == [[[0]]] * 3  # the first sample; later passes replay it from memory
    assert "replayed from memory" in outcome(record, "eval").detail
    assert seen["params"] == baseline[1]["params"]


def test_checkpoint_off_writes_nothing(tmp_path, baseline):
    record, seen = run(tmp_path, "checkpoint=off")
    assert not list(tmp_path.glob("ckpt*.pt"))
    assert "torch.save skipped at" in outcome(record, "checkpoint").detail
    assert seen["params"] == baseline[1]["params"]


def test_amp_bf16_autocasts_the_trained_model(tmp_path, baseline):
    record, seen = run(tmp_path, "amp=bf16", steps=4)
    assert baseline[1]["dtype"] == "torch.float32" and seen["dtype"] == "torch.bfloat16"
    assert "Net.forward" in outcome(record, "amp").detail


def test_amp_fp16_without_a_grad_scaler_is_refused(tmp_path):
    record, seen = run(tmp_path, "amp=fp16", steps=4)
    assert not outcome(record, "amp").applied and "GradScaler" in outcome(record, "amp").detail
    assert seen["dtype"] == "torch.float32"


def test_channels_last_converts_conv_models_only(tmp_path):
    record, seen = run(tmp_path, "channels_last=true", conv=True, steps=4)
    assert seen["channels_last"] is True and outcome(record, "channels_last").applied
    record, _ = run(tmp_path, "channels_last=true", steps=4)
    assert "no 2-D convolutions" in outcome(record, "channels_last").detail


def test_compile_compiles_the_model_the_optimizer_trains(tmp_path, monkeypatch):
    compiled = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, *a, **k: compiled.append(type(self).__name__))
    record, _ = run(tmp_path, "compile=true", steps=4)
    assert compiled == ["Net"] and outcome(record, "compile").applied


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
@pytest.mark.parametrize("knob", ["pin_memory=true", "tf32=true", "non_blocking=true", "cudnn_benchmark=true"])
def test_cuda_only_knobs_say_why_they_did_not_apply_on_cpu(tmp_path, knob):
    record, seen = run(tmp_path, knob, steps=4)
    result = outcome(record, knob.split("=")[0])
    assert not result.applied and "no CUDA" in result.detail
    assert all(math.isfinite(p) for p in seen["params"])


@pytest.mark.gpu
def test_gpu_knobs_take_effect_on_cuda(tmp_path):
    record, _ = run(tmp_path, "tf32=true", "pin_memory=true", "cudnn_benchmark=true", steps=4)
    assert all(k.applied for k in record.knobs)


def test_threads_sets_torch_threads_for_the_run_then_restores_them(tmp_path):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        record, seen = run(tmp_path, "threads=1", steps=4)
        assert outcome(record, "threads").applied and "2 → 1" in outcome(record, "threads").detail
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_first_sample_cuts_every_tensor_with_the_batch_rows_and_keeps_the_rest():
    from torchdoctor.run.knobs.loader import _first_sample

    batch = {"ids": torch.arange(12).view(4, 3), "mask": torch.ones(4), "vocab": torch.zeros(7), "text": ["a"] * 4}
    cut = _first_sample(batch)
    assert cut["ids"].tolist() == [[0, 1, 2]] and cut["mask"].shape == (1,)
    assert cut["vocab"].shape == (7,) and cut["text"] == ["a"] * 4  # not per-sample tensors, not tensors
    x, y = _first_sample((torch.zeros(5, 2), torch.arange(5)))
    assert x.shape == (1, 2) and y.tolist() == [0]


REBUILT_LOADER = """
import torch
from torch.utils.data import DataLoader, TensorDataset

def prepare(loader):  # what accelerate's prepare() does: a new loader around the old batch sampler
    return DataLoader(loader.dataset, batch_sampler=loader.batch_sampler)

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = prepare(DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4, shuffle=True))
for (x,) in loader:
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def test_batch_size_reaches_a_loader_rebuilt_around_the_batch_sampler(tmp_path):
    script = tmp_path / "rebuilt.py"
    script.write_text(REBUILT_LOADER)
    record = execute(RunRequest(target=str(script), warmup=1, steps=3, knobs=parse_settings(["batch_size=8"])),
                     tmp_path)
    knob = outcome(record, "batch_size")
    assert knob.applied and "keeps batch_size 8 from the batch sampler" in knob.detail
    assert record.loaders[-1].batch_size == 8 and record.steps[-1].samples == 8  # the sampler's size, recorded


def test_a_loader_with_a_batch_sampler_of_its_own_refuses_the_batch_size(tmp_path):
    script = tmp_path / "own_sampler.py"
    script.write_text(REBUILT_LOADER.replace(
        "loader = prepare(DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4, shuffle=True))",
        "from torch.utils.data import BatchSampler, SequentialSampler\n"
        "ds = TensorDataset(torch.randn(64, 4))\n"
        "loader = DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 4, False))"))
    record = execute(RunRequest(target=str(script), warmup=1, steps=3, knobs=parse_settings(["batch_size=8"])),
                     tmp_path)
    knob = outcome(record, "batch_size")
    assert not knob.applied and "batches with its own sampler" in knob.detail
    assert record.loaders[-1].batch_size == 4


CACHED_EPOCHS = """
import sys, json
import torch
from torch.utils.data import DataLoader, Dataset

reads = []

class Counting(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        reads.append(i)
        return torch.full((4,), float(i))

loader = DataLoader(Counting(), batch_size=8)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
epochs = 0
for epoch in range(6):
    epochs += 1
    for x in loader:
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
json.dump({"reads": len(reads), "epochs": epochs}, open(sys.argv[1], "w"))
"""


def test_cached_data_never_drives_the_loader_again_once_its_batches_are_in_memory(tmp_path):
    """An epoch is 4 batches; 2 are cached in warmup. Every later epoch replays them without
    the sampler or the dataset: the dataset is read for the first epoch only."""
    script = tmp_path / "epochs.py"
    script.write_text(CACHED_EPOCHS)
    out = tmp_path / "seen.json"
    record = execute(RunRequest(target=str(script), args=[str(out)], warmup=2, steps=30,
                                knobs=parse_settings(["data=cached"])), tmp_path / "run")
    seen = json.loads(out.read_text())
    assert seen["epochs"] == 6 and len(record.steps) == 24  # every epoch kept its 4 batches
    assert seen["reads"] <= 32  # the first epoch's reads only (a real loader would read 192)
    assert all(s.samples == 8 for s in record.measured_steps)  # the probe still counts replayed batches
    assert "not driven" in outcome(record, "data").detail


def test_the_compile_knob_sees_a_model_the_script_compiled_itself():
    from torchdoctor.run.knobs.compute import _already_compiled

    plain, wrapped, in_place = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    compiled = torch.compile(wrapped)  # nothing compiles before the first call
    in_place.compile()
    assert not _already_compiled(plain)
    assert _already_compiled(wrapped) and _already_compiled(in_place)
    del compiled


def test_the_compile_knob_sees_the_scripts_wrapper_itself():
    """The module called from the script whose parameters the optimizer trains is the
    `torch.compile(model)` wrapper when the script compiled before it made the optimizer."""
    from torchdoctor.run.knobs.compute import _already_compiled

    compiled = torch.compile(torch.nn.Linear(2, 2))  # nothing compiles before the first call
    assert _already_compiled(compiled)


# The script compiles its model itself after the knob did (a first forward before its own compile)
COMPILES_LATER = """
import torch
from torch import nn
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with torch.no_grad():
    model(torch.randn(2, 8))            # the knob finds the model here and compiles it
model.compile()                         # the script's own compile, later
for step in range(8):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_the_compile_knob_is_taken_back_when_the_script_compiles_the_model_later(tmp_path, monkeypatch):
    calls = []

    def fake_compile(self, *args, **kwargs):  # Module.compile's effect, without compiling
        calls.append(type(self).__name__)
        self._compiled_call_impl = self._call_impl

    monkeypatch.setattr(torch.nn.Module, "compile", fake_compile)
    script = tmp_path / "train.py"
    script.write_text(COMPILES_LATER)
    record = execute(RunRequest(target=str(script), warmup=1, steps=4, knobs=parse_settings(["compile=true"])),
                     tmp_path)
    assert record.run.status in ("completed", "step-limit"), record.run.error
    assert calls == ["Sequential", "Sequential"]  # the knob's, then the script's own
    result = outcome(record, "compile")
    assert not result.applied and "already compiled by the script" in result.detail and "train.py:8" in result.detail


def test_non_blocking_is_added_only_where_the_call_does_not_say_it_positionally():
    # Module.to copies each parameter with `t.to(device, dtype, non_blocking, ...)`: the knob's
    # keyword on top of that positional one was a TypeError on the H200 (2026-11-28, tune of
    # gpu_blocking_copy.py). What CUDA's real copy would do is not needed to test the choice.
    from types import SimpleNamespace

    from torchdoctor.run.knobs.compute import ComputeKnobs

    calls = []

    def to(tensor, *args, **kwargs):
        calls.append((args, kwargs))

    knobs = ComputeKnobs({"non_blocking": True}, SimpleNamespace(cuda_available=lambda: True))
    copy = knobs._wrap_copy(to)
    host = torch.zeros(2)
    copy(host, "cuda")
    copy(host, torch.device("cuda"), None, False, memory_format=torch.preserve_format)  # as Module.to calls it
    copy(host, "cuda", non_blocking=False)
    copy(host, torch.float16)
    assert calls == [(("cuda",), {"non_blocking": True}),
                     ((torch.device("cuda"), None, False), {"memory_format": torch.preserve_format}),
                     (("cuda",), {"non_blocking": False}), ((torch.float16,), {})]
    assert any(o.name == "non_blocking" and o.applied for o in knobs.outcomes())
