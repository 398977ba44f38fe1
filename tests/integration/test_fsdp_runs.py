"""FSDP jobs end to end on CPU (gloo, 2 ranks through torch.distributed.run): the examples'
planted causes found at their lines, the clean one without a finding of its own."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _run(tmp_path, example):
    out = tmp_path / example
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", "--nproc-per-node", "2", "--steps", "12",
                           "--warmup", "3", "--one-rank", "never", "--out", str(out), str(ROOT / "examples" / example)],
                          capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "report.json").read_text())["findings"], json.loads((out / "record.json").read_text())


def _line(example, mark):
    text = (ROOT / "examples" / example).read_text().splitlines()
    return next(n for n, line in enumerate(text, 1) if mark in line)


def test_fsdp2_per_layer_wrapping_and_accumulation_are_found_and_per_block_is_clean(tmp_path):
    findings, record = _run(tmp_path, "fsdp_per_layer.py")
    (granularity,) = [f for f in findings if f["code"] == "TD608"]
    assert granularity["location"]["line"] == _line("fsdp_per_layer.py", "expect: TD608")
    units = record["distributed"]["fsdp"]
    assert len(units) == 13 and all(u["sharded_bytes"] * 2 >= u["unsharded_bytes"] for u in units)

    findings, _ = _run(tmp_path, "fsdp_grad_accum.py")
    (accum,) = [f for f in findings if f["code"] == "TD601"]
    assert accum["location"]["line"] == _line("fsdp_grad_accum.py", "expect: TD601")

    findings, record = _run(tmp_path, "fsdp_clean.py")
    assert not [f for f in findings if f["code"] in ("TD601", "TD608") or
                (f["severity"] in ("high", "medium") and f["code"] != "TD606")]
    steps = [s for s in record["ranks"][0]["fsdp_steps"] if s["step"] > 3]
    assert steps and all(s["all_gathers"] == 9 and s["reduce_scatters"] == 5 for s in steps)
