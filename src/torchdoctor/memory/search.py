"""Which batch sizes to try, and what they say: at most `max_trials` trials.

1. The script's own batch b0 (halved while it does not fit, down to 1).
2. Points for the fit: b0/2 (or 2 when b0 is 1), then 2*b0 and 4*b0 while the fit says they
   fit: samples/s at larger batches is measured, not guessed (TD401).
3. With a capacity: the fit's largest batch on the search grid (1/16 to 1/8 of it), checked by
   a trial, then the grid step above it; bisection between the largest batch that fitted and
   the smallest that did not until they are one step apart.

No batch beyond the data is tried: one step cannot take more rows than the loader has (the
dataset's length, or a rank's DistributedSampler shard), so the search stops there and says so.

Every trial that measured a peak joins the fit, so a prediction that missed is corrected by
the trial that showed it. Pure: trials come from a `TrialRunner`; the DDP search is the same
plan with a runner whose trial is every rank at the same size, judged together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from torchdoctor.rules.memory_fit import FitPoint, fit_points, grid_step, max_batch, predict, prediction_error
from torchdoctor.model.memory_record import FAILED, FITS, OOM, OVER_LIMIT, BatchScaling, BatchTrial

MAX_TRIALS = 8


class Unreachable(Exception):
    """The knob did not change the batch size in a trial; the message says why."""


class TrialRunner(Protocol):
    def baseline(self) -> tuple[BatchTrial, str | None]:
        """A trial at the script's own batch size, and why the knob cannot change it (None: it can)."""

    def at(self, batch: int) -> BatchTrial: ...


@dataclass
class Capacity:
    total_bytes: int  # the device's memory (or --device-memory)
    headroom_bytes: int  # kept free for what PyTorch does not see
    source: str = ""
    headroom_basis: str = ""

    @property
    def usable_bytes(self) -> int:
        return self.total_bytes - self.headroom_bytes


def need(trial: BatchTrial) -> int | None:
    """What the trial needed of the device: the allocator's reserved peak where there is one
    (CUDA), else the tensors' peak."""
    return trial.device_peak_bytes or trial.peak_bytes


@dataclass
class BatchSearch:
    runner: TrialRunner
    capacity: Capacity | None = None
    max_trials: int = MAX_TRIALS
    trials: list[BatchTrial] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    first_prediction: int | None = None  # the fit's largest batch before any trial checked it
    step: int = 1  # the grid near that prediction
    data_bound: int | None = None  # the most rows one step can take from the loader
    data_bound_basis: str = ""
    stopped_at_data: bool = False
    stopped: KeyboardInterrupt | None = None  # what interrupted the search, raised again once it is written

    def run(self) -> BatchScaling:
        first, unreachable = self.runner.baseline()
        self._judge(first)
        scaling = BatchScaling(user_batch_size=first.batch_size if first.batch_size else None,
                               capacity_bytes=self.capacity.total_bytes if self.capacity else None,
                               capacity_source=self.capacity.source if self.capacity else "",
                               headroom_bytes=self.capacity.headroom_bytes if self.capacity else 0,
                               headroom_basis=self.capacity.headroom_basis if self.capacity else "",
                               unreachable=unreachable)
        if unreachable is None and first.batch_size:
            try:
                self._search(first.batch_size)
            except Unreachable as exc:
                scaling.unreachable = str(exc)
            except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the trials so far are the result
                self.stopped = stop
                self.notes.append(f"interrupted after {len(self.trials)} trials: the search did not finish")
        scaling.data_bound, scaling.data_bound_basis = self.data_bound, self.data_bound_basis
        if self.stopped_at_data:
            at_bound = self.trial(self.data_bound)
            self.notes.append(
                f"the search stopped at batch {self.data_bound}: {self.data_bound_basis}, so no step can take more rows"
                if at_bound is not None and at_bound.outcome == FITS else
                f"no batch beyond {self.data_bound} was tried: {self.data_bound_basis}")
        scaling.trials = sorted(self.trials, key=lambda t: t.batch_size)
        points = self._points()
        scaling.fits = fit_points(points)
        fitting = [t.fit_batch for t in self.trials if t.outcome == FITS]
        scaling.verified_max_batch = max(fitting) if fitting and self.capacity else None
        scaling.predicted_max_batch = self.first_prediction
        scaling.search_step = self.step
        error = prediction_error(scaling.fits, points)
        if error is not None:
            self.notes.append(f"the fit's largest error on the measured points is {error:.1%}")
        scaling.notes = self.notes
        return scaling

    # ---- the plan ----------------------------------------------------------------------
    def _search(self, b0: int) -> None:
        size = b0
        while self.trials[-1].outcome != FITS:  # the script's own batch does not fit
            if self.trials[-1].outcome == FAILED or size == 1 or not self._left():
                return
            size = max(1, size // 2)
            self._try(size)
        low = self.trials[-1].batch_size
        if self._left():
            self._try(low // 2 if low >= 2 else 2)
        for factor in (2, 4):
            target = self._bounded(low * factor)
            if self._left() and self.trial(target) is None and self._fits_by_fit(target) \
                    and not self._bounded_below(target):
                self._try(target)
        if self.capacity is not None:
            self._bracket()

    def _bracket(self) -> None:
        prediction = self._prediction()
        self.first_prediction = prediction
        if prediction is None:
            return
        self.step = grid_step(max(prediction, 1))
        if prediction == 0:
            self.notes.append("the fit says not even one sample fits: see the breakdown of the smallest trial")
            return
        candidate = max(1, prediction - prediction % self.step)
        while self._left():
            low, high = self._bounds()
            if high is not None and high - low <= self.step:
                return
            if self.data_bound is not None and low >= self.data_bound:
                self.stopped_at_data = True
                return
            if candidate is not None and low < candidate and (high is None or candidate < high) \
                    and self.trial(candidate) is None:
                target = candidate
            elif high is None:
                target = low + self.step
            else:
                target = low + max(1, (high - low) // (2 * self.step)) * self.step
            target = self._bounded(target)
            if self.trial(target) is not None:
                return
            self._try(target)
            refit = self._prediction()
            candidate = None if refit is None else max(1, refit - refit % self.step)

    # ---- trials ------------------------------------------------------------------------
    def _bounded(self, batch: int) -> int:
        """`batch`, or the data's bound when it is beyond it (noted: the search stops there)."""
        if self.data_bound is not None and batch > self.data_bound:
            self.stopped_at_data = True
            return self.data_bound
        return batch

    def _left(self) -> bool:
        return len(self.trials) < self.max_trials

    def _try(self, batch: int) -> BatchTrial:
        trial = self.runner.at(batch)
        self._judge(trial)
        return trial

    def _judge(self, trial: BatchTrial) -> None:
        usable = self.capacity.usable_bytes if self.capacity else None
        needed = need(trial)
        if trial.outcome == FITS and usable is not None and needed is not None and needed > usable:
            trial.outcome = OVER_LIMIT
        self.trials.append(trial)

    def trial(self, batch: int) -> BatchTrial | None:
        return next((t for t in self.trials if t.batch_size == batch), None)

    def _bounds(self) -> tuple[int, int | None]:
        fits = [t.batch_size for t in self.trials if t.outcome == FITS]
        misses = [t.batch_size for t in self.trials if t.outcome in (OOM, OVER_LIMIT, FAILED)
                  and t.batch_size > max(fits, default=0)]
        return max(fits, default=0), min(misses, default=None)

    def _bounded_below(self, batch: int) -> bool:
        """A smaller batch already failed: a larger one will too."""
        return any(t.outcome in (OOM, OVER_LIMIT, FAILED) and t.batch_size <= batch for t in self.trials)

    def _points(self) -> list[FitPoint]:
        return [FitPoint(t.fit_batch, t.peak_bytes, dict(t.phase_peaks)) for t in self.trials
                if t.peak_bytes and t.outcome in (FITS, OVER_LIMIT)]

    def _overhead(self) -> float:
        """Device bytes per accounted tensor byte (the allocator's rounding and cache), from the
        largest trial that measured both; 1 without device figures."""
        both = [t for t in self.trials if t.device_peak_bytes and t.peak_bytes]
        if not both:
            return 1.0
        top = max(both, key=lambda t: t.batch_size)
        return max(1.0, top.device_peak_bytes / top.peak_bytes)

    def _fits_by_fit(self, batch: int) -> bool:
        if self.capacity is None:
            return True
        predicted = predict(fit_points(self._points()), batch)
        return predicted is not None and predicted * self._overhead() <= self.capacity.usable_bytes

    def _prediction(self) -> int | None:
        if self.capacity is None:
            return None
        return max_batch(fit_points(self._points()), self.capacity.usable_bytes / self._overhead())
