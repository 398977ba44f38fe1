"""Lightning with torchdoctor, both ways in: `DoctorCallback` in the Trainer, and `torchdoctor
run` on the unchanged script. The script (frameworks/lightning_blobs.py) is a LightningModule
and a DataModule fitted by a Trainer; its planted causes are a slow dataset with no workers and
a per-step `.item()` in a helper module."""

import csv
import os
import subprocess
import sys

import pytest

pytest.importorskip("lightning", reason="the Lightning tests need `pip install lightning` (the test extra)")

from frameworks.harness import HERE, STEPS, WARMUP, by_file, causes, planted, with_callback, zero_code  # noqa: E402
from torchdoctor.model.findings import Report  # noqa: E402
from torchdoctor.model.record import RunRecord  # noqa: E402
from torchdoctor.run.probes.patching import is_patched  # noqa: E402

SCRIPT = "lightning_blobs.py"


def test_the_callback_measures_lightnings_steps_stops_the_fit_and_logs_the_findings(tmp_path, capsys):
    report = with_callback(SCRIPT, tmp_path / "run", ["--accumulate", "2", "--logs", str(tmp_path / "logs")])
    record = RunRecord.load(tmp_path / "run" / "record.json")
    # trainer.should_stop at the limit: the fit ended after warmup + steps optimizer steps
    assert f"rank 0 stopped at global step {WARMUP + STEPS}" in capsys.readouterr().out
    assert record.run.status == "step-limit" and record.run.step_source == "optimizer"
    assert len(record.steps) == WARMUP + STEPS
    assert [s.micro_batches for s in record.steps] == [2] * (WARMUP + STEPS)  # accumulate_grad_batches=2
    assert by_file(causes(report)) == planted(SCRIPT)
    # the trainer's logger got the numbers and the findings' text
    version = tmp_path / "logs" / "blobs" / "version_0"
    rows = list(csv.DictReader((version / "metrics.csv").open()))
    logged = [r for r in rows if r.get("torchdoctor/step_time_ms")]
    assert len(logged) == 1 and float(logged[0]["torchdoctor/findings"]) == len(report.findings)
    assert float(logged[0]["torchdoctor/step_time_ms"]) == pytest.approx(report.summary.step_time_s * 1e3)
    hparams = (version / "hparams.yaml").read_text()
    assert "torchdoctor/finding_1: 'TD101 dataloader-stall (high" in hparams and "torchdoctor/run_dir" in hparams
    from torch.utils.data import DataLoader

    assert not is_patched(DataLoader.__iter__)  # the probes came out at the limit


def test_zero_code_run_on_the_unchanged_script_finds_what_the_callback_finds(tmp_path):
    plain = zero_code(SCRIPT, tmp_path / "plain", [])
    called = with_callback(SCRIPT, tmp_path / "callback", [])
    assert causes(plain) == causes(called)
    assert by_file(causes(plain)) == planted(SCRIPT)
    # the loader is the user's `DataLoader(...)` in train_dataloader(), not Lightning's wrapper of it
    (stall,) = [f for f in plain.findings if f.code == "TD101"]
    assert stall.location.function == "Blobs.train_dataloader"


@pytest.mark.slow
def test_under_ddp_with_two_cpu_ranks_every_rank_stops_at_the_limit_and_rank_0_writes(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[2] / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(HERE / SCRIPT), "--devices", "2", "--doctor-out", str(tmp_path / "run"),
                           "--doctor-steps", str(STEPS), "--doctor-warmup", str(WARMUP)],
                          capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank} stopped at global step {WARMUP + STEPS}" in done.stdout
    assert done.stderr.count("torchdoctor: step-limit after") == 1  # rank 0 alone reports
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # and writes
    record = RunRecord.load(tmp_path / "run" / "record.json")
    assert len(record.steps) == WARMUP + STEPS
    report = Report.load(tmp_path / "run" / "report.json")
    # the slow loader too, at the user's DataLoader(...) line, though Lightning re-creates it with a
    # DistributedSampler inside itself (same dataset: the user's line is the one to change)
    assert {code for code, _, _ in causes(report)} == {"TD101", "TD201"}
    assert by_file(causes(report)) == planted(SCRIPT)
    # what a rank-0 report lacks is said: the cross-rank sections, and samples/s that is not the job's
    [lacks] = [n for n in report.notes if "rank 0's of 2 ranks" in n]
    assert "TD601-TD607" in lacks and "torchdoctor run --nproc-per-node 2" in lacks


@pytest.mark.slow
def test_zero_code_under_torchrun_ranks_names_the_users_lines_not_lightnings(tmp_path):
    """`torchdoctor run --nproc-per-node 2` on the unchanged script: Lightning sees torchrun's
    environment and spawns nothing; the loader and DDP it builds are put on the user's lines."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[2] / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", "--nproc-per-node", "2", "--steps", str(STEPS),
                           "--warmup", str(WARMUP), "--out", str(tmp_path / "run"), str(HERE / SCRIPT), "--devices", "2"],
                          capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    record = RunRecord.load(tmp_path / "run" / "record.json")
    assert sorted(v.rank for v in record.ranks) == [0, 1]
    (ddp,) = record.distributed.ddp
    assert ddp.created_at.path.endswith(SCRIPT) and ddp.created_at.function == "main"  # its trainer.fit(...)
    report = Report.load(tmp_path / "run" / "report.json")
    assert planted(SCRIPT) <= by_file(causes(report))  # TD101 in train_dataloader, TD201 in _metrics.py
