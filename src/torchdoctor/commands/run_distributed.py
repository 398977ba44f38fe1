"""The multi-rank side of `torchdoctor run`: launching the ranks (`--nproc-per-node`), being
one of them (started by that launch or by torchrun directly), and the merged run directory.
commands/run.py decides which; this module does it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from torchdoctor.errors import EXIT_SCRIPT_FAILED, UsageError
from torchdoctor.model.limits import Limits


def validate(opts, nproc: int | None) -> None:
    if nproc is not None and nproc < 1:
        raise UsageError("--nproc-per-node must be at least 1")
    if opts.nnodes < 1:
        raise UsageError("--nnodes must be at least 1")
    if opts.nnodes > 1 and (opts.rdzv_endpoint is None or opts.node_rank is None):
        raise UsageError("--nnodes > 1 needs --node-rank R and --rdzv-endpoint HOST:PORT (the same endpoint on "
                         "every node: node 0's address and a free port)")
    if opts.node_rank is not None and not 0 <= opts.node_rank < opts.nnodes:
        raise UsageError(f"--node-rank {opts.node_rank} is outside 0..{opts.nnodes - 1} (--nnodes {opts.nnodes})")


def child_argv(opts, raw_knobs: list[str], run_dir: Path, target: str, args: list[str], module: bool) -> list[str]:
    """The `torchdoctor run` command line every rank runs: the same limits and knobs."""
    limits = Limits(warmup=opts.warmup, steps=opts.steps, max_seconds=opts.max_seconds)
    argv = ["--out", str(run_dir.resolve()), *limits.argv(), "--format", opts.format]
    if getattr(opts, "follow", False):  # each rank follows itself; the launcher draws the panel and exports
        argv += ["--follow", "--timeline-every", f"{opts.timeline_every:g}", "--no-live"]
        if opts.stall_timeout is not None:
            argv += ["--stall-timeout", f"{opts.stall_timeout:g}"]
    if opts.trace is not None:
        argv.append("--trace" if opts.trace else "--no-trace")
    for setting in raw_knobs:
        if setting.partition("=")[0].strip().replace("-", "_") != "nproc":
            argv += ["--set", setting]
    return argv + (["-m", target] if module else [target]) + list(args)


def launch_ranks(opts, raw_knobs: list[str], nproc: int, target: str, args: list[str], module: bool, finish,
                 follow=None) -> int:
    """The launching process: start the ranks, wait, merge, report. `finish(record, run_dir)`
    diagnoses, writes and prints a record, returning the run's exit code. `follow` (FollowOptions,
    `run --follow`): the ranks follow themselves; this process reads their timelines for the live
    panel, the exporters and a rank that becomes a straggler (run/follow/job.py)."""
    from torchdoctor.diagnosis.ranks import merge_run_dir
    from torchdoctor.model.layout import create_run_dir
    from torchdoctor.run.ranks.launch import LaunchRequest, check_endpoint, launch
    from torchdoctor.run.target import check_target

    check_target(target, module)
    check_endpoint(opts.rdzv_endpoint, opts.node_rank or 0)
    run_dir = create_run_dir(opts.out, target)
    request = LaunchRequest(nproc_per_node=nproc, nnodes=opts.nnodes, node_rank=opts.node_rank or 0,
                            rdzv_endpoint=opts.rdzv_endpoint, stall_s=_stall_s(opts),
                            child_argv=child_argv(opts, raw_knobs, run_dir, target, args, module))
    watch = None
    if follow is not None:
        from torchdoctor.run.follow.job import JobWatch

        first = request.node_rank * nproc
        watch = JobWatch(run_dir, list(range(first, first + nproc)), follow)
        request.output = watch.output  # the ranks' lines pass through here, so the panel never splits them
        with watch:
            outcome = launch(request, run_dir)
    else:
        outcome = launch(request, run_dir)
    if outcome.error and not any(run_dir.glob("rank-*/record.json")):
        raise UsageError(f"the launcher could not start the ranks: {outcome.error}; check --rdzv-endpoint and "
                         "--nnodes/--node-rank (every node must use the same endpoint)")
    record = merge_run_dir(run_dir, outcome)
    if watch is not None:
        watch.blackboxes(record)
        if record.distributed is not None:
            record.distributed.notes.extend(f"following the ranks: {e}" for e in watch.errors[:5])
    if _wants_one_rank(opts, nproc, record, outcome):
        _measure_one_rank(opts, raw_knobs, nproc, target, args, module, record, run_dir)
    if any(k.partition("=")[0].strip() == "nproc" for k in raw_knobs):
        from torchdoctor.model.record import KnobOutcome

        record.knobs.append(KnobOutcome("nproc", str(nproc), applied=True,
                                        detail=f"launched {nproc} rank(s) per node (as --nproc-per-node {nproc})"))
    code = finish(record, run_dir)
    message = launch_message(record, outcome, run_dir)
    if message:
        sys.stderr.write(f"torchdoctor: {message}\n")
    if outcome.stall is not None or outcome.error:
        return EXIT_SCRIPT_FAILED
    return code


# A one-rank run costs about as long as the job's own (the same steps on one rank): measured
# by default when the job took at most this long, or whenever ranks share cores or a GPU (the
# model of one rank is wrong then).
ONE_RANK_AFFORDABLE_S = 60.0


def _wants_one_rank(opts, nproc: int, record, outcome) -> bool:
    from torchdoctor.rules.rank_facts import shared_compute

    mode = getattr(opts, "one_rank", "auto")
    if getattr(opts, "follow", False) and mode == "auto":
        return False  # a followed job runs to its end: running it again as one rank is asked for (always)
    if mode == "never" or nproc < 2 or opts.nnodes != 1 or outcome.stall is not None or outcome.error \
            or outcome.interrupted or record.run.status in ("crashed", "interrupted", "stalled") \
            or not record.measured_steps:
        return False
    return mode == "always" or shared_compute(record) is not None or record.run.wall_s <= ONE_RANK_AFFORDABLE_S


def _measure_one_rank(opts, raw_knobs: list[str], nproc: int, target: str, args: list[str], module: bool, record,
                      run_dir: Path) -> None:
    """One rank alone, the same script, limits, knobs and threads per rank, in RUN_DIR/one-rank:
    the scaling verdict's baseline, measured instead of modelled."""
    import time

    from torchdoctor.diagnosis.ranks import ONE_RANK_DIR, measured_one_rank, one_rank_failure
    from torchdoctor.run.ranks.launch import LaunchRequest, launch

    sys.stderr.write(f"torchdoctor: measuring one rank alone for the scaling verdict (TD606): the same run with 1 "
                     f"rank instead of {nproc} (the job took {record.run.wall_s:.0f} s; --one-rank never skips "
                     "it)\n")
    one_dir = run_dir / ONE_RANK_DIR
    one_dir.mkdir(exist_ok=True)
    started = time.monotonic()
    request = LaunchRequest(nproc_per_node=1, stall_s=_stall_s(opts),
                            child_argv=child_argv(opts, raw_knobs, one_dir, target, args, module))
    outcome = launch(request, one_dir)
    seconds = time.monotonic() - started
    baseline = measured_one_rank(run_dir, seconds) if not outcome.error else None
    notes = record.distributed.notes
    if baseline is None:
        why = outcome.error or one_rank_failure(run_dir)
        notes.append(f"one rank alone gave no baseline ({why}; its run is in {one_dir}): the scaling verdict is a "
                     "model")
        return
    record.distributed.one_rank = baseline
    notes.append(f"one rank alone was measured for the scaling verdict: {baseline.steps} steps in {seconds:.0f} s "
                 f"(its run: {one_dir})")


def launch_message(record, outcome, run_dir: Path) -> str | None:
    if outcome.stall is not None:
        return (f"the job stalled and was stopped: {outcome.stall.message}. Each rank's partial record is in "
                f"{run_dir}/rank-*/ (raise --stall-timeout if a step legitimately takes longer)")
    if outcome.error:
        return f"the launcher failed: {outcome.error}; partial records are in {run_dir}"
    return None


def run_as_rank(opts, launch, target: str, args: list[str], module: bool, knobs: dict, finish, output_guard) -> int:
    """This process is one rank: run the script under the probes, write rank-K/record.json.
    A rank started by torchrun directly (no launcher of ours) merges its node's ranks when it
    is local rank 0."""
    from torchdoctor.diagnosis.ranks import merge_run_dir
    from torchdoctor.run.progress import RunProgress
    from torchdoctor.run.ranks.child import run_rank, wait_for_neighbours
    from torchdoctor.run.ranks.identity import RANKS_DIR_ENV, default_ranks_dir
    from torchdoctor.run.runner import RunRequest

    if launch.coordinated:
        ranks_dir = Path(os.environ[RANKS_DIR_ENV])
    else:
        ranks_dir = opts.out or default_ranks_dir(target, launch)
    follow = None
    exports = [v for v in (opts.tensorboard, opts.prometheus_port, opts.prometheus_textfile, opts.otlp_endpoint)
               if v is not None] if getattr(opts, "follow", False) else []
    if exports and not launch.coordinated:
        raise UsageError("the exporters of a followed job run in the launcher: start the ranks with `torchdoctor run "
                         "--follow --nproc-per-node N ...` instead of torchrun, or drop the export options")
    if getattr(opts, "follow", False):  # this rank's timeline, changes, windows and black box; no panel, no export
        from torchdoctor.run.follow.follower import FollowOptions

        follow = FollowOptions(every_s=opts.timeline_every, stall_s=opts.stall_timeout)

    progress = RunProgress(total_steps=0 if follow is not None else opts.steps, warmup=opts.warmup,
                           enabled=None if launch.rank == 0 else False,
                           whole_lines=True)  # the other ranks print to the same terminal

    def make_request(on_probed, on_abandon) -> RunRequest:
        return RunRequest(target=target, args=list(args), module=module, warmup=opts.warmup, steps=opts.steps,
                          max_seconds=opts.max_seconds, trace=opts.trace, knobs=knobs, listeners=[progress],
                          on_abandon=on_abandon, on_probed=on_probed, follow=follow)

    with output_guard(opts.format == "json") as report_stream:
        record, code = run_rank(launch, ranks_dir, make_request)
        progress.close(f"torchdoctor: rank {launch.rank}: {record.run.status} after {len(record.steps)} steps")
        if record.run.error and not launch.coordinated:
            sys.stderr.write(record.run.error)
        if not launch.coordinated and launch.local_rank == 0:
            wait_for_neighbours(ranks_dir, launch.local_world_size)
            merged = merge_run_dir(ranks_dir, None)
            finish(merged, ranks_dir, report_stream)
    return code


# Under --follow each rank's own follower finds a stall first and writes its black box (every thread's
# stack); the launcher's watch, which names the rank the others wait for, is the backstop after it.
FOLLOW_STALL_BACKSTOP_S = 1800.0


def _stall_s(opts) -> float:
    """--stall-timeout, or its default for the ranks (60 s); under --follow, after the ranks' own."""
    if getattr(opts, "follow", False):
        return FOLLOW_STALL_BACKSTOP_S if opts.stall_timeout is None else 2 * opts.stall_timeout + 5
    return 60.0 if opts.stall_timeout is None else opts.stall_timeout
