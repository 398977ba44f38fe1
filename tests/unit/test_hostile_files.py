"""Hostile and damaged files, for every reader: a run directory's record.json and report.json,
a multi-rank run's rank records and heartbeats, compare's two runs, a tune directory's
tune.json, and a Kineto trace. Each input gets a one-line error naming the file and the
field (exit 2), or is read with what is damaged dropped and said; never a traceback, never
unbounded time or memory; and a record crafted to quote a file the run did not execute never
makes any output format show that file."""

import contextlib
import io
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.records import call, record, sampled, site
from torchdoctor.cli import main
from torchdoctor.model.serialize import dumps
from torchdoctor.model.untrusted import MAX_LIST_ITEMS, MAX_STRING_CHARS

ROOT = Path(__file__).resolve().parents[2]
SECONDS_PER_CASE = 30  # the bound on time: the FIFO, /dev/zero and deep cases hang or explode unbounded
# the bound on memory: a process's whole address space (Python, its libraries, their arenas), where a
# 100 MB script name took 1.1 GB before
MEMORY_LIMIT = 1 << 30


def good_record() -> dict:
    rec = sampled(record(step_s=0.1, steps=10), sites=[site(44, 30000, time_s=0.15)],
                  calls=[call(50, "Tensor.item", "host-sync", 30)])
    return json.loads(dumps(rec))


def _set(doc: dict, path: str, value) -> dict:
    """`doc` with the value at a dotted path (`steps.3.end`) replaced."""
    keys = path.split(".")
    target = doc
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    last = keys[-1]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return doc


def raw(path: str, token: str) -> bytes:
    """The good record with the JSON text `token` (not valid as a Python value) at `path`."""
    return json.dumps(_set(good_record(), path, "@@TOKEN@@")).replace('"@@TOKEN@@"', token).encode()


def hostile_documents() -> dict[str, bytes | str]:
    """name -> the bytes of a JSON document, or a special kind ("fifo", "dev-zero", "dir", "sparse")."""
    good = good_record()
    text = json.dumps(good)
    return {
        "empty": b"",
        "random-bytes": bytes(range(256)) * 40,
        "invalid-utf8": text.encode()[:40] + b"\xff\xfe" + text.encode()[40:],
        "truncated": text.encode()[: len(text) // 2],
        "top-level-list": b"[1, 2, 3]",
        "schema-999": json.dumps(_set(good_record(), "schema_version", 999)).encode(),
        "schema-string": json.dumps(_set(good_record(), "schema_version", "6" * 5000)).encode(),
        "nan-step-time": raw("steps.3.end", "NaN"),
        "infinite-number": raw("run.max_seconds", "1e999"),
        "negative-duration": json.dumps(_set(good_record(), "steps.3.data_wait_s", -5.0)).encode(),
        "negative-count": json.dumps(_set(good_record(), "steps.3.samples", -32)).encode(),
        "step-ends-before-it-starts": json.dumps(_set(good_record(), "steps.3.end", 0.01)).encode(),
        "null-step-time": json.dumps(_set(good_record(), "steps.3.end", None)).encode(),
        "bool-for-int": json.dumps(_set(good_record(), "run.warmup", True)).encode(),
        "deep-nesting": b"[" * 200_000 + b"]" * 200_000,
        "deep-in-unknown-field": json.dumps(good)[:-1].encode() + b', "extra": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
        "deep-in-any-field": raw("dispatch.api_calls.0.detail", "[" * 50 + "]" * 50),
        "huge-string": json.dumps(_set(good_record(), "run.script", "x" * (MAX_STRING_CHARS + 10))).encode(),
        "huge-list": json.dumps(_set(good_record(), "run.argv", ["a"] * (MAX_LIST_ITEMS + 1))).encode(),
        "no-steps": json.dumps(_set(good_record(), "steps", [])).encode(),
        "fifo": "fifo",
        "dev-zero": "dev-zero",
        "directory": "dir",
        "sparse-100mb": "sparse",
    }


def plant(path: Path, content: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if content == "fifo":
        os.mkfifo(path)
    elif content == "dev-zero":
        os.symlink("/dev/zero", path)
    elif content == "dir":
        path.mkdir()
    elif content == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(100 << 20)
    else:
        path.write_bytes(content)


def run_dir(folder: Path, doc: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "record.json").write_text(json.dumps(doc or good_record()))
    return folder


def rank_dirs(folder: Path, rank1: bytes | str) -> Path:
    for rank in (0, 1):
        doc = good_record()
        doc["distributed"] = {"identity": {"rank": rank, "world_size": 2, "job_id": "abc"}}
        if rank == 0:
            run_dir(folder / "rank-0", doc)
        else:
            plant(folder / "rank-1" / "record.json", rank1)
    return folder


def readers(tmp: Path, content: bytes | str) -> dict[str, tuple[list[str], Path]]:
    """reader -> (argv, the planted file)."""
    out = {}
    rec = tmp / "report-record"
    plant(rec / "record.json", content)
    out["report"] = (["report", str(rec)], rec / "record.json")
    other = run_dir(tmp / "compare-a")
    bad = tmp / "compare-b"
    plant(bad / "record.json", content)
    out["compare"] = (["compare", str(other), str(bad)], bad / "record.json")
    ranks = rank_dirs(tmp / "ranks", content)
    out["rank records"] = (["report", str(ranks)], ranks / "rank-1" / "record.json")
    tune = tmp / "tune"
    plant(tune / "tune.json", content)
    out["tune directory"] = (["report", str(tune)], tune / "tune.json")
    return out


@contextlib.contextmanager
def bounded(seconds: int):
    """Time, here; memory is bounded in a process of its own (test_the_heaviest_inputs_stay_...)."""
    def expire(signum, frame):
        raise TimeoutError(f"over {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), bounded(SECONDS_PER_CASE):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


ACCEPTED = {"no-steps"}  # a valid record of a run that made no step: its report says so, exit 0


@pytest.mark.parametrize("name", sorted(hostile_documents()))
def test_every_reader_refuses_a_hostile_document_in_one_line(tmp_path, name):
    content = hostile_documents()[name]
    for reader, (argv, planted) in readers(tmp_path, content).items():
        code, out, err = cli(argv)
        lines = err.strip().splitlines()
        if name in ACCEPTED and reader in ("report", "compare"):
            assert code == 0, (reader, err)
            continue
        assert code == 2, (reader, code, err)
        assert len(lines) == 1 and lines[0].startswith("torchdoctor: error: "), (reader, err)
        if name in ACCEPTED:  # valid, but not a rank record of this job nor a tune report: said so
            continue
        assert str(planted) in lines[0] or str(planted.relative_to(planted.parent.parent)) in lines[0], (reader, err)
        assert len(lines[0]) < 600, (reader, lines[0][:200])


def test_the_errors_name_the_field_and_what_is_wrong(tmp_path):
    docs = hostile_documents()
    expect = {
        "negative-duration": "$.steps[3].data_wait_s: expected `float` >= 0",
        "negative-count": "$.steps[3].samples: expected `int` >= 0",
        "step-ends-before-it-starts": "$.steps[3]: the step ends (0.01 s) before it starts",
        "null-step-time": "$.steps[3].end: expected `float`, got `null`",
        "bool-for-int": "$.run.warmup: expected `int`, got `bool`",
        "infinite-number": "number out of range",
        "nan-step-time": 'at the value of "end"; NaN and Infinity are not JSON numbers',
        "deep-nesting": "nested deeper than a torchdoctor document can be",
        "deep-in-unknown-field": "nested deeper than a torchdoctor document can be",
        "deep-in-any-field": "levels deep (at most 32)",
        "huge-string": "$.run.script is a string of 1,048,586 characters",
        "huge-list": "$.run.argv has 1,000,001 items",
        "fifo": "is a FIFO (named pipe)",
        "dev-zero": "is a character device (through a symbolic link)",
        "directory": "is a directory",
        "sparse-100mb": "is 100.0 MiB, more than the 64.0 MiB",
        "schema-string": "has schema_version of type str",
    }
    for name, words in expect.items():
        folder = tmp_path / name
        plant(folder / "record.json", docs[name])
        code, _, err = cli(["report", str(folder)])
        assert code == 2 and words in err, (name, err)


def test_a_record_without_steps_says_so_instead_of_a_negative_rate(tmp_path):
    folder = run_dir(tmp_path / "run", _set(good_record(), "steps", []))
    code, out, err = cli(["report", str(folder)])
    assert code == 0, err
    # words, not lines: the summary wraps at the terminal's width (80 columns without one)
    assert "-0." not in out and "steps/s: —" in " ".join(out.split())


# ---- traces ---------------------------------------------------------------------------------

def trace_doc(*events: dict) -> dict:
    return {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 10000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100, "dur": 500,
         "args": {"External id": 5}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2000,
         "args": {"device": 0, "stream": 7}}, *events]}


def good_trace() -> bytes:
    return json.dumps(trace_doc()).encode()


def hostile_traces() -> dict[str, bytes | str]:
    good = good_trace().decode()
    return {
        "empty": b"",
        "random-bytes": bytes(range(256)) * 40,
        "truncated": good.encode()[: len(good) // 2],
        "nan-duration": good.replace('"dur": 2000', '"dur": NaN', 1).encode(),
        "infinite-duration": good.replace('"dur": 2000', '"dur": 1e999', 1).encode(),
        "not-a-trace": b'{"a": 1}',
        "deep-nesting": b'{"traceEvents": [{"cat": "kernel", "args": ' + b"[" * 200_000 + b"]" * 200_000 + b"}]}",
        "fifo": "fifo",
        "dev-zero": "dev-zero",
        "directory": "dir",
    }


@pytest.mark.parametrize("name", sorted(hostile_traces()))
def test_trace_refuses_a_hostile_file_in_one_line(tmp_path, name):
    path = tmp_path / "trace.json"
    plant(path, hostile_traces()[name])
    code, _, err = cli(["trace", str(path)])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and str(path) in lines[0], (name, err)
    if name == "fifo":  # refused for what it is, not after waiting on it for a writer
        assert "is a FIFO (named pipe)" in lines[0], err


def test_trace_drops_negative_durations_and_says_so(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace_doc(  # the step "-232 ms" of a damaged trace, and a kernel like it
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 10000, "dur": -232000},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 3000, "dur": -500,
         "args": {"device": 0, "stream": 7}})))
    code, out, err = cli(["trace", str(path), "--format", "json"])
    assert code == 0, err
    assert "-232" not in out and "2 events with a negative, infinite or NaN time or duration were dropped" in out


# ---- a record crafted to quote a file the run did not execute ---------------------------------

SECRET = "SECRET_TOKEN = 'hunter2-0f9e8d7c'"


@pytest.mark.parametrize("how", ["absolute path outside the working directory", "relative path out of it",
                                 "inside a forged working directory, no hash", "inside it, a forged wrong hash"])
def test_a_crafted_record_never_shows_a_file_it_names(tmp_path, how):
    secret = tmp_path / "home" / "proj" / "settings.py"
    secret.parent.mkdir(parents=True)
    secret.write_text("\n".join([f"x{i} = {i}" for i in range(40)] + [SECRET] * 30) + "\n")
    doc = good_record()
    cwd, named = str(tmp_path / "elsewhere"), str(secret)
    if how == "relative path out of it":
        named = "../home/proj/settings.py"
    if how.startswith("inside"):
        cwd, named = str(secret.parent), "settings.py"
    doc["run"]["cwd"] = cwd
    doc["source_files"] = [str(secret)]
    for group in ("sites", "api_calls"):
        for item in doc["dispatch"][group]:
            item["location"]["path"] = named
            item["location"]["line"] = 44
    folder = run_dir(tmp_path / "run", doc)
    if how == "inside it, a forged wrong hash":
        (folder / "report.json").write_text(json.dumps({"sources": [{"path": named, "sha256": "0" * 64}]}))
    outputs = []
    for fmt in ("text", "md", "json", "html"):
        code, out, err = cli(["report", str(folder), "--format", fmt])
        assert code == 0, err
        outputs.append(out + err)
    assert all("hunter2" not in text for text in outputs)
    assert "source not available" in outputs[2]  # the card says why, in every format


@pytest.mark.parametrize("name", ["deep-nesting", "huge-string", "huge-list", "sparse-100mb", "dev-zero"])
def test_the_heaviest_inputs_stay_within_bounded_memory_in_a_real_process(tmp_path, name):
    """In a process of its own, with its address space capped: stderr is the one line."""
    folder = tmp_path / "run"
    plant(folder / "record.json", hostile_documents()[name])
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "report", str(folder)], capture_output=True,
                          text=True, timeout=120, env=env,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT)))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
