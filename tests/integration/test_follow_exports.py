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
from helpers.otlp import log_records
from helpers.scripts import linear_loop

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


def test_tensorboard_scalars_and_change_events_and_the_prometheus_textfile(slow_loader_followed):
    # `run --follow --timeline-every 1 --tensorboard TB --prometheus-textfile PROM` on the example (with
    # --otlp-endpoint too): one run, shared with the OTLP test and test_follow.py's diagnosis (conftest.py)
    run = slow_loader_followed
    done, out, tb, prom = run.done, run.out, run.tensorboard, run.prometheus_textfile
    assert tb is not None and prom is not None
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
    # the report's findings, as events once the run is diagnosed
    assert "torchdoctor/findings/text_summary" in texts
    table = acc.Tensors("torchdoctor/findings/text_summary")[0].tensor_proto.string_val[0].decode()
    # Exported as the report has them (whether the cause's line was found depends on how busy the
    # machine was; test_follow.py judges the diagnosis, this test the export).
    shift = _shift_finding(out)
    assert shift["code"] in table and (shift["where"] or shift["code"]) in table
    found = [s for s in families["torchdoctor_finding"].samples if s.labels["code"] == shift["code"]]
    assert found and found[0].labels["where"].endswith(shift["where"]) and bool(found[0].labels["where"]) == bool(shift["where"])
    assert found[0].value == pytest.approx(shift["estimated_speedup"] or 0.0, rel=1e-6)


def _shift_finding(out: Path) -> dict:
    """The run's change finding (TD902/TD903) as report.json has it, with its "path:line" or ""."""
    report = json.loads((out / "report.json").read_text())
    shift = next(f for f in report["findings"] if f["code"] in ("TD902", "TD903"))
    location = shift.get("location")
    shift["where"] = f"{Path(location['path']).name}:{location['line']}" if location else ""
    return shift


LONG = linear_loop(1000000, "    time.sleep(0.002)\n")


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


def test_otlp_metrics_and_events_reach_a_collector(slow_loader_followed):
    """An OTLP/HTTP receiver (conftest.py's, around the shared run of the example with
    --otlp-endpoint): what arrives is decoded with OpenTelemetry's own protobufs."""
    metrics_pb = pytest.importorskip("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    done, out, received = slow_loader_followed.done, slow_loader_followed.out, slow_loader_followed.otlp_received
    assert received is not None
    assert done.returncode == 0, done.stderr[-3000:]
    names, last_step = set(), 0
    for body in received["/v1/metrics"]:
        request = metrics_pb.ExportMetricsServiceRequest.FromString(body)
        for rm in request.resource_metrics:
            assert any(a.key == "service.name" and a.value.string_value == "torchdoctor" for a in rm.resource.attributes)
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    names.add(metric.name)
                    if metric.name == "torchdoctor.step":
                        last_step = max(last_step, max(p.as_int or int(p.as_double) for p in metric.gauge.data_points))
    assert {"torchdoctor.step", "torchdoctor.step_time", "torchdoctor.data_wait", "torchdoctor.samples_per_second",
            "torchdoctor.memory.high_water", "torchdoctor.changes"} <= names
    assert last_step == 600
    records = log_records(received)
    changes = [(text, attrs) for text, attrs in records if attrs["torchdoctor.event"].string_value == "change"]
    assert changes and "changed at step" in changes[0][0]
    findings = [attrs for _, attrs in records if attrs["torchdoctor.event"].string_value == "finding"]
    expected = _shift_finding(out)
    shift = next(a for a in findings if a["torchdoctor.code"].string_value == expected["code"])
    if expected["where"]:  # as the report has it (see the TensorBoard test)
        assert shift["code.filepath"].string_value.endswith("follow_slow_loader.py")
        assert shift["code.lineno"].int_value == expected["location"]["line"]
    if expected["estimated_speedup"]:
        assert shift["torchdoctor.estimated_speedup"].double_value == pytest.approx(expected["estimated_speedup"])
