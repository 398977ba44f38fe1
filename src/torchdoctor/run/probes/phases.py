"""Phase probe: time spent outside the training step proper — evaluation regions
(`model.eval()` until training resumes), `torch.save`, and printing/logging — with
their call sites."""

from __future__ import annotations

import builtins
import functools
import logging
import sys

import torch

from torchdoctor.run.probes.frames import location_of, user_frame
from torchdoctor.run.probes.patching import PatchSet
from torchdoctor.record import PhaseStats, RunRecord
from torchdoctor.run.session import RunSession


class PhaseProbe:
    name = "phases"

    def __init__(self, session: RunSession) -> None:
        self.session = session
        self.patches = PatchSet()
        self.stats: dict[tuple, PhaseStats] = {}
        self._train_depth = 0  # Module.train recurses into children: act on the outer call
        self._eval_site: PhaseStats | None = None
        self._busy = False  # a print inside logging (or the reverse) is timed once

    def install(self) -> None:
        self.patches.wrap(torch.nn.Module, "train", self._wrap_train)
        self.patches.wrap(torch, "save", self._wrap_timed("checkpoint", "checkpoint"))
        self.patches.wrap(builtins, "print", self._wrap_timed("logging", "logging"))
        self.patches.wrap(logging.Logger, "handle", self._wrap_timed("logging", "logging"))

    def uninstall(self) -> None:
        self.patches.restore()

    def contribute(self, record: RunRecord) -> None:
        self.close_eval()
        record.phases = sorted(self.stats.values(), key=lambda p: -p.total_s)

    def _site(self, kind: str, frame) -> PhaseStats:
        user, _ = user_frame(frame)
        location = location_of(user) if user is not None else None
        key = (kind, location.path, location.line) if location else (kind,)
        stats = self.stats.get(key)
        if stats is None:
            stats = self.stats[key] = PhaseStats(kind=kind, location=location)
        return stats

    def _in_measured_window(self) -> bool:
        return len(self.session.steps) >= self.session.config.warmup

    # ---- evaluation regions ----------------------------------------------------------
    def close_eval(self) -> None:
        if self._eval_site is None:
            return
        seconds = self.session.exit_eval()
        self._eval_site.total_s += seconds
        if self._in_measured_window():
            self._eval_site.in_measured_steps_s += seconds
        self._eval_site = None
        self.session.notify("on_eval_exit")

    def _wrap_train(self, original):
        probe = self

        @functools.wraps(original)
        def train(module, mode: bool = True):
            outer = probe._train_depth == 0
            probe._train_depth += 1
            try:
                if outer and not mode and probe._eval_site is None:
                    site = probe._site("eval", sys._getframe(1))
                    site.calls += 1
                    probe._eval_site = site
                    probe.session.enter_eval()
                    probe.session.notify("on_eval_enter")
                elif outer and mode:
                    probe.close_eval()
                return original(module, mode)
            finally:
                probe._train_depth -= 1

        return train

    # ---- checkpoint and logging ------------------------------------------------------
    def _wrap_timed(self, kind: str, category: str):
        def make(original):
            probe = self

            @functools.wraps(original)
            def timed(*args, **kwargs):
                if probe._busy:
                    return original(*args, **kwargs)
                probe._busy = True
                started = probe.session.clock()
                try:
                    return original(*args, **kwargs)
                finally:
                    seconds = probe.session.clock() - started
                    probe._busy = False
                    site = probe._site(kind, sys._getframe(1))
                    site.calls += 1
                    site.total_s += seconds
                    if probe._in_measured_window() and not probe.session.in_eval:
                        site.in_measured_steps_s += seconds
                    probe.session.add_time(category, seconds)

            return timed

        return make
