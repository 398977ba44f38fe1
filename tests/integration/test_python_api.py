"""The Python API as a notebook or a custom loop uses it: `torchdoctor.watch()` around a loop
whose model, loader and optimizer were made before the block, `torchdoctor.diagnose(RUN_DIR)`,
`torchdoctor.lint_source(text)`, and what `import torchdoctor` loads."""

import importlib
import json
import subprocess
import sys
import textwrap

import pytest

import torchdoctor
from torchdoctor.errors import InputError, UsageError
from torchdoctor.run.probes.patching import is_patched

HELPERS = '''
import torch


def train_one_epoch(model, loader, optimizer, losses):
    for features, labels in loader:
        loss = torch.nn.functional.cross_entropy(model(features), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # read every step
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A loop in a helper module, imported (as a notebook would) before anything is measured."""
    (tmp_path / "loop_helpers.py").write_text(HELPERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import loop_helpers

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
    loader = DataLoader(TensorDataset(torch.randn(512, 16), torch.randint(0, 3, (512,))), batch_size=16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    yield tmp_path, loop_helpers, model, loader, optimizer
    sys.modules.pop("loop_helpers", None)


def read_line(path) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if "read every step" in line)


def test_watch_measures_a_loop_made_before_the_block_and_ends_it_at_the_limit(project):
    tmp_path, helpers, model, loader, optimizer = project
    from torch.utils.data import DataLoader

    losses, after_loop = [], []
    with torchdoctor.watch(steps=8, warmup=2, out=tmp_path / "run") as doc:
        for _ in range(100):
            helpers.train_one_epoch(model, loader, optimizer, losses)
        after_loop.append(True)  # never reached: the step limit ends the block
    assert not after_loop and len(losses) == 9  # the 10th step ended in its optimizer.step(), before the read
    record = doc.record
    # the optimizer existed before the block: steps are its steps, not each backward()
    assert record.run.status == "step-limit" and record.run.step_source == "optimizer"
    assert len(record.steps) == 10 and [s.warmup for s in record.steps].count(True) == 2
    (sync,) = [f for f in doc.report.findings if f.code == "TD201"]
    assert sync.location.path == "loop_helpers.py" and sync.location.line == read_line(tmp_path / "loop_helpers.py")
    assert str(tmp_path / "loop_helpers.py") in record.source_files  # imported before, still linted
    assert {p.name for p in doc.run_dir.iterdir()} >= {"record.json", "report.json", "report.md", "report.html"}
    assert not is_patched(DataLoader.__iter__)  # the probes came out with the block
    as_json = json.loads(doc.report.to_json())
    assert [f["code"] for f in as_json["findings"]] == [f.code for f in doc.report.findings]
    html = doc._repr_html_()
    assert html.startswith("<style>") and '<div class="tdr">' in html and "TD201" in html
    assert "step-limit after 10 steps" in repr(doc) and str(doc.run_dir) in repr(doc)


def test_diagnose_remakes_the_report_of_a_watched_run_and_both_diagnose_names_work(project):
    tmp_path, helpers, model, loader, optimizer = project
    with torchdoctor.watch(steps=6, warmup=1, out=tmp_path / "run") as doc:
        while True:
            helpers.train_one_epoch(model, loader, optimizer, [])
    stage = importlib.import_module("torchdoctor.diagnosis.run")  # the stage's package, after the API name was used

    again = torchdoctor.diagnose(tmp_path / "run")
    assert [(f.code, f.location) for f in again.findings] == [(f.code, f.location) for f in doc.report.findings]
    assert torchdoctor.diagnosis.run is stage and callable(stage.analyze)
    with pytest.raises(InputError, match="not a run directory"):
        torchdoctor.diagnose(tmp_path / "missing")


def test_watch_without_stop_lets_training_go_on_and_keeps_the_loader_workers(project):
    tmp_path, helpers, model, _, optimizer = project
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    # one worker process: it must survive the probes coming out mid-epoch
    loader = DataLoader(TensorDataset(torch.randn(640, 16), torch.randint(0, 3, (640,))), batch_size=16,
                        num_workers=1)
    losses = []
    with torchdoctor.watch(steps=6, warmup=1, out=tmp_path / "run", stop=False) as doc:
        helpers.train_one_epoch(model, loader, optimizer, losses)
        measured_inside = doc.record  # measuring ended at the first batch after the limit
    assert len(losses) == 40  # the whole epoch ran
    assert measured_inside is doc.record and len(doc.record.steps) == 7
    assert doc.record.run.status == "step-limit"
    assert any(f.code == "TD201" for f in doc.report.findings)


def test_a_block_that_raises_keeps_what_was_measured_and_the_error_goes_on(project):
    tmp_path, helpers, model, loader, optimizer = project

    class Diverged(RuntimeError):
        pass

    with pytest.raises(Diverged):
        with torchdoctor.watch(steps=50, warmup=1, out=tmp_path / "run") as doc:
            helpers.train_one_epoch(model, loader, optimizer, [])
            raise Diverged("loss is nan")
    assert doc.record.run.status == "crashed" and "loss is nan" in doc.record.run.error
    assert len(doc.record.steps) == 32 and (tmp_path / "run" / "report.json").exists()


def test_bad_arguments_and_early_reads_are_one_line_errors(tmp_path):
    with pytest.raises(UsageError, match="steps must be a whole number of at least 1"):
        torchdoctor.watch(steps=0)
    with pytest.raises(UsageError, match="KNOB=VALUE"):
        torchdoctor.watch(knobs="workers=4")
    doc = torchdoctor.watch(out=tmp_path / "never")
    with pytest.raises(UsageError, match="after the `with` block"):
        doc.report
    with pytest.raises(UsageError, match="unknown knob|not a knob|knob"):
        with torchdoctor.watch(knobs=["warp_speed=9"]):
            pass


def test_lint_source_finds_the_habit_at_its_line_and_honours_noqa_and_selection():
    source = textwrap.dedent("""
        import torch

        def train(model, loader, opt):
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
                loss.backward()
                opt.step()
                print(loss.item())
                opt.zero_grad(set_to_none=False)
    """)
    found = torchdoctor.lint_source(source, path="train.py")
    by_code = {f.code: f for f in found}
    assert by_code["TD201"].line == 9 and by_code["TD201"].finding.location.path == "train.py"
    assert by_code["TD303"].line == 10
    assert [f.code for f in torchdoctor.lint_source(source, path="train.py", select=["TD3"])] == ["TD303"]
    assert "TD201" not in {f.code for f in torchdoctor.lint_source(source, ignore="TD201")}
    quiet = source.replace("print(loss.item())", "print(loss.item())  # noqa: TD201")
    assert "TD201" not in {f.code for f in torchdoctor.lint_source(quiet)}
    with pytest.raises(InputError, match=r"^cannot lint broken\.py:1:7: cannot parse"):
        torchdoctor.lint_source("def f(:\n  pass\n", path="broken.py")
    with pytest.raises(UsageError, match="select: no rule code"):
        torchdoctor.lint_source(source, select=["XX1"])


def fresh(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_torchdoctor_and_linting_source_load_no_torch():
    seen = fresh(textwrap.dedent("""
        import json, sys
        import torchdoctor
        names = sorted(torchdoctor.__all__)
        text = "for x in loader:\\n    loss = model(x.cuda()).sum()\\n    loss.backward()\\n    print(loss.item())\\n"
        found = [(f.code, f.line) for f in torchdoctor.lint_source(text)]
        print(json.dumps({"torch": "torch" in sys.modules, "names": names, "found": found,
                          "diagnose_is_callable": callable(torchdoctor.diagnose)}))
    """))
    assert seen["torch"] is False and seen["diagnose_is_callable"] is True
    assert {"watch", "diagnose", "lint_source", "Report", "Finding"} <= set(seen["names"]) and seen["found"] == [["TD201", 4]]


def test_the_diagnose_stage_imported_first_is_still_the_api_function(tmp_path):
    seen = fresh(textwrap.dedent(f"""
        import json
        import torchdoctor.diagnosis.run
        import torchdoctor
        try:
            torchdoctor.diagnose({str(tmp_path / "nothing")!r})
        except torchdoctor.TorchdoctorError as exc:
            print(json.dumps({{"error": str(exc), "analyze": callable(torchdoctor.diagnosis.run.analyze)}}))
    """))
    assert "is not a run directory" in seen["error"] and seen["analyze"] is True
