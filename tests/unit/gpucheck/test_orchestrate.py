"""The GPU check's runner: each step stopped at its budget with everything it started, the rest
still run, the check's total limit respected, and the bundle rewritten after every step."""

import os
import sys
from pathlib import Path

import pytest

from benchmarks.gpucheck.bundle import MAX_FILES, SAFE_NAME
from benchmarks.gpucheck.orchestrate import (FAILED, OVERRAN, PASSED, SKIPPED, Orchestrator, is_running,
                                             run_command)
from benchmarks.gpucheck.plan import Context, Step

ROOT = Path(__file__).resolve().parents[3]
linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc to find child processes")


def python(code: str):
    return lambda ctx, budget: [sys.executable, "-c", code]


# A step that starts a grandchild in its own session (as tune's trials do), writes its pid, and hangs.
HANGS_WITH_A_DETACHED_CHILD = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
    "open(sys.argv[1] if len(sys.argv) > 1 else 'pid.txt', 'w').write(str(child.pid))\n"
    "print('started', flush=True)\n"
    "time.sleep(120)\n"
)


@linux_only
def test_a_step_over_its_budget_is_stopped_with_the_processes_it_started(tmp_path):
    pid_file = tmp_path / "pid.txt"
    argv = [sys.executable, "-c", HANGS_WITH_A_DETACHED_CHILD, str(pid_file)]
    status, code, seconds = run_command(argv, 2.0, tmp_path / "step.log", dict(os.environ), tmp_path)
    assert status == OVERRAN and code is not None and code < 0
    child = int(pid_file.read_text())
    assert not is_running(child)  # a zombie left for init to reap counts as gone
    assert "started" in (tmp_path / "step.log").read_text()


def test_outcomes_say_what_each_exit_means_and_the_rest_still_run(tmp_path):
    steps = (
        Step("slow", "sleeps past its budget", 1.5, python("import time; print('working', flush=True); time.sleep(60)")),
        Step("ok", "passes", 30, python("print('fine')")),
        Step("missed", "writes its result, then fails with a known code", 30,
             lambda ctx, b: [sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write('{}'); sys.exit(1)",
                             str(ctx.work / "missed.json")], "missed.json", exit_codes={1: "a planted cause was missed"}),
        Step("odd", "fails with an unknown code, having written something", 30,
             lambda ctx, b: [sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write('{}'); sys.exit(7)",
                             str(ctx.work / "odd.json")], "odd.json"),
        Step("crash", "dies before writing its result", 30, python("print('Traceback: boom'); raise SystemExit(1)"),
             "crash.json", exit_codes={1: "a planted cause was missed"}),
    )
    out = tmp_path / "out"
    ctx = Context(ROOT, sys.executable, tmp_path / "work", rehearse=True)
    ctx.work.mkdir()
    orch = Orchestrator(ctx, out, {}, total_s=100, steps=steps, echo=lambda *a, **k: None)
    assert orch.run() == 1
    by_name = {s.name: s for s in orch.state.steps}
    assert by_name["slow"].status == OVERRAN and by_name["slow"].reason == "stopped after 2 s (its budget)"
    assert "working" in by_name["slow"].log_tail
    assert by_name["ok"].status == PASSED and by_name["ok"].log_tail == ""
    assert (by_name["missed"].status, by_name["missed"].reason) == (FAILED, "exit code 1: a planted cause was missed")
    assert by_name["missed"].log_tail == ""  # its result says what happened; the log is in the logs tarball
    assert by_name["odd"].reason == "exit code 7"
    assert by_name["crash"].reason.startswith("exit code 1 and no result written: it crashed")
    assert "Traceback: boom" in by_name["crash"].log_tail
    files = sorted(p.name for p in out.iterdir())
    assert "SUMMARY.md" in files and len(files) <= MAX_FILES and all(SAFE_NAME.match(f) for f in files)
    summary = (out / "SUMMARY.md").read_text()
    assert "| slow | overran | " in summary and "| missed | failed | " in summary
    assert "exit code 1: a planted cause was missed" in summary and "CPU rehearsal" in summary


def test_the_total_limit_skips_steps_that_cannot_start_and_cuts_the_one_running(tmp_path):
    steps = (
        Step("first", "uses the time", 30, python("import time; time.sleep(60)")),
        Step("second", "never starts", 30, python("print('x')")),
    )
    ctx = Context(ROOT, sys.executable, tmp_path / "work", rehearse=True)
    ctx.work.mkdir()
    orch = Orchestrator(ctx, tmp_path / "out", {}, total_s=6, steps=steps, echo=lambda *a, **k: None)
    orch.run()
    first, second = orch.state.steps
    assert first.status == OVERRAN and first.reason == "stopped after 6 s: the check's 6 s ran out"
    assert second.status == SKIPPED and second.reason.startswith("no time left")
    assert "## Skipped, and why" in (tmp_path / "out" / "SUMMARY.md").read_text()


def test_without_cuda_the_gpu_steps_are_skipped_and_the_run_exits_2(tmp_path):
    machine = (
        "import json, sys; json.dump({'cuda_available': False, 'device_name': None}, open(sys.argv[1], 'w'))")
    steps = (
        Step("machine", "says there is no GPU", 30, lambda ctx, b: [sys.executable, "-c", machine,
                                                                    str(ctx.work / "machine.json")]),
        Step("accuracy", "needs the GPU", 30, python("print('ran')")),
    )
    ctx = Context(ROOT, sys.executable, tmp_path / "work", rehearse=False)
    ctx.work.mkdir()
    orch = Orchestrator(ctx, tmp_path / "out", {}, steps=steps, echo=lambda *a, **k: None)
    assert orch.run() == 2
    assert orch.state.cuda is False and orch.state.steps[1].status == SKIPPED
    assert "torch.cuda.is_available() is False" in orch.state.steps[1].reason


def test_a_machine_step_that_wrote_nothing_leaves_cuda_unknown_and_the_gpu_steps_run(tmp_path):
    steps = (Step("machine", "cold start, past its budget", 30, python("raise SystemExit(1)"), "machine.json"),
             Step("gpu-tests", "runs anyway", 30, python("print('ran')")))
    ctx = Context(ROOT, sys.executable, tmp_path / "work", rehearse=False)
    ctx.work.mkdir()
    orch = Orchestrator(ctx, tmp_path / "out", {}, steps=steps, echo=lambda *a, **k: None)
    orch.run()
    assert orch.state.cuda is None and orch.state.steps[1].status == PASSED
    assert orch.state.steps[0].reason == "exit code 1 and no result written: it crashed (the end of its log below)"
