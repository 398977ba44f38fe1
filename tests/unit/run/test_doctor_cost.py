"""The doctor's own cost: what a run records about itself (run/cost.py), the budgets that bound
its costly probes (run/budget.py, the session's safe points), and how every report shows it."""

import dataclasses
import json
import sys

import pytest
import torch
from helpers.session_fakes import FakeClock, FakeWindow
from helpers.records import record

from torchdoctor.diagnosis.run import analyze
from torchdoctor.model.record import StepSample
from torchdoctor.report import render
from torchdoctor.run.budget import WindowBudget
from torchdoctor.run.cost import doctor_cost
from torchdoctor.run.session import RunSession, SessionConfig


def _step(index, seconds, probes=(), partial=(), doctor_s=0.0, warmup=False):
    return StepSample(index=index, start=0.0, end=seconds, warmup=warmup, sampled=bool(probes),
                      doctor_s=doctor_s, probes=list(probes), partial=list(partial))


# ---- what a run records -----------------------------------------------------------------------
def test_cost_reports_hooks_per_unmeasured_step_each_probe_and_the_first_step():
    steps = [_step(1, 0.030, ["memory"], warmup=True), _step(2, 0.010, doctor_s=20e-6, warmup=True),
             _step(3, 0.025, ["sampler"]), _step(4, 0.022, ["sampler"], partial=["sampler"]),
             *[_step(i, 0.010, doctor_s=(10 + i) * 1e-6) for i in range(5, 10)]]
    budgets = {"sampler": WindowBudget("sampler", step_factor=8, step_min_s=0.05, run_share=0.01, used_s=0.047,
                                       why_partial={4: "step"})}
    cost = doctor_cost(steps, budgets, baseline_s=0.010, expected_run_s=1.0, install_s=0.002, finish_s=0.03)
    assert cost.unmeasured_steps == 6 and cost.sampled_steps == 3
    assert cost.hook_s_per_step == pytest.approx(17.5e-6)  # median of 15..19 and 20 µs
    memory, sampler = cost.probes
    assert (memory.label, memory.steps, memory.step_ratio) == ("memory accounting", [1], 3.0)
    assert "first-step work" in memory.note  # a warm-up step's ratio is not the probe's alone
    assert (sampler.steps, sampler.partial, sampler.step_ratio) == ([3, 4], [4], 2.35)
    assert sampler.added_s == pytest.approx(0.027) and sampler.active_s == 0.047
    assert sampler.budget_step_s == pytest.approx(0.08) and sampler.budget_run_s == pytest.approx(0.5)
    assert "outgrew" in sampler.note
    assert cost.first_step_ratio == 3.0 and cost.first_step_probes == ["memory"]
    assert cost.added_s == pytest.approx(0.020 + 0.027 + sum((10 + i) * 1e-6 for i in range(5, 10)) + 20e-6)


def test_cost_counts_the_unmeasured_steps_whose_split_went_untimed_and_the_report_says_so():
    steps = [_step(i, 0.010, doctor_s=5e-6) for i in range(1, 11)]
    for s in steps[4:]:
        if s.index % 4:
            s.split_timed = False
    cost = doctor_cost(steps, {}, baseline_s=0.010, expected_run_s=1.0)
    assert (cost.unmeasured_steps, cost.split_untimed_steps) == (10, 5)  # steps 5, 6, 7, 9, 10
    rec = _record_with_cost()
    rec.doctor_cost.split_untimed_steps = 4
    report = analyze(rec)
    timed = rec.doctor_cost.unmeasured_steps - 4
    assert f"backward, optimizer and zero_grad timed in {timed} of {rec.doctor_cost.unmeasured_steps}" \
        in report.summary.doctor_cost
    table = next(t for t in report.tables if t.title == "The doctor's own cost")
    assert "timed in" in table.rows[0][-1]
    assert "timed in" not in analyze(_record_with_cost()).summary.doctor_cost  # a run that timed every step


def test_cost_without_an_unmeasured_step_says_not_measured_rather_than_guessing():
    cost = doctor_cost([_step(1, 0.03, ["memory"], warmup=True), _step(2, 0.02, ["sampler"])], {}, None, None)
    assert cost.hook_s_per_step is None and cost.first_step_ratio is None and cost.added_s is None
    assert all(p.step_ratio is None for p in cost.probes)


def test_a_step_sample_made_on_the_fast_path_has_every_field_in_its_place():
    # the fast path passes the fields by position: each ledger value must land in its own field
    session = RunSession(SessionConfig(warmup=0, steps=5))
    ledger = session.ledger
    for n, category in enumerate(("data_wait", "backward", "optimizer", "zero_grad", "eval", "checkpoint", "logging")):
        ledger.seconds[category] = 0.125 * (n + 1)
    ledger.micro_batches, ledger.closure_calls, ledger.samples, ledger.doctor_s = 2, 3, 64, 0.001
    ledger.batch_shape = torch.zeros(64, 7)
    session.on_optimizer_step()
    step = session.steps[0]
    assert {f.name for f in dataclasses.fields(StepSample)} == set(StepSample.__slots__)
    assert (step.index, step.warmup, step.sampled, step.micro_batches, step.closure_calls, step.samples) == \
        (1, False, False, 2, 3, 64)
    assert (step.data_wait_s, step.backward_s, step.optimizer_s, step.zero_grad_s, step.eval_s, step.checkpoint_s,
            step.logging_s) == (0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875)
    assert step.gpu_s is None and list(step.batch_shape) == [64, 7] and step.doctor_s == 0.001
    assert step.probes == [] and step.partial == [] and 0 <= step.start <= step.end
    # the ledger is zeroed in place for the next step: the sample already made keeps its values
    session.on_optimizer_step()
    assert step.data_wait_s == 0.125 and step.samples == 64
    following = session.steps[1]
    assert (following.data_wait_s, following.samples, following.micro_batches, following.batch_shape) == \
        (0.0, None, 0, None)


# ---- budgets ----------------------------------------------------------------------------------
def test_a_window_over_its_step_allowance_stops_at_the_next_safe_point_and_the_step_is_partial():
    clock = FakeClock()
    session = RunSession(SessionConfig(warmup=1, steps=10, sampled_steps=2), clock)
    session.sampler = FakeWindow()
    for _ in range(2):  # warm-up step 1, clean step 2 (the baseline: 10 ms): the window opens for step 3
        clock.advance(0.01)
        session.on_optimizer_step()
    assert session.sampler.active and session.baseline_s == pytest.approx(0.01)
    session.budgets["sampler"].step_min_s = 0.0
    clock.advance(0.03)
    session.checkpoint()  # 30 ms in: within 8 x 10 ms
    assert session.sampler.active
    clock.advance(0.06)
    session.checkpoint()  # 90 ms in: past it
    assert not session.sampler.active
    clock.advance(0.01)
    session.on_optimizer_step()
    step = session.steps[-1]
    assert step.probes == ["sampler"] and step.partial == ["sampler"] and step.sampled
    assert session.budgets["sampler"].partial == [3] and session.budgets["sampler"].why_partial == {3: "step"}


def test_a_window_whose_run_budget_is_spent_is_skipped_and_its_steps_stay_clean():
    clock = FakeClock()
    session = RunSession(SessionConfig(warmup=1, steps=20, sampled_steps=3), clock)
    session.sampler = FakeWindow()
    session.budgets["sampler"].step_factor = 1.0  # one baseline step: the run allowance is that much
    session.budgets["sampler"].step_min_s = 0.0
    session.budgets["sampler"].run_share = session.budgets["sampler"].run_min_s = 0.0
    for _ in range(8):
        clock.advance(0.01)
        session.on_optimizer_step()
    budget = session.budgets["sampler"]
    assert budget.steps == [3] and budget.skipped == [4, 5] and not session.sampler.active
    assert [s.index for s in session.steps if s.sampled] == [3]


def test_a_closure_step_stops_a_per_closure_window_after_one_evaluation():
    """LBFGS evaluates its closure many times a step: memory accounting needs one of them."""
    clock = FakeClock()
    session = RunSession(SessionConfig(warmup=3, steps=5), clock)
    session.memory = FakeWindow()
    session.memory.activate("train")
    session.window_opened("memory")
    for _ in range(20):  # step 1: no baseline yet; the closures' own length bounds the window
        clock.advance(0.01)
        session.ledger.closure_calls += 1
        session.checkpoint(closure_s=0.01)
    session.on_optimizer_step()
    assert session.steps[0].partial == ["memory"]  # stopped after a few closures, not 20
    assert session.budgets["memory"].in_step(clock()) == 0.0 and session.budgets["memory"].used_s < 0.07
    assert session.memory.active  # step 2 opens it again (a warm-up step of the window)
    clock.advance(0.01)
    session.ledger.closure_calls += 1
    session.checkpoint(closure_s=0.01)
    assert not session.memory.active and session.budgets["memory"].why_partial[2] == "closure"


def test_without_budgets_every_window_runs_its_whole_schedule():
    clock = FakeClock()
    session = RunSession(SessionConfig(warmup=1, steps=10, sampled_steps=3, budgets=False), clock)
    session.sampler = FakeWindow()
    for _ in range(3):
        clock.advance(0.01)
        session.on_optimizer_step()
    clock.advance(10.0)
    session.checkpoint()
    assert session.sampler.active and session.budgets == {}


def test_compiling_in_a_probes_step_is_the_scripts_not_the_probes():
    """torch.compile compiling for 100 s in step 1, under memory accounting: the probe is charged
    with the step's excess over the median once the compile is left out, not with the compile."""
    steps = [_step(1, 100.5, ["memory"], warmup=True), *[_step(i, 0.25) for i in range(2, 8)]]
    charged = doctor_cost(steps, {}, baseline_s=0.25, expected_run_s=110.0)
    fair = doctor_cost(steps, {}, baseline_s=0.25, expected_run_s=110.0, script_own_s={1: 100.0})
    (memory,) = fair.probes
    assert charged.probes[0].added_s == pytest.approx(100.25)
    assert memory.added_s == pytest.approx(0.25) and memory.step_ratio == pytest.approx(2.0)
    assert "compiling in its steps is the script's" in memory.note


# ---- the real probes ---------------------------------------------------------------------------
def _probed(tmp_path, **schedule):
    from torchdoctor.run.probed import ProbedRun, ProbeOptions

    return ProbedRun(ProbeOptions(steps=30, warmup=1, max_seconds=120, schedule=schedule), tmp_path, "x")


def test_outside_the_windows_nothing_of_the_doctor_runs_per_op(tmp_path):
    from torch.utils._python_dispatch import _get_current_dispatch_mode
    from torch.nn.modules import module as nn_module

    model = torch.nn.Linear(4, 2)
    probed = _probed(tmp_path)
    seen = []
    with probed:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(28):
            loss = model(torch.ones(3, 4)).sum()
            opt.zero_grad()
            loss.backward()
            if i == 26:  # past every window
                seen.append((torch._C._len_torch_function_stack(), _get_current_dispatch_mode(),
                             len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks),
                             dict(probed.session.budgets["line_sampler"].__dict__)["opened_at"]))
            opt.step()
    assert seen == [(0, None, 0, 0, None)]
    assert not probed.session.steps[-1].probes


def test_a_generation_loop_in_evaluation_is_sampled_for_a_bounded_time_then_runs_plain(tmp_path, monkeypatch):
    from torchdoctor.run.probes import dispatch

    monkeypatch.setattr(dispatch, "EVAL_SAMPLE_MIN_S", 0.0)
    model = torch.nn.Linear(4, 4)
    probed = _probed(tmp_path, memory_steps=0)
    with probed:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = model(torch.ones(2, 4)).sum()
        loss.backward()
        opt.step()
        model.eval()
        token = torch.ones(1, 4)
        with torch.no_grad():
            for _ in range(50):  # a generation loop: no DataLoader batch, a model call per token
                token = model(token).tanh()
            sampling_at_the_end = probed.probes.sampler.active
        model.train()
    sampler = probed.probes.sampler
    assert sampler.eval_windows == 1 and sampler.eval_cut and not sampling_at_the_end
    assert torch._C._len_torch_function_stack() == 0


def test_an_evaluation_in_a_script_that_compiles_is_sampled_without_a_module_hook(tmp_path, monkeypatch):
    """nanochat evaluates at step 0, before its compiled model first ran: a global module hook of the
    doctor's there would be traced into the graph Dynamo then compiles. With no hook and no DataLoader
    batch, the sample runs until a call of the evaluation's loop came round twice, then hands every
    call on unrecorded; the per-batch read is seen, and said to be of the sample's part."""
    from torch.nn.modules import module as nn_module

    from torchdoctor.run.probes import dispatch

    monkeypatch.setattr(dispatch, "EVAL_SAMPLE_MIN_S", 0.0)
    model = torch.nn.Linear(4, 4)
    probed = _probed(tmp_path, memory_steps=0)
    hooks = []
    with probed:
        probed.probes.sampler.script_compiles = lambda: True  # torch.compile was called
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            for _ in range(20):  # batches from a generator: nothing to count them by
                out = model(torch.ones(2, 4))
                hooks.append(len(nn_module._global_forward_pre_hooks))
                bool((out < 0).any())
        model.train()
        record = probed.record()
    sampler = probed.probes.sampler
    assert set(hooks) == {0} and sampler.eval_passed and sampler.eval_cut and not sampler.passing
    reads = [c for c in record.dispatch.api_calls if c.phase == "eval" and c.api == "__bool__"]
    assert [c.count for c in reads] == [2] and record.dispatch.eval_sample_cut
    assert torch._C._len_torch_function_stack() == 0
    (found,) = [f for f in analyze(record).findings if f.code == "TD203"]
    assert "2x in the first part of one evaluation" in found.title and found.severity.value == "low"


def test_compiling_inside_the_evaluations_sample_is_not_its_time():
    from torchdoctor.run.probes.dispatch import DispatchSampler

    sampler = DispatchSampler(clock=lambda: 20.0)
    sampler._eval_bound_from = 10.0
    sampler.exclude_script_time(1.5, now=20.0)
    assert sampler._eval_bound_from == 11.5
    sampler.exclude_script_time(30.0, now=20.0)  # never past now
    assert sampler._eval_bound_from == 20.0


def test_an_evaluation_inside_a_sampled_step_keeps_its_sample_when_the_training_window_is_spent(tmp_path):
    """The first evaluation is sampled (a `.cpu()` per batch is a habit only it shows) even when it
    falls in an op-sampled step whose budget runs out: the training window steps aside, and its
    spent budget cuts it after the evaluation, not the evaluation's own sample."""
    model = torch.nn.Linear(4, 2)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(12, 4)), batch_size=4)
    probed = _probed(tmp_path, memory_steps=0, sampled_steps=1, backward_steps=0, line_steps=0, profiled_steps=0)
    with probed:
        budget = probed.session.budgets["sampler"]
        budget.over = lambda *args: True  # spent from the first safe point on
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            loss = model(torch.ones(3, 4)).sum()
            if step == 1:  # the sampled step: an evaluation inside it
                model.eval()
                with torch.no_grad():
                    for (x,) in loader:
                        model(x).argmax(-1).cpu()
                model.train()
            opt.zero_grad()
            loss.backward()
            opt.step()
    sampler = probed.probes.sampler
    assert sampler.eval_windows == 1 and sampler.eval_batches == 3 and not sampler.eval_cut
    assert budget.partial  # the training window was cut, after the evaluation
    assert torch._C._len_torch_function_stack() == 0


def test_an_evaluation_sample_cut_by_time_counts_only_its_whole_batches(tmp_path, monkeypatch):
    """A per-batch `.cpu()` is said when it ran in every sampled batch: a sample cut by its time
    bound keeps at least two whole batches, and never counts a batch it did not sample whole."""
    from torchdoctor.run.probes import dispatch

    monkeypatch.setattr(dispatch, "EVAL_SAMPLE_MIN_S", 0.0)
    model = torch.nn.Linear(4, 2)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(24, 4)), batch_size=4)
    probed = _probed(tmp_path, memory_steps=0, sampled_steps=0, backward_steps=0, line_steps=0, profiled_steps=0)
    with probed:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            model(torch.ones(3, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            if step == 2:
                # the bound is the median unmeasured step, which a busy machine can stretch past
                # the whole evaluation: bound it at zero, so only the two whole batches it keeps hold it
                probed.probes.sampler.baseline = lambda: 0.0
                model.eval()
                with torch.no_grad():
                    for (x,) in loader:
                        model(x).argmax(-1).cpu()
                model.train()
        record = probed.record()
    sampler = probed.probes.sampler
    reads = sum(c.count for c in record.dispatch.api_calls if c.api == ".cpu()")
    assert sampler.eval_cut and record.dispatch.eval_batches_sampled >= 2
    assert reads == record.dispatch.eval_batches_sampled  # one read per whole sampled batch


# ---- every report shows it ---------------------------------------------------------------------
def _record_with_cost():
    rec = record(step_s=0.01, steps=10, warmup=2)
    rec.steps[0].probes, rec.steps[0].sampled = ["memory"], True
    rec.steps[0].end = rec.steps[0].start + 0.03
    rec.steps[3].probes, rec.steps[3].sampled, rec.steps[3].partial = ["sampler"], True, ["sampler"]
    rec.steps[3].end = rec.steps[3].start + 0.025
    for s in rec.steps:
        if not s.probes:
            s.doctor_s = 15e-6
    rec.doctor_cost = doctor_cost(rec.steps, {}, 0.01, 0.2)
    return rec


@pytest.mark.parametrize("fmt", ["text", "md", "html", "json"])
def test_every_report_format_shows_the_doctors_own_cost(fmt):
    report = analyze(_record_with_cost())
    assert report.summary.doctor_cost.startswith("+15 µs per unmeasured step in its hooks")
    assert "op sampler 1 (2.50x), 1 partial" in report.summary.doctor_cost
    assert "first step 3.0x the median step (under memory accounting)" in report.summary.doctor_cost
    table = next(t for t in report.tables if t.title == "The doctor's own cost")
    assert [row[0] for row in table.rows] == ["hooks (every step)", "memory accounting", "op sampler"]
    out = render(report, fmt)
    if fmt == "json":
        doc = json.loads(out)
        assert doc["summary"]["doctor_cost"] == report.summary.doctor_cost
        assert any(t["title"] == "The doctor's own cost" for t in doc["tables"])
    else:
        flat = " ".join(out.split())  # the terminal wraps long lines
        assert "own cost" in flat and "15 µs per unmeasured step" in flat
        assert "op sampler" in flat and "2.50x" in flat


def test_a_record_without_the_cost_still_renders():
    rec = record(step_s=0.01, steps=5)
    report = analyze(rec)
    assert report.summary.doctor_cost is None
    assert all(t.title != "The doctor's own cost" for t in report.tables)
    assert render(report, "text")


def test_an_evaluation_inside_a_sampled_step_runs_without_the_training_modes(tmp_path):
    model = torch.nn.Linear(4, 2)
    probed = _probed(tmp_path, memory_steps=0)
    seen = {}
    with probed:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model.eval()  # the first evaluation: the one the sampler samples (bounded)
        model(torch.ones(1, 4))
        model.train()
        for step in range(1, 5):
            loss = model(torch.ones(3, 4)).sum()
            loss.backward()
            if step == 3:  # the op sampler's first step (warm-up 1, one clean step)
                seen["training"] = torch._C._len_torch_function_stack()
                model.eval()
                seen["evaluating"] = torch._C._len_torch_function_stack()
                model(torch.ones(1, 4))
                model.train()
                seen["resumed"] = torch._C._len_torch_function_stack()
            opt.step()
    assert seen == {"training": 1, "evaluating": 0, "resumed": 1}
    assert probed.probes.sampler.train_windows >= 1 and probed.session.steps[2].probes == ["sampler"]
