"""Line sampler: a thread that looks at the main thread's stack every few milliseconds
during measured steps and counts the innermost user line. The share of samples on a
line is its share of step time, without the per-op cost that the dispatch sampler adds.

The interval matches CPython's default GIL switch interval (5 ms): sampling faster would
only make the main thread hand over the GIL more often.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter

from torchdoctor.run.probes.frames import display_path, user_frame
from torchdoctor.record import LineHits, LineProfile, Location, RunRecord

SAMPLE_INTERVAL_S = 0.005
MAX_LINES_KEPT = 200


class LineSampler:
    name = "line-sampler"

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.target_ident = threading.main_thread().ident
        self.hits: Counter = Counter()
        self.total = 0
        self.recording = False  # set by the session: only measured, unsampled steps count
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def install(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="torchdoctor-line-sampler", daemon=True)
        self._thread.start()

    def uninstall(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.recording:
                self.sample_once()

    def sample_once(self) -> None:
        frame = sys._current_frames().get(self.target_ident)
        user, _ = user_frame(frame)
        self.total += 1
        if user is not None:
            code = user.f_code
            self.hits[(code.co_filename, user.f_lineno, getattr(code, "co_qualname", code.co_name))] += 1

    def contribute(self, record: RunRecord) -> None:
        record.line_profile = LineProfile(
            interval_s=self.interval_s,
            total_samples=self.total,
            lines=[
                LineHits(Location(display_path(f), line, fn), n)
                for (f, line, fn), n in self.hits.most_common(MAX_LINES_KEPT)
            ],
        )
