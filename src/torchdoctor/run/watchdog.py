"""The run's limits, enforced whatever the script catches or ignores.

The step hooks stop a stepping script themselves (StopRun raised from `optimizer.step()` or
`DataLoader.__next__`). This thread is the backstop, in two stages:

1. At `--max-seconds` (plus a short grace, so the hooks act first) it requests the stop and
   raises StopRun in the script's thread asynchronously (`PyThreadState_SetAsyncExc`). No
   signal is involved, so a SIGINT ignored by `nohup`, a CI runner or the script does not
   matter, and a script with no steps at all is stopped too.
2. A stop the script has not obeyed within STOP_GRACE_S of the request (a bare `except:`
   around the loop swallows StopRun at every step; or the thread is blocked in a long C call)
   ends the run from here: `abandon` writes everything measured so far, with a note saying how
   the run ended, and the process exits. The run directory is always written.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import Callable

from torchdoctor.run.session import RunSession, StopRun

HOOK_GRACE_S = 2.0  # after --max-seconds: the step hooks stop a stepping script first
FIRST_RAISE_S = 1.0  # after a stop request: the hook's own StopRun usually ends the script by then
RAISE_EVERY_S = 1.0  # while waiting, raise StopRun again (a script may catch it only sometimes)
STOP_GRACE_S = 10.0  # a requested stop the script has not obeyed by then is enforced
# ... sooner after SIGTERM or Ctrl-C: a scheduler kills the job 10-30 s after its SIGTERM, and the
# run directory must be written by then (run/signals.py)
SIGNAL_GRACE_S = 3.0
# ... and sooner after a stall (`run --follow`): the script was already silent for the stall limit
STALL_GRACE_S = 2.0


def raise_in_thread(thread_id: int, exception: type[BaseException]) -> bool:
    """Raise `exception` in another thread at its next Python bytecode; True if a thread was
    found. (Never called with NULL to cancel one: CPython 3.11 then leaves the eval loop's
    "pending" flag set for good, which slows every later bytecode and hung the profiler.)"""
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exception)) == 1


class Watchdog:
    """`abandon(reason)` must end the process (it never returns when called)."""

    def __init__(self, session: RunSession, max_seconds: float, abandon: Callable[[str], None],
                 thread_id: int | None = None, raise_async: bool = True, end_process: bool = True) -> None:
        self.session = session
        self.raise_async = raise_async  # False: only request the stop (the caller ends its loop)
        self.end_process = end_process  # False: never end the process (a notebook's kernel)
        self.deadline = session.t0 + max_seconds + HOOK_GRACE_S
        self.abandon = abandon
        self.thread_id = thread_id or threading.get_ident()
        self.async_raises = 0
        self.lost_in_finalizers = 0  # StopRuns that landed in a finalizer, dropped (see _unraisable)
        self._wake = threading.Event()
        self._done = False
        self._in_script = False  # StopRun is raised only while the script's own code runs
        self._raising = threading.Lock()
        self._claim = threading.Lock()  # held by whoever ends the run: the script's thread or this one
        self._thread = threading.Thread(target=self._watch, name="torchdoctor-watchdog", daemon=True)

    def on_stop(self, reason: str) -> None:  # session event: a stop was requested
        self._wake.set()

    def __enter__(self) -> "Watchdog":
        self._previous_unraisable = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        self._thread.start()
        return self

    def _unraisable(self, unraisable) -> None:
        """A StopRun raised into the script's thread while it ran a finalizer (`__del__`, a
        weakref callback) cannot propagate: Python would print it as "Exception ignored in ...",
        blaming the script. It is ours and is dropped silently; the stop is raised again."""
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, StopRun):
            self.lost_in_finalizers += 1
            return
        self._previous_unraisable(unraisable)

    def enter_script(self) -> None:
        with self._raising:
            self._in_script = True

    def disarm(self) -> None:
        """No StopRun is raised from now on. One raised just before is delivered at the
        script thread's next bytecode: here (caught, disarming repeats) or in the runner,
        which expects it."""
        while True:
            try:
                with self._raising:
                    self._in_script = False
                return
            except StopRun:
                continue

    def __exit__(self, exc_type, exc, tb) -> bool:
        """The script's thread is done with the script: stop watching. If the watchdog is
        already ending the run, wait here: the process exits from there. A StopRun that
        arrives after the script returned is ours, not the script's: it is swallowed."""
        self.disarm()
        if sys.unraisablehook == self._unraisable:
            sys.unraisablehook = self._previous_unraisable
        self._claim.acquire()
        self._done = True
        self._wake.set()
        self._thread.join()
        return exc_type is not None and issubclass(exc_type, StopRun)

    def _watch(self) -> None:
        session = self.session
        while True:
            requested = session.stop_requested_at
            now = session.clock()
            if requested is None:
                wait = self.deadline - now
                if wait <= 0:
                    session.request_stop("time-limit")
                    continue
            else:
                if not self.raise_async:
                    return  # the caller ends its loop at the flag; nothing more to do here
                grace = self.grace()
                if now - requested >= grace:
                    if self.end_process and self._claim.acquire(blocking=False):
                        self.abandon(self._why())
                    if self.end_process:
                        return
                    wait = RAISE_EVERY_S  # keep raising: the code may yet let one through
                elif now - requested >= FIRST_RAISE_S:
                    wait = min(RAISE_EVERY_S, grace - (now - requested))
                else:
                    wait = FIRST_RAISE_S - (now - requested)
                if now - requested >= FIRST_RAISE_S:
                    with self._raising:
                        if self._in_script and raise_in_thread(self.thread_id, StopRun):
                            self.async_raises += 1
            self._wake.wait(max(wait, 0.0))
            self._wake.clear()
            if self._done:
                return

    def grace(self) -> float:
        if self.session.stop_reason == "stalled":
            return STALL_GRACE_S
        return SIGNAL_GRACE_S if self.session.stop_signal is not None else STOP_GRACE_S

    def _why(self) -> str:
        s = self.session
        caught = s.stop_raises + self.async_raises
        if s.stop_reason == "stalled":
            return (f"stopped by torchdoctor: the run stalled (see the black box); the script's thread did not "
                    f"return to a step within {self.grace():g} s, so torchdoctor wrote what was measured and ended "
                    "the process")
        if s.stop_raises > 1:
            cause = (f"the script caught the stop {caught} times (a bare `except:` or `except BaseException:` "
                     f"around the training loop)")
        else:
            cause = "the script's thread did not return (blocked in a long call, or catching the stop)"
        return (f"stopped by torchdoctor: the {s.stop_reason} stop was requested, but {cause}; "
                f"{self.grace():g} s later torchdoctor wrote what was measured and ended the process")
