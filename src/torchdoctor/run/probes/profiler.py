"""Profiler window: a short torch.profiler capture of a couple of steps, saved as a
Kineto (Chrome trace) file in the run directory for `trace/` to analyse."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from torchdoctor.model.record import ProbeNote, RunRecord


class ProfilerWindow:
    name = "profiler"

    def __init__(self, out_file: Path, on_activate=lambda: None) -> None:
        self.out_file = out_file
        self.on_activate = on_activate
        self._prof: profile | None = None
        self.saved: str | None = None
        self.error: str | None = None

    @property
    def active(self) -> bool:
        return self._prof is not None

    def activate(self, phase: str) -> None:
        if self._prof is not None or self.saved is not None or self.error is not None:
            return  # one window per run
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(ProfilerActivity.CUDA)
            release_cupti_after_the_window()
        try:
            self._prof = profile(activities=activities, record_shapes=True, with_stack=True)
            self._prof.__enter__()
            self.on_activate()
        except Exception as exc:  # another profiler running, Kineto missing: note it
            self._prof = None
            self.error = f"{type(exc).__name__}: {exc}"

    def deactivate(self) -> None:
        if self._prof is None:
            return
        prof, self._prof = self._prof, None
        try:
            prof.__exit__(None, None, None)
            prof.export_chrome_trace(str(self.out_file))
            self.saved = self.out_file.name
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def install(self) -> None:
        pass  # the session's schedule activates the window

    def uninstall(self) -> None:
        self.deactivate()

    def contribute(self, record: RunRecord) -> None:
        if self.saved:
            record.trace_file = self.saved
        elif self.error:
            record.probe_notes.append(ProbeNote(self.name, self.error))


def release_cupti_after_the_window(environ=os.environ, cuda_version: str | None = None) -> bool:
    """Have Kineto detach CUPTI when the window closes. It does so only when TEARDOWN_CUPTI=1;
    otherwise CUPTI's callbacks stay on every kernel launch for the rest of the run, and the
    doctor would slow every step after its window (pytorch/pytorch#144455: 10-20 %). A value the
    user set is kept; CUDA before 12.6 is left alone (teardown crashed there beside CUDA graphs,
    which is why torch itself sets it to 0 for them). Returns whether it was set."""
    version = cuda_version if cuda_version is not None else (torch.version.cuda or "")
    if "TEARDOWN_CUPTI" in environ or not version:
        return False
    major, _, minor = version.partition(".")
    try:
        if (int(major), int(minor.split(".")[0] or 0)) < (12, 6):
            return False
    except ValueError:
        return False
    environ["TEARDOWN_CUPTI"] = "1"
    return True
