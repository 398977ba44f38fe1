"""A followed run's figures where teams look (integrations/exporters.py), read back with each
ecosystem's own reader: TensorBoard's EventAccumulator, and an HTTP GET of the Prometheus endpoint
parsed by prometheus_client's parser (and its textfile by the same parser)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "follow_slow_loader.py"
pytestmark = pytest.mark.slow

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
parser = pytest.importorskip("prometheus_client.parser")

GAUGES = {"torchdoctor_step", "torchdoctor_step_time_seconds", "torchdoctor_data_wait_seconds",
          "torchdoctor_samples_per_second", "torchdoctor_memory_high_water_bytes"}


def env():
    e = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    e.pop("CI", None)
    return e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tensorboard_scalars_and_change_events_and_the_prometheus_textfile(tmp_path):
    out, tb, prom = tmp_path / "run", tmp_path / "tb", tmp_path / "torchdoctor.prom"
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", "--follow", "--timeline-every", "1",
                           "--tensorboard", str(tb), "--prometheus-textfile", str(prom), "--out", str(out),
                           str(EXAMPLE)], env=env(), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    acc = event_accumulator.EventAccumulator(str(tb), size_guidance={event_accumulator.SCALARS: 0,
                                                                     event_accumulator.TENSORS: 0})
    acc.Reload()
    scalars = set(acc.Tags()["scalars"])
    assert {"torchdoctor/step_time_ms", "torchdoctor/data_wait_ms", "torchdoctor/samples_per_s",
            "torchdoctor/memory_high_water_bytes"} <= scalars
    steps = acc.Scalars("torchdoctor/step_time_ms")
    assert [e.step for e in steps] == list(range(4, 601))  # every step after the warm-up, at its step
    timeline = {json.loads(line)["step"]: json.loads(line) for line in (out / "timeline.jsonl").read_text().splitlines()}
    assert all(abs(e.value - timeline[e.step]["step_s"] * 1000) < 1e-3 for e in steps)  # the run's own numbers
    texts = acc.Tags()["tensors"]
    assert "torchdoctor/changes/text_summary" in texts
    change = acc.Tensors("torchdoctor/changes/text_summary")[0]
    record = json.loads((out / "record.json").read_text())
    assert change.step == record["follow"]["changes"][0]["step"]
    assert f"at step {change.step}" in change.tensor_proto.string_val[0].decode()
    families = {f.name: f for f in parser.text_string_to_metric_families(prom.read_text())}
    assert GAUGES <= set(families)
    assert families["torchdoctor_step"].samples[0].value == 600
    changes = families["torchdoctor_changes"].samples
    assert any(s.name == "torchdoctor_changes_total" and s.value >= 1 for s in changes)
    assert "Also sent to: TensorBoard" in (out / "report.md").read_text()


LONG = """
import time, torch
from torch import nn
model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 16)
for i in range(1000000):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.002)
"""


def test_the_prometheus_endpoint_serves_the_documented_metrics_while_the_run_goes(tmp_path):
    script = tmp_path / "long.py"
    script.write_text(LONG)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "torchdoctor", "run", "--follow", "--timeline-every", "0.5",
                             "--prometheus-port", str(port), "--out", str(tmp_path / "run"), str(script)],
                            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, families = time.monotonic() + 90, {}
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                continue
            families = {f.name: f for f in parser.text_string_to_metric_families(body)}
            if families.get("torchdoctor_step") and families["torchdoctor_step"].samples[0].value > 20:
                break
        assert GAUGES <= set(families)
        assert families["torchdoctor_step"].samples[0].value > 20
        assert 0.001 < families["torchdoctor_step_time_seconds"].samples[0].value < 1.0
        assert families["torchdoctor_memory_high_water_bytes"].samples[0].value > 10 * 2**20
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143
    with pytest.raises(OSError):  # the endpoint goes with the run
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_an_export_without_follow_is_a_one_line_usage_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", "--tensorboard", str(tmp_path), str(EXAMPLE)],
                          env=env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "add --follow" in done.stderr and "Traceback" not in done.stderr
