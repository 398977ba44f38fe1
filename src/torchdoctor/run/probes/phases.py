"""Phase probe: time spent outside the training step proper — evaluation regions
(`model.eval()` until training resumes), `torch.save`, and printing/logging — with
their call sites.

A phase is blamed on the line of the training loop that enters it (the `evaluate(...)` or
`save_checkpoint(...)` call), not on the first line inside it: the call is what the user
would change. Each site keeps its occurrences (when, after which step, how long) so rules
can size a phase per training interval wherever it fell: in start-up, warm-up, the measured
steps or after them. Time counts as "in the measured steps" only for steps that closed:
a `print` after the last step is never per-step overhead.
"""

from __future__ import annotations

import builtins
import functools
import os
import logging
import sys

import torch

from torchdoctor.model.record import Location, PhaseOccurrence, PhaseStats, RunRecord, StepSample
from torchdoctor.run.probes.frames import library_of, location_of, project_frames, user_frame
from torchdoctor.run.probes.patching import PatchSet
from torchdoctor.run.session import RunSession

MAX_OCCURRENCES = 500  # per site; totals keep counting past it
# Plotting inside the loop is per-step output like printing (a figure redrawn, `plt.pause`
# sleeping to show it): timed as logging. pyplot is patched once a script has imported it.
PYPLOT_CALLS = ("pause", "draw", "show", "savefig", "plot", "scatter", "imshow", "hist", "text", "cla", "clf")


class _Site:
    def __init__(self, stats: PhaseStats, stack: list[Location]) -> None:
        self.stats = stats
        self.stack = stack  # the user's own frames at the first call, innermost first


class PhaseProbe:
    name = "phases"
    # on_step looks for pyplot imported and counts the calls of the steps closed since the last
    # call (each call is kept with its step): a poll is enough (session.POLL_S)
    polls_steps = True

    def __init__(self, session: RunSession) -> None:
        self.session = session
        self.patches = PatchSet()
        self.sites: dict[tuple, _Site] = {}
        self._train_depth = 0  # Module.train recurses into children: act on the outer call
        self._eval_site: _Site | None = None
        self._eval_began: tuple[int, float] | None = None
        self._busy = False  # a print inside logging (or the reverse) is timed once
        self._pyplot_patched = False
        # calls in measured steps not yet seen closed, by (site, step index): [site, index, seconds, calls]
        self._pending: dict[tuple[int, int], list] = {}

    @property
    def stats(self) -> dict[tuple, PhaseStats]:
        return {key: site.stats for key, site in self.sites.items()}

    def install(self) -> None:
        self.patches.wrap(torch.nn.Module, "train", self._wrap_train)
        self.patches.wrap(torch, "save", self._wrap_timed("checkpoint", "checkpoint"))
        self.patches.wrap(builtins, "print", self._wrap_timed("logging", "logging"))
        self.patches.wrap(logging.Logger, "handle", self._wrap_timed("logging", "logging"))
        self._patch_pyplot()

    def _patch_pyplot(self) -> None:
        pyplot = sys.modules.get("matplotlib.pyplot")
        if self._pyplot_patched or pyplot is None:
            return
        self._pyplot_patched = True
        for name in PYPLOT_CALLS:
            if callable(getattr(pyplot, name, None)):
                self.patches.wrap(pyplot, name, self._wrap_timed("logging", "logging"))

    def uninstall(self) -> None:
        self.patches.restore()

    def on_step(self, step: StepSample) -> None:
        """Steps up to `step` closed: their calls count as in the measured steps (a warm-up step's
        calls were never kept). Polled (session.POLL_S): several steps may have closed since."""
        if not self._pyplot_patched and "matplotlib.pyplot" in sys.modules:
            self._patch_pyplot()  # imported by the script after the probes went in (at its top, usually)
        if self._pending:
            self._count_closed(step.index)

    def _count_closed(self, last: int) -> None:
        kept = {}
        for key, entry in self._pending.items():
            site, index, seconds, calls = entry
            if index <= last:
                site.stats.in_measured_steps_s += seconds
                site.stats.calls_in_measured += calls
            else:
                kept[key] = entry
        self._pending = kept

    def contribute(self, record: RunRecord) -> None:
        self.close_eval()
        if self._pending:  # steps closed since the last poll; the calls of a step left open never count
            self._count_closed(self.session.step_count)
        loop = _loop_function(record)
        for site in self.sites.values():
            site.stats.location = _blame(site.stack, loop, site.stats.inner_location)
        record.phases = sorted((s.stats for s in self.sites.values()), key=lambda p: -p.total_s)

    def _site(self, kind: str, frame) -> _Site:
        user, _ = user_frame(frame)
        inner = location_of(user) if user is not None else None
        key = (kind, inner.path, inner.line) if inner else (kind,)
        site = self.sites.get(key)
        if site is None:
            stack = [location_of(f) for f in project_frames(frame)]
            site = self.sites[key] = _Site(PhaseStats(kind=kind, location=inner, inner_location=inner), stack)
        return site

    def _record(self, site: _Site, began: tuple[int, float], seconds: float) -> None:
        stats = site.stats
        stats.calls += 1
        stats.total_s += seconds
        after_step, at = began
        if after_step + 1 > self.session.config.warmup:  # a measured step's, once that step closes
            entry = self._pending.get((id(site), after_step + 1))
            if entry is None:
                self._pending[(id(site), after_step + 1)] = [site, after_step + 1, seconds, 1]
            else:
                entry[2] += seconds
                entry[3] += 1
        if len(stats.occurrences) < MAX_OCCURRENCES:
            stats.occurrences.append(PhaseOccurrence(after_step=after_step, t=round(at, 6),
                                                     seconds=round(seconds, 6)))

    def _now(self) -> tuple[int, float]:
        session = self.session
        return session.step_count, session.clock() - session.t0

    # ---- evaluation regions ----------------------------------------------------------
    def close_eval(self) -> None:
        if self._eval_site is None:
            return
        site, began = self._eval_site, self._eval_began
        self._eval_site = self._eval_began = None
        seconds = self.session.exit_eval()  # tells the probes (on_eval_exit)
        self._record(site, began, seconds)

    def _wrap_train(self, original):
        probe = self

        @functools.wraps(original)
        def train(module, mode: bool = True):
            probe._patch_pyplot()
            outer = probe._train_depth == 0
            probe._train_depth += 1
            try:
                if outer and not mode and probe._eval_site is None:
                    probe._eval_site = probe._site("eval", sys._getframe(1))
                    probe._eval_began = probe._now()
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
                probe._patch_pyplot()  # a script's first figure often follows its first print
                if probe._busy:
                    return original(*args, **kwargs)
                probe._busy = True
                if category == "logging":
                    probe.session.notify("on_output")  # e.g. the progress line clears itself first
                began = probe._now()
                started = probe.session.clock()
                try:
                    return original(*args, **kwargs)
                finally:
                    seconds = probe.session.clock() - started
                    probe._busy = False
                    site = probe._site(kind, sys._getframe(1))
                    if probe.session.in_eval:  # inside an evaluation: evaluation's time, not its own
                        site.stats.calls += 1
                        site.stats.total_s += seconds
                    else:
                        probe._record(site, began, seconds)
                    probe.session.add_time(category, seconds)

            return timed

        return make


def _loop_function(record: RunRecord) -> tuple[str, str] | None:
    """(path, function) of the training loop: where the step's `step()` (or, with no
    optimizer, `backward()`) was called from."""
    where = record.run.loop_location
    return (where.path, where.function) if where is not None else None


def _blame(stack: list[Location], loop: tuple[str, str] | None, inner: Location | None) -> Location | None:
    """The frame of the training loop on the phase's stack: the line that entered it. When a
    framework runs the loop (its frames are not the user's), the user's innermost line on the
    stack, else the first line inside the phase."""
    if loop is not None:
        for loc in stack:
            if (loc.path, loc.function) == loop:
                return loc
    if inner is not None and library_of(os.path.abspath(inner.path)) and stack:
        return stack[0]
    return inner
