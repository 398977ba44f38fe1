"""Merging rank-K/record.json into one run: the job's throughput, statuses, lost ranks,
ranks that disagree, and records of different launches refused."""

import pytest
from helpers.records import record

from torchdoctor.diagnosis.ranks import merge_run_dir
from torchdoctor.model.distributed_record import DistributedInfo, RankIdentity
from torchdoctor.errors import InputError
from torchdoctor.pipeline import load_record


def rank_record(rank, job="job-a", world=2, steps=6, status="step-limit", error=None, wall=3.0):
    rec = record(steps=steps, warmup=1)
    rec.run.status, rec.run.error, rec.run.wall_s = status, error, wall
    rec.run.exit_code = 1 if status == "crashed" else 0
    rec.distributed = DistributedInfo(identity=RankIdentity(rank=rank, world_size=world, job_id=job, host="h",
                                                            backend="gloo", epoch_t0=100.0))
    return rec


def save(run_dir, *records):
    for rec in records:
        folder = run_dir / f"rank-{rec.distributed.identity.rank}"
        folder.mkdir(parents=True)
        rec.save(folder / "record.json")


def test_the_job_throughput_sums_every_ranks_samples(tmp_path):
    save(tmp_path, rank_record(0), rank_record(1))
    merged = merge_run_dir(tmp_path)
    assert [v.rank for v in merged.ranks] == [0, 1]
    assert all(s.samples == 64 for s in merged.steps)  # 32 per rank
    assert merged.run.status == "step-limit"


def test_the_first_rank_to_fail_is_the_runs_error(tmp_path):
    crashed = rank_record(1, status="crashed", error="Traceback...\nValueError: bad batch\n", wall=2.0)
    survivor = rank_record(0, status="crashed", error="RuntimeError: Connection closed by peer\n", wall=2.5)
    save(tmp_path, survivor, crashed)
    merged = merge_run_dir(tmp_path)
    assert merged.run.status == "crashed" and merged.run.error.startswith("rank 1 failed first")
    assert "ValueError: bad batch" in merged.run.error and "rank(s) 0" in merged.run.ended_by


def test_a_rank_killed_without_a_record_went_first_not_the_peer_whose_connection_it_reset(tmp_path):
    """SIGKILL on rank 1 (the out-of-memory killer): rank 0 then fails in its all-reduce. torchrun's failure
    times are whole seconds, both fell in one, and its "first failure" was rank 0: the report said "rank 0
    failed first" with the connection reset as the cause."""
    from torchdoctor.diagnosis.run import how_it_ended
    from torchdoctor.run.ranks.launch import LaunchOutcome

    reset = "Traceback...\nRuntimeError: [gloo] Read error: Connection reset by peer\n"
    save(tmp_path, rank_record(0, status="crashed", error=reset, wall=2.5))
    outcome = LaunchOutcome(exit_codes={0: 1, 1: -9}, first_failure=0, failure_times={0: 1_700_000_000, 1: 1_700_000_000})
    merged = merge_run_dir(tmp_path, outcome=outcome)
    assert merged.run.status == "crashed" and merged.run.error.startswith("rank 1 was killed first")
    assert "exit code -9" in merged.run.error.splitlines()[0] and "Connection reset by peer" in merged.run.error
    assert how_it_ended(merged).startswith("rank 1 was killed first")
    # the launcher saw rank 0 fail a second before the kill: rank 0 went first
    (tmp_path / "record.json").unlink(missing_ok=True)
    outcome.failure_times = {0: 1_699_999_999, 1: 1_700_000_000}
    merged = merge_run_dir(tmp_path, outcome=outcome)
    assert merged.run.error.startswith("rank 0 failed first")


def test_ranks_failing_in_one_second_of_the_launchers_clock_are_ordered_by_their_own(tmp_path):
    """Rank 1 raises; rank 0's all-reduce then fails 0.5 s later, in the same second of torchrun's
    whole-second clock, which named rank 0 first."""
    from torchdoctor.run.ranks.launch import LaunchOutcome

    crashed = rank_record(1, status="crashed", error="Traceback...\nValueError: bad batch\n", wall=2.0)
    survivor = rank_record(0, status="crashed", error="RuntimeError: Connection closed by peer\n", wall=2.5)
    save(tmp_path, survivor, crashed)
    tied = LaunchOutcome(exit_codes={0: 1, 1: 1}, first_failure=0, failure_times={0: 1_700_000_000, 1: 1_700_000_000})
    assert merge_run_dir(tmp_path, outcome=tied).run.error.startswith("rank 1 failed first")
    (tmp_path / "record.json").unlink(missing_ok=True)
    apart = LaunchOutcome(exit_codes={0: 1, 1: 1}, first_failure=0, failure_times={0: 1_699_999_998, 1: 1_700_000_000})
    assert merge_run_dir(tmp_path, outcome=apart).run.error.startswith("rank 0 failed first")  # seconds apart: its word


def test_ranks_that_disagree_on_steps_merge_the_common_steps_and_say_so(tmp_path):
    save(tmp_path, rank_record(0, steps=6), rank_record(1, steps=4))
    merged = merge_run_dir(tmp_path)
    assert len(merged.steps) == 5  # 1 warm-up + 4 measured
    assert any("disagree on step counts" in n and "rank 1: 5" in n for n in merged.distributed.notes)


def test_a_missing_rank_is_listed_with_what_is_known(tmp_path):
    save(tmp_path, rank_record(0, world=3), rank_record(2, world=3))
    merged = merge_run_dir(tmp_path)
    lost = [v for v in merged.ranks if v.status == "lost"]
    assert [v.rank for v in lost] == [1] and "copy their rank-K folders here" in lost[0].error


def test_records_of_two_launches_are_refused(tmp_path):
    save(tmp_path, rank_record(0, job="job-a"), rank_record(1, job="job-b"))
    with pytest.raises(InputError, match="rank-1/record.json is from another run"):
        load_record(tmp_path)


def test_a_re_render_keeps_what_the_launcher_knew(tmp_path):
    from torchdoctor.run.ranks.launch import LaunchOutcome

    save(tmp_path, rank_record(0))
    first = merge_run_dir(tmp_path, LaunchOutcome(exit_codes={1: -9}, notes=["launch note"]))
    first.save(tmp_path / "record.json")
    again = load_record(tmp_path)
    [lost] = [v for v in again.ranks if v.status == "lost"]
    assert "killed by SIGKILL" in lost.error and "launch note" in again.distributed.notes


def test_a_one_rank_run_that_gives_no_baseline_says_why(tmp_path):
    """open_lm refuses --fsdp with one rank (a ValueError): the note names that, not 'could not'."""
    from helpers.records import record

    from torchdoctor.diagnosis.ranks import ONE_RANK_DIR, one_rank_failure

    assert one_rank_failure(tmp_path) == "it wrote no record"
    rank = tmp_path / ONE_RANK_DIR / "rank-0"
    rank.mkdir(parents=True)
    crashed = record()
    crashed.run.status, crashed.run.exit_code = "crashed", 1
    crashed.run.error = "Traceback (most recent call last):\n  ...\nValueError: --fsdp can only be specified in distributed mode.\n"
    crashed.save(rank / "record.json")
    assert one_rank_failure(tmp_path) == "the script crashed alone: ValueError: --fsdp can only be specified in distributed mode."
