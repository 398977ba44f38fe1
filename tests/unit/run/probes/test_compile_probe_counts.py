"""Compiled graphs per step count the training step's graphs: graphs run inside the script's
evaluation regions (model.eval() to model.train(): a validation pass, a generation loop) are
kept apart, so "N compiled graphs per step" is never an average of evaluation into training."""

from torchdoctor.model.record import StepSample
from torchdoctor.run.probes.compile import CompileProbe
from torchdoctor.run.session import RunSession, SessionConfig


def test_graphs_in_evaluation_are_not_a_training_steps():
    session = RunSession(SessionConfig(warmup=0, steps=10))
    probe = CompileProbe(session)
    probe.hooked = True
    backend = probe._wrap_backend(lambda output_graph, gm, example_inputs: (lambda *a: "out"))
    graph = backend(None, None, [])  # one compiled graph, as Dynamo's backend returns it

    graph()  # the training forward of step 1
    session.enter_eval()
    for _ in range(33):  # a generation loop: one graph call per new token
        graph()
    session.exit_eval()
    session.step_count = 1  # step 1 closed
    graph()  # step 2: training only
    session.step_count = 2
    graph()  # after the last step: no step's
    probe._counts_by_step()
    assert probe.info.graph_calls == {"1": 1, "2": 1}
    assert probe.info.eval_graph_calls == {"1": 33}


def test_a_compiled_script_keeps_the_lean_path_of_unmeasured_steps():
    """Hooked, the probe counts each call under the step it falls in: it needs no step sample, and an
    unmeasured step of a compiled script costs what a plain one does (README, "The doctor's own cost")."""
    session = RunSession(SessionConfig(warmup=0, steps=10))
    probe = CompileProbe(session)
    session.subscribe(probe)
    probe.hooked = True
    sample = StepSample(index=1, start=0.0, end=1.0, warmup=False, sampled=False)
    session._poll(sample, 1.0)
    assert probe.on_step not in session._pollers and probe.on_step not in session._listeners["on_step"]


def test_compiling_inside_a_window_is_not_charged_to_its_budget():
    """litgpt compiles its model in the op sampler's first step (1.8 s): charged to the sampler, the
    run budget was spent and the sampler sampled nothing more. The compile is the script's time."""
    from types import SimpleNamespace

    now = [0.0]
    session = RunSession(SessionConfig(warmup=0, steps=10), clock=lambda: now[0])
    probe = CompileProbe(session)
    session.window_opened("sampler")
    now[0] = 0.1
    probe._on_start(SimpleNamespace(compile_id="0/0", callback_trigger="DYNAMO"))
    now[0] = 1.9  # Dynamo compiled the model for 1.8 s inside the window
    probe._on_end(SimpleNamespace(compile_id="0/0", callback_trigger="DYNAMO"))
    now[0] = 2.0
    session.window_closed("sampler")
    budget = session.budgets["sampler"]
    assert abs(budget.used_s - 0.2) < 1e-9 and abs(probe._events[0].seconds - 1.8) < 1e-9
    budget.steps.append(1)  # its first step is behind it: the run budget decides the next
    assert budget.may_open(baseline_s=0.05, expected_run_s=2.5)  # 0.2 s of its 0.5 s floor: it samples on
