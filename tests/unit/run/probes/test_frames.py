import os
import sys

import torch

from torchdoctor.run.probes.frames import DOCTOR, STDLIB, TORCH, TRAMPOLINE, USER, classify_file, user_frame


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
