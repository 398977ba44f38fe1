"""A followed multi-rank job's exports are labelled with the rank (integrations/exporters.py),
read back with the libraries' own readers."""

import pytest

from helpers.records import rank_points
from torchdoctor.integrations.exporters import PrometheusExporter, TensorBoardExporter
from torchdoctor.model.follow_record import BlackBox, ChangePoint, Level

parser = pytest.importorskip("prometheus_client.parser")


def test_prometheus_labels_every_figure_with_its_rank(tmp_path):
    path = tmp_path / "torchdoctor.prom"
    prom = PrometheusExporter(textfile=path, per_rank=True)
    for rank in (0, 1):
        prom.on_points(rank_points(rank, steps=60, slow_from=1), rank=rank)
    prom.on_change(ChangePoint(kind="straggler", rank=1, step=152, t=2.8, detected_step=176, before=Level(0, 0, 25),
                               after=Level(0.03, 0, 25), threshold=0.001))
    prom.on_blackbox(BlackBox(reason="exception", message="boom", step=41, t=2.5), rank=1)
    prom.close()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in parser.text_string_to_metric_families(path.read_text()) for s in f.samples}
    assert samples[("torchdoctor_step", (("rank", "0"),))] == 60
    assert samples[("torchdoctor_step", (("rank", "1"),))] == 60
    waits = {r: samples[("torchdoctor_collective_wait_seconds", (("rank", r),))] for r in ("0", "1")}
    assert waits["0"] > waits["1"]  # rank 0 waits for the straggler
    assert samples[("torchdoctor_changes_total", (("kind", "straggler"), ("rank", "1")))] == 1
    assert samples[("torchdoctor_change_step", (("kind", "straggler"), ("rank", "1")))] == 152
    assert samples[("torchdoctor_stopped", (("rank", "1"), ("reason", "exception")))] == 1


def test_tensorboard_writes_one_run_per_rank(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = TensorBoardExporter(tmp_path / "tb")
    for rank in (0, 1):
        tb.on_points(rank_points(rank, steps=20), rank=rank)
    tb.close()
    for rank in (0, 1):
        events = EventAccumulator(str(tmp_path / "tb" / f"rank-{rank}"))
        events.Reload()
        tags = set(events.Tags()["scalars"])
        assert {"torchdoctor/step_time_ms", "torchdoctor/collective_wait_ms"} <= tags
        assert [e.step for e in events.Scalars("torchdoctor/step_time_ms")] == list(range(4, 21))
