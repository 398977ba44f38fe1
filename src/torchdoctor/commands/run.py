"""`torchdoctor run [OPTIONS] SCRIPT.py [ARGS...]` (or `-m MODULE`): run the script under the
probes, diagnose the record, write the run directory, print the report."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
from pathlib import Path
from typing import Iterator, Sequence, TextIO

from torchdoctor.commands.parser import CommandParser, non_negative
from torchdoctor.diagnosis.steps import no_step_explanation
from torchdoctor.errors import (EXIT_INTERRUPTED, EXIT_OK, EXIT_SCRIPT_FAILED, EXIT_TERMINATED, EXIT_USAGE,
                                Interrupted, NoStepsMeasured, ScriptFailed, UsageError)
from torchdoctor.model.limits import DEFAULT_MAX_SECONDS, DEFAULT_STEPS, DEFAULT_WARMUP, Limits
from torchdoctor.report import RENDERERS, emit

HELP = "run a training script under the probes and diagnose it"


def parser() -> argparse.ArgumentParser:
    from torchdoctor.run.knobs.spec import knob_help

    p = CommandParser(prog="torchdoctor run", description=HELP,
                      formatter_class=argparse.RawDescriptionHelpFormatter,
                      epilog="knobs for --set (this run only, the script is not edited):\n" + knob_help())
    p.add_argument("--steps", type=non_negative(int), default=None,
                   help=f"optimizer steps to measure (default {DEFAULT_STEPS}; with --follow: no limit)")
    p.add_argument("--warmup", type=non_negative(int), default=DEFAULT_WARMUP,
                   help=f"steps run before measuring (default {DEFAULT_WARMUP})")
    p.add_argument("--max-seconds", type=non_negative(float), default=None,
                   help=f"stop the script after this long (default {DEFAULT_MAX_SECONDS:g}; with --follow: no limit)")
    p.add_argument("--out", type=Path, help="run directory (default ./torchdoctor-runs/<time>-<script>/)")
    p.add_argument("--format", choices=sorted(RENDERERS), default="text", help="what to print")
    p.add_argument("--trace", action=argparse.BooleanOptionalAction, default=None,
                   help="save a torch.profiler trace of 2 steps (default: only when CUDA is used)")
    p.add_argument("--set", dest="knobs", action="append", default=[], metavar="KNOB=VALUE",
                   help="apply a fix or a measurement for this run only (repeatable; see below)")
    follow = p.add_argument_group("the whole job (--follow)")
    follow.add_argument("--follow", action="store_true",
                        help="let the script run to its end: a timeline of every step, changes found along the run, "
                             "a black box on a crash, a signal or a stall (with --nproc-per-node: every rank's, and "
                             "a rank that becomes a straggler)")
    follow.add_argument("--timeline-every", type=non_negative(float), default=10.0, metavar="S",
                        help="write the timeline and live.json every S seconds (default 10)")
    follow.add_argument("--tensorboard", type=Path, metavar="DIR",
                        help="also write the figures as TensorBoard scalars to DIR (pip install 'torchdoctor[tensorboard]')")
    follow.add_argument("--prometheus-port", type=int, metavar="PORT",
                        help="serve the figures for Prometheus on http://0.0.0.0:PORT/metrics "
                             "(pip install 'torchdoctor[prometheus]')")
    follow.add_argument("--prometheus-textfile", type=Path, metavar="FILE",
                        help="write the figures to FILE for node-exporter's textfile collector")
    follow.add_argument("--otlp-endpoint", metavar="URL",
                        help="push the figures and events to an OpenTelemetry collector over OTLP/HTTP, e.g. "
                             "http://localhost:4318 (pip install 'torchdoctor[otlp]')")
    follow.add_argument("--live", action=argparse.BooleanOptionalAction, default=None,
                        help="a live panel on stderr (default: on a terminal only, never in pipes or CI)")
    dist = p.add_argument_group("several ranks (through torch.distributed.run, torchrun's launcher)")
    dist.add_argument("--nproc-per-node", type=int, metavar="N", help="ranks on this machine (each runs the script)")
    dist.add_argument("--nnodes", type=int, default=1, metavar="M", help="machines in the job (default 1)")
    dist.add_argument("--node-rank", type=int, metavar="R", help="this machine's place among them (0..M-1)")
    dist.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="where the ranks meet (node 0's address, a free port)")
    dist.add_argument("--one-rank", choices=("auto", "always", "never"), default="auto",
                      help="after the job, measure one rank alone for the scaling verdict (TD606): auto (default) "
                           "when the ranks share CPU cores or a GPU, or the job took at most 60 s; always; never")
    dist.add_argument("--stall-timeout", type=non_negative(float), default=None, metavar="S",
                      help="stop every rank when none finishes a step for S seconds (default 60; with --follow: "
                           "no step and no batch for 100 usual steps, twice the longest gap seen, at least 300 s)")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module, like `python -m` (then its args)")
    p.add_argument("target", nargs="?", help="the training script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return p


def main(argv: Sequence[str]) -> int:
    from torchdoctor.run.knobs.spec import parse_settings

    argv = list(argv)
    split = _module_split(argv)
    if split is not None:  # `-m MODULE ARGS...`: everything after the module is the module's
        opts = parser().parse_args(argv[:split])
        if split + 1 >= len(argv):
            raise UsageError("-m needs a module name, e.g. torchdoctor run -m mypkg.train")
        target, args, module = argv[split + 1], argv[split + 2:], True
    else:
        opts = parser().parse_args(argv)
        if not opts.target:
            raise UsageError("no script given; usage: torchdoctor run [OPTIONS] train.py [ARGS...]")
        target, args, module = opts.target, opts.args, False
    target, args, module = _through_torchrun(opts, target, args, module)
    _resolve_limits(opts)
    Limits(warmup=opts.warmup, steps=opts.steps, max_seconds=opts.max_seconds).check()
    knobs = parse_settings(opts.knobs)
    if opts.follow and opts.nnodes != 1:
        raise UsageError("--follow follows the ranks of one machine for now (--nproc-per-node N); drop --nnodes, or "
                         "drop --follow for the bounded multi-node run")
    distributed = _distributed(opts, knobs, target, args, module)
    if distributed is not None:
        return distributed
    # Parsed and checked: now load the pipeline (torch with it), which --help never needs.
    from torchdoctor.run.progress import RunProgress
    from torchdoctor.run.runner import RunRequest, execute
    from torchdoctor.run.target import check_target
    from torchdoctor.model.layout import create_run_dir

    check_target(target, module)
    follow = _follow_options(opts) if opts.follow else None  # a missing exporter library: before the directory
    run_dir = create_run_dir(opts.out, target)
    progress = RunProgress(total_steps=0 if opts.follow else opts.steps, warmup=opts.warmup,
                           enabled=False if follow is not None and follow.panel is not None else None)
    with _script_output_kept_off_stdout(opts.format == "json") as report_stream:
        exporters = list(follow.sinks) if follow is not None else []

        def finish(record) -> int:
            return _finish(record, run_dir, opts.format, progress, report_stream, exporters)

        request = RunRequest(target=target, args=list(args), module=module, warmup=opts.warmup,
                             steps=opts.steps, max_seconds=opts.max_seconds, trace=opts.trace, knobs=knobs,
                             listeners=[progress] + ([follow.panel] if follow is not None and follow.panel else []),
                             on_abandon=finish, follow=follow)
        record = execute(request, run_dir)
        if any(run_dir.glob("rank-*/record.json")):  # the script spawned its ranks (torch.multiprocessing.spawn)
            from torchdoctor.diagnosis.ranks import merge_run_dir

            record = merge_run_dir(run_dir, launcher_record=record)
        code = finish(record)
    if code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        raise Interrupted(_outcome_message(record, run_dir), code)
    if code != EXIT_OK:
        raise _OUTCOME_ERRORS[code](_outcome_message(record, run_dir))
    return EXIT_OK


def _through_torchrun(opts, target: str, args: list[str], module: bool) -> tuple[str, list[str], bool]:
    """A target that is torchrun's launcher (`-m torch.distributed.run ... train.py`): the doctor would measure
    the agent, which trains nothing; its ranks and script are taken from torchrun's own command line instead and
    launched the doctor's way (through the same torch.distributed.run), said on stderr."""
    from torchdoctor.run.ranks.launch import from_torchrun, is_torchrun

    if not is_torchrun(target, module):
        return target, args, module
    if opts.nproc_per_node is not None or opts.nnodes != 1:
        raise UsageError("the ranks are given twice (torchrun's options and the doctor's --nproc-per-node/--nnodes); "
                         "keep one: torchdoctor run --nproc-per-node N train.py ARGS")
    job = from_torchrun(args)
    opts.nproc_per_node, opts.nnodes, opts.node_rank, opts.rdzv_endpoint = (
        job.nproc_per_node, job.nnodes, job.node_rank, job.rdzv_endpoint)
    nodes = f" --nnodes {job.nnodes} --node-rank {job.node_rank} --rdzv-endpoint {job.rdzv_endpoint}" \
        if job.nnodes > 1 else ""
    sys.stderr.write(f"torchdoctor: {target} is torchrun's launcher: measuring its {job.nproc_per_node} rank(s) of "
                     f"{job.target} as `torchdoctor run --nproc-per-node {job.nproc_per_node}{nodes}"
                     f"{' -m' if job.module else ''} {job.target} ...`\n")
    return job.target, job.args, job.module


def _resolve_limits(opts) -> None:
    """The defaults of --steps and --max-seconds: a bounded window, or with --follow none at all.
    The export options belong to --follow."""
    from torchdoctor.model.limits import FOLLOW_MAX_SECONDS, FOLLOW_STEPS

    exports = [name for name, value in (("--tensorboard", opts.tensorboard), ("--prometheus-port", opts.prometheus_port),
                                        ("--prometheus-textfile", opts.prometheus_textfile),
                                        ("--otlp-endpoint", opts.otlp_endpoint)) if value is not None]
    if exports and not opts.follow:
        raise UsageError(f"{exports[0]} sends a followed run's figures; add --follow")
    if opts.prometheus_port is not None and not 0 < opts.prometheus_port < 65536:
        raise UsageError(f"--prometheus-port must be a port number from 1 to 65535, not {opts.prometheus_port}")
    if opts.follow and not opts.timeline_every > 0:
        raise UsageError("--timeline-every must be a positive number of seconds, e.g. --timeline-every 10")
    if opts.steps is None:
        opts.steps = FOLLOW_STEPS if opts.follow else DEFAULT_STEPS
    if opts.max_seconds is None:
        opts.max_seconds = FOLLOW_MAX_SECONDS if opts.follow else DEFAULT_MAX_SECONDS


def _follow_options(opts):
    """What --follow does besides the timeline: the exporters and the live panel (run/follow/)."""
    from torchdoctor.run.follow.follower import FollowOptions

    # the exporters get the report's findings after the run, then this command closes them (_finish)
    follow = FollowOptions(every_s=opts.timeline_every, stall_s=opts.stall_timeout, close_sinks=False)
    if any(v is not None for v in (opts.tensorboard, opts.prometheus_port, opts.prometheus_textfile, opts.otlp_endpoint)):
        from torchdoctor.integrations.exporters import make_exporters

        per_rank = opts.nproc_per_node is not None or any(k.partition("=")[0].strip() == "nproc" for k in opts.knobs)
        follow.sinks = make_exporters(tensorboard=opts.tensorboard, prometheus_port=opts.prometheus_port,
                                      prometheus_textfile=opts.prometheus_textfile, otlp_endpoint=opts.otlp_endpoint,
                                      per_rank=per_rank)
    if opts.live is not False and opts.format != "json":
        from torchdoctor.run.follow.panel import LivePanel

        panel = LivePanel.for_terminal(sys.stderr, force=bool(opts.live))
        if panel is not None:
            from torchdoctor.diagnosis.run import top_findings

            follow.panel = panel
            follow.top_findings = top_findings  # one run's; a job's launcher shows its ranks' changes instead
    return follow


def _distributed(opts, knobs: dict, target: str, args: list[str], module: bool) -> int | None:
    """A multi-rank run (launching the ranks, or being one of them); None for a plain run."""
    from torchdoctor.run.ranks.identity import launch_env

    nproc = knobs.pop("nproc", None) or opts.nproc_per_node
    launch = launch_env()
    if launch is None and nproc is None and opts.nnodes == 1:
        return None
    from torchdoctor.commands import run_distributed as ranks

    ranks.validate(opts, nproc)
    if launch is not None:
        def finish_merged(record, run_dir: Path, stream: TextIO) -> int:
            return _finish(record, run_dir, opts.format, _NoProgress(), stream)

        return ranks.run_as_rank(opts, launch, target, args, module, knobs, finish_merged,
                                 _script_output_kept_off_stdout)
    follow = _follow_options(opts) if opts.follow else None  # the job's exporters and panel, in this launcher
    exporters = list(follow.sinks) if follow is not None else []

    def finish(record, run_dir: Path) -> int:
        return _finish(record, run_dir, opts.format, _NoProgress(), sys.stdout, exporters)

    return ranks.launch_ranks(opts, opts.knobs, nproc or 1, target, args, module, finish, follow=follow)


class _NoProgress:
    def close(self, message: str) -> None:
        sys.stderr.write(message + "\n")


def _finish(record, run_dir: Path, fmt: str, progress, stream: TextIO, exporters=()) -> int:
    """Everything after the script: evidence, diagnosis, the run directory, the printed
    report. Also called from the watchdog's thread when it must end a script that would not
    stop, so it never raises: it returns the exit code."""
    from torchdoctor.model.layout import HTML_FILE
    from torchdoctor.pipeline import complete_run
    from torchdoctor.run.children import end_descendants

    report = complete_run(run_dir, record)
    _close_exporters(exporters, report)
    if record.run.status not in ("completed", "exited"):  # stopped by us: what the script started ends with it
        end_descendants()
    progress.close(f"torchdoctor: {record.run.status} after {len(record.steps)} steps; run directory: {run_dir} "
                   f"(open {run_dir / HTML_FILE} for the charts)")
    if record.run.error:
        sys.stderr.write(record.run.error)
    emit(report, fmt, stream)
    stream.flush()
    code = _outcome_code(record)
    if code != EXIT_OK and threading.current_thread() is not threading.main_thread():
        sys.stderr.write(f"torchdoctor: error: {_outcome_message(record, run_dir)}\n")
    return code


def _close_exporters(exporters, report) -> None:
    """`--follow`'s exporters: the findings as events, then closed (an exporter's failure only says so)."""
    for sink in exporters:
        for method, args in (("on_report", (report,)), ("close", ())):
            try:
                getattr(sink, method)(*args)
            except Exception as exc:  # noqa: BLE001 - the run directory is written; the export is extra
                sys.stderr.write(f"torchdoctor: {sink.describe()}: {method} failed: {type(exc).__name__}: {exc}\n")


@contextlib.contextmanager
def _script_output_kept_off_stdout(redirect: bool) -> Iterator[TextIO]:
    """With `--format json` stdout carries the report alone: the script's own output (Python
    prints and anything C code writes to file descriptor 1) goes to stderr while it runs.
    Yields the stream the report is written to."""
    if not redirect:
        yield sys.stdout
        return
    try:
        on_fd1 = sys.stdout.fileno() == 1
    except (AttributeError, OSError, ValueError):  # a replaced sys.stdout (a notebook, a test)
        on_fd1 = False
    if not on_fd1:
        report = sys.stdout
        with contextlib.redirect_stdout(sys.stderr):
            yield report
        return
    sys.stdout.flush()
    saved_fd = os.dup(1)
    report = os.fdopen(os.dup(saved_fd), "w", encoding="utf-8")
    os.dup2(2, 1)
    try:
        yield report
    finally:
        sys.stdout.flush()
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
        report.close()


_VALUE_OPTIONS = {"--steps", "--warmup", "--max-seconds", "--out", "--format", "--set", "--nproc-per-node",
                  "--nnodes", "--node-rank", "--rdzv-endpoint", "--stall-timeout", "--one-rank", "--timeline-every",
                  "--tensorboard", "--prometheus-port", "--prometheus-textfile", "--otlp-endpoint"}


def _module_split(argv: list[str]) -> int | None:
    """Index of a `-m` that comes before the script, as in `python -m`; None if absent."""
    for i, token in enumerate(argv):
        if token == "-m":
            return i
        if not token.startswith("-") and (i == 0 or argv[i - 1] not in _VALUE_OPTIONS):
            return None  # the script path: anything after it belongs to the script
    return None


def _outcome_code(record) -> int:
    from torchdoctor.run.outcome import exit_code_of

    run = record.run
    code = exit_code_of(run.status, run.exit_code)
    if code == EXIT_OK and not record.steps and run.status != "loader-only" and not _trained_elsewhere(record):
        return EXIT_USAGE
    return code


def _trained_elsewhere(record) -> bool:
    """The script ran to its end and trained in processes it started itself (said in the
    report): a finished run with what could be measured, not a usage error."""
    return record.run.status in ("completed", "exited") and record.run.exit_code == 0 \
        and record.run.backward_calls == 0 and any(n.probe == "spawn" for n in record.probe_notes)


def _outcome_message(record, run_dir: Path) -> str:
    run = record.run
    if run.status == "crashed" and record.memory is not None and record.memory.failure is not None:
        return (f"{run.script} ran out of memory (traceback above); what was live and what to change (TD503) are "
                f"in {run_dir}")
    if run.status == "crashed":
        return f"{run.script} raised (traceback above); the partial run is in {run_dir}"
    if run.status == "exited":
        return f"{run.script} exited with code {run.exit_code}; the partial run is in {run_dir}"
    if run.status == "stalled":
        return f"{run.script} stalled and was stopped; every thread's stack and the last steps are in {run_dir}"
    if run.status == "interrupted":
        how = "terminated (SIGTERM)" if run.exit_code == EXIT_TERMINATED else "interrupted"
        return f"{how}; the partial run is in {run_dir}"
    return f"{no_step_explanation(record)} (what was measured is in {run_dir})"


_OUTCOME_ERRORS = {EXIT_SCRIPT_FAILED: ScriptFailed, EXIT_USAGE: NoStepsMeasured}
