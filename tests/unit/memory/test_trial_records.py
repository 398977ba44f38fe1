"""A DDP trial's rank records: read once, by rank, whatever else lies in the trial's folder."""

from torchdoctor.memory.trials import _load, _rank_records
from torchdoctor.model.record import Environment, RunInfo, RunRecord


def _record(script: str) -> RunRecord:
    info = RunInfo(script=script, argv=[], cwd="/", started_at="x", torchdoctor_version="0", warmup=0,
                   steps_requested=1, max_seconds=1.0)
    return RunRecord(run=info, environment=Environment(python="3", platform="p", torch="t", cuda_available=False))


def test_rank_records_come_by_rank_and_strays_are_left_out(tmp_path):
    for rank in (10, 2, 0):
        (tmp_path / f"rank-{rank}").mkdir()
        _record(f"rank{rank}.py").save(tmp_path / f"rank-{rank}" / "record.json")
    (tmp_path / "rank-x").mkdir()  # not a rank's folder
    _record("stray.py").save(tmp_path / "rank-x" / "record.json")
    (tmp_path / "rank-3").mkdir()
    (tmp_path / "rank-3" / "record.json").write_text("{not json")  # a rank that died mid-write
    ranks = _rank_records(tmp_path)
    assert [(rank, record.run.script) for rank, record in ranks] == [(0, "rank0.py"), (2, "rank2.py"),
                                                                      (10, "rank10.py")]
    assert _load(tmp_path, ranks) is ranks[0][1]  # no rank ran out of memory: rank 0's
    assert _load(tmp_path, []) is None
