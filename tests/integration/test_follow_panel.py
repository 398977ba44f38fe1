"""The live panel of `run --follow` (run/follow/panel.py), in a pseudo-terminal: it is drawn, and
the script's own lines never share a line with it; in pipes and under CI it is not drawn at all."""

import os
import pty
import re
import select
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers.scripts import ddp_loop, linear_loop

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

PANEL_TAIL = """    time.sleep(0.004)
    if (i + 1) % 40 == 0:
        print(f"SCRIPT LINE {i + 1} loss {loss.item():.4f}")
"""
SCRIPT = linear_loop(600, PANEL_TAIL)


def in_a_terminal(args, env, timeout=180) -> tuple[int, str]:
    """Run with stdin, stdout and stderr on one pseudo-terminal; all it wrote, and the exit code."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the other side closed: the process ended
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    code = proc.wait(timeout=30)
    return code, b"".join(chunks).decode("utf-8", "replace")


def env(**extra):
    e = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TERM": "xterm", "COLUMNS": "100", **extra}
    e.pop("CI", None)
    e.update(extra)
    return e


def test_the_panel_is_drawn_in_a_terminal_and_never_shares_a_line_with_the_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    code, raw = in_a_terminal([sys.executable, "-m", "torchdoctor", "run", "--follow", "--timeline-every", "0.5",
                               "--out", str(tmp_path / "run"), str(script)], env())
    assert code == 0, raw[-3000:]
    assert "\x1b[" in raw  # drawn in place
    text = ANSI.sub("", raw).replace("\r", "")
    assert text.count("torchdoctor --follow") >= 2  # redrawn as the run went
    script_lines = [line for line in text.split("\n") if "SCRIPT LINE" in line]
    assert len(script_lines) == 15
    assert all(re.fullmatch(r"SCRIPT LINE \d+ loss \d+\.\d{4}", line) for line in script_lines), script_lines
    # the panel's lines are whole too: none carries a script's line
    panel_lines = [line for line in text.split("\n") if "│" in line or "╭" in line]
    assert panel_lines and not any("SCRIPT" in line for line in panel_lines)
    # and it is gone at the end: the last screen is the report
    assert "torchdoctor --follow" not in ANSI.sub("", raw.rsplit("\x1b[J", 1)[-1])


def test_no_panel_in_pipes_or_under_ci(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(linear_loop(200, PANEL_TAIL))
    # the two runs at once (two cores): what each is checked for is a panel's absence, nothing timed
    with ThreadPoolExecutor(max_workers=1) as pool:
        in_ci = pool.submit(in_a_terminal, [sys.executable, "-m", "torchdoctor", "run", "--follow", "--timeline-every",
                                            "0.5", "--out", str(tmp_path / "b"), str(script)], env(CI="true"))
        piped = subprocess.run([sys.executable, "-m", "torchdoctor", "run", "--follow", "--timeline-every", "0.5",
                                "--out", str(tmp_path / "a"), str(script)], env=env(), capture_output=True, text=True,
                               timeout=180)
        code, raw = in_ci.result()
    assert piped.returncode == 0
    assert "torchdoctor --follow" not in piped.stderr + piped.stdout and "\x1b[" not in piped.stderr
    assert code == 0 and "torchdoctor --follow" not in raw


RANKS_SCRIPT = ddp_loop(400, """    time.sleep(0.006)
    if (i + 1) % 40 == 0:
        print(f"RANK {rank} LINE {i + 1} loss {loss.item():.4f}", flush=True)
""")


def test_a_followed_jobs_panel_has_a_row_per_rank_and_never_splits_a_ranks_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(RANKS_SCRIPT)
    code, raw = in_a_terminal([sys.executable, "-m", "torchdoctor", "run", "--follow", "--nproc-per-node", "2",
                               "--timeline-every", "0.5", "--out", str(tmp_path / "run"), str(script)],
                              env(OMP_NUM_THREADS="1"))
    assert code == 0, raw[-3000:]
    text = ANSI.sub("", raw).replace("\r", "")
    assert text.count("torchdoctor --follow · ranks") >= 2
    rank_lines = [line for line in text.split("\n") if "LINE" in line and "RANK" in line]
    assert len(rank_lines) == 20  # 10 per rank, each whole, with torchrun's rank prefix
    assert all(re.fullmatch(r"\[rank(\d)\]:RANK \1 LINE \d+ loss \d+\.\d{4}", line) for line in rank_lines), rank_lines
    panel_lines = [line for line in text.split("\n") if "│" in line or "╭" in line]
    assert not any("LINE" in line for line in panel_lines)
    rows = [line for line in panel_lines if re.match(r"│ +[01] ", line)]
    assert {line.split()[1] for line in rows} >= {"0", "1"}  # a row per rank, drawn with its figures
