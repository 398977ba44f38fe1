"""The timeline of a followed run: one point per step, appended to RUN_DIR/timeline.jsonl as JSON
lines every few seconds (flushed to disk), bounded in memory and on disk.

Bounded: once MAX_POINTS points are kept, the older half (all but the newest RECENT_POINTS) is
thinned, two neighbours merged into one (their mean; the memory marks their maximum; `span` says
how many steps a point stands for), and the file is rewritten from what is kept. A month-long
job's timeline stays a few megabytes; its last RECENT_POINTS steps stay step by step.
"""

from __future__ import annotations

import os
from pathlib import Path

from torchdoctor.model.follow_record import TimelinePoint

import msgspec

MAX_POINTS = 20_000
RECENT_POINTS = 5_000
_ENCODER = msgspec.json.Encoder()


def merge(a: TimelinePoint, b: TimelinePoint) -> TimelinePoint:
    """Two neighbouring points as one: means weighted by the steps each stands for."""
    n = a.span + b.span

    def mean(x: float, y: float) -> float:
        return (x * a.span + y * b.span) / n

    def both(x: float | None, y: float | None) -> float | None:  # a figure only one of them measured is not merged
        return None if x is None or y is None else mean(x, y)

    def timed(x: float | None, y: float | None) -> float | None:  # of the two, those that timed it
        return y if x is None else x if y is None else mean(x, y)

    def peak(x: int | None, y: int | None) -> int | None:
        return max((m for m in (x, y) if m is not None), default=None)

    samples = None if a.samples is None or b.samples is None else int(round(mean(a.samples, b.samples)))
    return TimelinePoint(step=a.step, t=b.t, step_s=mean(a.step_s, b.step_s),
                         data_wait_s=mean(a.data_wait_s, b.data_wait_s), compute_s=timed(a.compute_s, b.compute_s),
                         samples=samples, mem_bytes=peak(a.mem_bytes, b.mem_bytes), cpu_wait=both(a.cpu_wait, b.cpu_wait),
                         comm_wait_s=both(a.comm_wait_s, b.comm_wait_s), gpu_util=both(a.gpu_util, b.gpu_util),
                         gpu_power_w=both(a.gpu_power_w, b.gpu_power_w), gpu_mem_bytes=peak(a.gpu_mem_bytes, b.gpu_mem_bytes),
                         span=n, sampled=a.sampled or b.sampled, warmup=a.warmup and b.warmup)


def thin(points: list[TimelinePoint], keep_recent: int = RECENT_POINTS) -> list[TimelinePoint]:
    """The older part merged pairwise; the newest `keep_recent` points kept as they are."""
    if len(points) <= keep_recent + 1:
        return points
    old, recent = points[:-keep_recent], points[-keep_recent:]
    merged = [merge(old[i], old[i + 1]) if i + 1 < len(old) else old[i] for i in range(0, len(old), 2)]
    return merged + recent


class Timeline:
    """Written only by the follower's thread (run/follow/follower.py)."""

    def __init__(self, path: Path, max_points: int = MAX_POINTS, keep_recent: int = RECENT_POINTS) -> None:
        self.path = path
        self.points: list[TimelinePoint] = []
        self.max_points, self.keep_recent = max_points, keep_recent
        self._written = 0  # points[:_written] are in the file
        self._rewrite = True  # the file must be written whole (first write, or after thinning)
        self.errors = 0

    def add(self, points: list[TimelinePoint]) -> None:
        self.points.extend(points)
        if len(self.points) > self.max_points:
            self.points = thin(self.points, self.keep_recent)
            self._rewrite = True

    @property
    def thinned_to(self) -> int:
        return max((p.span for p in self.points), default=1)

    def flush(self, hold: int = 0) -> None:
        """Append the points not yet written (or rewrite the file after thinning), then fsync-free
        flush: what is written survives the process, a crash of the machine may lose seconds. The
        newest `hold` points wait for the next flush (their figures are not all in yet)."""
        upto = max(0, len(self.points) - hold)
        try:
            if self._rewrite:
                tmp = self.path.with_suffix(".jsonl.tmp")
                with open(tmp, "wb") as f:
                    for point in self.points[:upto]:
                        f.write(_ENCODER.encode(point) + b"\n")
                os.replace(tmp, self.path)
                self._rewrite = False
            else:
                new = self.points[self._written:upto]
                if new:
                    with open(self.path, "ab") as f:
                        f.write(b"".join(_ENCODER.encode(p) + b"\n" for p in new))
            self._written = upto
        except OSError:
            self.errors += 1  # a full disk must not stop the training


def read_timeline(path: Path, max_points: int = 1_000_000) -> list[TimelinePoint]:
    """A timeline file read back (bounded: model/untrusted.py's limits; a bad line is skipped)."""
    from torchdoctor.model.serialize import SchemaError, from_plain
    from torchdoctor.model.untrusted import read_untrusted

    raw = read_untrusted(path, what="timeline")
    points = []
    for line in raw.splitlines()[:max_points]:
        try:
            points.append(from_plain(TimelinePoint, msgspec.json.decode(line)))
        except (msgspec.DecodeError, SchemaError):
            continue
    return points
