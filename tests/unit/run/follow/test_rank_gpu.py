"""Each rank's own GPU under `run --follow --nproc-per-node N`: its follower puts the figures NVML gave
for the rank's device on every timeline point (a fake NVML injected: two GPUs, each answering its own
figures), the launcher's rows and exporters carry them by rank, and a rank without NVML says it is not
measurable, never a number."""

import io
import json

import pytest

from helpers.follow_fakes import make, step
from helpers.gpu_fakes import GIB, FakeCuda, FakeNvml, sampled_probe
from helpers.otlp import gauge_points, otlp_receiver

from torchdoctor.integrations.exporters import OtlpExporter, PrometheusExporter, TensorBoardExporter
from torchdoctor.run.follow.follower import FollowOptions
from torchdoctor.run.follow.job import JobWatch
from torchdoctor.run.follow.panel import LivePanel

parser = pytest.importorskip("prometheus_client.parser")

NVML = FakeNvml(figures={0: (10, 90_000, 5 * GIB), 1: (95, 380_000, 60 * GIB)})


def follow_rank(run_dir, gpu, steps=30):
    """A rank's follower, its steps, its timeline written (the follower's tick, by hand)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    session, follower = make(run_dir, gpu=gpu, every_s=0.0)
    follower.tick()  # the tick reads NVML's latest sample before the steps it holds
    for _ in range(steps):
        step(session, follower, 0.010)
    follower.tick()
    return [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]


def two_ranks(tmp_path):
    """Rank 0 trains on GPU 0; rank 1 moved its model with .to(1), torch's current device still 0, and
    sees its own GPU 1; rank 2's NVML cannot start (no driver): nothing measured."""
    gpus = {0: sampled_probe(FakeCuda(current=0, devices=2, allocated={0: 3 * GIB}), NVML),
            1: sampled_probe(FakeCuda(current=0, devices=2, allocated={0: 512, 1: 3 * GIB}), NVML),
            2: sampled_probe(FakeCuda(), FakeNvml(init_error=True))}
    return {rank: follow_rank(tmp_path / f"rank-{rank}", gpu) for rank, gpu in gpus.items()}


def test_each_ranks_timeline_has_its_own_gpus_figures_or_none(tmp_path):
    lines = two_ranks(tmp_path)
    assert {(p["gpu_util"], p["gpu_power_w"], p["gpu_mem_bytes"]) for p in lines[0]} == {(10.0, 90.0, 5 * GIB)}
    assert {(p["gpu_util"], p["gpu_power_w"], p["gpu_mem_bytes"]) for p in lines[1]} == {(95.0, 380.0, 60 * GIB)}
    assert {(p["gpu_util"], p["gpu_power_w"], p["gpu_mem_bytes"]) for p in lines[2]} == {(None, None, None)}


def test_the_launchers_rows_and_exports_carry_each_ranks_gpu(tmp_path):
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    two_ranks(tmp_path)
    prom_file = tmp_path / "torchdoctor.prom"
    prom, tb = PrometheusExporter(textfile=prom_file, per_rank=True), TensorBoardExporter(tmp_path / "tb")
    with otlp_receiver() as (endpoint, received):
        otlp = OtlpExporter(endpoint)
        watch = JobWatch(tmp_path, [0, 1, 2], FollowOptions(every_s=0.0, sinks=[prom, tb, otlp]))
        watch.tick(final=True)
        otlp.close()
    utilization = {p.attributes[0].value.int_value: p.as_double
                   for p in gauge_points(received)["torchdoctor.gpu.utilization"]}
    assert utilization == {0: 10.0, 1: 95.0}  # rank 2: none
    rows = {r["rank"]: r for r in watch.state()["ranks"]}
    assert (rows[1]["gpu_util"], rows[1]["gpu_power_w"], rows[1]["gpu_mem"]) == (95.0, 380.0, 60 * GIB)
    assert (rows[2]["gpu_util"], rows[2]["gpu_power_w"], rows[2]["gpu_mem"]) == (None, None, None)
    text = LivePanel(io.StringIO(), width=120).render(watch.state())
    cells = {line.strip("│ ")[:1]: line for line in text.splitlines() if line.strip("│ ")[:2] in ("0 ", "1 ", "2 ")}
    assert "10% · 90W · 5.0GiB" in cells["0"] and "95% · 380W · 60.0GiB" in cells["1"]
    assert "not measurable" in cells["2"]
    prom.close()
    tb.close()
    samples = {(s.name, s.labels.get("rank")): s.value
               for f in parser.text_string_to_metric_families(prom_file.read_text()) for s in f.samples}
    assert samples[("torchdoctor_gpu_utilization_percent", "1")] == 95.0
    assert samples[("torchdoctor_gpu_power_watts", "0")] == 90.0
    assert samples[("torchdoctor_gpu_memory_used_bytes", "1")] == 60 * GIB
    assert not any(name.startswith("torchdoctor_gpu_") and rank == "2" for name, rank in samples)  # not a 0
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs = {}
    for rank in (1, 2):
        events = EventAccumulator(str(tmp_path / "tb" / f"rank-{rank}"))
        events.Reload()
        runs[rank] = events
    assert {e.value for e in runs[1].Scalars("torchdoctor/gpu_util_percent")} == {95.0}
    assert "torchdoctor/gpu_util_percent" not in runs[2].Tags()["scalars"]


def test_a_run_without_nvml_exports_no_gpu_figure(tmp_path):
    """Unlabelled (one process): a Prometheus gauge made up front would read 0; none is made."""
    from helpers.records import rank_points

    path = tmp_path / "torchdoctor.prom"
    prom = PrometheusExporter(textfile=path)
    prom.on_points(rank_points(0, steps=20))
    prom.close()
    names = {f.name for f in parser.text_string_to_metric_families(path.read_text())}
    assert "torchdoctor_step" in names and not any(n.startswith("torchdoctor_gpu") for n in names)
