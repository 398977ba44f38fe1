"""The run contract: limits hold whatever the script catches or ignores, the run directory is
always written, and the exit code and message say how the run ended. Each case runs
`torchdoctor run` in a process of its own, since some end by the watchdog's os._exit."""

import json
import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from torchdoctor.run.watchdog import HOOK_GRACE_S, STOP_GRACE_S

pytestmark = pytest.mark.slow

TRAIN_STEP = """
import signal, time, torch
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
def train_step():
    loss = model(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def doctor(tmp_path, body: str, *options: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float, dict]:
    script = tmp_path / "train.py"
    script.write_text(TRAIN_STEP + textwrap.dedent(body))
    out = tmp_path / "run"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", "--out", str(out), *options, str(script)],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    took = time.monotonic() - started
    record = json.loads((out / "record.json").read_text())
    assert (out / "report.json").exists() and (out / "report.md").exists()
    return done, took, record


def _time_limit_with_sigint_ignored(folder: Path):
    return doctor(folder, """
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # as under nohup or some CI runners
        while True:
            time.sleep(0.05)
    """, "--max-seconds", "2")


def test_time_limit_holds_with_sigint_ignored_and_no_steps(runs):
    done, took, record = runs.result(_time_limit_with_sigint_ignored)
    assert took < 2 + HOOK_GRACE_S + STOP_GRACE_S + 15  # the start-up of torch included
    assert record["run"]["status"] == "time-limit" and record["steps"] == []
    assert done.returncode == 2
    assert "time limit (--max-seconds 2) was reached before the first training step" in done.stderr
    assert "never called optimizer.step()" not in done.stderr


def _bare_except(folder: Path):
    return doctor(folder, """
        for i in range(10**9):
            try:
                train_step()
            except:  # swallows everything, the doctor's stop too
                pass
    """, "--steps", "5", "--warmup", "1", "--max-seconds", "60")


def test_a_bare_except_around_every_step_cannot_keep_the_run_going(runs):
    done, took, record = runs.result(_bare_except)
    assert took < STOP_GRACE_S + 30
    assert done.returncode == 0, done.stderr
    assert record["run"]["status"] == "step-limit" and len(record["steps"]) == 6  # no step after the stop
    # the watchdog's stop ends it: raised between two try blocks, or by ending the process
    assert "caught the stop" in record["run"]["ended_by"]
    report = json.loads((runs.folder(_bare_except) / "run" / "report.json").read_text())
    assert any("How the run ended" in note for note in report["notes"])


def _thread_blocked(folder: Path):
    return doctor(folder, f"""
        import ctypes
        for _ in range(4):
            train_step()
        open({str(folder / BLOCKED)!r}, "w").close()  # for the fixture: the other cases may start
        # blocked in C with signals held off: no hook runs, no handler, no exception delivered
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGALRM, signal.SIGINT}})
        ctypes.CDLL(None).sleep(10_000)
    """, "--steps", "50", "--warmup", "1", "--max-seconds", "3")


def test_a_thread_blocked_in_a_long_call_is_ended_with_the_run_written(runs):
    done, took, record = runs.result(_thread_blocked)
    assert took < 3 + HOOK_GRACE_S + STOP_GRACE_S + 20
    # the steps done before the block are kept: all 4 on a quiet machine, fewer when a busy one
    # spent the 3 s starting Python and torch (at load 4-5 only 1 step fitted)
    assert record["run"]["status"] == "time-limit" and len(record["steps"]) <= 4
    assert "did not return" in record["run"]["ended_by"]
    assert done.returncode == 0, done.stderr


def _closure_step(folder: Path):
    return doctor(folder, """
        lbfgs = torch.optim.LBFGS(model.parameters(), max_iter=1000, tolerance_grad=0, tolerance_change=0)
        def closure():
            lbfgs.zero_grad()
            loss = model(torch.randn(8, 16)).pow(2).mean()
            loss.backward()
            time.sleep(0.2)
            return loss
        lbfgs.step(closure)  # one step of up to 1000 evaluations of 0.2 s
    """, "--max-seconds", "2")


def test_a_closure_step_longer_than_the_limit_says_so(runs):
    done, took, record = runs.result(_closure_step)
    assert took < 60
    assert record["run"]["status"] == "time-limit" and record["steps"] == []
    assert record["unfinished_step"]["closure_calls"] >= 3
    assert done.returncode == 2
    assert "closure evaluations" in done.stderr and "raise --max-seconds" in done.stderr


def _json_output(folder: Path):
    return doctor(folder, """
        import os
        for step in range(40):
            train_step()
            print(f"step {step}")  # Python's stdout
            os.write(1, b"from C\\n")  # the file descriptor, as C code writes
    """, "--steps", "5", "--warmup", "1", "--format", "json")


def test_json_output_stays_parseable_when_the_script_prints(runs):
    done, _, _ = runs.result(_json_output)
    report = json.loads(done.stdout)
    assert report["summary"]["steps_measured"] > 0
    assert "step 3" in done.stderr and "from C" in done.stderr


BLOCKED = "blocked"  # written by the blocked-thread case's script when its four steps are done
CASES = {f.__name__: f for f in (_time_limit_with_sigint_ignored, _bare_except, _thread_blocked, _closure_step,
                                 _json_output)}
# Cases whose assertions hold whatever else runs (no step has to fit in a time limit; the bounds on
# their seconds are the watchdog's grace plus 15-30 s): run two at a time.
SHARED = {_time_limit_with_sigint_ignored.__name__, _bare_except.__name__, _json_output.__name__}


class _Runs:
    """The selected tests' cases, run before the first test reads its own. The blocked-thread case
    starts first with nothing beside it (its four steps must fit in its 3 s limit); once its script
    is blocked, idle until the watchdog ends it some 12 s on, the cases in SHARED run beside it two
    at a time, then the closure case alone (its closure calls must fit in its 2 s limit)."""

    def __init__(self, base: Path, names: list[str]):
        self.base, self.names, self._runs = base, names, None

    def folder(self, case) -> Path:
        return self.base / case.__name__

    def result(self, case):
        """The case's (process, seconds, record); its failure is raised in its own test."""
        if self._runs is None:
            self._make()
        return self._runs[case.__name__].result()

    def _make(self) -> None:
        self._runs = {}
        for name in self.names:
            self.folder(CASES[name]).mkdir()
        with ThreadPoolExecutor(max_workers=1) as alone:
            if _thread_blocked.__name__ in self.names:
                blocked = alone.submit(_thread_blocked, self.folder(_thread_blocked))
                self._runs[_thread_blocked.__name__] = blocked
                deadline = time.monotonic() + 120
                while not (self.folder(_thread_blocked) / BLOCKED).exists() and not blocked.done() \
                        and time.monotonic() < deadline:
                    time.sleep(0.1)
            with ThreadPoolExecutor(max_workers=2) as pool:  # waits for them
                for name in self.names:
                    if name in SHARED:
                        self._runs[name] = pool.submit(CASES[name], self.folder(CASES[name]))
            for name in self.names:
                if name not in self._runs:
                    self._runs[name] = alone.submit(CASES[name], self.folder(CASES[name]))
                    self._runs[name].exception()  # one at a time


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory) -> _Runs:
    tests = {"test_time_limit_holds_with_sigint_ignored_and_no_steps": _time_limit_with_sigint_ignored,
             "test_a_bare_except_around_every_step_cannot_keep_the_run_going": _bare_except,
             "test_a_thread_blocked_in_a_long_call_is_ended_with_the_run_written": _thread_blocked,
             "test_a_closure_step_longer_than_the_limit_says_so": _closure_step,
             "test_json_output_stays_parseable_when_the_script_prints": _json_output}
    names = [tests[item.originalname].__name__ for item in request.session.items
             if item.module is request.module and item.originalname in tests]
    return _Runs(tmp_path_factory.mktemp("contract"), names)
