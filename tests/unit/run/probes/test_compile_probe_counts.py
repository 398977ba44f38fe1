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
    probe.on_step(StepSample(index=1, start=0.0, end=1.0, warmup=False, sampled=False))
    graph()  # step 2: training only
    probe.on_step(StepSample(index=2, start=1.0, end=2.0, warmup=False, sampled=False))
    assert probe.info.graph_calls == {"1": 1, "2": 1}
    assert probe.info.eval_graph_calls == {"1": 33}
