"""The exporters' metric names are the ones README documents ("Exports: where the team looks"): a
name added or renamed in integrations/exporters.py without the README fails here."""

from pathlib import Path

import pytest

from torchdoctor.integrations import exporters
from torchdoctor.model.follow_record import TimelinePoint

README = (Path(__file__).resolve().parents[4] / "README.md").read_text(encoding="utf-8")


def exports_section() -> str:
    start = README.index("### Exports: where the team looks")
    return README[start:README.index("\n## ", start)]


def test_every_tensorboard_scalar_a_point_gives_is_documented():
    full = TimelinePoint(step=9, t=1.0, step_s=0.01, data_wait_s=0.001, samples=32, mem_bytes=2**30, comm_wait_s=0.002,
                         gpu_util=90.0, gpu_power_w=300.0, gpu_mem_bytes=2**33)
    given = set(exporters._point_values(full))
    assert given == set(exporters.TB_SCALARS)
    doc = exports_section()
    for name in exporters.TB_SCALARS:
        assert f"`torchdoctor/{name}`" in doc, name


def test_every_prometheus_metric_is_in_the_readmes_table():
    prom = pytest.importorskip("prometheus_client")
    doc = exports_section()
    names = {**exporters.PROMETHEUS_GAUGES, **exporters.PROMETHEUS_GPU_GAUGES, **exporters.PROMETHEUS_RANK_GAUGES}
    exporter = exporters.PrometheusExporter(per_rank=True)
    names.update({m._name: "" for m in (exporter.changes, exporter.change_step, exporter.stopped, exporter.findings)})
    assert prom is not None and len(names) >= 13
    for name in names:  # a counter's samples end in _total; a labelled one is documented with its labels
        assert any(f"`{name}{tail}" in doc for tail in ("`", "_total{", "{")), name


def test_every_opentelemetry_gauge_is_documented():
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    exporter = exporters.OtlpExporter("http://127.0.0.1:9")  # nothing recorded: closing it sends nothing
    try:
        names = [g.name for g in exporter.gauges.values()] + [exporter.changes.name]
    finally:
        exporter.close()
    doc = exports_section()
    assert len(names) == 9
    for name in names:
        assert f"`{name}`" in doc or f"`{name}{{" in doc, name
