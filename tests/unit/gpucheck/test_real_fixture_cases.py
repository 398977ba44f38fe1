"""Which recordings the real-fixture twins run on: only those made on CUDA, each holding the files
a twin needs; with none, one skipped case that says how to make one."""

import json

from helpers import real_fixtures


def recording(folder, cuda: bool, files=("host_sync_item/trace.json.gz",)):
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"tags": {"cuda_used": cuda}}))
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"")


def test_no_recording_is_one_skipped_case_saying_how_to_record(tmp_path, monkeypatch):
    monkeypatch.setenv(real_fixtures.ENV, str(tmp_path))
    (case,) = real_fixtures.cases("host_sync_item/trace.json.gz")
    (mark,) = case.marks
    assert mark.name == "skip" and "python3 dev.py gpu --unpack DIR" in mark.kwargs["reason"]


def test_only_cuda_recordings_with_the_file_are_cases(tmp_path, monkeypatch):
    monkeypatch.setenv(real_fixtures.ENV, str(tmp_path))
    recording(tmp_path / "nvidia-h100-2026-12-01", cuda=True)
    recording(tmp_path / "nvidia-h200-2026-12-02", cuda=True, files=("nvml.json",))
    recording(tmp_path / "cpu-rehearsal-2026-12-03", cuda=False)
    assert [c.id for c in real_fixtures.cases("host_sync_item/trace.json.gz")] == ["nvidia-h100-2026-12-01"]
    (case,) = real_fixtures.cases("python_loop_ops/trace.json.gz")
    assert "hold no python_loop_ops/trace.json.gz" in case.marks[0].kwargs["reason"]


def test_a_single_recording_folder_can_be_pointed_at_directly(tmp_path, monkeypatch):
    """As the GPU check does for the recording it has just made."""
    recording(tmp_path / "fixtures", cuda=True)
    monkeypatch.setenv(real_fixtures.ENV, str(tmp_path / "fixtures"))
    assert [c.values[0] for c in real_fixtures.cases("host_sync_item/trace.json.gz")] == [tmp_path / "fixtures"]
