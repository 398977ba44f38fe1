"""tune on a DDP script: the knobs for DDP findings, one rank beside N, every trial launched
with the baseline's ranks."""

from pathlib import Path

from helpers.records import record

from torchdoctor.model.findings import Finding, Report, Severity
from torchdoctor.model.record import RankView
from torchdoctor.tune.plan import SCALING, Trial, plan_trials
from torchdoctor.tune.trials import TrialSettings, command_for


def finding(code, **evidence):
    return Finding(code=code, slug="s", severity=Severity.HIGH, title="t", message="m", location=None,
                   evidence=evidence, fix="f", estimated_speedup=1.5, estimate_basis="b")


def test_ddp_findings_get_their_knobs_and_one_rank_is_measured_beside_n():
    rec = record()
    rec.ranks = [RankView(rank=0), RankView(rank=1)]
    baseline = Report(source="run", tool_version="0", findings=[
        finding("TD601"), finding("TD603", setting="find_unused_parameters=True"),
        finding("TD603", setting="bucket_cap_mb=1"), finding("TD606", best="fp16 gradient compression (fp16_…)")])
    trials = {t.name: t for t in plan_trials(baseline, rec, cuda=False)}
    assert trials["no_sync=true"].addresses == ["TD601"]
    assert trials["find_unused_parameters=false"].knobs == {"find_unused_parameters": "false"}
    assert trials["bucket_cap_mb=25"].addresses == ["TD603"]
    assert trials["comm_hook=fp16"].addresses == ["TD606"]
    assert trials["nproc=1"].kind == SCALING and trials["nproc=1"].addresses == ["TD606"]


def test_a_single_rank_baseline_gets_no_nproc_trial():
    assert not [t for t in plan_trials(Report(source="run", tool_version="0"), record(), cuda=False)
                if t.name == "nproc=1"]


def test_trials_launch_the_baselines_ranks_and_a_trial_can_change_them():
    settings = TrialSettings("train.py", ["--lr", "1"], False, steps=10, warmup=2, max_seconds=60.0, nproc_per_node=2)
    cmd = command_for(Trial("nproc=1", {"nproc": "1"}, SCALING), settings, Path("/tmp/t"))
    assert cmd[cmd.index("--nproc-per-node") + 1] == "2" and cmd[cmd.index("--set") + 1] == "nproc=1"
    assert cmd[-3:] == ["train.py", "--lr", "1"]
