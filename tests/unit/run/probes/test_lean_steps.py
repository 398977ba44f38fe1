"""An unmeasured step's cost (README, "The doctor's own cost"): outside every window the hooks take
their lean paths, the step is kept as a row until read, and only listeners that need every step
are called; the figures are the same as the full paths record."""

import statistics
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers.session_fakes import FakeClock, FakeWindow
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor.run.probed import ProbedRun, ProbeOptions
from torchdoctor.run.probes.phases import PhaseProbe
from torchdoctor.run.probes.steps import StepProbe
from torchdoctor.rules.facts import RunFacts
from torchdoctor.run.session import POLL_S, SPLIT_EVERY, SPLIT_TIMED_FIRST, RunSession, SessionConfig

NO_WINDOWS = dict(sampled_steps=0, backward_steps=0, profiled_steps=0, line_steps=0, memory_steps=0)


def test_an_unmeasured_step_is_kept_as_a_row_and_read_as_its_sample():
    clock = FakeClock()
    session = RunSession(SessionConfig(warmup=1, steps=50, **NO_WINDOWS), clock)
    for i in range(1, 5):
        clock.advance(0.5)
        session.add_time("data_wait", 0.1 * i)
        session.add_time("backward", 0.2)
        session.add_time("optimizer", 0.05)
        session.add_time("zero_grad", 0.01)
        session.ledger.add_samples(32)
        session.ledger.batch_shape = (32, 3)
        session.ledger.micro_batches = 2
        session.ledger.doctor_s = 1e-5
        session.on_optimizer_step()
    assert len(session._rows) == 4 and len(session.steps) == 4 and session.step_count == 4
    last = session.steps[-1]  # reading builds them, in order
    assert not session._rows and [s.index for s in session.steps] == [1, 2, 3, 4]
    assert (last.start, last.end, last.warmup, last.sampled) == (1.5, 2.0, False, False)
    assert (last.data_wait_s, last.backward_s, last.optimizer_s, last.zero_grad_s, last.eval_s) \
        == pytest.approx((0.4, 0.2, 0.05, 0.01, 0.0))
    assert (last.samples, last.micro_batches, last.batch_shape, last.doctor_s) == (32, 2, (32, 3), 1e-5)
    assert session.steps[0].warmup and session.steps[0].data_wait_s == pytest.approx(0.1)
    assert last.probes == [] and last.partial == []


def test_a_polling_listener_gets_warmup_and_window_steps_and_an_unmeasured_one_each_poll_interval():
    clock = FakeClock()
    session = RunSession(SessionConfig(warmup=2, steps=100, **{**NO_WINDOWS, "sampled_steps": 2}), clock)
    session.sampler = FakeWindow()

    class Poller:
        polls_steps = True

        def __init__(self):
            self.seen = []

        def on_step(self, step):
            self.seen.append(step.index)

    poller = Poller()
    session.subscribe(poller)
    step_s = POLL_S / 2.5
    for _ in range(40):
        clock.advance(step_s)
        session.on_optimizer_step()
    seen = poller.seen
    assert {1, 2, 3, 4, 5} <= set(seen)  # warm-up, the first measured and the sampled steps
    later = [i for i in seen if i > 5]
    assert later and len(seen) < 20 and max(b - a for a, b in zip([5, *later], later)) <= 3
    assert not session._listeners["on_step"] and session._rows  # nothing needed the other steps


def test_outside_every_window_the_hooks_take_their_lean_paths_and_record_the_same_figures(monkeypatch):
    full_backward = []
    timed = StepProbe._timed_backward
    monkeypatch.setattr(StepProbe, "_timed_backward", lambda self, *a: full_backward.append(1) or timed(self, *a))
    probed = ProbedRun(ProbeOptions(warmup=2, steps=1000, max_seconds=600, stop="flag", schedule=NO_WINDOWS),
                       Path(tempfile.mkdtemp()), "x.py")
    with probed:
        loader = DataLoader(TensorDataset(torch.randn(64, 3), torch.randn(64, 1)), batch_size=4)
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    session = probed.session
    assert len(full_backward) == 1  # the run's first backward: the loops around it are learned there
    assert not session._listeners["on_step"]  # the probes' per-step handlers only poll
    record = probed.record()
    assert len(record.steps) == 16
    for step in record.steps[2:]:
        assert step.micro_batches == 1 and step.samples == 4 and step.batch_shape == [4, 3]
        assert step.data_wait_s > 0 and step.backward_s > 0 and step.optimizer_s > 0 and step.zero_grad_s > 0
        assert 0 < step.doctor_s < step.duration_s
    assert record.losses.steps == list(range(1, 17)) and len(record.losses.values) == 16
    (info,) = record.optimizers
    assert info.step_calls == 16 and info.zero_grad_calls == 16 and info.zero_grad_set_to_none is True
    assert record.loaders[0].batches == 16


def test_a_polled_phase_probe_counts_the_calls_of_every_closed_measured_step_and_not_the_open_one(capsys):
    clock = FakeClock()
    session = RunSession(SessionConfig(warmup=1, steps=100, **NO_WINDOWS), clock)
    phases = PhaseProbe(session)
    session.subscribe(phases)
    phases.install()
    try:
        for _ in range(6):  # steps far shorter than the poll interval: polled once after the warm-up
            print("step")
            clock.advance(POLL_S / 10)
            session.on_optimizer_step()
        print("in a step that never closes")
    finally:
        phases.uninstall()
    sites = list(phases.stats.values())  # the loop's print and the last one
    assert sum(s.calls for s in sites) == 7
    assert sum(s.calls_in_measured for s in sites) == 1  # polled at step 2; steps 3-6 not yet seen closed
    phases.contribute(SimpleNamespace(run=SimpleNamespace(loop_location=None), phases=[]))
    assert sum(s.calls_in_measured for s in sites) == 5  # steps 2-6: not the warm-up step's, not the open step's


def test_a_list_given_for_the_steps_takes_the_rows_kept_so_far_and_the_steps_to_come():
    clock = FakeClock()
    session = RunSession(SessionConfig(warmup=1, steps=50, **NO_WINDOWS), clock)

    class Kept(list):
        pass

    for _ in range(3):
        clock.advance(0.5)
        session.on_optimizer_step()
    assert session._rows and session.step_count == 3
    session.steps = Kept()
    clock.advance(0.5)
    session.on_optimizer_step()
    assert type(session.steps) is Kept and [s.index for s in session.steps] == [1, 2, 3, 4]
    assert session.steps[-1].start == 1.5 and not session._rows


def test_the_lean_flag_is_off_from_whatever_ends_a_clean_step_until_a_clean_step_closes():
    clock = FakeClock()
    session = RunSession(SessionConfig(warmup=1, steps=50, **{**NO_WINDOWS, "sampled_steps": 1}), clock)
    session.sampler = FakeWindow()

    def close():
        clock.advance(0.5)
        session.on_optimizer_step()

    close()  # warm-up
    assert session.lean
    close()  # step 2: the sampler's window opens for step 3
    assert not session.lean and session.sampler.active
    close()  # step 3, sampled: the window closes
    assert session.lean and [s.sampled for s in session.steps] == [False, False, True]
    session.enter_eval()
    assert not session.lean
    close()  # the evaluation goes on into the next step: still not lean
    assert not session.lean
    session.exit_eval()
    close()
    assert session.lean
    session.note_heavy_probe()
    assert not session.lean
    close()
    assert session.lean and session.steps[-1].sampled  # the costly probe ran in it: left out of timings
    session.subscribe(SimpleNamespace(on_batch=lambda in_eval: None))
    assert not session.lean
    close()
    assert not session.lean  # a listener of every batch: the loader's full path, every batch


def test_a_lean_optimizer_step_that_raised_leaves_no_start_time_for_the_next_full_one(monkeypatch):
    probed = ProbedRun(ProbeOptions(warmup=1, steps=1000, max_seconds=600, stop="flag", schedule=NO_WINDOWS),
                       Path(tempfile.mkdtemp()), "x.py")
    with probed:
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step():
            opt.zero_grad()
            model(torch.randn(4, 3)).sum().backward()
            opt.step()

        for _ in range(3):
            step()
        assert probed.probes.probes[0]._lean_optimizer is opt
        with monkeypatch.context() as patch:  # the step raises inside: its post-hook never runs
            patch.setattr(torch.optim.SGD, "_init_group", lambda *a, **k: 1 / 0)
            with pytest.raises(ZeroDivisionError):
                step()
        probed.session.lean = False  # the next step takes the full path (as after a window)
        opt.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        clock = probed.session.clock
        called = clock()
        opt.step()
        returned = clock()
    last = probed.session.steps[-1]
    assert 0 < last.optimizer_s <= returned - called  # timed from its own start, not the step that raised


def test_cuda_step_events_leave_unmeasured_steps_lean(monkeypatch):
    # On the H200 (2026-11-28) the hooks took 121 µs a step on CUDA against ~14 on a CPU. One
    # cause: the CUDA events listener got every step, so no CUDA step took the lean path.
    from torchdoctor.run.probes.cuda_events import CudaStepEvents

    class FakeEvent:
        def __init__(self, enable_timing=False):
            pass

        def record(self):
            pass

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    clock = FakeClock()
    session = RunSession(SessionConfig(warmup=2, steps=400, **NO_WINDOWS), clock)
    events = CudaStepEvents()
    session.subscribe(events)
    for _ in range(300):
        clock.advance(0.001)
        session.on_optimizer_step()
    # warm-up, the first step after it, then one a poll interval (50 ms: 6 of 300 1-ms steps)
    assert {1, 2, 3} <= set(events.events) and len(events.events) < 15


def _bare_session(clock):
    session = RunSession(SessionConfig(warmup=1, steps=500, **NO_WINDOWS), clock)
    session.step_source, session.backward_loops_seen = "optimizer", True  # what the first step() teaches

    def close():
        clock.advance(0.5)
        session.add_time("backward", 0.2)  # what the full paths would time; the bare ones add nothing
        session.on_optimizer_step()
    return session, close


def test_a_long_run_times_the_split_of_its_first_steps_then_of_one_step_in_split_every():
    clock = FakeClock()
    session, close = _bare_session(clock)
    first_bare = 1 + SPLIT_TIMED_FIRST + 1  # the warm-up step, the timed ones, then the next
    for _ in range(first_bare - 1):
        assert not session.bare
        close()
    timed_after = [i for i in range(first_bare, first_bare + 3 * SPLIT_EVERY) if i % SPLIT_EVERY == 0]
    pattern = []
    for index in range(first_bare, first_bare + 3 * SPLIT_EVERY):
        pattern.append(session.bare)
        close()
        assert session.steps[-1].index == index and session.steps[-1].split_timed is not pattern[-1]
    assert [i for i, bare in zip(range(first_bare, first_bare + 3 * SPLIT_EVERY), pattern) if not bare] == timed_after
    assert all(s.split_timed for s in session.steps[:first_bare - 1])  # a bounded run of 30 steps: all timed


def test_whatever_ends_a_lean_step_ends_a_bare_one_and_its_row_says_its_split_went_untimed():
    clock = FakeClock()
    session, close = _bare_session(clock)
    while not session.bare:
        close()
    session.enter_eval()  # an evaluation inside a bare step: the rest of the step takes the full paths
    assert not session.bare and not session.lean
    close()
    assert session.steps[-1].split_timed is False  # its first calls went untimed
    session.exit_eval()
    close()
    assert not session.bare or session.steps[-1].split_timed  # a window-free step again, bare or timed
    while not session.bare:
        close()
    session.request_stop("step-limit")
    assert not session.bare


def test_bare_steps_pass_the_calls_on_untimed_count_them_and_change_no_number():
    def train(steps: int, probed: ProbedRun | None = None) -> list[torch.Tensor]:
        torch.manual_seed(0)
        loader = DataLoader(TensorDataset(torch.randn(steps * 4, 3), torch.randn(steps * 4, 1)), batch_size=4)
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            if i % 10 == 5:
                loss.backward(retain_graph=False)  # arguments: the bare path leaves the call to the full one
            else:
                loss.backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    steps = 1 + SPLIT_TIMED_FIRST + 6 * SPLIT_EVERY
    plain = train(steps)
    probed = ProbedRun(ProbeOptions(warmup=1, steps=1000, max_seconds=600, stop="flag", schedule=NO_WINDOWS),
                       Path(tempfile.mkdtemp()), "x.py")
    with probed:
        doctored = train(steps, probed)
    assert all(torch.equal(a, b) for a, b in zip(plain, doctored))  # bit for bit: the user's numerics
    record = probed.record()
    assert len(record.steps) == steps
    bare = [s for s in record.steps if not s.split_timed]
    timed = [s for s in record.steps[1:] if s.split_timed]
    assert len(bare) == 6 * (SPLIT_EVERY - 1)
    for s in record.steps[1:]:  # every step's boundary, data wait, batch and backward count: measured
        assert s.micro_batches == 1 and s.samples == 4 and s.data_wait_s > 0 and s.duration_s > 0
    for s in bare:
        assert s.optimizer_s == s.zero_grad_s == 0.0
        assert s.backward_s == 0.0 or (s.index - 1) % 10 == 5  # a call with arguments was timed anyway
    assert all(s.backward_s > 0 and s.optimizer_s > 0 and s.zero_grad_s > 0 for s in timed)
    (info,) = record.optimizers
    assert info.step_calls == steps  # counted in every step
    # kept where timed (and where the call with arguments took the lean path)
    assert record.losses.steps == [s.index for s in record.steps if s.split_timed or (s.index - 1) % 10 == 5]
    facts = RunFacts.of(record)  # the split's means are over the steps that timed it, not diluted by zeros
    measured_timed = [s for s in facts.measured if s.split_timed]
    assert facts.mean("backward_s") == pytest.approx(statistics.fmean(s.backward_s for s in measured_timed))
    assert facts.mean("data_wait_s") == pytest.approx(statistics.fmean(s.data_wait_s for s in facts.measured))


def test_a_bare_step_does_not_skip_a_wrapper_put_over_torch_autograd_backward_after_the_doctors(monkeypatch):
    # the DDP probe wraps torch.autograd.backward when a DDP model is made: a bare step must still call it
    probed = ProbedRun(ProbeOptions(warmup=1, steps=1000, max_seconds=600, stop="flag", schedule=NO_WINDOWS),
                       Path(tempfile.mkdtemp()), "x.py")
    seen = []
    with probed:
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        inner = torch.autograd.backward

        def outer(*args, **kwargs):
            seen.append(probed.session.bare)
            return inner(*args, **kwargs)

        for i in range(SPLIT_TIMED_FIRST + 2 * SPLIT_EVERY):
            if i == 3:
                monkeypatch.setattr(torch.autograd, "backward", outer)
            opt.zero_grad()
            model(torch.randn(4, 3)).sum().backward()
            opt.step()
        monkeypatch.undo()
    assert len(seen) == SPLIT_TIMED_FIRST + 2 * SPLIT_EVERY - 3 and any(seen)  # bare steps too went through it


def test_a_planned_window_that_does_not_open_leaves_no_bare_step_behind():
    # a followed run plans windows late, when steps are bare; a window that does not open (its run budget
    # spent, a probe that declines) must still leave the next step timed whole, as its row says
    clock = FakeClock()
    session, close = _bare_session(clock)
    while not session.bare:
        close()
    session._planned.add(session.step_count + 2)  # the step after this one: planned, and no probe to open
    close()
    assert not session.bare
    close()
    assert session.steps[-1].split_timed and session.steps[-1].backward_s > 0


def test_in_a_bare_step_another_optimizers_closure_step_is_still_timed():
    probed = ProbedRun(ProbeOptions(warmup=1, steps=1000, max_seconds=600, stop="flag", schedule=NO_WINDOWS),
                       Path(tempfile.mkdtemp()), "x.py")
    steps = 1 + SPLIT_TIMED_FIRST + 2 * SPLIT_EVERY
    with probed:
        first, second = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)
        opt1 = torch.optim.SGD(first.parameters(), lr=0.01)  # steps first: the primary, whose steps go bare
        opt2 = torch.optim.SGD(second.parameters(), lr=0.01)

        def closure():
            opt2.zero_grad()
            loss = second(torch.randn(4, 3)).sum()
            loss.backward()
            return loss

        for _ in range(steps):
            opt1.zero_grad()
            first(torch.randn(4, 3)).sum().backward()
            opt1.step()
            opt2.step(closure)
    record = probed.record()
    assert any(not s.split_timed for s in record.steps)
    # the closure step of the second optimizer closes each interval: timed and counted in every one
    assert [s.closure_calls for s in record.steps[1:]] == [1] * (steps - 1)
