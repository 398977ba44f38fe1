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
