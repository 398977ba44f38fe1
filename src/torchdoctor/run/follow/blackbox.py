"""The black box (`run --follow`): when a run crashes, is stopped by a signal or stalls, every
thread's Python stack (as faulthandler would print it, per thread, from `sys._current_frames`) and
the last steps' figures are kept, and written before the process ends: at once on their own
(RUN_DIR/blackbox.json, `write_box`), which a followed job's launcher reads while the job goes on
(`read_box`, run/follow/job.py), then in live.json and record.json.

The training thread's stack is the one that says where: for an exception, the frames of its
traceback (where it was raised); for a signal or a stall, where the thread is now. torchdoctor's
own frames are left out of every stack: they are never the user's answer.
"""

from __future__ import annotations

import sys
import threading
import traceback
from types import FrameType, TracebackType

from pathlib import Path

from torchdoctor.model.follow_record import BlackBox, BlackBoxFile, StackFrame, ThreadStack, TimelinePoint
from torchdoctor.run.probes.frames import DOCTOR, USER, classify_file, display_path, source_text
from torchdoctor.model.paths import library_of

MAX_FRAMES = 64  # per thread, innermost kept
MAX_THREADS = 64


def _frames_of_stack(frame: FrameType | None) -> list[StackFrame]:
    """The stack from `frame` outwards, outermost first, without torchdoctor's frames."""
    out: list[StackFrame] = []
    while frame is not None and len(out) < 4 * MAX_FRAMES:
        code = frame.f_code
        if classify_file(code.co_filename) != DOCTOR and "runpy" not in code.co_filename:
            out.append(_frame(code.co_filename, frame.f_lineno or code.co_firstlineno,
                              getattr(code, "co_qualname", code.co_name)))
        frame = frame.f_back
    out.reverse()
    return out[-MAX_FRAMES:]


def _frames_of_traceback(tb: TracebackType | None) -> list[StackFrame]:
    out = [_frame(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(tb)
           if classify_file(f.filename) != DOCTOR and "runpy" not in f.filename]
    return out[-MAX_FRAMES:]


def _frame(filename: str, line: int, function: str) -> StackFrame:
    return StackFrame(path=display_path(filename), line=int(line), function=function,
                      text=source_text(filename, int(line)), library=library_of(filename))


def thread_stacks(main_ident: int, exc: BaseException | None = None) -> list[ThreadStack]:
    """Every live thread's stack now; the training thread's from `exc`'s traceback when given."""
    frames = sys._current_frames()
    threads = {t.ident: t for t in threading.enumerate()}
    own = threading.get_ident()
    stacks = []
    for ident, frame in list(frames.items())[:MAX_THREADS]:
        thread = threads.get(ident)
        name = thread.name if thread is not None else f"thread {ident}"
        if name.startswith("torchdoctor-") and ident != main_ident:
            continue  # the doctor's own threads (watchdog, sampler, follower)
        if ident == main_ident and exc is not None and exc.__traceback__ is not None:
            stack = _frames_of_traceback(exc.__traceback__)
        elif ident == own:
            stack = _frames_of_stack(sys._getframe(1))
        else:
            stack = _frames_of_stack(frame)
        stacks.append(ThreadStack(name=name, ident=ident, main=ident == main_ident,
                                  daemon=bool(thread.daemon) if thread is not None else False, frames=stack))
    stacks.sort(key=lambda s: (not s.main, s.name))
    return stacks


def innermost_user(stack: ThreadStack | None):
    """The innermost frame of the user's own code on a stack (a Location), else the innermost."""
    if stack is None or not stack.frames:
        return None
    from torchdoctor.model.location import Location

    for f in reversed(stack.frames):
        if f.library is None and classify_file_path(f) == USER:
            return Location(f.path, f.line, f.function)
    f = stack.frames[-1]
    return Location(f.path, f.line, f.function)


def classify_file_path(frame: StackFrame) -> int:
    """A kept frame's kind; its display path may be relative to the working directory."""
    import os

    return classify_file(os.path.abspath(frame.path))


def capture(reason: str, message: str, main_ident: int, step: int, t: float, last: list[TimelinePoint],
            exc: BaseException | None = None) -> BlackBox:
    threads = thread_stacks(main_ident, exc)
    main = next((s for s in threads if s.main), None)
    where = innermost_user(main)
    return BlackBox(reason=reason, message=message, step=step, t=t, where=where, threads=threads,
                    last_points=list(last), waiting_in=waiting_in(main, where, _process_group_up()))


def waiting_in(main: ThreadStack | None, where=None, distributed: bool = False) -> str | None:
    """The collective the training thread waits in, from its stack (outermost first): the innermost
    torch.distributed collective on it (the script's, FSDP's, an object collective's), else, in a job with
    a process group, a backward() it is inside (DDP's gradient all-reduce waits for the other ranks
    there, in C++, with no frame of its own). `where`: the user's line it was called from."""
    from torchdoctor.run.probes.collectives import OPS

    if main is None:
        return None
    at = f" at {where}" if where is not None else ""
    for frame in reversed(main.frames):
        path = frame.path.replace("\\", "/")
        if "torch/distributed/" in path and frame.function.rsplit(".", 1)[-1] in OPS:
            return f"{frame.function.rsplit('.', 1)[-1]}(){at} (torch.distributed)"
    if distributed:
        for frame in reversed(main.frames):
            if "torch/autograd/" in frame.path.replace("\\", "/") and frame.function in ("backward",
                                                                                       "_engine_run_backward"):
                return f"backward(){at}, where DDP's gradient all-reduce waits for the other ranks"
    return None


def _process_group_up() -> bool:
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:  # a half-torn-down process group: no claim
        return False




def write_box(path: Path, box: BlackBox) -> None:
    """RUN_DIR/blackbox.json, replaced whole (a reader never sees half of it)."""
    from torchdoctor.model.record import SCHEMA_VERSION
    from torchdoctor.model.serialize import write_json

    write_json(path, BlackBoxFile(schema_version=SCHEMA_VERSION, blackbox=box))


def read_box(path: Path) -> BlackBox:
    """A blackbox.json read back, bounded and typed; SchemaError or InputError (one line) when it is not one."""
    from torchdoctor.model.record import OLDEST_READABLE_SCHEMA, SCHEMA_VERSION
    from torchdoctor.model.serialize import read_json

    return read_json(path, BlackBoxFile, SCHEMA_VERSION, oldest=OLDEST_READABLE_SCHEMA).blackbox
