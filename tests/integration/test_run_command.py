"""`torchdoctor run` end to end, in-process through cli.main, on small scripts."""

import json
import multiprocessing
import textwrap

import pytest

from torchdoctor.cli import main

TRAIN = """
import sys, torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=8{loader_args})
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
{pre}
for epoch in range(20):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        {body}
"""


def script(tmp_path, name="train.py", pre="", body="pass", loader_args="", text=None):
    path = tmp_path / name
    path.write_text(text if text is not None else TRAIN.format(pre=pre, body=body, loader_args=loader_args))
    return path


def run(tmp_path, path, *extra, steps=6):
    out = tmp_path / "run"
    code = main(["run", "--steps", str(steps), "--warmup", "2", "--out", str(out), *extra, str(path)])
    return code, out


def test_step_limit_writes_the_run_directory(tmp_path, capsys):
    code, out = run(tmp_path, script(tmp_path))
    assert code == 0
    record = json.loads((out / "record.json").read_text())
    assert record["run"]["status"] == "step-limit" and len(record["steps"]) == 8
    assert {"report.json", "report.md", "report.html"} <= {p.name for p in out.iterdir()}
    capsys.readouterr()
    assert main(["report", str(out), "--format", "json"]) == 0
    rerendered = json.loads(capsys.readouterr().out)
    saved = json.loads((out / "report.json").read_text())
    assert rerendered["summary"] == saved["summary"] and rerendered["findings"] == saved["findings"]


def test_script_sees_plain_python_semantics(tmp_path):
    path = script(tmp_path, text=textwrap.dedent("""
        import sys, os, json
        json.dump({"argv": sys.argv, "name": __name__, "path0": sys.path[0]}, open(os.environ["TD_OUT"], "w"))
    """))
    out_file = tmp_path / "seen.json"
    import os
    os.environ["TD_OUT"] = str(out_file)
    try:
        code = main(["run", "--out", str(tmp_path / "r"), str(path), "--lr", "3e-4"])
    finally:
        del os.environ["TD_OUT"]
    seen = json.loads(out_file.read_text())
    assert seen == {"argv": [str(path), "--lr", "3e-4"], "name": "__main__", "path0": str(tmp_path)}
    assert code == 2  # never stepped an optimizer


def test_missing_script_is_a_one_line_usage_error(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.py")]) == 2
    err = capsys.readouterr().err.strip()
    assert "script not found" in err and "\n" not in err


def test_existing_run_directory_is_never_overwritten(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "keep.txt").write_text("x")
    code, _ = run(tmp_path, script(tmp_path))
    assert code == 2 and "already exists" in capsys.readouterr().err
    assert (tmp_path / "run" / "keep.txt").read_text() == "x"


@pytest.mark.parametrize("where", ["import", "loop"])
def test_crashing_script_exits_1_and_keeps_the_partial_run(tmp_path, capsys, where):
    body = "if step == 4: raise ValueError('boom')" if where == "loop" else "pass"
    pre = "raise ValueError('boom')" if where == "import" else ""
    code, out = run(tmp_path, script(tmp_path, pre=pre, body=body))
    assert code == 1
    err = capsys.readouterr().err
    assert "ValueError: boom" in err and "torchdoctor/runner.py" not in err
    record = json.loads((out / "record.json").read_text())
    assert record["run"]["status"] == "crashed"
    assert len(record["steps"]) == (4 if where == "loop" else 0)


def test_script_that_never_steps_still_reports_its_loader(tmp_path, capsys):
    path = script(tmp_path, text=TRAIN.format(pre="", body="pass", loader_args="").replace("opt.step()", "pass"))
    code, out = run(tmp_path, path)
    err = capsys.readouterr().err
    assert code == 2 and "640 backward() calls, no optimizer step" in err and "SGD at " in err
    assert "point torchdoctor at" not in err  # it is the entry point: it trained here
    record = json.loads((out / "record.json").read_text())
    assert record["loaders"][0]["batches"] == 20 * 32


def test_sys_exit_zero_is_a_normal_end(tmp_path):
    code, out = run(tmp_path, script(tmp_path, body="sys.exit(0) if step == 5 else None"), steps=20)
    record = json.loads((out / "record.json").read_text())
    assert code == 0 and record["run"]["status"] == "exited" and len(record["steps"]) == 5


def test_catch_all_except_exception_cannot_swallow_the_stop(tmp_path):
    text = TRAIN.format(pre="", body="pass", loader_args="")
    text = text.replace("for epoch in range(20):", "try:\n  for epoch in range(20):").replace(
        "\n    for x", "\n   for x").replace("\n        ", "\n         ") + "\nexcept Exception:\n    pass\n"
    code, out = run(tmp_path, script(tmp_path, text=text))
    assert code == 0 and json.loads((out / "record.json").read_text())["run"]["status"] == "step-limit"


def test_ctrl_c_writes_a_partial_report(tmp_path):
    body = "os.kill(os.getpid(), signal.SIGINT) if step == 5 else None"
    code, out = run(tmp_path, script(tmp_path, pre="import os, signal", body=body), steps=20)
    record = json.loads((out / "record.json").read_text())
    assert code == 130 and record["run"]["status"] == "interrupted" and len(record["steps"]) == 5
    assert (out / "report.md").exists()


def test_workers_stopped_mid_epoch_leave_no_processes(tmp_path):
    code, out = run(tmp_path, script(tmp_path, loader_args=", num_workers=2"))
    assert code == 0
    assert multiprocessing.active_children() == []
    assert json.loads((out / "record.json").read_text())["loaders"][0]["num_workers"] == 2


def test_corrupted_record_given_to_report_exits_2(tmp_path, capsys):
    (tmp_path / "record.json").write_text('{"schema_version": 1, "run": ')
    assert main(["report", str(tmp_path)]) == 2
    assert "re-run" in capsys.readouterr().err


def test_probes_do_not_change_the_numerics(tmp_path):
    """The same script with and without the doctor ends with identical weights."""
    import runpy
    import sys

    import torch

    path = script(tmp_path, body="torch.save(model.state_dict(), sys.argv[1]) if step == 8 else None")
    assert main(["run", "--steps", "10", "--warmup", "2", "--out", str(tmp_path / "r"),
                 str(path), str(tmp_path / "a.pt")]) == 0
    saved_argv = sys.argv[:]
    sys.argv[:] = [str(path), str(tmp_path / "b.pt")]
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv[:] = saved_argv
    a, b = torch.load(tmp_path / "a.pt"), torch.load(tmp_path / "b.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_trace_flag_saves_a_kineto_trace_on_cpu(tmp_path):
    import gzip

    code, out = run(tmp_path, script(tmp_path), "--trace", steps=12)
    record = json.loads((out / "record.json").read_text())
    assert code == 0 and record["trace_file"] == "trace.json.gz"
    trace = json.loads(gzip.decompress((out / "trace.json.gz").read_bytes()))
    names = {e.get("name", "") for e in trace["traceEvents"]}
    assert any(n.startswith("aten::") for n in names)
    profiled = [s for s in record["steps"] if s["sampled"]]
    assert len(profiled) >= 5  # 3 op-sampled + 2 profiled steps, all excluded from timings


def test_module_mode_runs_like_python_dash_m(tmp_path, monkeypatch):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(TRAIN.format(pre="", body="pass", loader_args=""))
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--steps", "4", "--warmup", "1", "--out", str(tmp_path / "r"), "-m", "mypkg.train", "--x"])
    record = json.loads((tmp_path / "r" / "record.json").read_text())
    assert code == 0 and record["run"]["script"] == "-m mypkg.train" and record["run"]["argv"] == ["--x"]
    assert len(record["steps"]) == 5


def test_unknown_module_is_a_usage_error(tmp_path, capsys):
    assert main(["run", "-m", "no_such_module_xyz"]) == 2
    assert "cannot find module" in capsys.readouterr().err


def test_markdown_report_has_the_reference_report_sections(tmp_path, capsys):
    code, out = run(tmp_path, script(tmp_path, body="loss.item()"), "--format", "md", steps=8)
    md = capsys.readouterr().out
    for heading in ("## Run summary", "## Where a step's time goes", "## Causes, ranked", "## Environment"):
        assert heading in md
    assert "TD201" in md and md == (out / "report.md").read_text()


def test_set_knob_is_recorded_and_shown_in_the_report(tmp_path, capsys):
    code, out = run(tmp_path, script(tmp_path), "--set", "workers=1", "--format", "md")
    assert code == 0
    record = json.loads((out / "record.json").read_text())
    assert record["loaders"][0]["num_workers"] == 1
    assert record["knobs"] == [{"name": "workers", "value": "1", "applied": True,
                                "detail": record["knobs"][0]["detail"]}]
    assert "## Knobs set for this run" in capsys.readouterr().out


def test_unknown_knob_is_a_usage_error_listing_the_valid_ones(tmp_path, capsys):
    code, out = run(tmp_path, script(tmp_path), "--set", "num_workers=4")
    err = capsys.readouterr().err
    assert code == 2 and "unknown knob 'num_workers'; valid knobs: workers," in err
    assert not out.exists()  # nothing ran


HOGWILD = '''
import torch
import torch.multiprocessing as mp
from torch import nn


def train(model, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        loss = model(torch.randn(32, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("worker done", flush=True)


if __name__ == "__main__":
    model = nn.Linear(16, 4)
    model.share_memory()
    procs = [mp.Process(target=train, args=(model, 100)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
'''


def test_hogwild_workers_run_as_written_and_the_run_says_once_what_it_did_not_measure(tmp_path, capfd):
    """Forked workers inherit the probes: they must neither count steps nor be stopped by them."""
    script = tmp_path / "hogwild.py"
    script.write_text(HOGWILD)
    assert main(["run", "--steps", "5", "--warmup", "1", "--out", str(tmp_path / "run"), "--format", "json",
                 str(script)]) == 0
    out, err = capfd.readouterr()
    assert out.count("worker done") == 3 or err.count("worker done") == 3
    assert "StopRun" not in err and "Traceback" not in err
    report = json.loads(out[out.index("{"):])
    said = [n for n in report["notes"] if "started 3 processes running train" in n]
    assert len(said) == 1 and "Hogwild" in said[0]
