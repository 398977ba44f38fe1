"""How measured code ended, in one place: an exception (or none) -> (status, exit code, error).

The statuses a record can carry (`RunInfo.status`): the run reached its step or time limit, the
code completed or exited by itself, or it was interrupted, or it crashed. Every way in (a
script, a spawned rank, a `watch()` block, a framework's fit) turns its ending into an Outcome
here, so a status never drifts between them.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass

from torchdoctor.errors import EXIT_INTERRUPTED, EXIT_SCRIPT_FAILED
from torchdoctor.run.session import StopRun
from torchdoctor.version import PACKAGE_DIR

COMPLETED, STEP_LIMIT, TIME_LIMIT = "completed", "step-limit", "time-limit"
EXITED, INTERRUPTED, CRASHED = "exited", "interrupted", "crashed"
STALLED = "stalled"  # no step for the stall limit (`run --follow`, or the ranks of a multi-rank run)
STATUSES = (COMPLETED, STEP_LIMIT, TIME_LIMIT, EXITED, INTERRUPTED, CRASHED, STALLED)


@dataclass(frozen=True)
class Outcome:
    status: str = COMPLETED
    exit_code: int = 0
    error: str | None = None  # the traceback as the user would see it, or the SystemExit message

    @classmethod
    def of(cls, exc: BaseException | None, stop_reason: str | None = None) -> Outcome:
        """The outcome of code that raised `exc` (None: it returned). `stop_reason` is the
        session's, when the doctor's own StopRun ended the code at a limit."""
        if exc is None:
            return cls()
        if isinstance(exc, StopRun):
            return cls(stop_reason or exc.reason)
        if isinstance(exc, SystemExit):
            code = exc.code
            if code is None or code == 0:
                return cls(EXITED)
            return cls(EXITED, code if isinstance(code, int) else 1, None if isinstance(code, int) else str(code))
        if isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or SIGTERM's Terminated (143)
            return cls(INTERRUPTED, getattr(exc, "exit_code", EXIT_INTERRUPTED))
        return cls(CRASHED, 1, user_traceback(exc))

    def astuple(self) -> tuple[str, int, str | None]:
        return self.status, self.exit_code, self.error


def exit_code_of(status: str, exit_code: int) -> int:
    """The exit code of a run that ended with `status` (a RunInfo's): 1 when the script failed,
    130 or 143 when a signal stopped it, else 0."""
    if status in (CRASHED, STALLED) or (status == EXITED and exit_code != 0):
        return EXIT_SCRIPT_FAILED
    if status == INTERRUPTED:
        return exit_code if exit_code in (130, 143) else EXIT_INTERRUPTED
    return 0


def user_traceback(exc: BaseException) -> str:
    """The traceback as the user would see it from plain `python`: our frames removed."""
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith(PACKAGE_DIR)
        and os.path.basename(f.filename) != "runpy.py" and f.filename != "<frozen runpy>"
    ]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)
