"""Numbers the distributed rules and the per-rank tables share, derived from one record.

Per rank and measured step: exposed communication (DDP's all-reduce not hidden behind
backward, plus the user's own collectives), data wait, extra work (evaluation, checkpoints,
logging) and the rest, compute. Across ranks: at each step, the rank whose last gradient
was ready last (DDP's timestamps on the host clock) is the one the others waited for, and
the others' wait is how much later it was. One rank's throughput without communication is
its step minus the transfer the fastest-waiting rank saw (the straggler's exposed
communication is pure transfer: nobody kept it waiting).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from torchdoctor.comm.verdict import judge
from torchdoctor.model.distributed_record import DdpModel, DdpStep, OneRankBaseline
from torchdoctor.model.record import RankView, RunRecord, StepSample
from torchdoctor.rules.noise import Change, Throughput, change, throughput

# Ranks whose training threads waited this share of their time for a CPU were sharing cores
# (the same threshold as a busy machine, diagnosis/reliability.py).
SHARED_RUNQUEUE_SHARE = 0.10

EXTRA = ("eval_s", "checkpoint_s", "logging_s")


@dataclass
class RankStep:
    rank: int
    step: StepSample
    exposed_s: float  # DDP's exposed all-reduce plus user collectives
    ready_at: float | None  # epoch time the rank's last synchronised gradient was ready

    @property
    def extra_s(self) -> float:
        return sum(getattr(self.step, k) for k in EXTRA)

    @property
    def compute_s(self) -> float:
        return max(0.0, self.step.duration_s - self.step.data_wait_s - self.extra_s - self.exposed_s)


@dataclass
class RankSummary:
    rank: int
    steps: int
    step_s: float
    data_wait_s: float
    compute_s: float
    exposed_s: float
    extra_s: float
    last_ready: int = 0  # steps at which the others waited for this rank
    caused_wait_s: float = 0.0  # the others' mean wait per step, over the steps it was last


@dataclass
class JobFacts:
    world_size: int
    step_s: float  # the job's mean measured step (the lowest rank's)
    ranks: dict[int, RankSummary] = field(default_factory=dict)
    by_step: dict[int, list[RankStep]] = field(default_factory=dict)
    last_at: dict[int, int] = field(default_factory=dict)  # step -> the rank the others waited for
    wait_at: dict[int, float] = field(default_factory=dict)  # step -> the others' mean wait then
    transfer_s: float = 0.0  # mean exposed communication of the rank nobody waited for (pure transfer)

    def one_rank_step_s(self) -> float:
        """A rank's step without the communication the job adds: its estimate of one rank alone."""
        return max(1e-9, self.step_s - self.transfer_s)


def ddp_model(record: RunRecord) -> DdpModel | None:
    info = record.distributed
    if info is None or not info.ddp:
        return None
    return max(info.ddp, key=lambda m: m.grad_bytes)


def world_size(record: RunRecord) -> int:
    info = record.distributed
    return info.identity.world_size if info is not None else 1


def rank_steps(view: RankView) -> dict[int, RankStep]:
    ddp = {s.step: s for s in view.ddp_steps}
    fsdp = {s.step: s.exposed_s for s in view.fsdp_steps}
    user: dict[int, float] = {}
    for site in view.collectives:
        for index, seconds in site.steps.items():
            user[int(index)] = user.get(int(index), 0.0) + seconds
    out = {}
    for step in view.measured_steps:
        d: DdpStep | None = ddp.get(step.index)
        exposed = (d.exposed_s if d else 0.0) + user.get(step.index, 0.0) + fsdp.get(step.index, 0.0)
        ready = d.backwards[-1].compute_end if d and d.backwards else None
        out[step.index] = RankStep(view.rank, step, exposed, ready)
    return out


def job_facts(record: RunRecord) -> JobFacts | None:
    """None unless the record merges two ranks or more with measured steps."""
    views = [v for v in record.ranks if v.steps]
    if len(views) < 2:
        return None
    per_rank = {v.rank: rank_steps(v) for v in views}
    common = set.intersection(*(set(steps) for steps in per_rank.values()))
    if not common:
        return None
    base = per_rank[min(per_rank)]
    facts = JobFacts(world_size=max(world_size(record), len(views)),
                     step_s=statistics.fmean(base[i].step.duration_s for i in common))
    for index in sorted(common):
        row = [per_rank[r][index] for r in sorted(per_rank)]
        facts.by_step[index] = row
        timed = [s for s in row if s.ready_at is not None]
        if len(timed) == len(row):
            last = max(row, key=lambda s: s.ready_at)
            waits = [last.ready_at - s.ready_at for s in row if s is not last]
        else:  # no DDP timestamps (collectives the script calls): the rank with the most own work
            last = max(row, key=lambda s: s.step.duration_s - s.exposed_s)
            waits = [s.exposed_s - last.exposed_s for s in row if s is not last]
        facts.last_at[index] = last.rank
        facts.wait_at[index] = max(0.0, statistics.fmean(waits)) if waits else 0.0
    for rank, steps in per_rank.items():
        chosen = [steps[i] for i in sorted(common)]
        summary = RankSummary(
            rank=rank, steps=len(chosen), step_s=statistics.fmean(s.step.duration_s for s in chosen),
            data_wait_s=statistics.fmean(s.step.data_wait_s for s in chosen),
            compute_s=statistics.fmean(s.compute_s for s in chosen),
            exposed_s=statistics.fmean(s.exposed_s for s in chosen),
            extra_s=statistics.fmean(s.extra_s for s in chosen))
        led = [i for i, r in facts.last_at.items() if r == rank]
        summary.last_ready = len(led)
        summary.caused_wait_s = statistics.fmean(facts.wait_at[i] for i in led) if led else 0.0
        facts.ranks[rank] = summary
    # the rank nobody waited for at a step saw only the transfer itself
    facts.transfer_s = statistics.fmean(
        next(s.exposed_s for s in facts.by_step[i] if s.rank == facts.last_at[i]) for i in sorted(common))
    return facts


def synced_per_step(record: RunRecord) -> tuple[float, float] | None:
    """(all-reduces, backward calls) per measured optimizer step on this record's rank."""
    info = record.distributed
    if info is None or not info.ddp_steps:
        return None
    measured = {s.index: s for s in record.measured_steps}
    rows = [(d.synced_backwards, measured[d.step].micro_batches) for d in info.ddp_steps if d.step in measured]
    if not rows:
        return None
    return statistics.fmean(r[0] for r in rows), statistics.fmean(r[1] for r in rows)


def shared_compute(record: RunRecord) -> str | None:
    """A sentence naming the ranks that share CPU cores or a GPU, or None: the modelled
    one-rank baseline (a rank's step minus its communication) assumes they share nothing."""
    views = [v for v in record.ranks if v.steps]
    by_host: dict[str, list[RankView]] = {}
    for view in views:
        by_host.setdefault(view.host, []).append(view)
    for host, ranks in by_host.items():
        gpus: dict[int, list[int]] = {}
        for view in ranks:
            if view.device_index is not None:
                gpus.setdefault(view.device_index, []).append(view.rank)
        for gpu, sharing in gpus.items():
            if len(sharing) > 1:
                return f"ranks {_ranks(sharing)} share GPU {gpu}"
        threads = [v.threads for v in ranks]
        cpus = min((v.cpus for v in ranks if v.cpus), default=None)
        if cpus and all(threads) and sum(threads) > cpus:
            return (f"ranks {_ranks([v.rank for v in ranks])} run {sum(threads)} compute threads in all "
                    f"({'/'.join(map(str, threads))} per rank) on {cpus} usable CPU core{'s' if cpus != 1 else ''}: "
                    "they share cores")
    waited = {v.rank: v.contention.runqueue_share for v in views if v.contention is not None
              and v.contention.runqueue_share is not None}
    if len(waited) >= 2 and statistics.fmean(waited.values()) >= SHARED_RUNQUEUE_SHARE:
        shares = ", ".join(f"rank {r} {w:.0%}" for r, w in sorted(waited.items()))
        return f"the ranks waited for a CPU ({shares} of their time): they share cores with each other or other processes"
    return None


def _ranks(ranks: list[int]) -> str:
    ranks = sorted(ranks)
    return ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}" if len(ranks) > 1 else str(ranks[0])


@dataclass
class ScalingBase:
    """The job against one rank alone: measured (a one-rank run) or modelled (a rank's step
    without the communication the job adds, which assumes the ranks share no compute)."""

    ratio: float  # the job's throughput / one rank's
    one_step_s: float  # one rank's step
    measured: OneRankBaseline | None = None
    change: Change | None = None  # with its noise band, when measured
    per_rank_batch_note: str = ""  # when the one-rank run's batch differs from a rank's in the job


def scaling_base(record: RunRecord, jf: JobFacts) -> ScalingBase:
    one = record.distributed.one_rank if record.distributed else None
    job = throughput(record)
    if one is None or job is None:
        return ScalingBase(jf.world_size * jf.one_rank_step_s() / jf.step_s, jf.one_rank_step_s())
    mine = Throughput(one.step_s, one.steps_per_s, one.samples_per_s, one.relative_sem)
    moved = change(mine, job)
    note = ""
    if moved.measure == "steps/s":  # no sample counts: the job's steps carry n batches of a rank's size
        moved = Change(moved.ratio * jf.world_size, None if moved.noise is None else moved.noise * jf.world_size,
                       "steps/s x ranks")
        note = "samples were not counted: the job's steps are taken as one batch per rank, of one rank's size"
    else:
        per_rank = [s.samples / jf.world_size for s in record.measured_steps if s.samples is not None]
        mean = statistics.fmean(per_rank) if per_rank else None
        if mean and one.samples_per_step and abs(mean - one.samples_per_step) > 0.05 * one.samples_per_step:
            note = (f"one rank alone took {one.samples_per_step:.0f} samples per step, a rank in the job "
                    f"{mean:.0f}: compared by samples/s")
    return ScalingBase(moved.ratio, one.step_s, one, moved, note)


@dataclass
class Prediction:
    """A fix for the N-rank job: its step time and throughput against one rank alone."""

    fix: str
    knob: str | None  # the --set that proves it, when there is one
    step_s: float
    ratio: float  # N-rank throughput / one rank's, with this fix
    basis: str


def grads_per_step(record: RunRecord) -> tuple[int, float]:
    """(bytes per all-reduce, all-reduces per measured step) of the biggest DDP model."""
    model = ddp_model(record)
    synced = synced_per_step(record)
    return (model.grad_bytes if model else 0), (synced[0] if synced else 0.0)


def predict_fixes(record: RunRecord, jf: JobFacts, base: ScalingBase | None = None) -> list[Prediction]:
    """Each fix's effect on the job's step: only the communication it changes is removed. The
    throughput against one rank is the measured ratio scaled by the step each fix predicts."""
    t_n, t_1, transfer = jf.step_s, jf.one_rank_step_s(), jf.transfer_s
    base = base or scaling_base(record, jf)
    model = ddp_model(record)
    _, synced = grads_per_step(record)

    def predicted(fix: str, knob: str | None, saved: float, basis: str) -> Prediction:
        step = max(t_1, t_n - max(0.0, saved))
        return Prediction(fix, knob, step, base.ratio * t_n / step, basis)

    now = ("measured: the job's samples/s over one rank's, both measured" if base.measured is not None else
           "modelled: one rank alone taken as a rank's step without the job's communication")
    out = [Prediction("now", None, t_n, base.ratio, now)]
    if synced > 1.5:
        out.append(predicted(f"no_sync() on {synced - 1:.0f} of {synced:.0f} micro-batches", "no_sync=true",
                             transfer * (synced - 1) / synced, "one all-reduce per step instead of one per micro-batch"))
    buffers = model.buffer_sync_s if model is not None and model.broadcast_buffers else 0.0
    if model is not None and model.comm_hook is None:
        half = "bf16" if model.backend == "nccl" else "fp16"  # DDP's bf16 hook needs NCCL; gloo takes fp16
        out.append(predicted(f"{half} gradient compression ({half}_compress_hook)", f"comm_hook={half}",
                             max(0.0, transfer - buffers) / 2,
                             "half the bytes of fp32 gradients; the all-reduce transfer halves, latency stays"))
    if buffers > 0 and model.buffers_changed is False:
        out.append(predicted("broadcast_buffers=False (the buffers never change)", None, buffers,
                             "no buffer broadcast before each forward"))
    comm = record.distributed.comm if record.distributed else None
    verdict = judge(comm) if comm is not None else None
    if verdict is not None and verdict.slow:  # only a link below what it should carry can be repaired
        out.append(predicted(f"the link at its expected {verdict.expected_gbps:.1f} GB/s", None,
                             transfer * (1 - verdict.share), "transfer scaled by measured / expected bandwidth"))
    alone = ("one rank alone, measured" if base.measured is not None else
             "one rank alone: its step without the job's communication")
    out.append(Prediction("train on one rank", "nproc=1", base.one_step_s, 1.0, alone))
    return out
