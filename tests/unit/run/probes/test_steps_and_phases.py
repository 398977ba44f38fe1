import torch

from torchdoctor.run.probes.phases import PhaseProbe
from torchdoctor.run.probes.steps import StepProbe
from torchdoctor.run.session import RunSession, SessionConfig


def _train(model, opt, steps, set_to_none=True, eval_every=0):
    for i in range(steps):
        loss = model(torch.randn(4, 3)).sum()
        opt.zero_grad(set_to_none=set_to_none)
        loss.backward()
        opt.step()
        if eval_every and i % eval_every == 0:
            model.eval()
            with torch.no_grad():
                model(torch.randn(4, 3))
            model.train()


def test_steps_backward_and_optimizer_config_are_recorded():
    session = RunSession(SessionConfig(warmup=0, steps=100))
    probe = StepProbe(session)
    probe.install()
    try:
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
        _train(model, opt, 3, set_to_none=False)
    finally:
        probe.uninstall()
    assert len(session.steps) == 3 and all(s.micro_batches == 1 for s in session.steps)
    assert all(s.backward_s > 0 and s.optimizer_s > 0 for s in session.steps)
    (info,) = probe.all_infos
    assert (info.class_name, info.param_tensors, info.params, info.foreach) == ("AdamW", 2, 8, False)
    assert info.zero_grad_set_to_none is False and info.step_calls == 3
    assert info.created_at.path.endswith("test_steps_and_phases.py")


def test_only_the_primary_optimizer_ends_a_step():
    session = RunSession(SessionConfig(warmup=0, steps=100))
    probe = StepProbe(session)
    probe.install()
    try:
        a, b = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)
        opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
        for _ in range(2):
            (a(torch.randn(2, 3)).sum() + b(torch.randn(2, 3)).sum()).backward()
            opt_a.step()
            opt_b.step()
    finally:
        probe.uninstall()
    assert len(session.steps) == 2


def test_eval_regions_are_timed_once_per_model_eval_call():
    session = RunSession(SessionConfig(warmup=0, steps=100))
    steps, phases = StepProbe(session), PhaseProbe(session)
    steps.install()
    phases.install()
    try:
        model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 2))
        _train(model, torch.optim.SGD(model.parameters(), lr=0.1), 4, eval_every=2)
        torch.save(model.state_dict(), "/dev/null")
        print("logged")
    finally:
        phases.uninstall()
        steps.uninstall()
    kinds = {p.kind: p for p in phases.stats.values()}
    assert kinds["eval"].calls == 2 and kinds["eval"].total_s > 0
    assert kinds["checkpoint"].calls == 1 and kinds["logging"].calls == 1
    assert sum(s.eval_s for s in session.steps) > 0
