"""Loops found in the bytecode: the loop around an op (walking out through the user's frames),
and the loops around the step() call (the training loops)."""

import sys

from torchdoctor.run.probes.loops import loop_of, loop_spans, loops_around


def _cell(seen, probe):
    seen.append(probe(sys._getframe(0)))


def _model(xs, seen, probe):
    for x in xs:  # the loop over time steps
        _cell(seen, probe)


def test_an_op_in_a_callee_counts_in_the_callers_loop_and_turns_are_counted_by_offset():
    seen = []
    _model([1, 2, 3], seen, loop_of)
    headers = {(a.function, a.header) for a in seen}
    assert headers == {("_model", _model.__code__.co_firstlineno + 1)}
    assert len({a.frame_id for a in seen}) == 1 and len(seen) == 3


def test_the_loops_around_a_point_include_every_enclosing_loop():
    seen = []

    def train():
        for epoch in range(2):
            for step in range(2):
                seen.append(loops_around(sys._getframe(0)))

    train()
    first = train.__code__.co_firstlineno
    mine = {line for path, _, line in seen[0] if path == __file__}  # pytest's own loops hold it too
    assert mine == {first + 1, first + 2}
    assert not loop_spans(_cell.__code__)  # no loop of its own
