"""Reading trace files: formats the loader accepts and inputs it refuses with a clear message."""

import gzip
import json

import pytest
from helpers.trace_builder import TraceBuilder, trace_gen

from torchdoctor.errors import InputError
from torchdoctor.trace import analyze_trace_files, loader
from torchdoctor.trace.loader import TraceTooLarge, load_trace


def small_trace(tmp_path, name="t.json", **kw):
    tb = TraceBuilder(tmp_path / name, **kw)
    tb.step(1, 100, 100)
    ext = tb.op("aten::add", 101, 10)
    tb.launch("k", 102, 5, 110, 50, ext=ext)
    return tb.close()


def test_generated_trace_with_integer_times_and_no_flows_is_read(tmp_path):
    path = tmp_path / "int.json"
    trace_gen.training_trace(path, events=2000, plan=trace_gen.Plan(int_times=True, with_flows=False))
    assert '"ts": 4529152' in path.read_text() and '.' not in path.read_text().split('"ts": ')[5].split(",")[0]
    summary = analyze_trace_files([path])
    assert summary.ranks[0].devices[0].kernels > 100


def test_bare_event_array_and_trailing_keys_are_read(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 0.25,
               "args": {"stream": 7, "device": 0, "correlation": 1}}]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(events))
    assert len(load_trace(bare).events.gpu) == 1
    obj = tmp_path / "obj.json"
    obj.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "computeMajor": 9}],
                               "distributedInfo": {"rank": 3, "world_size": 4}, "traceName": "x ] y"}))
    loaded = load_trace(obj)
    assert loaded.distributed.rank == 3 and loaded.device_properties[0].computeMajor == 9
    assert loaded.events.gpu[0].dur == 0.25


def test_pieces_cut_at_fake_boundaries_inside_strings_still_decode(tmp_path, monkeypatch):
    """`}, {` inside a name looks like an event boundary; tiny chunks force cuts everywhere."""
    tb = TraceBuilder(tmp_path / "t.json")
    tb.step(1, 100, 1000)
    for i in range(300):
        tb.launch("weird }, { name }\n,\n{ " + str(i), 100 + i, 1, 101 + i, 0.5)
    path = tb.close()
    expected = analyze_trace_files([path])
    monkeypatch.setattr(loader, "CHUNK_BYTES", 1024)
    monkeypatch.setattr(loader, "BOUNDARY_WINDOW", 2048)
    got = analyze_trace_files([path])
    assert got == expected and got.ranks[0].devices[0].kernels == 300


def test_unknown_categories_are_decoded_leniently(tmp_path):
    path = small_trace(tmp_path)
    text = path.read_text().replace('"ph": "X", "cat": "cpu_op"', '"ph": "X", "cat": "my_new_category"', 1)
    path.write_text(text)
    loaded = load_trace(path)
    assert len(loaded.events.gpu) == 1 and loaded.events.ops == []


@pytest.mark.parametrize("content,message", [
    (b"", "is empty"),
    (b"\x00\x01binary", "is not JSON"),
    (b'{"a": 1, "b": [1, 2]}', "not a Chrome/Kineto trace"),
    (b"[1, 2, 3]", "unexpected shape"),
    (b'{"traceEvents": [{"cat": "kernel", "ts": 1, "dur": 1}, {"cat": "kernel", "ts": 2, "dur": x}]}',
     "not valid JSON"),
])
def test_bad_inputs_say_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        analyze_trace_files([path])


def test_truncated_files_are_reported_as_truncated(tmp_path):
    path = tmp_path / "t.json"
    trace_gen.training_trace(path, events=3000)
    data = path.read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(InputError, match="truncated"):
        load_trace(cut)
    cut_gz = tmp_path / "cut.json.gz"
    cut_gz.write_bytes(gzip.compress(data)[:-100])
    with pytest.raises(InputError, match="truncated"):
        load_trace(cut_gz)


def test_corruption_in_the_middle_names_the_byte(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "CHUNK_BYTES", 4096)
    path = tmp_path / "t.json"
    trace_gen.training_trace(path, events=3000)
    data = bytearray(path.read_bytes())
    at = data.index(b'"ts"', len(data) // 2)
    data[at:at + 4] = b'"ts:'
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"not valid JSON near byte \d"):
        load_trace(path)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_trace(tmp_path / "nope.json")
    with pytest.raises(InputError, match="is a directory"):
        load_trace(tmp_path)


def test_a_trace_too_large_for_memory_is_refused_with_a_memory_message(tmp_path):
    path = tmp_path / "t.json"
    trace_gen.training_trace(path, events=3000)
    with pytest.raises(TraceTooLarge, match="too large for this machine's memory"):
        load_trace(path, max_memory_bytes=100_000)
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))  # size unknown up front: refused while streaming
    with pytest.raises(TraceTooLarge, match="events so far"):
        load_trace(gz, max_memory_bytes=100_000)
    assert load_trace(path).events.events > 3000  # the default budget (half of free memory) is enough


def test_missing_device_properties_is_noted_and_tensor_cores_not_judged(tmp_path):
    path = tmp_path / "t.json"
    tb = TraceBuilder(path, device_properties=[])
    tb.step(1, 100, 1000)
    tb.launch("ampere_sgemm_128x64_tn", 95, 5, 100, 900)
    summary = analyze_trace_files([tb.close()])
    (rank,) = summary.ranks
    assert any("no deviceProperties" in n for n in rank.notes)
    assert rank.devices[0].compute_capability is None
    assert rank.devices[0].matmul_fp32_us == pytest.approx(900)
