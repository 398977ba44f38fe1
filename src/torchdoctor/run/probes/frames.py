"""Find the user's source line behind a call: the innermost frame outside torch,
torchdoctor and the standard library.

Third-party packages (transformers, timm, lightning, ...) count as code the user runs, as
DESIGN.md §5 says, but they are labelled: `library_of` names the installed package a frame
belongs to, so a finding inside a framework's own loop says "inside lightning, not your
code" instead of being blamed on the user's `trainer.fit(...)`.
"""

from __future__ import annotations

import getpass
import linecache
import os
import re
import sys
import sysconfig
import tempfile
from functools import lru_cache
from types import CodeType, FrameType

import torch

from torchdoctor.model.paths import INSTALLED_MARKERS, library_of, typed_path  # noqa: F401 (library_of: the probes import it from here)
from torchdoctor.version import PACKAGE_DIR
from torchdoctor.model.location import Location

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_DOCTOR_DIR = PACKAGE_DIR + os.sep
_STDLIB_DIRS = tuple(
    {sysconfig.get_paths()[k] + os.sep for k in ("stdlib", "platstdlib")}
)
MAX_SOURCE_TEXT = 160  # characters of a source line kept in the record

# torch files that only forward a call (operator overloads, __torch_function__ plumbing,
# tensor printing). A call that passes only through these is still the user's own call.
_TORCH_TRAMPOLINES = (
    "overrides.py",
    "_tensor.py",
    "_tensor_str.py",
    "functional.py",
    "_ops.py",
    os.path.join("utils", "_python_dispatch.py"),
    os.path.join("utils", "_device.py"),
    os.path.join("_dynamo", "eval_frame.py"),
    os.path.join("_compile.py"),
    os.path.join("autograd", "grad_mode.py"),
    os.path.join("utils", "_contextlib.py"),
)

# Installed files that only forward a call made by the user's code: Lightning wraps
# `DataLoader.__init__` while its data hooks run, to keep the arguments. The loader is still
# the user's `DataLoader(...)` line in `train_dataloader()`, one frame further out.
_LIBRARY_TRAMPOLINES = (
    os.path.join("lightning", "fabric", "utilities", "data.py"),
    os.path.join("lightning_fabric", "utilities", "data.py"),
)

USER, TORCH, TRAMPOLINE, DOCTOR, STDLIB = range(5)


@lru_cache(maxsize=4096)
def classify_file(filename: str) -> int:
    if filename.startswith(_DOCTOR_DIR):
        return DOCTOR
    if filename.startswith(_TORCH_DIR):
        rel = filename[len(_TORCH_DIR) :]
        return TRAMPOLINE if rel.endswith(_TORCH_TRAMPOLINES) else TORCH
    if filename.startswith("<"):  # <frozen importlib>, <string>: not editable by the user
        return STDLIB
    if filename.startswith(_STDLIB_DIRS) and not any(m in filename for m in INSTALLED_MARKERS):
        # (a virtual environment's platstdlib is the folder that holds its site-packages)
        return STDLIB
    if filename.endswith(_LIBRARY_TRAMPOLINES) and any(m in filename for m in INSTALLED_MARKERS):
        return TRAMPOLINE
    if filename.startswith(_inductor_cache_dir()):
        # the Python that torch.compile's Inductor generated for the user's graphs (nanochat's line samples
        # landed there, in files named by hashes): torch's, so a sample goes to the user's line that called it
        return TORCH
    return USER


def _inductor_cache_dir() -> str:
    """Where Inductor writes the code it generates: TORCHINDUCTOR_CACHE_DIR, else its default (torch's
    `default_cache_dir`, without importing torch._inductor: the temporary folder, torchinductor_<user>)."""
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(), f"torchinductor_{_user()}")
    return os.path.abspath(folder) + os.sep


@lru_cache(maxsize=1)
def _user() -> str:
    try:
        name = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name (a container's uid without a passwd entry)
        getuid = getattr(os, "getuid", None)
        name = f"uid_{getuid()}" if callable(getuid) else "unknown_user"
    return re.sub(r'[\\/:*?"<>|]', "_", name)


@lru_cache(maxsize=4096)
def display_path(filename: str) -> str:
    """The path as the user would type it (model/paths.py's rule), cached: probes ask per op."""
    return typed_path(filename)


def source_text(filename: str, line: int) -> str:
    """The source line, stripped and cut to MAX_SOURCE_TEXT characters ("" when unreadable)."""
    return linecache.getline(filename, line).strip()[:MAX_SOURCE_TEXT]


def user_frame(frame: FrameType | None) -> tuple[FrameType | None, bool]:
    """Walk outwards from `frame` to the first user frame.

    Returns (frame, internal): `internal` is True when torch library code (not a mere
    trampoline) sits between the call and the user's line, e.g. an optimizer's own
    `.item()` on its step counter, which the user did not write.
    """
    internal = False
    while frame is not None:
        kind = classify_file(frame.f_code.co_filename)
        if kind == USER:
            return frame, internal
        if kind == TORCH:
            internal = True
        frame = frame.f_back
    return None, internal


MAX_CODES_CACHED = 4096  # code objects a per-offset cache holds before it starts over


def by_offset(cache: dict, code: CodeType) -> dict:
    """The per-offset dictionary of `code` in `cache`, a cache of what one instruction offset of a
    code object always gives (its line, its loop). Keyed by id(code), the code object kept in the
    value so that its id is not reused while the entry lives: hashing a code object hashes its
    constants, nested code objects included, on every lookup."""
    entry = cache.get(id(code))
    if entry is None or entry[0] is not code:
        if len(cache) >= MAX_CODES_CACHED:
            cache.clear()
        entry = cache[id(code)] = (code, {})
    return entry[1]


# (code object, instruction offset) -> its line. `f_lineno` scans the code's line table up to the
# offset on every read, per op in the op sampler and per allocation in the memory ledger: in a long
# module-level training loop that scan was a large part of attributing an op to its line.
_LINES: dict[int, tuple[CodeType, dict[int, int]]] = {}


def frame_line(frame: FrameType) -> int:
    """The line a frame is on (cached per code object and offset: the same offset is always the
    same line)."""
    last, code = frame.f_lasti, frame.f_code
    lines = by_offset(_LINES, code)
    line = lines.get(last)
    if line is None:
        line = _frame_line(frame)
        # kept only when the code's line table gives that line for the offset read: a frame of another
        # thread (the line sampler's thread) may have moved on between the two reads, a tracer may set a
        # line of its own, and an offset without a line has none to keep
        if line == _table_line(code, last):
            lines[last] = line
    return line


def _table_line(code: CodeType, offset: int) -> int | None:
    """The line the code's line table gives an instruction offset (what `f_lineno` reads, untraced)."""
    if offset < 0:
        return code.co_firstlineno
    return next((line for start, end, line in code.co_lines() if start <= offset < end), None)


def _frame_line(frame: FrameType) -> int:
    """The line a frame is on. Python 3.11 gives None for a frame caught (from another thread
    or a hook) at an instruction without line information; the line of the nearest instruction
    before it stands in, else the function's first line."""
    line = frame.f_lineno
    if line is not None:
        return line
    code, last = frame.f_code, frame.f_lasti
    best = None
    for start, _, number in code.co_lines():
        if start <= last and number is not None:
            best = number
    return best if best is not None else code.co_firstlineno


def location_of(frame: FrameType) -> Location:
    code = frame.f_code
    return Location(
        path=display_path(code.co_filename),
        line=frame_line(frame),
        function=getattr(code, "co_qualname", code.co_name),
    )


@lru_cache(maxsize=4096)
def is_project_file(filename: str) -> bool:
    """The user's own file: user code outside any installed library (one lookup per frame: the
    line sampler walks the whole stack at every sample)."""
    return classify_file(filename) == USER and library_of(filename) is None


def project_frames(frame: FrameType | None, limit: int = 32) -> list[FrameType]:
    """The user's own frames (not torch, not torchdoctor, not the standard library, not an
    installed library) from `frame` outwards, innermost first."""
    out = []
    while frame is not None and len(out) < limit:
        if is_project_file(frame.f_code.co_filename):
            out.append(frame)
        frame = frame.f_back
    return out


def keyword_in_call(frame: FrameType, name: str) -> Location | None:
    """Where `name=` is written in the call `frame` is making now (a call over several lines: the fix goes
    on the keyword's line, not the call's first one), from the positions Python keeps for the call
    instruction; None where the call does not write it (it was left to its default or passed in **kwargs)."""
    try:
        start, end = list(frame.f_code.co_positions())[frame.f_lasti // 2][:2]
    except Exception:  # noqa: BLE001 - no positions (python -X no_debug_ranges)
        return None
    if start is None or end is None or end - start > 200:
        return None
    written = re.compile(rf"\b{re.escape(name)}\s*=(?!=)")
    filename = frame.f_code.co_filename
    for line in range(start, end + 1):
        if written.search(linecache.getline(filename, line)):
            code = frame.f_code
            return Location(path=display_path(filename), line=line, function=getattr(code, "co_qualname", code.co_name))
    return None


def caller_location(depth: int = 1) -> Location | None:
    """Location of the innermost user frame above our caller."""
    frame, _ = user_frame(sys._getframe(depth + 1))
    return location_of(frame) if frame is not None else None


def own_caller_location(depth: int = 1) -> Location | None:
    """Location of the innermost frame of the user's own files above our caller, past any
    installed library (a framework that built the object on the user's behalf); the
    innermost user frame when there is none."""
    own = project_frames(sys._getframe(depth + 1), limit=1)
    return location_of(own[0]) if own else caller_location(depth + 1)
