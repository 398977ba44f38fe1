"""Every file a run directory can hold is in README's "What a run directory holds", and each a
rank writes is listed under rank-K/ (the users' copy of the run directory's contract)."""

import re
from pathlib import Path

from torchdoctor.diagnosis.ranks import ONE_RANK_DIR
from torchdoctor.model import layout
from torchdoctor.model.record import SCHEMA_VERSION
from torchdoctor.run.follow.job import LOG_DIR
from torchdoctor.run.probeset import TRACE_FILE
from torchdoctor.run.ranks.heartbeat import HEARTBEAT_FILE

README = Path(__file__).resolve().parents[3] / "README.md"


def section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("### What a run directory holds")
    return text[start:text.index("\n### ", start + 1)]


def test_every_file_of_the_layout_is_documented_with_the_records_schema():
    doc = section()
    files = [v for k, v in vars(layout).items() if k.endswith("_FILE") and isinstance(v, str)]
    assert len(files) >= 8
    for name in [*files, TRACE_FILE]:
        assert f"| `{name}` |" in doc, name
    for folder in (ONE_RANK_DIR, LOG_DIR):
        assert f"| `{folder}/` |" in doc, folder
    versions = set(re.findall(r'schema_version"?`?:? (\d+)', doc)) | set(re.findall(r"record schema (\d+)", doc))
    assert versions == {str(SCHEMA_VERSION), "4"}  # the record's (and the report's 4)


def test_each_file_a_rank_writes_is_listed_under_rank_k():
    doc = section()
    for name in (layout.RECORD_FILE, HEARTBEAT_FILE, TRACE_FILE, layout.TIMELINE_FILE, layout.CHANGES_FILE,
                 layout.LIVE_FILE, layout.BLACKBOX_FILE):
        assert f"| `rank-K/{name}` |" in doc, name
