"""Fixtures the end-to-end tests share."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.otlp import otlp_receiver

ROOT = Path(__file__).resolve().parents[2]
DEMO = "examples/demo_prompt_encoder.py"


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> tuple[str, Path]:
    """`python3 dev.py demo`'s own command line, run once from the repository root for every test
    that reads the demo's output: (what it printed, its run directory)."""
    out = tmp_path_factory.mktemp("demo") / "run"
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", "--steps", "20", "--out", str(out), DEMO],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout, out


SLOW_LOADER = ROOT / "examples" / "follow_slow_loader.py"


@dataclass
class FollowedRun:
    """One `run --follow --timeline-every 1` of examples/follow_slow_loader.py, its figures sent to
    every exporter this environment has: TensorBoard, a Prometheus textfile and an OTLP collector
    (None where that exporter's package is missing)."""
    done: subprocess.CompletedProcess
    out: Path
    tensorboard: Path | None
    prometheus_textfile: Path | None
    otlp_received: dict | None


def _installed(*modules: str) -> bool:
    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except ModuleNotFoundError:  # a parent package missing
        return False


@pytest.fixture(scope="session")
def slow_loader_followed(tmp_path_factory) -> FollowedRun:
    """The 600-step example run once for test_follow.py's diagnosis and test_follow_exports.py's
    exports (three runs of the same example before): each test reads what it judges from it."""
    base = tmp_path_factory.mktemp("slow_loader")
    out = base / "run"
    tb = base / "tb" if _installed("tensorboard", "prometheus_client") else None
    prom = base / "torchdoctor.prom" if tb is not None else None
    with_otlp = _installed("opentelemetry.exporter.otlp.proto.http", "opentelemetry.proto.collector.metrics.v1")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("CI", None)
    exports = ["--tensorboard", str(tb), "--prometheus-textfile", str(prom)] if tb is not None else []
    received = None
    with otlp_receiver() as (endpoint, collected):
        if with_otlp:
            exports += ["--otlp-endpoint", endpoint]
            received = collected
        done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", "--follow", "--timeline-every", "1",
                               *exports, "--out", str(out), str(SLOW_LOADER)], env=env, capture_output=True,
                              text=True, timeout=240)
    return FollowedRun(done, out, tb, prom, received)
