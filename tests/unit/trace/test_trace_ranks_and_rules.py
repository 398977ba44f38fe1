"""Several rank files, rule thresholds, the report and the command line."""

import json

import pytest
from helpers.trace_builder import PASCAL, TraceBuilder, trace_gen

from torchdoctor import cli
from torchdoctor.errors import InputError
from torchdoctor.report import render
from torchdoctor.rules.registry import CATALOGUE, engines_for
from torchdoctor.diagnosis.trace import trace_report
from torchdoctor.trace import analyze_trace_files, trace_findings
from torchdoctor.rules.registry import detected_codes


def ddp_traces(tmp_path, link_gbps=1.0, world=2):
    plan = trace_gen.Plan(layers=2, allreduce_bytes=8 << 20, link_gbps=link_gbps, dataloader_ns=20_000)
    paths = []
    for rank in range(world):
        path = tmp_path / f"rank{rank}.json"
        trace_gen.training_trace(path, events=100_000, plan=plan, rank=rank, world=world, late_rank=1, max_steps=6)
        paths.append(path)
    return paths


def test_generated_ddp_traces_name_the_late_rank_and_the_slow_link(tmp_path):
    summary = analyze_trace_files(list(reversed(ddp_traces(tmp_path))))
    assert [r.rank for r in summary.ranks] == [0, 1]  # sorted by the rank each file declares
    (late,) = summary.late_ranks
    assert late.collective == "allreduce" and late.calls == 6
    assert late.late_counts == {"1": 3}  # rank 1 arrives 300 µs late on every other call
    assert late.wait_caused_us["1"] / 3 == pytest.approx(300.0, rel=0.05)
    col = summary.ranks[0].devices[0].collectives[0]
    assert col.bytes == 8 << 20 and col.busbw_gbps == pytest.approx(1.0, rel=0.06)
    slow = [f for f in trace_findings(summary) if f.code == "TD602"]
    assert slow and slow[0].evidence["busbw_gbps"] < 1.1 and slow[0].evidence["ranks"] == [0, 1]
    report = trace_report(summary)
    assert "Late ranks" in [t.title for t in report.tables]


def test_fast_link_is_not_flagged(tmp_path):
    summary = analyze_trace_files(ddp_traces(tmp_path, link_gbps=80.0))
    assert "TD602" not in {f.code for f in trace_findings(summary)}


@pytest.mark.parametrize("dists,message", [
    ([{"rank": 0, "world_size": 2}, {"rank": 0, "world_size": 2}], "both say they are rank 0"),
    ([{"rank": 0, "world_size": 2}, {"rank": 1, "world_size": 4}], "disagree on the world size"),
    ([{"rank": 0, "world_size": 2}, None], "has no rank"),
    ([{"rank": 0, "world_size": 2}, {"rank": 5, "world_size": 2}], "world size is 2"),
])
def test_mismatched_rank_files_are_refused(tmp_path, dists, message):
    paths = []
    for i, dist in enumerate(dists):
        tb = TraceBuilder(tmp_path / f"r{i}.json", distributed=dist)
        tb.step(1, 100, 100)
        tb.launch("k", 100, 5, 105, 50)
        paths.append(tb.close())
    with pytest.raises(InputError, match=message):
        analyze_trace_files(paths)


@pytest.mark.parametrize("props,expected", [(None, True), ([PASCAL], False)])
def test_fp32_matmuls_are_flagged_only_on_tensor_core_gpus(tmp_path, props, expected):
    tb = TraceBuilder(tmp_path / "t.json", device_properties=props)
    for s, o in enumerate((100.0, 1100.0)):
        tb.step(s + 1, o, 1000)
        tb.launch("ampere_sgemm_128x64_tn", o - 5, 5, o, 600)
        tb.launch("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", o + 600, 5, o + 605, 300)
    summary = analyze_trace_files([tb.close()])
    dev = summary.ranks[0].devices[0]
    assert (dev.matmul_fp32_us, dev.matmul_lowp_us) == (pytest.approx(1200), pytest.approx(600))
    found = [f for f in trace_findings(summary) if f.code == "TD402"]
    assert bool(found) == expected
    if expected:  # 600 µs of fp32 per 1000 µs step, twice as fast in bf16: 300 µs saved
        assert found[0].estimated_speedup == pytest.approx(1000 / 700, abs=1e-3)

DETECTED_CODES = detected_codes("trace")


def test_registry_codes_are_catalogue_entries_and_engines_know_trace():
    assert DETECTED_CODES <= {r.code for r in CATALOGUE}
    assert engines_for("TD304") == ["trace"]
    assert "trace" in engines_for("TD201")


def test_cli_trace_prints_each_format_and_exits_0(tmp_path, capsys):
    path = tmp_path / "t.json.gz"
    trace_gen.training_trace(path, events=5000, plan=trace_gen.Plan(item_per_step=True, pageable_bytes=4 << 20),
                             gz=True)
    assert cli.main(["trace", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"] == "trace" and {f["code"] for f in doc["findings"]} >= {"TD103"}
    assert cli.main(["trace", str(path), "--format", "md"]) == 0
    assert "GPU time per step" in capsys.readouterr().out
    assert cli.main(["trace", str(path)]) == 0
    assert "Causes, ranked" in capsys.readouterr().out
    assert cli.main(["trace", str(path), "--format", "html"]) == 0
    page = capsys.readouterr().out
    assert page.startswith("<!DOCTYPE html>") and "GPU time per step" in page and 'id="findings"' in page


@pytest.mark.parametrize("argv,message", [
    (["trace"], "the following arguments are required"),
    (["trace", "missing.json"], "does not exist"),
    (["trace", "x.json", "--format", "pdf"], "invalid choice"),
])
def test_cli_trace_errors_exit_2_with_one_line(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_report_renders_cpu_and_gpu_traces_in_every_format(tmp_path):
    path = tmp_path / "t.json"
    trace_gen.training_trace(path, events=3000, plan=trace_gen.Plan(loop_ops=120, with_stack=False))
    report = trace_report(analyze_trace_files([path]))
    assert any("no python_function events" in n for n in report.notes)
    for fmt in ("text", "md", "json"):
        assert render(report, fmt)
