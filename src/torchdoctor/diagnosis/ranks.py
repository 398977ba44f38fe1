"""Merge the ranks of a multi-rank run: RUN_DIR/rank-K/record.json -> one RunRecord.

The merged record is the lowest rank's (its probes, its time split) with the job's view on
top: each step's samples summed over the ranks (so samples/s is the job's throughput and
`compare` puts one rank beside N), one `RankView` per rank for the cross-rank rules, the
worst outcome as the run's status with the first failing rank's traceback, and what the
launcher knew of ranks that left no record. Records of different launches are refused.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from torchdoctor.model.distributed_record import DistributedInfo, OneRankBaseline, RankIdentity
from torchdoctor.errors import InputError
from torchdoctor.machine.oom import killed_words
from torchdoctor.model.record import RankView, RunRecord
from torchdoctor.rules.facts import training_loader
from torchdoctor.rules.noise import throughput
from torchdoctor.run.ranks.heartbeat import read_heartbeats
from torchdoctor.model.serialize import SchemaError
from torchdoctor.model.layout import LIVE_FILE
from torchdoctor.model.follow_record import BlackBox, FollowRecord, rank_message
from torchdoctor.rules.changes import straggler_changes

RANK_RECORD = "record.json"
ONE_RANK_DIR = "one-rank"  # RUN_DIR/one-rank/rank-0/: one rank alone, measured for the scaling verdict
TOP_LINES = 12
FAILED = ("crashed",)
WAITING_PARTS = ("distributed", "autograd", "nn/parallel")  # torch's code a rank waits for the others in


def rank_record_paths(run_dir: Path) -> list[Path]:
    """Each rank's record.json; a followed rank still running (or ended without its record) has
    its live.json instead (`run --follow --nproc-per-node N`)."""
    def rank_of(path: Path) -> int:
        return int(path.parent.name.split("-", 1)[1])

    folders = [p for p in run_dir.glob("rank-*") if p.name.split("-", 1)[1].isdigit() and p.is_dir()]
    found = []
    for folder in folders:
        for name in (RANK_RECORD, LIVE_FILE):
            if (folder / name).exists():
                found.append(folder / name)
                break
    return sorted(found, key=rank_of)


def has_rank_records(run_dir: Path) -> bool:
    return bool(rank_record_paths(run_dir))


def load_rank_records(run_dir: Path) -> list[RunRecord]:
    records = []
    for path in rank_record_paths(run_dir):
        try:
            records.append(RunRecord.load(path))
        except SchemaError as exc:
            raise InputError(f"cannot read {path.relative_to(run_dir)}: {exc}; copy that rank's record again, or "
                             "remove its folder to report the other ranks") from None
    return records


def check_one_job(records: list[RunRecord], run_dir: Path) -> None:
    """Every record must come from one launch: the same job id and world size."""
    first = records[0]
    for other in records[1:]:
        a, b = _identity(first), _identity(other)
        if a.job_id != b.job_id or a.world_size != b.world_size:
            raise InputError(
                f"{run_dir}: rank-{b.rank}/record.json is from another run than rank-{a.rank}/record.json (job "
                f"{b.job_id[:8] or '?'} of {b.world_size} ranks, started {other.run.started_at}, "
                f"{other.run.script} vs job {a.job_id[:8] or '?'} of {a.world_size} ranks, started "
                f"{first.run.started_at}, {first.run.script}); put the rank folders of one run in one directory")


def _identity(record: RunRecord) -> RankIdentity:
    return record.distributed.identity if record.distributed else RankIdentity(rank=0, world_size=1)


def merge_run_dir(run_dir: Path, outcome=None, launcher_record: RunRecord | None = None) -> RunRecord:
    """The merged record of RUN_DIR's ranks. `outcome` is the launcher's (launch.LaunchOutcome);
    without it (a re-render) what the previous merge knew of lost ranks is kept."""
    records = load_rank_records(run_dir)
    previous = _previous_merge(run_dir) if outcome is None else None
    if not records:
        if launcher_record is not None:
            return launcher_record
        if previous is not None:
            return previous
        raise InputError(f"{run_dir} has no rank-K/record.json; pass the folder `torchdoctor run` printed")
    check_one_job(records, run_dir)
    merged = merge(records, outcome, previous, launcher_record, heartbeats=read_heartbeats(run_dir))
    kept = previous.distributed.one_rank if previous is not None and previous.distributed else None
    merged.distributed.one_rank = kept or measured_one_rank(run_dir)
    return merged


def measured_one_rank(run_dir: Path, seconds: float | None = None,
                      source: str = "measured in this command") -> OneRankBaseline | None:
    """The one-rank run in RUN_DIR/one-rank, when there is one that measured steps."""
    path = run_dir / ONE_RANK_DIR / "rank-0" / RANK_RECORD
    try:
        record = RunRecord.load(path)
    except SchemaError:
        return None
    return one_rank_baseline(record, source, seconds if seconds is not None else record.run.wall_s,
                             str(path.parent.relative_to(run_dir)))


def one_rank_failure(run_dir: Path) -> str:
    """Why the one-rank run in RUN_DIR/one-rank gave no baseline, in a few words for the notes."""
    try:
        record = RunRecord.load(run_dir / ONE_RANK_DIR / "rank-0" / RANK_RECORD)
    except SchemaError:
        return "it wrote no record"
    if record.run.status in FAILED:
        lines = [ln.strip() for ln in (record.run.error or "").splitlines() if ln.strip()]
        return f"the script {record.run.status} alone" + (f": {lines[-1][:200]}" if lines else "")
    return "it measured no step"


def one_rank_baseline(record: RunRecord, source: str, seconds: float, run_dir: str) -> OneRankBaseline | None:
    """A one-rank record as the baseline of the scaling verdict; None without measured steps."""
    speed = throughput(record)
    if speed is None or record.run.status in FAILED:
        return None
    counted = [s.samples for s in record.measured_steps if s.samples is not None]
    return OneRankBaseline(source=source, steps=len(record.measured_steps), step_s=speed.step_s,
                           steps_per_s=speed.steps_per_s, samples_per_s=speed.samples_per_s,
                           relative_sem=speed.relative_sem,
                           samples_per_step=sum(counted) / len(counted) if counted else None,
                           seconds=round(seconds, 1), run_dir=run_dir)


def merge(records: list[RunRecord], outcome=None, previous: RunRecord | None = None,
          launcher_record: RunRecord | None = None, heartbeats: dict[int, dict] | None = None) -> RunRecord:
    records = sorted(records, key=lambda r: _identity(r).rank)
    base = records[0]
    identity = _identity(base)
    merged = replace(base, run=replace(base.run), steps=[replace(s) for s in base.steps])
    merged.distributed = replace(base.distributed or DistributedInfo(identity=identity),
                                 notes=list((base.distributed.notes if base.distributed else [])))
    notes = merged.distributed.notes
    heartbeats = heartbeats or {}
    merged.ranks = [_view(r, heartbeats.get(_identity(r).rank)) for r in records]
    ended = outcome is not None or previous is not None  # the launch is over (its merged record was written)
    if ended:  # a followed rank still "running" ended without its record
        known = {v.rank: v for v in (previous.ranks if previous else []) if v.status == "lost"}
        for view in merged.ranks:
            if view.status == "running":
                _ended_unwritten(view, outcome, known.get(view.rank))
    present = {v.rank for v in merged.ranks}
    merged.ranks += _lost_ranks(identity.world_size, present, outcome, previous, heartbeats)
    merged.ranks.sort(key=lambda v: v.rank)
    _merge_steps(merged, records, notes)
    if merged.distributed.comm is None:
        merged.distributed.comm = next((r.distributed.comm for r in records if r.distributed and r.distributed.comm),
                                       None)
    backends = {_identity(r).backend for r in records if _identity(r).backend}
    if len(backends) > 1:
        notes.append(f"the ranks initialised different backends ({', '.join(sorted(backends))}): every rank must "
                     "pass the same backend to init_process_group")
    _settle_status(merged, records, outcome, launcher_record)
    if outcome is not None:
        notes.extend(n for n in outcome.notes if n not in notes)
    elif previous is not None and previous.distributed:
        notes.extend(n for n in previous.distributed.notes if n not in notes)
    if launcher_record is not None:
        merged.probe_notes = launcher_record.probe_notes + merged.probe_notes
    if any(r.follow is not None for r in records):
        merge_follow(merged, records, outcome, ended)
    return merged


def merge_follow(merged: RunRecord, records: list[RunRecord], outcome=None, ended: bool = False) -> None:
    """A followed job (`run --follow --nproc-per-node N`): the lowest rank's follow record with the
    job's view on top: each rank's black box (RankView.blackbox), the one of the rank that failed first
    leading, and the ranks that became stragglers, found in every rank's timeline (with the window the
    straggler sampled right after it, when its own follower sampled one)."""
    base = merged.follow or FollowRecord()
    follow = replace(base, windows=list(base.windows), changes=list(base.changes))
    follow.steps = max(r.follow.steps for r in records if r.follow is not None)
    follow.live = not ended and any(r.follow is not None and r.follow.live for r in records)
    views = {v.rank: v for v in merged.ranks}
    boxes: dict[int, BlackBox] = {}
    for record in records:
        rank = _identity(record).rank
        box = record.follow.blackbox if record.follow is not None else None
        if box is not None:
            boxes[rank] = replace(box, rank=rank)
            if rank in views:
                views[rank].blackbox = boxes[rank]
    follow.blackbox = _leading_box(boxes, records, outcome)
    points = {_identity(r).rank: r.follow.points for r in records if r.follow is not None and r.follow.points}
    by_rank = {_identity(r).rank: r.follow for r in records if r.follow is not None}
    if len(points) == len(records):
        for change in straggler_changes(points):
            own = by_rank.get(change.rank)
            window = _window_after(own, change.step) if own is not None else None
            if window is not None:
                follow.windows.append(replace(window, change=len(follow.changes)))
                change.window = len(follow.windows) - 1
            follow.changes.append(change)
    merged.follow = follow


def _window_after(follow: FollowRecord, step: int):
    """The straggler's own probe window sampled right after `step` (its own follower saw its steps
    change there too), else None."""
    from torchdoctor.rules.shifts import RECENT_STEPS

    for window in follow.windows:
        if window.reason != "start" and step - RECENT_STEPS <= window.first_step <= step + 20 * RECENT_STEPS:
            return replace(window, change=None)
    return None


def _leading_box(boxes: dict[int, BlackBox], records: list[RunRecord], outcome) -> BlackBox | None:
    """The black box the job's report leads with: the rank that failed first's, else the first
    written (a stall, a signal)."""
    if not boxes:
        return None
    stalls = {rank: box for rank, box in boxes.items() if box.reason == "stall"}
    if stalls and not any(r.run.status in FAILED for r in records):  # the rank the others wait for
        leading = [rank for rank, box in sorted(stalls.items()) if not _waits_for_others(box)]
        return _with_rank(stalls[leading[0]] if leading else min(stalls.values(), key=lambda b: b.t))
    failed = [r for r in records if r.run.status in FAILED or r.run.status == "stalled"]
    if failed:
        first = _identity(_first_to_end(failed, outcome)).rank
        if first in boxes:
            return _with_rank(boxes[first])
    if all(box.reason == "signal" for box in boxes.values()):  # the job was stopped: no rank to blame
        first = boxes[min(boxes)]
        return replace(first, message=f"{first.message} (every rank; their stacks below)")
    chosen = min(boxes.values(), key=lambda b: (b.reason != "exception", b.reason != "stall", b.t))
    return _with_rank(chosen)


def _waits_for_others(box: BlackBox) -> bool:
    """The training thread stopped inside a collective or a backward (waiting for the other ranks)."""
    main = next((t for t in box.threads if t.main), None)
    if main is None or not main.frames:
        return False
    path = main.frames[-1].path.replace("\\", "/")
    return any(f"torch/{part}/" in path for part in WAITING_PARTS)


def _with_rank(box: BlackBox) -> BlackBox:
    return replace(box, message=rank_message(box.message, box.rank))


def _view(record: RunRecord, heartbeat: dict | None) -> RankView:
    info = record.distributed
    loader = training_loader(record)
    lines = sorted(record.line_profile.lines, key=lambda h: -h.seconds)[:TOP_LINES]
    return RankView(
        rank=_identity(record).rank, host=_identity(record).host, status=record.run.status,
        exit_code=record.run.exit_code, error=record.run.error, ended_by=record.run.ended_by,
        wall_s=record.run.wall_s, epoch_t0=_identity(record).epoch_t0, steps=list(record.steps),
        ddp_steps=list(info.ddp_steps) if info else [], fsdp_steps=list(info.fsdp_steps) if info else [],
        collectives=list(info.collectives) if info else [],
        phases=list(record.phases), loader_location=loader.iterated_at if loader else None, top_lines=lines,
        last_position=(heartbeat or {}).get("position"), contention=record.contention,
        threads=record.environment.num_threads, cpus=record.environment.cpu_count,
        device_index=record.nvml.device_index if record.nvml is not None and record.environment.cuda_used else None,
    )


def _ended_unwritten(view: RankView, outcome, known: RankView | None = None) -> None:
    """A followed rank whose live.json is all it left (SIGKILL, the out-of-memory killer)."""
    if known is not None:  # a re-render: what the launcher's merge knew
        view.status, view.exit_code, view.error, view.ended_by = known.status, known.exit_code, known.error, known.ended_by
        return
    code = outcome.exit_codes.get(view.rank) if outcome is not None else None
    how = _process_end(code, outcome) if code is not None else "its process ended"
    view.status, view.exit_code, view.ended_by = "lost", code or 1, how
    view.error = (f"rank {view.rank} wrote no record: {how}; what it wrote while it ran (live.json) is kept")


def _process_end(code: int, outcome) -> str:
    """How a rank's process ended, from the launcher's exit code (a signal's name and what sends it)."""
    return f"its process ended with exit code {code}" + (
        f" ({killed_words(-code, getattr(outcome, 'oom_kills', None))})" if code < 0 else "")


def _lost_ranks(world_size: int, present: set[int], outcome, previous: RunRecord | None,
                heartbeats: dict[int, dict]) -> list[RankView]:
    """Ranks with no record: what the launcher or the previous merge knew of them."""
    known = {v.rank: v for v in (previous.ranks if previous else []) if v.rank not in present}
    lost = []
    for rank in range(world_size):
        if rank in present:
            continue
        if rank in known:
            lost.append(known[rank])
            continue
        code = outcome.exit_codes.get(rank) if outcome is not None else None
        how = _process_end(code, outcome) if code is not None else (
            "its record is not in this directory (another node's ranks: copy their rank-K folders here)")
        lost.append(RankView(rank=rank, status="lost", exit_code=code or 0, error=f"rank {rank} wrote no record: {how}",
                             ended_by=how, last_position=(heartbeats.get(rank) or {}).get("position")))
    return lost


def _merge_steps(merged: RunRecord, records: list[RunRecord], notes: list[str]) -> None:
    counts = {_identity(r).rank: len(r.steps) for r in records}
    common = min(counts.values())
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"rank {k}: {v}" for k, v in sorted(counts.items()))
        notes.append(f"the ranks disagree on step counts ({listed}); the merged run counts the {common} steps every "
                     "rank finished (an uneven sampler, or a loop whose length depends on the rank?)")
        merged.steps = merged.steps[:common]
    for i, step in enumerate(merged.steps):
        samples = [r.steps[i].samples for r in records]
        step.samples = None if any(s is None for s in samples) else sum(samples)


def _settle_status(merged: RunRecord, records: list[RunRecord], outcome, launcher_record: RunRecord | None) -> None:
    run = merged.run
    failed = [r for r in records if r.run.status in FAILED or (r.run.status == "exited" and r.run.exit_code)]
    lost = [v for v in merged.ranks if v.status == "lost" and v.exit_code]
    killed = _killed_first(lost, failed, outcome)
    if killed is not None:
        after = sorted(_identity(r).rank for r in failed)
        run.status, run.exit_code = "crashed", 1
        how = killed.ended_by or killed.error  # (a merge by an older version kept only the error)
        run.error = (f"rank {killed.rank} was killed first, with no record of its own ({how}); rank(s) "
                     f"{', '.join(map(str, after))} failed after it:\n{failed[0].run.error or ''}")
        run.ended_by = (f"rank {killed.rank} was killed; rank(s) {', '.join(map(str, after))} then failed in what "
                        "they were doing with it (their errors follow from its death), and their records are kept")
    elif failed:
        first = _first_to_end(failed, outcome)
        others = sorted(_identity(r).rank for r in records if r is not first)
        run.status, run.exit_code = first.run.status, first.run.exit_code or 1
        run.error = f"rank {_identity(first).rank} failed first:\n{first.run.error or ''}"
        if others:
            run.ended_by = (f"rank {_identity(first).rank} failed; the launcher stopped rank(s) "
                            f"{', '.join(map(str, others))}, whose partial records are kept")
    elif lost:
        run.status, run.exit_code = "crashed", 1
        run.error = lost[0].error + "\n"
    elif outcome is not None and outcome.stall is not None:
        run.status, run.ended_by = "stalled", outcome.stall.message
    elif outcome is not None and outcome.interrupted or any(r.run.status == "interrupted" for r in records):
        # the launcher's signal when it got one (SIGTERM: 143), else what stopped the ranks
        codes = [r.run.exit_code for r in records if r.run.status == "interrupted" and r.run.exit_code in (130, 143)]
        signalled = getattr(outcome, "signal_exit", None)
        run.status, run.exit_code = "interrupted", signalled or max(codes, default=130)
    elif launcher_record is not None and launcher_record.run.status in FAILED:
        run.status, run.exit_code, run.error = "crashed", 1, launcher_record.run.error
    run.wall_s = max(r.run.wall_s for r in records)


def _killed_first(lost: list[RankView], failed: list[RunRecord], outcome) -> RankView | None:
    """A rank ended by a signal without a record of its own (SIGKILL: the out-of-memory killer) while
    others failed: their errors are what its death did to them (a peer's connection reset in a
    collective), so it went first, unless the launcher saw one of them fail a second or more before
    it. torchrun's failure times are whole seconds, so its own "first failure" between ranks ending
    within one second is arbitrary (it named the rank whose connection was reset)."""
    killed = [v for v in lost if v.exit_code is not None and v.exit_code < 0]
    if not killed or not failed:
        return None
    times = getattr(outcome, "failure_times", None) or {}
    first = min(killed, key=lambda v: (times.get(v.rank, 0), v.rank))
    at = times.get(first.rank)
    if at and any(0 < times.get(_identity(r).rank, at) < at for r in failed):
        return None  # a failing rank went a second or more before it
    return first


def _first_to_end(failed: list[RunRecord], outcome) -> RunRecord:
    """The launcher's first failure, unless other failed ranks fell in the same second of its whole-second
    clock: then the ranks' own end times (time.time() at their t0 plus their wall time) order them."""
    named = getattr(outcome, "first_failure", None)
    times = getattr(outcome, "failure_times", None) or {}
    if named is not None:
        tied = [r for r in failed if named in times and times.get(_identity(r).rank) == times[named]]
        if len(tied) > 1:
            failed = tied
        else:
            for record in failed:
                if _identity(record).rank == named:
                    return record
    return min(failed, key=lambda r: _identity(r).epoch_t0 + r.run.wall_s)


def _previous_merge(run_dir: Path) -> RunRecord | None:
    try:
        record = RunRecord.load(run_dir / RANK_RECORD)
    except SchemaError:
        return None
    return record if record.ranks else None
