"""`torchdoctor run --follow`: the whole job, end to end (issue "follow a run from start to end").

- a script whose data loading slows at step 300 of 600 gets a finding that the slowdown began at
  step 300 ± 20, with its cause at the loader line;
- a script that hangs is stopped by the stall detector, every thread's stack in the report;
- a script that raises at step 400 keeps its last steps and stacks;
- `torchdoctor report DIR` works on a live directory, and a SIGTERM leaves the black box;
- the timeline is the run's own figures.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.scripts import linear_loop

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "follow_slow_loader.py"
pytestmark = pytest.mark.slow


def torchdoctor(*args, cwd=None, timeout=240, **kwargs):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("CI", None)
    return subprocess.run([sys.executable, "-m", "torchdoctor", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, **kwargs)


def findings(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "report.json").read_text())["findings"]


def test_a_loader_that_slows_at_step_300_is_found_there_with_its_cause_at_the_loader_line(slow_loader_followed):
    # `run --follow --timeline-every 1` on the example, shared with test_follow_exports.py (conftest.py)
    done, out = slow_loader_followed.done, slow_loader_followed.out
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "record.json").read_text())
    assert record["run"]["status"] == "completed" and len(record["steps"]) == 600  # ran to its end
    # the step time's test (TD902) or the data wait's (TD903): whichever fired first names the change
    # (on a shared machine a later shift can follow it: other processes' load, said as the machine's)
    shifts = sorted((f for f in findings(out) if f["code"] in ("TD902", "TD903") and f["severity"] != "info"),
                    key=lambda f: f["evidence"]["from_step"])
    assert shifts, [f["title"] for f in findings(out)]
    shift = shifts[0]
    assert not [f for f in shifts if f["evidence"]["from_step"] < 280]  # nothing before the planted change
    assert abs(shift["evidence"]["from_step"] - 300) <= 20
    loader_line = next(i for i, line in enumerate(EXAMPLE.read_text().splitlines(), 1) if "loader = DataLoader(" in line)
    assert shift["location"]["line"] == loader_line
    assert shift["location"]["path"].endswith("follow_slow_loader.py")
    assert shift["evidence"]["cause_code"] == "TD101"
    assert shift["evidence"]["figures_after"]["data_wait_s"] > 5 * shift["evidence"]["figures_before"]["data_wait_s"]
    # the window sampled right after the change names the slow line inside __getitem__
    sleep_line = next(i for i, line in enumerate(EXAMPLE.read_text().splitlines(), 1) if "time.sleep" in line)
    assert shift["evidence"]["window_top_line"].endswith(f"follow_slow_loader.py:{sleep_line}")
    follow = record["follow"]
    window = follow["windows"][follow["changes"][0]["window"]]
    assert window["reason"] == "change" and window["first_step"] > follow["changes"][0]["step"]
    # findings from different times are kept apart
    later = [f for f in findings(out) if f["title"].startswith(f"from step {shift['evidence']['from_step']}:")]
    assert any(f["code"] == "TD101" for f in later)
    # the timeline holds every step, read back as the run wrote it
    lines = (out / "timeline.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(1, 601))
    report_md = (out / "report.md").read_text()
    assert "Probe windows along the run" in report_md and "bound 2%" in report_md


HANG = """
import threading, time
import torch
from torch import nn

def helper():
    threading.Event().wait()  # a helper thread that waits for ever

threading.Thread(target=helper, name="loader-helper", daemon=True).start()
model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 16)

def train_step(i):
    if i == 120:
        time.sleep(3600)  # HANGS HERE
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

for i in range(100000):
    train_step(i)
"""


def test_a_hang_is_stopped_by_the_stall_detector_with_every_threads_stack(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    out = tmp_path / "run"
    started = time.monotonic()
    done = torchdoctor("run", "--follow", "--stall-timeout", "1", "--out", str(out), str(script), timeout=120)
    assert time.monotonic() - started < 100
    assert done.returncode == 1, done.stderr[-3000:]
    assert "stalled" in done.stderr and "Traceback" not in done.stderr
    record = json.loads((out / "record.json").read_text())
    assert record["run"]["status"] == "stalled"
    box = record["follow"]["blackbox"]
    assert box["reason"] == "stall" and box["step"] == 120
    threads = {t["name"]: t for t in box["threads"]}
    assert set(threads) >= {"MainThread", "loader-helper"}
    assert threads["MainThread"]["frames"][-1]["text"].startswith("time.sleep(3600)")
    assert any(f["function"] == "helper" for f in threads["loader-helper"]["frames"])
    hang_line = HANG.splitlines().index("        time.sleep(3600)  # HANGS HERE") + 1
    assert box["where"]["line"] == hang_line
    text = done.stdout
    assert text.splitlines()[0].startswith("torchdoctor")
    assert "stalled: no step finished" in " ".join(text.split("\n\n")[0].split())  # the report leads with it
    assert "Black box: every thread's stack" in text and "loader-helper" in text


BOOM = linear_loop(1000, "    if i == 399:\n        raise RuntimeError(\"loss went NaN at step 400\")\n")


def test_a_script_raising_at_step_400_keeps_its_last_steps_and_stacks(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text(BOOM)
    out = tmp_path / "run"
    done = torchdoctor("run", "--follow", "--out", str(out), str(script))
    assert done.returncode == 1
    assert "RuntimeError: loss went NaN at step 400" in done.stderr
    record = json.loads((out / "record.json").read_text())
    box = record["follow"]["blackbox"]
    assert box["reason"] == "exception" and box["step"] == 400
    assert [p["step"] for p in box["last_points"]][-1] == 400 and len(box["last_points"]) >= 20
    main = next(t for t in box["threads"] if t["main"])
    assert main["frames"][-1]["text"] == 'raise RuntimeError("loss went NaN at step 400")'
    assert box["where"]["line"] == BOOM.splitlines().index('        raise RuntimeError("loss went NaN at step 400")') + 1
    first = " ".join(done.stdout.split("\n\n")[0].split())
    assert "crashed: RuntimeError: loss went NaN at step 400 at" in first
    # the report re-made from the directory says the same
    again = torchdoctor("report", str(out), "--format", "md")
    assert again.returncode == 0 and "Black box: the last steps before it stopped" in again.stdout


LONG = linear_loop(100000, "    time.sleep(0.002)\n")


def test_report_works_on_a_live_directory_and_sigterm_leaves_the_black_box(tmp_path):
    script = tmp_path / "long.py"
    script.write_text(LONG)
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "torchdoctor", "run", "--follow", "--timeline-every", "0.5",
                             "--out", str(out), str(script)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        report = None
        while time.monotonic() < deadline:  # until the live record holds some steps
            time.sleep(0.5)
            if not (out / "live.json").exists():
                continue
            live = torchdoctor("report", str(out), "--format", "json")
            assert live.returncode == 0, live.stderr
            report = json.loads(live.stdout)
            if report["summary"]["steps_total"] > 10:
                break
        assert report is not None and report["summary"]["status"] == "running"
        assert any("still going" in n for n in report["notes"])
        assert report["summary"]["steps_total"] > 10
        assert not (out / "record.json").exists()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stderr[-2000:]
    record = json.loads((out / "record.json").read_text())
    box = record["follow"]["blackbox"]
    assert box["reason"] == "signal" and "SIGTERM" in box["message"]
    assert any(t["main"] and t["frames"] for t in box["threads"])


WATCHED = """
import json, sys, torch, torchdoctor
from torch import nn
model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 16)
try:
    with torchdoctor.watch(out=sys.argv[1], follow=True, follow_every_s=0.5) as doc:
        for i in range(250):
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i == 239:
                raise ValueError("bad batch at step 240")
except ValueError:
    pass
print(json.dumps({"steps": len(doc.record.steps), "status": doc.record.run.status,
                  "box": doc.record.follow.blackbox.reason, "where": doc.record.follow.blackbox.where.line}))
"""


def test_watch_follow_runs_the_block_to_its_end_with_the_black_box(tmp_path):
    script = tmp_path / "watched.py"
    script.write_text(WATCHED)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # no step limit (30 by default without follow): the block ran until it raised at its 240th step
    assert result == {"steps": 240, "status": "crashed", "box": "exception",
                      "where": WATCHED.splitlines().index('                raise ValueError("bad batch at step 240")') + 1}
    assert (tmp_path / "run" / "timeline.jsonl").exists()


def test_the_limits_still_hold_under_follow(tmp_path):
    script = tmp_path / "long.py"
    script.write_text(LONG)
    out = tmp_path / "run"
    # 6 s: the first seconds go to the probe windows (a CPU hog beside the run left 43-78 steps within
    # 4 s), then steps are fast (590-1,750 steps within 6 s with the hog)
    done = torchdoctor("run", "--follow", "--max-seconds", "6", "--out", str(out), str(script), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((out / "record.json").read_text())
    assert record["run"]["status"] == "time-limit" and record["follow"]["blackbox"] is None
    steps = len(record["steps"])
    out2 = tmp_path / "run2"
    done = torchdoctor("run", "--follow", "--steps", "40", "--out", str(out2), str(script), timeout=120)
    record = json.loads((out2 / "record.json").read_text())
    assert done.returncode == 0 and record["run"]["status"] == "step-limit" and len(record["steps"]) == 43
    assert steps > 33  # the first run went on past the default 3 + 30 steps, until its time limit
