"""The bundle a GPU check leaves in --out, and `--unpack`, which puts it where the project keeps
results and real fixtures; a rehearsal or a tampered archive is refused with one line."""

import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

from benchmarks.gpucheck import bundle, cli
from benchmarks.gpucheck.orchestrate import CheckState, StepOutcome

TAG = "nvidia-test-gpu-2026-01-02"


def state(tag=TAG, rehearsal=False, cuda=True) -> CheckState:
    s = CheckState(1, rehearsal, "2026-01-02T10:00:00+00:00", "python3", 480.0, tag=tag, cuda=cuda, finished=True)
    s.steps = [StepOutcome("accuracy", "every example", "passed", 100, 42.0, 0)]
    return s


def work_dir(tmp_path) -> Path:
    """A work folder as the steps leave it (test inputs for the packer, not recordings)."""
    work = tmp_path / "work"
    (work / "fixtures" / "host_sync_item").mkdir(parents=True)
    (work / "accuracy.json").write_text(json.dumps({"found": 3, "planted_causes": 4, "false_positives": 0,
                                                    "rows": []}))
    (work / "overhead.json").write_text(json.dumps({"overhead_outside_sampled_steps": 0.013}))
    (work / "fixtures" / "meta.json").write_text(json.dumps({"tags": {"cuda_used": True}, "files": {}, "skipped": {}}))
    (work / "fixtures" / "host_sync_item" / "trace.json.gz").write_bytes(b"\x1f\x8b not really")
    (work / "accuracy.log").write_text("x" * (bundle.LOG_KEEP_BYTES + 10) + "the end\n")
    return work


def test_pack_writes_at_most_8_plain_files_and_unpack_puts_each_where_it_belongs(tmp_path):
    work = work_dir(tmp_path)
    out = tmp_path / "out"
    written = bundle.pack(state(), work, out)
    assert len(written) <= bundle.MAX_FILES and all(bundle.SAFE_NAME.match(p.name) for p in written)
    assert {p.name for p in out.iterdir()} == {p.name for p in written}
    root = tmp_path / "project"
    placed = bundle.unpack(out, root)
    results = root / "benchmarks" / "results" / "gpu"
    assert json.loads((results / f"accuracy-{TAG}.json").read_text())["found"] == 3
    assert (results / f"overhead-{TAG}.json").read_bytes() == (work / "overhead.json").read_bytes()
    assert (results / f"SUMMARY-{TAG}.md").read_text().startswith(f"# GPU check: {TAG}")
    fixture = root / "tests" / "fixtures" / "real" / TAG / "host_sync_item" / "trace.json.gz"
    assert fixture.read_bytes() == b"\x1f\x8b not really" and fixture in placed
    with tarfile.open(results / f"logs-{TAG}.tar.gz") as logs:
        log = logs.extractfile("accuracy.log").read()
    assert log.endswith(b"the end\n") and len(log) < bundle.LOG_KEEP_BYTES + 100  # the end of a long log kept


def test_a_later_pack_under_the_real_tag_removes_the_provisional_files(tmp_path):
    work, out = work_dir(tmp_path), tmp_path / "out"
    first = bundle.pack(state(tag="unknown-device"), work, out)
    second = bundle.pack(state(), work, out, previous=first)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in second)
    assert not any("unknown-device" in p.name for p in out.iterdir())


def test_a_rehearsal_is_refused_for_the_project_and_allowed_into_a_scratch_root(tmp_path):
    out = tmp_path / "out"
    bundle.pack(state(tag="cpu-rehearsal-2026-01-02", rehearsal=True, cuda=False), work_dir(tmp_path), out)
    with pytest.raises(bundle.BundleError, match="no GPU evidence"):
        bundle.unpack(out)  # the project itself: refused before anything is written
    assert not (bundle.ROOT / "tests" / "fixtures" / "real" / "cpu-rehearsal-2026-01-02").exists()
    assert bundle.unpack(out, tmp_path / "scratch")


def _tamper(out: Path, name: str, data: bytes = b"{}") -> None:
    archive = out / f"fixtures-{TAG}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("member", ["../escape.json", f"{TAG}/../../escape.json", "/etc/escape.json",
                                    "other-tag/meta.json", f"{TAG}/run.py"])
def test_an_archive_with_unexpected_members_unpacks_nothing(tmp_path, member):
    out = tmp_path / "out"
    bundle.pack(state(), work_dir(tmp_path), out)
    _tamper(out, member)
    root = tmp_path / "project"
    with pytest.raises(bundle.BundleError, match="unexpected entries"):
        bundle.unpack(out, root)
    assert not root.exists()


def test_unpack_errors_are_one_line_and_exit_2(tmp_path, capsys):
    assert cli.main(["--unpack", str(tmp_path / "missing")], venv_python=lambda: sys.executable) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a folder" in err
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "summary-x.json").write_text("{not json")
    assert cli.main(["--unpack", str(tmp_path / "out")], venv_python=lambda: sys.executable) == 2
    assert "is not JSON" in capsys.readouterr().err


def test_tags_are_plain_names_from_the_device():
    assert bundle.tag_for({"device_name": "NVIDIA H100 80GB HBM3"}, False, "2026-12-01") == \
        "nvidia-h100-80gb-hbm3-2026-12-01"
    assert bundle.tag_for({}, True, "2026-12-01") == "cpu-rehearsal-2026-12-01"
    assert bundle.tag_for({"cuda_available": False}, False, "2026-12-01") == "no-cuda-2026-12-01"
    assert bundle.tag_for({}, False, "2026-12-01") == "unknown-device-2026-12-01"  # machine.json never written
    assert bundle.SAFE_NAME.match(bundle.tag_for({"device_name": "Tesla P100/PCIe (16GB)"}, False, "2026-12-01"))
