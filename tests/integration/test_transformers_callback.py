"""Hugging Face `transformers.Trainer` with torchdoctor, both ways in: `DoctorCallback` in the
Trainer, and `torchdoctor run` on the unchanged script. The script (frameworks/
transformers_tiny_gpt.py) fine-tunes a two-layer GPT-2 built from a config, with a Trainer
subclass whose `compute_loss` reads every micro-batch's loss with `.item()`. Nothing is
downloaded (HF_HUB_OFFLINE=1)."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers", reason="the transformers tests need `pip install transformers accelerate`")
pytest.importorskip("accelerate", reason="transformers.Trainer needs `pip install accelerate`")

from frameworks.harness import STEPS, WARMUP, by_file, causes, planted, with_callback, zero_code  # noqa: E402
from torchdoctor.model.record import RunRecord  # noqa: E402

SCRIPT = "transformers_tiny_gpt.py"


def test_the_callback_counts_accumulation_micro_steps_and_stops_the_training(tmp_path, capsys):
    report = with_callback(SCRIPT, tmp_path / "run", ["--accumulate", "3"])
    record = RunRecord.load(tmp_path / "run" / "record.json")
    out, err = capsys.readouterr()
    # control.should_training_stop at the limit: warmup + steps optimizer steps of 3 micro-batches;
    # compute_loss ran once more per step than on_substep_end reports (the step's last micro-batch)
    assert f"stopped at global step {WARMUP + STEPS} after {3 * (WARMUP + STEPS)} micro-batches" in out
    assert record.run.status == "step-limit" and record.run.step_source == "optimizer"
    assert [s.micro_batches for s in record.steps] == [3] * (WARMUP + STEPS)
    assert not [n for n in record.probe_notes if "micro-steps" in n.message]  # the two counts agreed
    assert by_file(causes(report)) == planted(SCRIPT)
    (sync,) = [f for f in report.findings if f.code == "TD201"]
    assert sync.location.function == "LossHistoryTrainer.compute_loss"
    assert f"torchdoctor: step-limit after {WARMUP + STEPS} steps of transformers" in err


def test_zero_code_run_on_the_unchanged_script_finds_what_the_callback_finds(tmp_path):
    plain = zero_code(SCRIPT, tmp_path / "plain", ["--accumulate", "2"])
    called = with_callback(SCRIPT, tmp_path / "callback", ["--accumulate", "2"])
    assert causes(plain) == causes(called) and by_file(causes(plain)) == planted(SCRIPT)
    # what the Trainer itself does (its own syncs, its attention code) is labelled as the
    # library's in both, never put on the user's `trainer.train()` line
    for report in (plain, called):
        inside = [f for f in report.findings if f.location and "site-packages" in f.location.path]
        assert all(f.title.startswith("Inside ") for f in inside)
        assert not [f for f in report.findings if f.location and f.location.function == "main"]
        assert any("Host syncs inside installed libraries" in n and "transformers" in n for n in report.notes)
