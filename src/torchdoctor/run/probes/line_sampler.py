"""Line sampler: a thread that looks at the main thread's stack every few milliseconds
during measured steps and counts the innermost user line. The share of samples on a
line is its share of step time, without the per-op cost that the dispatch sampler adds.

Samples are kept per step: those of the step in progress are pending until the step
closes, so time after the last step (a `print` after `trainer.fit()` returned, teardown)
never counts as step time.

Every sample also notes which of the user's functions are on the stack, and outside the
measured steps the thread keeps doing only that, more rarely: the functions the run
executed, so that static findings in code that never ran can be left out of the report.

The interval matches CPython's default GIL switch interval (5 ms): sampling faster would
only make the main thread hand over the GIL more often.
"""

from __future__ import annotations

import linecache
import sys
import threading
from collections import Counter

from torchdoctor.record import LineHits, LineProfile, Location, RunRecord
from torchdoctor.run.probes.frames import display_path, library_of, project_frames, user_frame

SAMPLE_INTERVAL_S = 0.005
COVERAGE_INTERVAL_S = 0.05  # outside measured steps only the executed functions are noted
MAX_LINES_KEPT = 200
MAX_TEXT = 160


class LineSampler:
    name = "line-sampler"

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.target_ident = threading.main_thread().ident
        self.hits: Counter = Counter()
        self.total = 0
        self._pending: Counter = Counter()  # samples of the step in progress
        self._pending_total = 0
        self.functions: set[tuple[str, str]] = set()  # (filename, qualname) of user code seen running
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

    def commit(self) -> None:
        """The step in progress closed: its samples count (a later step's are discarded
        unless committed too). Called from the training thread; a sample taken meanwhile
        lands in the next step, which is as close as a 5 ms sampler can be."""
        pending, self._pending = self._pending, Counter()
        self.hits.update(pending)
        self.total += self._pending_total
        self._pending_total = 0

    def _loop(self) -> None:
        while True:
            recording = self.recording
            if self._stop.wait(self.interval_s if recording else COVERAGE_INTERVAL_S):
                return
            if self.recording:
                self.sample_once()
            else:
                self._note_functions(sys._current_frames().get(self.target_ident))

    def sample_once(self) -> None:
        frame = sys._current_frames().get(self.target_ident)
        user, _ = user_frame(frame)
        self._pending_total += 1
        if user is not None:
            code = user.f_code
            self._pending[(code.co_filename, user.f_lineno, getattr(code, "co_qualname", code.co_name))] += 1
        self._note_functions(frame)

    def _note_functions(self, frame) -> None:
        for f in project_frames(frame):
            code = f.f_code
            self.functions.add((code.co_filename, getattr(code, "co_qualname", code.co_name)))

    def contribute(self, record: RunRecord) -> None:
        record.line_profile = LineProfile(
            interval_s=self.interval_s,
            total_samples=self.total,
            lines=[
                LineHits(Location(display_path(f), line, fn), n, text=_source(f, line), library=library_of(f))
                for (f, line, fn), n in self.hits.most_common(MAX_LINES_KEPT)
            ],
        )
        record.functions_seen = sorted(f"{path}::{name}" for path, name in self.functions)


def _source(filename: str, line: int) -> str:
    return linecache.getline(filename, line).strip()[:MAX_TEXT]
