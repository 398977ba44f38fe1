"""Domain errors and the one place that maps them to exit codes (DESIGN.md §2)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_SCRIPT_FAILED = 1  # the user's script raised (or lint found something)
EXIT_USAGE = 2  # usage error or unreadable input
EXIT_INTERRUPTED = 130  # Ctrl-C: the shell convention (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (a scheduler, `timeout`, `kill`): 128 + SIGTERM


class TorchdoctorError(Exception):
    """An error the user can act on. `str(exc)` is one line: the problem and the fix."""

    exit_code = EXIT_USAGE


class UsageError(TorchdoctorError):
    exit_code = EXIT_USAGE


class InputError(TorchdoctorError):
    """A file given to torchdoctor is missing, unreadable or malformed."""

    exit_code = EXIT_USAGE


class ScriptFailed(TorchdoctorError):
    """The user's script raised; its traceback was already shown."""

    exit_code = EXIT_SCRIPT_FAILED


class NoStepsMeasured(TorchdoctorError):
    """The script never stepped an optimizer, so there is no training step to diagnose."""

    exit_code = EXIT_USAGE


class Interrupted(TorchdoctorError):
    """Ctrl-C (130) or SIGTERM (143) stopped the run; what was measured is written."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str, exit_code: int = EXIT_INTERRUPTED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt (run/signals.py): code that handles
    Ctrl-C handles a scheduler's stop the same way; the exit code says which it was."""

    exit_code = EXIT_TERMINATED
