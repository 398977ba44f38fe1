import json

import pytest

from torchdoctor.model.record import SCHEMA_VERSION, Environment, LoaderStats, RunInfo, RunRecord, StepSample
from torchdoctor.rules.facts import loading_cpu_share
from torchdoctor.model.serialize import SchemaError, from_plain, to_plain


def _record() -> RunRecord:
    info = RunInfo(script="t.py", argv=["--a"], cwd="/x", started_at="2026-01-01T00:00:00+00:00",
                   torchdoctor_version="0", warmup=1, steps_requested=2, max_seconds=5.0)
    env = Environment(python="3.11", platform="Linux", torch="2.13", cuda_available=False)
    return RunRecord(run=info, environment=env,
                     steps=[StepSample(index=1, start=0.0, end=0.5, warmup=True, sampled=False, samples=None)])


def test_record_round_trips_through_json(tmp_path):
    record = _record()
    record.save(tmp_path / "record.json")
    assert RunRecord.load(tmp_path / "record.json") == record


def test_wrong_type_names_the_field():
    data = to_plain(_record())
    data["steps"][0]["end"] = "soon"
    with pytest.raises(SchemaError, match=r"steps\[0\]\.end"):
        from_plain(RunRecord, data)


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a torchdoctor document"),
    (json.dumps({"schema_version": 999}), "schema_version 999"),
    (json.dumps({"schema_version": 1, "run": {}}), "missing required field `script`"),
])
def test_corrupted_record_gives_a_schema_error(tmp_path, content, message):
    path = tmp_path / "record.json"
    path.write_text(content)
    with pytest.raises(SchemaError, match=message):
        RunRecord.load(path)


def test_non_finite_floats_become_null_so_the_file_stays_valid_json():
    plain = to_plain({"a": float("inf"), "b": float("-inf"), "c": float("nan"), "d": 1.5})
    assert json.loads(json.dumps(plain, allow_nan=False)) == {"a": None, "b": None, "c": None, "d": 1.5}


def test_a_version_1_record_without_knobs_still_loads(tmp_path):
    data = to_plain(_record())
    data["schema_version"] = 1
    del data["knobs"], data["loader_only"], data["trace"]
    path = tmp_path / "record.json"
    path.write_text(json.dumps(data))
    loaded = RunRecord.load(path)
    assert loaded.knobs == [] and loaded.loader_only is None and loaded.trace is None
    assert loaded.memory is None and loaded.batch_scaling is None
    assert loaded.schema_version == SCHEMA_VERSION == 10
    assert loaded.follow is None


def test_a_version_4_record_from_before_distributed_runs_loads_as_one_process(tmp_path):
    data = to_plain(_record())
    data["schema_version"] = 4
    del data["distributed"], data["ranks"]
    path = tmp_path / "record.json"
    path.write_text(json.dumps(data))
    loaded = RunRecord.load(path)
    assert loaded.distributed is None and loaded.ranks == []


def test_a_version_2_loader_without_cpu_time_is_read_as_not_measured(tmp_path):
    """Schema 3 added the loader's CPU time; 0.0 would read as "loading only waits"."""
    record = _record()
    record.loaders = [LoaderStats(loader_id=0, created_at=None, iterated_at=None, batch_size=8, num_workers=0,
                                  pin_memory=False, prefetch_factor=None, persistent_workers=False,
                                  drop_last=False, dataset_len=64, wait_total_s=1.0, wait_cpu_s=0.9)]
    data = to_plain(record)
    data["schema_version"] = 2
    del data["loaders"][0]["wait_cpu_s"], data["loaders"][0]["epoch_start_steps"]
    path = tmp_path / "record.json"
    path.write_text(json.dumps(data))
    (loader,) = RunRecord.load(path).loaders
    assert loader.wait_cpu_s is None and loader.epoch_start_steps == [] and loading_cpu_share(loader) is None


def test_fixed_length_tuples_read_back_as_tuples_and_a_wrong_length_is_named():
    from torchdoctor.model.figures import MemoryFigure

    figure = from_plain(MemoryFigure, to_plain(MemoryFigure(title="step 2", peak_bytes=4096, timeline=[(1, 2048), (2, 4096)])))
    assert figure.timeline == [(1, 2048), (2, 4096)]
    data = to_plain(figure)
    data["timeline"][1] = [2]
    with pytest.raises(SchemaError, match=r"timeline\[1\]: expected `array` of length 2"):
        from_plain(MemoryFigure, data)
