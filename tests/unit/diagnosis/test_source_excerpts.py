"""The source lines on each finding's card: read from the run's own files, never from any
other file: executed, under the run's working directory, and on a re-render with the hash the
run recorded; else "source not available" and why."""

import json
import os
import time

from helpers.records import record
from helpers.reports import finding

from torchdoctor.diagnosis.sources import source_excerpts
from torchdoctor.model.record import Location
from torchdoctor.model.layout import recorded_source_hashes

TRAIN = "".join(f"line {n} = {n}\n" for n in range(1, 21)).replace("line 12 = 12", "loss.item()  # <b>&amp;")


def run_of(tmp_path, *files):
    rec = record(steps=2, warmup=0)
    rec.run.cwd = str(tmp_path)
    rec.run.started_at = "2026-01-01T00:00:00+00:00"
    rec.source_files = [str(tmp_path / f) for f in files]
    return rec


def at(path, line):
    return finding("TD201", None, location=Location(path, line, "train"))


def write_old(path, text):
    """A file as it was before the run started (the record's started_at is 2026-01-01)."""
    path.write_text(text)
    old = time.mktime((2025, 12, 31, 0, 0, 0, 0, 0, 0))
    os.utime(path, (old, old))


def test_the_lines_around_the_location_with_the_files_hash(tmp_path):
    write_old(tmp_path / "train.py", TRAIN)
    (excerpt,) = source_excerpts([at("train.py", 12)], run_of(tmp_path, "train.py"))
    assert excerpt.status == "ok" and excerpt.note == ""
    assert excerpt.first_line == 9 and len(excerpt.lines) == 7
    assert excerpt.lines[3] == "loss.item()  # <b>&amp;"  # as written; escaping is the renderer's job
    assert len(excerpt.sha256) == 64


def test_the_first_lines_of_a_file_and_one_excerpt_per_place(tmp_path):
    write_old(tmp_path / "train.py", TRAIN)
    excerpts = source_excerpts([at("train.py", 1), at("train.py", 1), at("train.py", 20)], run_of(tmp_path, "train.py"))
    assert [(e.line, e.first_line, len(e.lines)) for e in excerpts] == [(1, 1, 4), (20, 17, 4)]


def test_a_vanished_file_is_said_so(tmp_path):
    rec = run_of(tmp_path, "train.py")
    (excerpt,) = source_excerpts([at("train.py", 12)], rec)
    assert excerpt.status == "missing" and "no longer exists" in excerpt.note and excerpt.lines == []


def test_a_file_edited_since_the_run_by_its_recorded_hash(tmp_path):
    write_old(tmp_path / "train.py", TRAIN)
    rec = run_of(tmp_path, "train.py")
    (at_run,) = source_excerpts([at("train.py", 12)], rec)
    write_old(tmp_path / "train.py", TRAIN.replace("loss.item()", "loss.detach()"))  # same old mtime
    (later,) = source_excerpts([at("train.py", 12)], rec, {"train.py": at_run.sha256})
    assert later.status == "changed" and later.lines == []
    assert later.note == "source not available: the file changed since the run (its sha256 is not the one the run recorded)"


def test_a_re_render_without_a_recorded_hash_shows_no_lines(tmp_path):
    write_old(tmp_path / "train.py", TRAIN)
    (excerpt,) = source_excerpts([at("train.py", 12)], run_of(tmp_path, "train.py"), {})
    assert excerpt.lines == [] and "records no hash of the file" in excerpt.note


def test_a_touched_but_identical_file_is_not_called_changed_when_the_hash_is_known(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)  # modified "now", after the recorded start
    rec = run_of(tmp_path, "train.py")
    (by_time,) = source_excerpts([at("train.py", 12)], rec)
    assert by_time.status == "changed" and "modified after the run started" in by_time.note
    (by_hash,) = source_excerpts([at("train.py", 12)], rec, {"train.py": by_time.sha256})
    assert by_hash.status == "ok"


def test_a_line_past_the_end_of_a_shortened_file(tmp_path):
    write_old(tmp_path / "train.py", "x = 1\n")
    (excerpt,) = source_excerpts([at("train.py", 12)], run_of(tmp_path, "train.py"))
    assert excerpt.status == "changed" and "past the end of the file (1 line)" in excerpt.note


def test_only_files_the_run_executed_are_read(tmp_path):
    write_old(tmp_path / "train.py", TRAIN)
    (tmp_path / "secret.txt").write_text("token = 'do not show'\n")
    (tmp_path / "helper.py").write_text("x = 1\n")
    rec = run_of(tmp_path, "train.py", "secret.txt")  # listed, but not Python source
    excerpts = source_excerpts([at("secret.txt", 1), at("helper.py", 1), at("/etc/passwd", 1), at("../train.py", 1)],
                               rec)
    assert [e.status for e in excerpts] == ["not-run-file"] * 4
    not_run = "source not available: not one of the files this run executed"
    assert [e.note for e in excerpts] == ["source not available: not a Python file", not_run,
                                          "source not available: not a Python file", not_run]
    assert all(e.lines == [] for e in excerpts)


def test_an_executed_file_outside_the_working_directory_is_not_read(tmp_path):
    outside = tmp_path / "home" / "settings.py"
    outside.parent.mkdir()
    write_old(outside, TRAIN)
    (tmp_path / "proj").mkdir()
    rec = run_of(tmp_path / "proj")
    rec.source_files = [str(outside)]  # a record edited to list it
    (excerpt,) = source_excerpts([at(str(outside), 12)], rec, {str(outside): "0" * 64})
    assert excerpt.lines == [] and excerpt.note == "source not available: outside the run's working directory"


def test_a_link_out_of_the_working_directory_is_not_followed(tmp_path):
    outside = tmp_path / "settings.py"
    write_old(outside, TRAIN)
    (tmp_path / "proj").mkdir()
    os.symlink(outside, tmp_path / "proj" / "train.py")
    (excerpt,) = source_excerpts([at("train.py", 12)], run_of(tmp_path / "proj", "train.py"), {"train.py": "0" * 64})
    assert excerpt.lines == [] and "a link out of the run's working directory" in excerpt.note


def test_an_absolute_location_inside_the_run_is_read(tmp_path):
    write_old(tmp_path / "model.py", TRAIN)
    (excerpt,) = source_excerpts([at(str(tmp_path / "model.py"), 2)], run_of(tmp_path, "model.py"))
    assert excerpt.status == "ok" and excerpt.lines[1] == "line 2 = 2"


def test_recorded_hashes_are_read_leniently(tmp_path):
    assert recorded_source_hashes(tmp_path) == {}  # no report.json
    for text in ("not json", "[1, 2]", '{"sources": 5}', '{"sources": [1, {"path": 3, "sha256": "x"}]}'):
        (tmp_path / "report.json").write_text(text)
        assert recorded_source_hashes(tmp_path) == {}
    (tmp_path / "report.json").write_text(json.dumps({"sources": [{"path": "a.py", "sha256": "ab"},
                                                                  {"path": "b.py", "sha256": None}]}))
    assert recorded_source_hashes(tmp_path) == {"a.py": "ab"}
