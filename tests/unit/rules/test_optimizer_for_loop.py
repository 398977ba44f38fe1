"""TD306 optimizer-for-loop: optimizer.step() on torch's single-tensor path, sized from this run's
own steps (median share and its spread), silent where foreach/fused already run or the share is
small; and a real run of a minimal script of that shape (an AdamW left at its defaults on a CPU)."""

import pytest
import torch

from helpers.records import optimizer, record
from torchdoctor.rules.facts import RunFacts
from torchdoctor.rules.launch import FOR_LOOP_MIN_SHARE, OptimizerForLoop
from torchdoctor.run.probes.steps import update_path
from torchdoctor.run.runner import RunRequest, execute


def check(rec):
    return OptimizerForLoop().check(rec, RunFacts.of(rec))


def looping(**kw):
    base = dict(foreach=None, fused=None, implementation="for-loop", fused_available=True, param_devices=["cpu"],
                step_calls=12)
    base.update(kw)
    return optimizer(**base)


def with_shares(shares, step_s=0.1):
    rec = record(step_s=step_s, steps=len(shares))
    for step, share in zip(rec.measured_steps, shares):
        step.optimizer_s = share * step_s
    return rec


def test_a_large_for_loop_share_is_found_with_its_spread_and_the_fused_fix():
    rec = with_shares([0.38, 0.40, 0.42, 0.44, 0.41, 0.39, 0.43, 0.40, 0.45, 0.36])
    rec.optimizers = [looping()]
    (f,) = check(rec)
    assert f.code == "TD306" and f.location.line == 9
    assert f.evidence["share_of_step_time"] == pytest.approx(0.405, abs=0.01)
    assert f.evidence["share_low"] < f.evidence["share_of_step_time"] < f.evidence["share_high"]
    assert f.evidence["suggested"] == "fused=True" and "fused=True" in f.fix
    assert "Measured" in f.message and "between" in f.message and "10 measured steps" in f.message
    # measured share, the assumption named, and the bound of removing the whole update
    assert "measured" in f.estimate_basis and "assumed" in f.estimate_basis and "at most" in f.estimate_basis
    assert f.estimated_speedup == pytest.approx(1 / (1 - 0.405 * 0.7), rel=0.02)


def test_fused_false_written_for_cpu_runs_is_said_as_written():
    """llm.c's `fused=use_fused` (True on CUDA only): on a CPU the loop runs, and torch has fused kernels there."""
    rec = with_shares([0.4] * 8)
    rec.optimizers = [looping(fused=False)]
    (f,) = check(rec)
    assert "created with fused=False (foreach unset)" in f.message and "on the cpu too: `fused=True`" in f.message


def test_without_fused_kernels_it_suggests_foreach_and_makes_no_estimate():
    rec = with_shares([0.3] * 8)
    rec.optimizers = [looping(class_name="RMSprop", fused_available=False)]
    (f,) = check(rec)
    assert f.evidence["suggested"] == "foreach=True" and "foreach=True" in f.fix and "fused=True" not in f.fix
    assert f.estimated_speedup is None and f.severity.value == "medium"


@pytest.mark.parametrize("opt", [
    looping(implementation="foreach"),                       # CUDA's default, or foreach=True
    looping(implementation="fused", fused=True),
    looping(foreach=False),                                  # set by the script: TD302's
    looping(implementation=None),                            # not a torch.optim update: unknown
])
def test_silent_where_the_update_is_not_the_default_for_loop(opt):
    rec = with_shares([0.5] * 8)
    rec.optimizers = [opt]
    assert check(rec) == []


def test_silent_when_the_share_is_small():
    rec = with_shares([FOR_LOOP_MIN_SHARE * 0.6] * 8)
    rec.optimizers = [looping()]
    assert check(rec) == []


@pytest.mark.parametrize("kwargs, path", [
    ({}, "for-loop"), ({"foreach": True}, "foreach"), ({"fused": True}, "fused"), ({"foreach": False}, "for-loop")])
def test_the_update_path_is_torchs_own_resolution(kwargs, path):
    params = torch.nn.Linear(4, 4).parameters()
    implementation, fused, devices = update_path(torch.optim.AdamW(params, **kwargs))
    assert (implementation, fused, devices) == (path, True, ["cpu"])
    assert update_path(torch.optim.RMSprop(torch.nn.Linear(4, 4).parameters()))[:2] == ("for-loop", False)
    assert update_path(torch.optim.LBFGS(torch.nn.Linear(4, 4).parameters()))[:2] == (None, None)


# An AdamW left at its defaults over many small tensors: on a CPU the update is most of the step.
SCRIPT = """
import torch
torch.manual_seed(0)
params = [torch.nn.Parameter(torch.randn(16, 16)) for _ in range(150)]
opt = torch.optim.AdamW(params, lr=1e-3{extra})
x = torch.randn(4, 16)
for step in range(40):
    loss = sum((x @ p).sum() for p in params[:4])
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("extra, found", [("", True), (", fused=True", False), (", foreach=True", False)])
def test_a_real_run_of_a_default_adamw_on_cpu(tmp_path, extra, found):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(extra=extra))
    rec = execute(RunRequest(target=str(script), warmup=2, steps=12), tmp_path)
    assert rec.run.status in ("step-limit", "completed"), rec.run.error
    (opt,) = rec.optimizers
    assert opt.implementation == ("for-loop" if found else extra.split("=")[0].strip(", ")) and opt.fused_available
    findings = check(rec)
    assert [f.code for f in findings] == (["TD306"] if found else [])
    if found:
        assert findings[0].location.line == 5 and findings[0].evidence["suggested"] == "fused=True"


def test_severity_holds_at_the_low_end_of_the_measured_share():
    """A share the machine's noise pushed up for a few steps makes no medium: the low end decides."""
    steady = with_shares([0.12] * 10)
    steady.optimizers = [looping()]
    (f,) = check(steady)
    assert f.severity.value == "medium"  # 1 / (1 - 0.12 * 0.7) = 1.09x, at both ends
    noisy = with_shares([0.05, 0.05, 0.05, 0.05, 0.12, 0.12, 0.12, 0.12, 0.12, 0.12])
    noisy.optimizers = [looping()]
    (f,) = check(noisy)
    assert f.severity.value == "low" and f.estimated_speedup > 1.05


def test_a_cpu_run_of_a_script_that_uses_cuda_when_it_can_is_checked_not_a_cause():
    """On CUDA torch's default is already the multi-tensor path: a GPU-minded script run on a CPU
    (its sources take cuda when available) gets the same measured finding as information, saying the
    cost is the CPU run's, also when it sets fused from the device (litgpt: fused on CUDA only); a
    CPU-only script keeps its measured severity."""
    shares = [0.38, 0.40, 0.42, 0.44, 0.41, 0.39, 0.43, 0.40, 0.45, 0.36]
    cpu_only, gpu_minded = with_shares(shares), with_shares(shares)
    cpu_only.optimizers, gpu_minded.optimizers = [looping()], [looping()]
    cpu_only.sources_prefer_cuda, gpu_minded.sources_prefer_cuda = False, True
    (plain,), (stand_in,) = check(cpu_only), check(gpu_minded)
    assert plain.severity.value != "low" and not plain.evidence["cpu_run_of_a_cuda_script"]
    assert stand_in.severity.value == "info" and stand_in.evidence["cpu_run_of_a_cuda_script"]
    assert "this CPU run's" in stand_in.message and stand_in.estimated_speedup == plain.estimated_speedup
    gpu_minded.optimizers[0].fused = False  # `fused=device.type == "cuda"` on this CPU
    assert check(gpu_minded)[0].severity.value == "info"


def test_a_script_that_takes_cuda_when_there_is_one_is_read_from_the_files(tmp_path):
    from torchdoctor.run.sources import prefer_cuda

    gpu, cpu, flag = tmp_path / "gpu.py", tmp_path / "cpu.py", tmp_path / "flag.py"
    gpu.write_text("device = 'cuda' if torch.cuda.is_available() else 'cpu'\n")
    cpu.write_text("model = Net()\n")
    # makemore: a --device option that defaults to cpu, 'cuda' said only to sync when chosen
    flag.write_text("p.add_argument('--device', default='cpu')\nif args.device.startswith('cuda'): sync()\n")
    assert prefer_cuda([str(cpu), str(gpu)]) and not prefer_cuda([str(cpu), str(flag), str(tmp_path / "gone.py")])
    flag.write_text("p.add_argument('--device', type=str, default='cuda')\n")
    assert prefer_cuda([str(flag)])
