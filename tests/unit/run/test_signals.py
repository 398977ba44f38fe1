"""SIGTERM as a stop (run/signals.py): it raises where Ctrl-C would, requests the session's stop,
says which signal it was (exit 143 beside 130), leaves the script's own handlers and forked
children alone; a multi-rank run's progress never shares a line with the ranks' output."""

import io
import os
import signal
import time

import pytest

from torchdoctor.errors import Terminated
from torchdoctor.run.outcome import Outcome, exit_code_of
from torchdoctor.run.progress import RunProgress
from torchdoctor.run.signals import StopSignals


class Session:
    def __init__(self):
        self.stop_signal = None
        self.reasons = []

    def request_stop(self, reason):
        self.reasons.append(reason)


@pytest.fixture
def stops():
    made = StopSignals().install()
    yield made
    made.uninstall()


def test_sigterm_raises_terminated_and_requests_the_stop(stops):
    session = Session()
    stops.attach(session)
    with pytest.raises(Terminated):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler runs at the next bytecode
    assert session.stop_signal == signal.SIGTERM and session.reasons[0] == "interrupted"
    assert stops.exit_code == 143 and stops.signal_name == "SIGTERM"


def test_a_second_signal_does_not_cut_the_stop_short(stops, capfd):
    with pytest.raises(Terminated):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    os.kill(os.getpid(), signal.SIGTERM)  # only said: the first one's stop is under way
    time.sleep(0.1)
    assert "stopping, writing what was measured" in capfd.readouterr().err


def test_the_outcome_of_terminated_is_interrupted_with_143():
    outcome = Outcome.of(Terminated())
    assert (outcome.status, outcome.exit_code) == ("interrupted", 143)
    assert Outcome.of(KeyboardInterrupt()).exit_code == 130
    assert exit_code_of("interrupted", 143) == 143 and exit_code_of("crashed", 0) == 1


def test_handlers_the_script_installed_stay_its_own():
    def mine(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        stops = StopSignals().install()
        assert signal.getsignal(signal.SIGTERM) is mine
        stops.uninstall()
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_uninstall_restores_the_default_dispositions():
    StopSignals().install().uninstall()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) == signal.default_int_handler


def test_a_forked_child_gets_the_default_sigterm_back(stops):
    stops.attach(Session())
    pid = os.fork()
    if pid == 0:  # the child (a DataLoader worker): its SIGTERM is its own, and ends it
        os._exit(0 if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert stops.received is None  # nothing of the child's reached this process


def test_progress_of_a_rank_is_whole_lines():
    stream = io.StringIO()
    progress = RunProgress(total_steps=10, warmup=1, stream=stream, enabled=True, whole_lines=True)
    for step in range(1, 12):
        progress.update(step, 0.0059)
    progress.close("torchdoctor: rank 0: step-limit after 11 steps")
    text = stream.getvalue()
    assert "\r" not in text and "\033" not in text and text.endswith("\n")
    assert text.count("\n") == 2  # the first step's line, then the closing line (redraws are 10 s apart)


def test_a_handler_a_framework_puts_back_after_us_acts_as_the_default(tmp_path):
    """Lightning saves the handler it finds and restores it at its teardown, after ours came out."""
    import subprocess
    import sys

    code = ("import os, signal, time\nfrom torchdoctor.run.signals import StopSignals\n"
            "s = StopSignals().install()\nsaved = signal.getsignal(signal.SIGTERM)\ns.uninstall()\n"
            "signal.signal(signal.SIGTERM, saved)\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(5)\n"
            "print('still alive')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == -signal.SIGTERM and "still alive" not in done.stdout, done.stderr
