"""SIGTERM is a stop, not a loss: the one place that turns SIGINT (Ctrl-C) and SIGTERM (a
scheduler ending the job, `timeout`, `kill`) into a stop of the measured code.

While it is installed, either signal ends the measured code the way Ctrl-C does: an exception
in the training thread (KeyboardInterrupt, or for SIGTERM `Terminated`, a KeyboardInterrupt, so
code that handles Ctrl-C handles it too), and a stop request on the session, which the watchdog
enforces when the thread cannot take an exception (blocked in C code or a collective). The
record then says which signal ended the run, and the exit code is 128 + its number (130, 143).

Only default dispositions are replaced: a handler the script or a framework installed, or a
signal ignored by `nohup`, stays theirs (the stop is still requested through the wakeup fd,
which any Python-level handler writes to). Processes forked while it is installed (DataLoader
workers) get the default dispositions back, so a worker's SIGTERM is never taken for ours.

A scheduler's grace is short (Slurm and Kubernetes 30 s, docker 10 s before SIGKILL): only the
first signal raises; a second one, or one while the run is written (`quiet`), only says so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Iterator

from torchdoctor.errors import Terminated

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
WHY = {  # how the record's `ended_by` says it
    "SIGTERM": "SIGTERM (the job was stopped: a scheduler's time limit or preemption, `timeout` or `kill`)",
    "SIGINT": "SIGINT (Ctrl-C)",
}
_active: "StopSignals | None" = None  # the installed one, for the fork hook


def exit_code_of(signum: int) -> int:
    return 128 + int(signum)


class StopSignals:
    """`raise_in_code=False`: only request the stop (a framework callback ends its loop at the
    stop flag, then `redeliver` ends the process as the signal would have)."""

    def __init__(self, raise_in_code: bool = True, signums: tuple[int, ...] = STOP_SIGNALS) -> None:
        self.raise_in_code = raise_in_code
        self.signums = signums  # code in the user's process (watch(), callbacks) leaves Ctrl-C as it is
        self.received: int | None = None  # the first stop signal that arrived
        self.session = None  # a RunSession: its stop is requested on a signal
        self.quiet = False  # set while the run is written: a signal then only says so
        self.pid = os.getpid()
        self._previous: dict[int, object] = {}  # what it replaced, while installed
        self._before: dict[int, object] = {}  # ... kept after uninstall, for a handler put back after us
        self._installed_once = False
        self._handled = False  # the handler ran once (the watcher thread may have seen the signal first)
        self._read_fd = self._write_fd = -1
        self._thread: threading.Thread | None = None

    # ---- what arrived ------------------------------------------------------------------
    @property
    def signal_name(self) -> str | None:
        return signal.Signals(self.received).name if self.received is not None else None

    @property
    def exit_code(self) -> int | None:
        return exit_code_of(self.received) if self.received is not None else None

    # ---- in and out ----------------------------------------------------------------------
    def install(self) -> "StopSignals":
        """The handlers (main thread only; default dispositions only)."""
        global _active
        if threading.current_thread() is not threading.main_thread() or self._previous:
            return self
        for signum in self.signums:
            current = signal.getsignal(signum)
            if current in (signal.SIG_DFL, signal.default_int_handler):
                self._previous[signum] = self._before[signum] = current
                signal.signal(signum, self._handle)
                self._installed_once = True
        _active = self
        return self

    def attach(self, session) -> None:
        """The run's session exists: a signal (already arrived or to come) requests its stop,
        also while the training thread is blocked where no handler runs (the wakeup fd)."""
        self.session = session
        if self.received is not None:
            self._request_stop(self.received)
        if self._thread is not None or threading.current_thread() is not threading.main_thread():
            return
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        try:
            old = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        except ValueError:
            old = -2
        if old != -1:  # someone's event loop owns the wakeup fd: theirs stays
            if old >= 0:
                signal.set_wakeup_fd(old)
            self._close_pipe()
            return
        self._thread = threading.Thread(target=self._watch, name="torchdoctor-signals", daemon=True)
        self._thread.start()

    def uninstall(self) -> None:
        global _active
        if threading.current_thread() is not threading.main_thread():
            return
        if self._thread is not None:
            signal.set_wakeup_fd(-1)
            os.write(self._write_fd, b"\0")  # wake the watcher so it ends
            self._thread.join(timeout=2)
            self._thread = None
            self._close_pipe()
        for signum, handler in self._previous.items():
            if signal.getsignal(signum) == self._handle:  # the script's own handler, if any, stays
                signal.signal(signum, handler)
        self._previous.clear()
        if _active is self:
            _active = None

    def redeliver(self) -> None:
        """After the run is written: end this process as the signal would have without us
        (SIGTERM with its default action: exit status 143). For code that runs in the user's
        process (watch(), the callbacks), where the signal was only deferred."""
        if self.received != signal.SIGTERM or os.getpid() != self.pid:
            return
        self.uninstall()
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGTERM)

    # ---- the signal ----------------------------------------------------------------------
    @property
    def stale(self) -> bool:
        """Uninstalled, yet its handler may still be set: a framework that saved it as "the
        original" when it installed its own (Lightning does) puts it back at its teardown."""
        return not self._previous and self._installed_once

    def _handle(self, signum, frame) -> None:
        if os.getpid() != self.pid or self.stale:  # a forked child, or a handler put back after us
            signal.signal(signum, self._before.get(signum, signal.SIG_DFL))  # what it would have been
            os.kill(os.getpid(), signum)
            return
        first, self._handled = not self._handled, True
        self.received = self.received or signum
        if self.quiet or not first:  # the stop under way must not be cut short by its own repeat
            _say(f"torchdoctor: {signal.Signals(signum).name}: stopping, writing what was measured "
                 "(SIGKILL ends it without that)")
            return
        self._request_stop(signum)
        if self.raise_in_code:
            raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    def _request_stop(self, signum: int) -> None:
        session = self.session
        if session is None:
            return
        if getattr(session, "stop_signal", None) is None:
            session.stop_signal = signum
        session.request_stop("interrupted")  # the first reason wins: a limit reached before stays

    def _watch(self) -> None:
        """The signal as the C handler saw it: the stop is requested even while the training
        thread is blocked where no Python handler runs."""
        while True:
            try:
                data = os.read(self._read_fd, 16)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in self.signums:
                    self.received = self.received or signum
                    if not self.quiet:
                        self._request_stop(signum)
            if 0 in data:  # uninstall's wake-up (it may arrive in one read with a signal's byte)
                return

    def _close_pipe(self) -> None:
        for fd in (self._read_fd, self._write_fd):
            if fd != -1:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._read_fd = self._write_fd = -1


def current() -> StopSignals | None:
    """The installed stop signals (the command line's, cli.py, or a watch() block's), for a run to attach
    its session to."""
    return _active


@contextlib.contextmanager
def handling_stop_signals() -> Iterator[StopSignals]:
    """Around a whole command: SIGTERM and SIGINT stop it as Ctrl-C does (exit 143 or 130)."""
    if _active is not None:
        yield _active
        return
    stops = StopSignals().install()
    try:
        yield stops
    finally:
        stops.uninstall()


def _say(text: str) -> None:
    try:
        os.write(2, (text + "\n").encode())
    except OSError:
        pass


def _after_fork_in_child() -> None:
    """A process forked from a run (a DataLoader worker): its signals are its own again, and
    its wakeup fd no longer writes into our pipe."""
    active = _active
    if active is None:
        return
    try:
        signal.set_wakeup_fd(-1)
        for signum, handler in active._previous.items():
            signal.signal(signum, handler)
    except (ValueError, OSError):
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
