import os
import sys

import torch

from torchdoctor.run.probes.frames import (DOCTOR, STDLIB, TORCH, TRAMPOLINE, USER, classify_file, keyword_in_call,
                                           user_frame)


def test_files_are_classified_by_where_they_live():
    import torch.optim.adam as adam
    assert classify_file(adam.__file__) == TORCH
    assert classify_file(torch.overrides.__file__) == TRAMPOLINE
    assert classify_file(os.__file__) == STDLIB
    assert classify_file("<frozen runpy>") == STDLIB
    assert classify_file(sys.modules["torchdoctor.run.probes.frames"].__file__) == DOCTOR
    assert classify_file(__file__) == USER


def test_user_frame_is_the_innermost_test_frame():
    frame, internal = user_frame(sys._getframe())
    assert frame.f_code.co_filename == __file__ and internal is False


def test_a_frame_without_line_information_still_has_a_line():
    """Python 3.11 gives f_lineno None for a frame caught at an instruction without line
    information (seen by the line sampler on third-party scripts: the whole line profile was
    lost to a TypeError); the nearest line before the instruction stands in."""
    from types import SimpleNamespace

    from torchdoctor.run.probes.frames import frame_line

    def body():
        x = 1
        y = x + 1
        return y

    code = body.__code__
    starts = [(start, line) for start, _, line in code.co_lines() if line is not None]
    last_start, last_line = starts[-1]
    caught = SimpleNamespace(f_lineno=None, f_code=code, f_lasti=last_start + 2)
    assert frame_line(caught) == last_line
    assert frame_line(SimpleNamespace(f_lineno=7, f_code=code, f_lasti=0)) == 7
    assert frame_line(SimpleNamespace(f_lineno=None, f_code=code, f_lasti=-1)) == code.co_firstlineno


def test_a_package_pip_installed_into_a_plain_folder_is_a_library(tmp_path):
    """`pip install --target DIR` (a folder on PYTHONPATH) leaves *.dist-info beside the
    packages: their files are the library's, not the user's (matplotlib's time.sleep inside
    plt.pause was reported as a hot line of the user's)."""
    from torchdoctor.run.probes.frames import library_of

    deps = tmp_path / "deps"
    (deps / "plotlib" / "backends").mkdir(parents=True)
    (deps / "plotlib-1.0.dist-info").mkdir()
    (tmp_path / "proj").mkdir()
    assert library_of(str(deps / "plotlib" / "backends" / "agg.py")) == "plotlib"
    assert library_of(str(deps / "single_module.py")) == "single_module"
    assert library_of(str(tmp_path / "proj" / "train.py")) is None


def _wrap(model, **options):
    return keyword_in_call(sys._getframe(1), "use_orig_params"), keyword_in_call(sys._getframe(1), "limit")


def test_a_keyword_is_found_on_its_own_line_of_a_call_written_over_several_lines():
    first = sys._getframe().f_lineno + 1
    written, absent = _wrap(
        "model",
        device_id=0,
        use_orig_params=False,
    )
    assert written.line == first + 3 and written.function.endswith("test_a_keyword_is_found_on_its_own_line_of_a_call_written_over_several_lines")
    assert absent is None  # `limit=` is not in the call (a keyword left to its default)
    options = {"use_orig_params": False}
    assert _wrap("model", **options)[0] is None  # passed in **kwargs: no line writes it


def test_code_inductor_generated_is_torchs_and_a_sample_there_goes_to_the_users_line(tmp_path, monkeypatch):
    """nanochat's line samples landed in /tmp/torchinductor_<user>/qi/cqiim....py: Python that torch.compile
    generated, which no user can open or change."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    generated = str(tmp_path / "inductor" / "qi" / "cqiimw3unvri6sn7.py")
    assert classify_file(generated) == TORCH
    assert classify_file(str(tmp_path / "inductor_notes" / "train.py")) == USER  # a name that only starts alike
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    import tempfile

    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    # without the variable: torch's own default folder, found without importing Inductor
    assert default_cache_dir().startswith(tempfile.gettempdir())
    assert classify_file(os.path.join(default_cache_dir(), "ab", f"c{os.getpid()}.py")) == TORCH


class _CountingFrame:
    """A frame whose line is counted as it is read: the line table's, or `line` when given (a
    tracer's own line, or a frame of another thread that moved on after its offset was read)."""

    reads = 0

    def __init__(self, code, lasti, line=None):
        self.f_code, self.f_lasti, self._line = code, lasti, line

    @property
    def f_lineno(self):
        _CountingFrame.reads += 1
        if self._line is not None:
            return self._line
        return next(line for start, end, line in self.f_code.co_lines() if start <= self.f_lasti < end)


def test_a_line_is_read_once_per_code_and_offset_when_the_line_table_agrees():
    """The op sampler and the memory ledger ask the line of every op: `f_lineno` scans the code's
    line table each time, so the line of an offset is kept; a line the table does not give that
    offset is returned as read, and not kept."""
    from torchdoctor.run.probes.frames import frame_line

    def body():
        x = 1
        return x

    code = body.__code__
    offset, line = next((start, line) for start, _, line in code.co_lines() if line == code.co_firstlineno + 1)
    _CountingFrame.reads = 0
    assert [frame_line(_CountingFrame(code, offset)) for _ in range(3)] == [line] * 3
    assert _CountingFrame.reads == 1
    other = next(start for start, _, number in code.co_lines() if number == code.co_firstlineno + 2)
    assert [frame_line(_CountingFrame(code, other, line=42)) for _ in range(2)] == [42, 42]
    assert _CountingFrame.reads == 3
    assert frame_line(_CountingFrame(code, other)) == code.co_firstlineno + 2  # nothing wrong was kept


def test_the_kept_line_is_the_frames_own_line_at_each_offset():
    from torchdoctor.run.probes.frames import frame_line

    seen = []
    for _ in range(2):  # the second turn is served from what the first kept
        seen.append((frame_line(sys._getframe()), sys._getframe().f_lineno))
        seen.append((frame_line(sys._getframe()), sys._getframe().f_lineno))
    assert all(kept == read for kept, read in seen) and seen[0][0] + 1 == seen[1][0]
    from torchdoctor.run.probes.frames import _LINES
    assert sorted(_LINES[id(sys._getframe().f_code)][1].values()) == [seen[0][0], seen[1][0]]  # both kept


def test_an_entry_of_a_code_object_that_died_is_not_served_to_another():
    """Entries are keyed by id(code): an id reused by a new code object starts afresh."""
    from torchdoctor.run.probes.frames import by_offset

    def one():
        return 1

    def other():
        return 2

    cache = {id(one.__code__): (other.__code__, {0: 99})}
    assert by_offset(cache, one.__code__) == {}
    assert cache[id(one.__code__)][0] is one.__code__


def test_a_files_kind_is_decided_once_for_the_stack_walks(monkeypatch):
    """The line sampler walks the whole stack at every sample: each file is classified once."""
    import torchdoctor.run.probes.frames as frames

    asked = []
    real = frames.classify_file
    monkeypatch.setattr(frames, "classify_file", lambda filename: asked.append(filename) or real(filename))
    frames.is_project_file.cache_clear()
    first = frames.project_frames(sys._getframe())
    again = frames.project_frames(sys._getframe())
    assert first[0].f_code is again[0].f_code is test_a_files_kind_is_decided_once_for_the_stack_walks.__code__
    assert len(asked) == len(set(asked))  # the second walk asked nothing new
    assert all(frames.classify_file(f.f_code.co_filename) == USER for f in first)
