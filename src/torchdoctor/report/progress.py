"""A one-line live progress display for `torchdoctor run`, on stderr."""

from __future__ import annotations

import sys
from typing import TextIO


class RunProgress:
    def __init__(self, total_steps: int, warmup: int, stream: TextIO | None = None, enabled: bool | None = None):
        self.total_steps = total_steps
        self.warmup = warmup
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled

    def update(self, step: int, step_time_s: float | None) -> None:
        if not self.enabled:
            return
        measured = max(0, step - self.warmup)
        phase = f"warmup {step}/{self.warmup}" if step <= self.warmup else f"step {measured}/{self.total_steps}"
        rate = f" {step_time_s * 1000:.1f} ms/step" if step_time_s is not None else ""
        self.stream.write(f"\rtorchdoctor: {phase}{rate}   ")
        self.stream.flush()

    def close(self, message: str) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
        self.stream.write(message + "\n")
        self.stream.flush()
