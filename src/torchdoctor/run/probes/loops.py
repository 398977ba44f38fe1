"""Which Python loop an op runs in: the innermost loop of the user's code around it.

A loop is found in the bytecode, not the source: a backward jump closes one (`for`, `while`,
a comprehension's own code), from its target (the loop's header line) to the jump. An op's
loop is the first loop met walking out from the innermost user frame through the user's
frames (a module called once per time step is in the caller's loop, not its own). The
walk stops at the first loop, so the training loop only counts for ops no inner loop holds.
"""

from __future__ import annotations

import dis
from dataclasses import dataclass
from functools import lru_cache
from types import CodeType, FrameType

from torchdoctor.run.probes.frames import USER, classify_file, frame_line

MAX_FRAMES = 12  # user frames walked out from the op: deeper nests are not what a user rewrites
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)


@dataclass(frozen=True)
class LoopSpan:
    start: int  # the jump target: the loop's header instruction
    end: int  # the backward jump
    line: int  # the header's line


@lru_cache(maxsize=8192)
def loop_spans(code: CodeType) -> tuple[LoopSpan, ...]:
    """The loops of one code object, innermost (shortest) first."""
    lines = {}
    for start, end, line in code.co_lines():
        if line is not None:
            for offset in range(start, end, 2):
                lines[offset] = line
    spans = []
    for ins in dis.get_instructions(code):
        if (ins.opcode in _JUMPS and isinstance(ins.argval, int) and ins.argval < ins.offset
                and "NO_INTERRUPT" not in ins.opname):  # `yield from`/`await` wait loops are not the user's
            spans.append(LoopSpan(ins.argval, ins.offset, lines.get(ins.argval, code.co_firstlineno)))
    return tuple(sorted(spans, key=lambda s: s.end - s.start))


def enclosing_loop(frame: FrameType) -> LoopSpan | None:
    at = frame.f_lasti
    return next((span for span in loop_spans(frame.f_code) if span.start <= at <= span.end), None)


@dataclass(frozen=True)
class LoopAnchor:
    """An op's loop: where its header is, and the line of the loop's frame running now."""

    filename: str
    function: str
    header: int
    body_line: int
    frame_id: int  # the frame running the loop: a new frame is a new run of the loop
    lasti: int  # where in that frame: an offset lower than the last op's means a new iteration


def loop_of(frame: FrameType | None) -> LoopAnchor | None:
    """The innermost loop around the op whose innermost frame is `frame`, in the user's code."""
    walked = 0
    while frame is not None and walked < MAX_FRAMES:
        if classify_file(frame.f_code.co_filename) == USER:
            walked += 1
            span = enclosing_loop(frame)
            if span is not None:
                code = frame.f_code
                return LoopAnchor(code.co_filename, getattr(code, "co_qualname", code.co_name), span.line,
                                  frame_line(frame), id(frame), frame.f_lasti)
        frame = frame.f_back
    return None


def loops_around(frame: FrameType | None) -> list[tuple[str, str, int]]:
    """(file, function, header line) of every loop of the user's code that holds this point:
    around a step's `step()` call, these are the training loop(s), not loops inside a step."""
    found = []
    while frame is not None:
        if classify_file(frame.f_code.co_filename) == USER:
            code, at = frame.f_code, frame.f_lasti
            found += [(code.co_filename, getattr(code, "co_qualname", code.co_name), span.line)
                      for span in loop_spans(code) if span.start <= at <= span.end]
        frame = frame.f_back
    return found
