"""A followed multi-rank job (`run --follow --nproc-per-node N`) from rank records made by hand:
a rank that becomes a straggler is found in the ranks' timelines (TD905, with the step, the time and
the rank, its cause from that rank's own window), every rank's black box is kept and the report
leads with the rank that failed, and a directory whose ranks are still running (live.json) merges."""

import json
from pathlib import Path

from helpers.records import rank_points as points, record

from torchdoctor.diagnosis.ranks import merge_run_dir
from torchdoctor.diagnosis.run import analyze
from torchdoctor.model.distributed_record import DistributedInfo, RankIdentity
from torchdoctor.model.follow_record import (BlackBox, FollowRecord, ProbeWindow, StackFrame, ThreadStack,
                                             TimelinePoint, WindowLine)
from torchdoctor.model.location import Location
from torchdoctor.pipeline import diagnose_run_dir
from torchdoctor.report import render
from torchdoctor.rules.changes import straggler_changes

SLEEP = Location("train.py", 15, "<module>")


def rank_record(rank, pts, status="completed", box=None, live=False, windows=()):
    rec = record(steps=len(pts), warmup=3)
    rec.run.status = status
    rec.run.exit_code = 1 if status == "crashed" else 0
    rec.distributed = DistributedInfo(identity=RankIdentity(rank=rank, world_size=2, job_id="job", host="h",
                                                            backend="gloo", epoch_t0=100.0))
    rec.follow = FollowRecord(steps=len(pts), points=pts, blackbox=box, live=live, windows=list(windows))
    return rec


def save(run_dir, *records, name="record.json"):
    for rec in records:
        folder = run_dir / f"rank-{rec.distributed.identity.rank}"
        folder.mkdir(parents=True, exist_ok=True)
        rec.save(folder / name)


def test_a_rank_that_slows_from_step_200_is_the_straggler_from_there():
    [change] = straggler_changes({0: points(0), 1: points(1)})
    assert change.kind == "straggler" and change.rank == 1
    assert abs(change.step - 200) <= 5 and change.detected_step >= change.step
    assert change.figures_after["others_comm_wait_s"] > change.figures_before["others_comm_wait_s"]
    assert change.after.median - change.before.median > change.threshold


def test_a_recorded_jobs_straggler_is_found_where_it_began():
    # a real run: the start's probe windows took most steps before the change (its reference is ~50 clean
    # steps), the ranks' own time is a fraction of the step, and the first tests after the change see only
    # a few changed steps, which must not cut the series short of it
    doc = json.loads((Path(__file__).parents[2] / "fixtures" / "follow" / "ddp_straggler_points.json").read_text())
    pts = {int(r): [TimelinePoint(**p) for p in series] for r, series in doc["ranks"].items()}
    [change] = straggler_changes(pts)
    assert change.rank == 1 and abs(change.step - 152) <= 5


def test_ranks_that_only_share_noise_have_no_straggler():
    assert straggler_changes({0: points(0, extra=0.0), 1: points(1, extra=0.0)}) == []


def test_a_straggler_that_recovers_does_not_make_the_other_rank_one():
    def recovering(rank):
        return [p if p.step < 300 else TimelinePoint(step=p.step, t=p.t, step_s=0.010, comm_wait_s=0.001)
                for p in points(rank)]

    assert [c.rank for c in straggler_changes({0: recovering(0), 1: recovering(1)})] == [1]


def test_the_straggler_finding_names_the_rank_the_step_and_its_line(tmp_path):
    window = ProbeWindow(reason="change", first_step=222, last_step=230, start_t=2.0, end_t=2.3,
                         probes=["line_sampler"], sampled_s=0.25, samples=250,
                         lines=[WindowLine(location=SLEEP, seconds=0.2, samples=200, text="time.sleep(0.03)")])
    save(tmp_path, rank_record(0, points(0)), rank_record(1, points(1), windows=[window]))
    merged = merge_run_dir(tmp_path)
    [change] = [c for c in merged.follow.changes if c.kind == "straggler"]
    assert change.rank == 1 and merged.follow.windows[change.window].first_step == 222
    report = analyze(merged)
    [finding] = [f for f in report.findings if f.code == "TD905"]
    assert finding.evidence["rank"] == 1 and abs(finding.evidence["from_step"] - 200) <= 5
    assert finding.title.startswith(f"From step {change.step}, rank 1 became the straggler")
    assert finding.location == SLEEP and "time.sleep(0.03)" in finding.message
    assert "rank 1's, after it became the straggler" in render(report, "md")


def _box(rank, reason, message, frames):
    return BlackBox(reason=reason, message=message, step=41, t=2.5, where=Location(*frames[-1][:3]),
                    threads=[ThreadStack(name="MainThread", ident=1, main=True, daemon=False,
                                         frames=[StackFrame(p, line, fn) for p, line, fn in frames])])


def test_a_rank_that_raised_leads_the_report_with_every_ranks_stack(tmp_path):
    boom = _box(1, "exception", "RuntimeError: blew up", [("train.py", 15, "<module>")])
    waiting = _box(0, "exception", "RuntimeError: Connection closed by peer",
                   [("train.py", 11, "<module>"), ("/venv/site-packages/torch/autograd/graph.py", 979, "run")])
    crashed = rank_record(1, points(1, steps=41), status="crashed", box=boom)
    crashed.run.error, crashed.run.wall_s = "Traceback...\nRuntimeError: blew up\n", 2.0
    survivor = rank_record(0, points(0, steps=41), status="crashed", box=waiting)
    survivor.run.error, survivor.run.wall_s = "RuntimeError: Connection closed by peer\n", 2.5
    save(tmp_path, survivor, crashed)
    merged = merge_run_dir(tmp_path)
    assert merged.follow.blackbox.rank == 1 and [v.blackbox.rank for v in merged.ranks] == [0, 1]
    report = analyze(merged)
    assert report.summary.ended.startswith("rank 1: RuntimeError: blew up at train.py:15")
    text = render(report, "text")
    assert text.splitlines()[0].split(" · ")[2].startswith("crashed: rank 1: RuntimeError: blew up")
    stacks = next(t for t in report.tables if t.title == "Black box: every rank's stacks when the run stopped")
    assert [r[0] for r in stacks.rows if r[0]] == ["rank 0 · MainThread (training)", "rank 1 · MainThread (training)"]


def test_a_stalled_job_leads_with_the_rank_the_others_wait_for(tmp_path):
    hung = _box(1, "stall", "no step finished for 3 s", [("train.py", 20, "train_step")])
    waiting = _box(0, "stall", "no step finished for 3 s",
                   [("train.py", 11, "<module>"), ("torch/distributed/distributed_c10d.py", 2500, "all_reduce")])
    save(tmp_path, rank_record(0, points(0, steps=50), status="stalled", box=waiting),
         rank_record(1, points(1, steps=50), status="stalled", box=hung))
    assert merge_run_dir(tmp_path).follow.blackbox.message.startswith("rank 1: no step finished")


def test_a_job_still_running_is_reported_from_its_ranks_live_files(tmp_path):
    save(tmp_path, rank_record(0, points(0), live=True), rank_record(1, points(1), live=True), name="live.json")
    report = diagnose_run_dir(tmp_path)
    assert report.summary.ranks == 2
    assert any(f.code == "TD905" for f in report.findings)
    assert "The run is still going" in " ".join(report.notes) and "a rank's live.json was written" in report.notes[0]


def test_a_followed_rank_killed_before_writing_its_record_is_lost_with_what_it_wrote(tmp_path):
    from types import SimpleNamespace

    survivor = rank_record(0, points(0, steps=300), status="crashed")
    survivor.run.error = "RuntimeError: Connection reset by peer\n"
    killed = rank_record(1, points(1, steps=300), status="running", live=True)
    save(tmp_path, survivor)
    save(tmp_path, killed, name="live.json")
    outcome = SimpleNamespace(exit_codes={1: -9}, first_failure=None, notes=[], stall=None, interrupted=False,
                              signal_exit=None, oom_kills=None)
    merged = merge_run_dir(tmp_path, outcome)
    view = next(v for v in merged.ranks if v.rank == 1)
    assert view.status == "lost" and view.exit_code == -9 and "SIGKILL" in view.error and "live.json" in view.error
    assert view.steps and not merged.follow.live  # what it wrote is kept; the job is over
    merged.save(tmp_path / "record.json")
    again = merge_run_dir(tmp_path)  # a re-render keeps what the launcher knew
    assert next(v for v in again.ranks if v.rank == 1).status == "lost" and not again.follow.live
