"""A one-line live progress display for `torchdoctor run`, on stderr.

On a terminal it rewrites one line with `\\r`; anywhere else (CI logs, files, pipes) it
stays silent per step and only prints the final line, so logs are not flooded. It is
called from the user's training loop, so it must be cheap and must never raise.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

CLEAR_LINE = "\r\033[K"  # carriage return + erase to end of line (any ANSI terminal)
# Redrawing more often than this is invisible to a reader but costs terminal I/O on
# every step of a fast loop.
MIN_REDRAW_INTERVAL_S = 0.1
WHOLE_LINE_INTERVAL_S = 10.0  # whole_lines: a line this often at most


class RunProgress:
    polls_steps = True  # redrawn every MIN_REDRAW_INTERVAL_S at most: the session's poll (POLL_S) is enough

    def __init__(self, total_steps: int, warmup: int, stream: TextIO | None = None,
                 enabled: bool | None = None, min_interval_s: float = MIN_REDRAW_INTERVAL_S,
                 whole_lines: bool = False):
        self.total_steps = total_steps
        self.warmup = warmup
        # Whole lines, seldom, instead of one line redrawn: other processes (the other ranks of
        # a multi-rank run) print to the same terminal, and a line without its newline would run
        # into theirs ("5.9 ms/stepepoch 1 step 70 loss")
        self.whole_lines = whole_lines
        if whole_lines:
            min_interval_s = max(min_interval_s, WHOLE_LINE_INTERVAL_S)
        # Resolved at construction, not import, so a redirected sys.stderr is honoured.
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _is_tty(self.stream) if enabled is None else enabled
        self.min_interval_s = min_interval_s
        self._last_draw: float | None = None
        self._drawn = False
        self._closed = False
        self._lock = threading.Lock()  # the step hook and close() may come from different threads

    def line(self, step: int, step_time_s: float | None) -> str:
        """The progress text for optimizer step `step` (1-based, warmup included)."""
        if step <= self.warmup:
            position = f"warmup {step}/{self.warmup}"
        else:
            measured = step - self.warmup
            total = f"/{self.total_steps}" if self.total_steps and self.total_steps > 0 else ""
            position = f"step {measured}{total}" + (f" (warmup {self.warmup})" if self.warmup else "")
        rate = f" {step_time_s * 1000:.1f} ms/step" if step_time_s is not None else ""
        return f"torchdoctor: {position}{rate}"

    def update(self, step: int, step_time_s: float | None) -> None:
        if not self.enabled or self._closed:
            return
        now = time.monotonic()
        last = self._last_draw
        if last is not None and now - last < self.min_interval_s:
            return  # most steps of a fast loop: no lock taken (checked again under it)
        with self._lock:
            if self._last_draw is not None and now - self._last_draw < self.min_interval_s:
                return
            self._last_draw = now
            if self.whole_lines:  # one write of a whole line: it never shares a line with other output
                self._write(self.line(step, step_time_s) + "\n")
                return
            self._write(CLEAR_LINE + self.line(step, step_time_s))
            self._drawn = True

    # ---- session events (RunRequest.listeners) -------------------------------------------
    def on_step(self, step) -> None:
        self.update(step.index, step.duration_s)

    def on_output(self) -> None:
        """The script is about to print: take the live line away first, so its output does
        not start in the middle of ours (it is redrawn at the next step)."""
        if not self.enabled or self._closed or not self._drawn:
            return
        with self._lock:
            self._write(CLEAR_LINE)
            self._drawn = False

    def close(self, message: str) -> None:
        """Replace the live line with `message` (printed once, TTY or not)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._write((CLEAR_LINE if self._drawn else "") + message + "\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            # A closed or broken stderr must not stop the user's training.
            self.enabled = False


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False
