"""The backward timer: the autograd nodes a candidate line made, timed in backward."""

import time

import torch

import torchdoctor.run.probes.backward_attribution as backward_attribution
from torchdoctor.run.probes.backward_attribution import BackwardTimer


def _forward(w, x):
    y = w * 2  # the candidate line
    return (y + x).sum()


def test_a_candidate_lines_nodes_are_timed_and_calls_making_none_walk_no_frames(monkeypatch):
    """A DataLoader's samples, `.item()`, anything without grad: no autograd node to tag, so the
    walk out to the user's line is left out for them."""
    walks = []
    real = backward_attribution.user_frame
    monkeypatch.setattr(backward_attribution, "user_frame", lambda frame: walks.append(1) or real(frame))
    line = _forward.__code__.co_firstlineno + 1
    timer = BackwardTimer(time.perf_counter, candidates=lambda: {(__file__, line)})
    w, x = torch.ones(3, requires_grad=True), torch.ones(3)
    timer.activate("train")
    try:
        x.add(1)[0].item()  # no grad anywhere: no node
        assert walks == []
        loss = _forward(w, x)
    finally:
        timer.deactivate()
    assert len(walks) == 3  # mul, add, sum: each made a node
    loss.backward()
    assert dict(timer.nodes) == {(__file__, line): 1} and timer.seconds[(__file__, line)] >= 0.0
