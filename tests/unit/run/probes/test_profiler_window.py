"""The profiler window leaves no CUPTI behind it: Kineto detaches CUPTI after the window only
with TEARDOWN_CUPTI=1, and without that every later kernel launch of the run pays its callbacks."""

import pytest
import torch

from torchdoctor.run.probes import profiler
from torchdoctor.run.probes.profiler import ProfilerWindow, release_cupti_after_the_window


@pytest.mark.parametrize("version, expected", [("13.0", "1"), ("12.6", "1"), ("12.8.1", "1"), ("12.4", None),
                                               ("11.8", None), ("", None), ("rocm", None)])
def test_teardown_is_asked_from_cuda_12_6_on(version, expected):
    environ = {}
    assert release_cupti_after_the_window(environ, cuda_version=version) is (expected is not None)
    assert environ.get("TEARDOWN_CUPTI") == expected


def test_a_value_the_user_set_is_kept():
    environ = {"TEARDOWN_CUPTI": "0"}
    assert not release_cupti_after_the_window(environ, cuda_version="13.0")
    assert environ == {"TEARDOWN_CUPTI": "0"}


def test_only_a_window_that_records_cuda_asks_for_it(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(profiler, "release_cupti_after_the_window", lambda: asked.append(True))
    monkeypatch.setattr(profiler, "profile", lambda **kwargs: type("P", (), {"__enter__": lambda s: s})())
    ProfilerWindow(tmp_path / "trace.json").activate("train")
    assert asked == []  # CPU only: no CUPTI
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    ProfilerWindow(tmp_path / "trace.json").activate("train")
    assert asked == [True]
