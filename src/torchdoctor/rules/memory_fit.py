"""peak(b) = fixed + b * per_sample, fitted on measured trials, and the largest batch it allows.

A step's peak falls in forward/backward (activations: grows with the batch) or in the
optimizer step (its temporaries: grows with the parameters). Each phase gets its own line and
the prediction is the larger: a small batch whose peak is in the optimizer step does not hide
the batch at which activations take over. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torchdoctor.model.memory_record import PHASES, MemoryFit

PEAK = "peak"  # the fit of the step's overall peak, when the trials carry no phase peaks


@dataclass
class FitPoint:
    batch: int  # rows per step
    peak: int  # bytes
    phase_peaks: dict[str, int]


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares (intercept, slope); a single point gives a line through the origin's
    slope-free guess (intercept = y, slope 0) - callers need two distinct xs for a real fit."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    var = sum((x - mean_x) ** 2 for x in xs)
    if var == 0:
        return mean_y, 0.0
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / var
    return mean_y - slope * mean_x, slope


TOP_POINTS = 3  # the fit is made where it is used: on the largest batches measured


def fit_points(points: list[FitPoint], top: int = TOP_POINTS) -> list[MemoryFit]:
    """One line per phase every point measured (the overall peak when they have none), through
    the `top` largest batches. A phase's peak can fall at a different moment at small batches
    (in backward: gradients against activations), so the largest batches set the slope."""
    largest: dict[int, FitPoint] = {}
    for p in sorted(points, key=lambda p: -p.batch):
        if p.batch not in largest and len(largest) < top:
            largest[p.batch] = p
    points = list(largest.values())
    if len(points) < 2:
        return []
    phases = [ph for ph in PHASES if all(ph in p.phase_peaks for p in points)] or [PEAK]
    fits = []
    for phase in phases:
        xs = [float(p.batch) for p in points]
        ys = [float(p.peak if phase == PEAK else p.phase_peaks[phase]) for p in points]
        fixed, per_sample = fit_line(xs, ys)
        error = max(abs(fixed + per_sample * x - y) / y for x, y in zip(xs, ys) if y > 0) if len(points) > 2 else None
        fits.append(MemoryFit(phase, fixed, per_sample, len(points), error))
    return fits


def predict(fits: list[MemoryFit], batch: float) -> float | None:
    if not fits:
        return None
    return max(f.fixed_bytes + f.per_sample_bytes * batch for f in fits)


def prediction_error(fits: list[MemoryFit], points: list[FitPoint]) -> float | None:
    """Largest |predicted - measured| / measured of the step's peak over the points."""
    errors = [abs(predict(fits, p.batch) - p.peak) / p.peak for p in points if p.peak > 0 and fits]
    return max(errors) if len(points) > 2 and errors else None


def max_batch(fits: list[MemoryFit], usable_bytes: float) -> int | None:
    """The largest batch whose predicted peak is within `usable_bytes`: 0 when not even one
    sample fits, None when the peak does not grow with the batch (nothing bounds it)."""
    if not fits:
        return None
    bound = math.inf
    for f in fits:
        if f.per_sample_bytes <= 0:
            if f.fixed_bytes > usable_bytes:
                return 0
            continue
        bound = min(bound, math.floor((usable_bytes - f.fixed_bytes) / f.per_sample_bytes))
    if bound == math.inf:
        return None
    return max(0, int(bound))


def grid_step(batch: int) -> int:
    """The search's resolution near `batch`: a power of two, 1/16 to 1/8 of it."""
    if batch < 16:
        return 1
    return 2 ** (int(math.log2(batch)) - 3)
