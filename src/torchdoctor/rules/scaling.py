"""Rules across the ranks of a merged run: TD602 slow-interconnect (the communication check
against what the path should carry), TD605 straggler-rank (the rank the others wait for, and
why), TD606 scaling-verdict (what N ranks give against one, and what each fix would give)."""

from __future__ import annotations

import math
import statistics

from torchdoctor.comm.verdict import judge
from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.base import MB, MIN_REPORTED_SPEEDUP, amdahl, ms
from torchdoctor.rules.distributed import DistributedRule
from torchdoctor.rules.fsdp import fsdp_root
from torchdoctor.rules.facts import RunFacts
from torchdoctor.model.paths import library_of
from torchdoctor.rules.noise import Z_95, relative_sem
from torchdoctor.rules.rank_facts import (JobFacts, ddp_model, grads_per_step, predict_fixes, scaling_base,
                                         shared_compute)

# Which rank is ready last at a step is partly chance (scheduling, a busy core). A rank is the
# one the others wait for when what it does more explains at least half of their wait
# (evaluation, logging or data wait only it has), or when it is last so often that chance would
# do it less than 1 time in 100 (binomial, each rank equally likely to be last).
EXPLAINED_SHARE = 0.5
CHANCE_P = 0.01
MIN_STEPS_FOR_CHANCE = 8
# Scaling: DDP keeps near-linear throughput on a link that carries its gradients (Li et al.,
# "PyTorch Distributed", VLDB 2020, fig. 9: ~90 % per-GPU efficiency). Under 60 % is far from that.
LOW_EFFICIENCY = 0.6


def _location(record: RunRecord):
    model = ddp_model(record)
    if model is not None and model.created_at is not None:
        return model.created_at
    root = fsdp_root(record)
    if root is not None:
        return root
    return record.distributed.identity.init_location if record.distributed else None


class SlowInterconnect(DistributedRule):
    code = "TD602"
    slug = "slow-interconnect"
    title = "Collective bandwidth far below what the link should give"
    rationale = (
        "Gradient all-reduce time is set by the slowest link between ranks. Bandwidth far below "
        "what the path should carry (a transport turned off, traffic through host memory or sockets "
        "instead of PCIe peer-to-peer or NVLink, WSL2, a wrong network interface) leaves the ranks "
        "waiting for communication."
    )
    fix = (
        "Find why the path is slow (`torchdoctor comm` shows the transport NCCL chose and the settings "
        "that cripple it), and meanwhile send less, less often:\n```python\nmodel = DDP(model, "
        "bucket_cap_mb=100, gradient_as_bucket_view=True)\nmodel.register_comm_hook(None, "
        "default_hooks.bf16_compress_hook)\n```"
    )
    example = "model = DDP(model)  # ranks joined by 1 GB/s where the link carries 24"

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        comm = record.distributed.comm if record.distributed and self.multi_rank(record) else None
        if comm is None or not facts.step_s:
            return []
        verdict = judge(comm)
        if not verdict.slow:
            return []
        jf = facts.job
        transfer = jf.transfer_s if jf else 0.0
        saved = transfer * (1 - verdict.share)
        speedup, severity = self.reported(amdahl(facts.step_s, saved), below=Severity.MEDIUM)
        return [self.finding(
            title=f"all-reduce reaches {verdict.measured_gbps:.2f} GB/s; this path should carry "
                  f"{verdict.expected_gbps:.1f} GB/s",
            message=(f"{verdict.text}. Communication the ranks could not hide took {ms(transfer):.1f} ms of each "
                     f"{ms(facts.step_s):.1f} ms step."),
            location=_location(record),
            evidence={"busbw_gbps": verdict.measured_gbps, "expected_gbps": verdict.expected_gbps,
                      "share": round(verdict.share, 3), "link": comm.link.description if comm.link else None,
                      "simulated_link_gbps": comm.simulated_link_gbps, "exposed_transfer_ms": ms(transfer)},
            speedup=speedup, severity=severity,
            basis=("Amdahl on the exposed transfer (the rank nobody waited for), shrunk by measured / expected "
                   "bus bandwidth"))]


class StragglerRank(DistributedRule):
    code = "TD605"
    slug = "straggler-rank"
    title = "One rank is the one the others wait for"
    rationale = (
        "A collective finishes when the last rank arrives, so every rank runs at the pace of the "
        "slowest. Work only one rank does (evaluation or logging on rank 0, a slower data shard) "
        "makes the others idle in the next all-reduce."
    )
    fix = (
        "Give every rank the same work: shard evaluation across ranks (a DistributedSampler on the "
        "validation set, then all-reduce the metric), or evaluate less often; balance the data:\n"
        "```python\nval_loader = DataLoader(val_set, sampler=DistributedSampler(val_set, shuffle=False))\n"
        "metric = evaluate(model, val_loader); dist.all_reduce(metric)\n```"
    )
    example = "if rank == 0:\n    evaluate(model, val_loader)  # the other ranks wait in the next backward"

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        jf = facts.job
        if jf is None or not jf.last_at:
            return []
        total = len(jf.last_at)
        explained = explained_waits(jf)
        caused = {r: sum(explained.get(r, {}).values()) / total for r in jf.ranks}
        rank = max(caused, key=caused.get)
        me, wait = jf.ranks[rank], caused[rank]
        if chance_of_leading(me.last_ready, total, jf.world_size) < CHANCE_P and total >= MIN_STEPS_FOR_CHANCE:
            wait = max(wait, sum(w for i, w in jf.wait_at.items() if jf.last_at[i] == rank) / total)
        speedup = amdahl(jf.step_s, wait)
        if speedup < MIN_REPORTED_SPEEDUP or beyond_spread(jf, rank, wait) is not None:
            return []
        kind, excess = own_excess(jf, rank)
        why, location = straggler_reason(record, rank, kind, excess)
        same_work = kind == "compute"
        starved = cpu_starved(record, rank, excess * 0.5) if same_work else None
        severity = None
        if starved is not None:  # the machine, not the script: said, and ranked below the script's causes
            why += (f"; in its sampled steps it waited for a CPU {starved[0]:.0%} of the time, the other ranks "
                    f"{starved[1]:.0%}: the ranks share too few cores")
            severity = Severity.LOW
        return [self.finding(
            title=f"rank {rank} is the rank the others wait for at {me.last_ready} of {total} steps",
            message=(f"The other ranks wait {ms(wait):.1f} ms per step for rank {rank} ({wait / jf.step_s:.0%} of the "
                     f"{ms(jf.step_s):.1f} ms step): {why}."),
            location=location,
            evidence={"rank": rank, "steps_last": me.last_ready, "steps": total, "wait_ms_per_step": ms(wait),
                      "per_rank_ms": {str(r): {"data_wait": ms(s.data_wait_s), "extra": ms(s.extra_s),
                                               "compute": ms(s.compute_s), "exposed_comm": ms(s.exposed_s)}
                                      for r, s in jf.ranks.items()}},
            speedup=speedup,
            basis=("Amdahl on the others' wait (how much later rank's last gradient was ready, from DDP's timestamps "
                   "on the host clock), averaged over all measured steps"),
            severity=severity, fix=SAME_WORK_SLOWER_FIX.format(rank=rank) if same_work else None)]


# The straggler runs the same code as the others, only slower: the cause is where it runs, not
# what the script gives it to do.
SAME_WORK_SLOWER_FIX = (
    "Rank {rank} does no extra work; it runs the same lines slower. Look at where it runs: on GPUs, "
    "`nvidia-smi -q -d CLOCK,PERFORMANCE` for throttling and `nvidia-smi` for other processes on its "
    "device; on CPU ranks, cores shared with other ranks or processes (give each rank its own cores: "
    "`OMP_NUM_THREADS` = cores / ranks, `taskset`/`numactl`), and whether its input batches are larger "
    "(variable-length data without bucketing)."
)


def cpu_starved(record: RunRecord, rank: int, enough_s: float) -> tuple[float, float] | None:
    """(its run-queue share, the others' mean) when `rank` waited for a CPU, beyond the other
    ranks, at least `enough_s` per step; None when that does not explain it or was not measured."""
    views = {v.rank: v for v in record.ranks}
    shares = {r: v.contention.runqueue_share for r, v in views.items() if v.contention is not None}
    if shares.get(rank) is None or len(shares) < 2 or any(v is None for v in shares.values()):
        return None
    others = statistics.fmean(v for r, v in shares.items() if r != rank)
    step = statistics.fmean(s.duration_s for s in views[rank].measured_steps) if views[rank].measured_steps else 0.0
    return (shares[rank], others) if (shares[rank] - others) * step >= enough_s > 0 else None


def explained_waits(jf: JobFacts) -> dict[int, dict[int, float]]:
    """rank -> {step: the others' wait} at the steps where that rank was last AND its own extra
    work or data wait that step, beyond the others', accounts for at least half the wait."""
    out: dict[int, dict[int, float]] = {}
    for index, row in jf.by_step.items():
        leader, wait = jf.last_at[index], jf.wait_at[index]
        me = next(s for s in row if s.rank == leader)
        others = [s for s in row if s.rank != leader]
        if not others or wait <= 0:
            continue
        extra = me.extra_s - statistics.fmean(o.extra_s for o in others)
        data = me.step.data_wait_s - statistics.fmean(o.step.data_wait_s for o in others)
        if max(extra, data) >= EXPLAINED_SHARE * wait:
            out.setdefault(leader, {})[index] = wait
    return out


def own_excess(jf: JobFacts, rank: int) -> tuple[str, float]:
    """What `rank` does more than the other ranks per step: extra work, data wait or compute."""
    me = jf.ranks[rank]
    others = [s for r, s in jf.ranks.items() if r != rank]
    diffs = {
        "extra": me.extra_s - statistics.fmean(o.extra_s for o in others),
        "data": me.data_wait_s - statistics.fmean(o.data_wait_s for o in others),
        "compute": me.compute_s - statistics.fmean(o.compute_s for o in others),
    }
    kind = max(diffs, key=diffs.get)
    return kind, diffs[kind]


def chance_of_leading(led: int, steps: int, ranks: int) -> float:
    """P(a rank is last at `led` or more of `steps` steps) when each of `ranks` is equally likely.
    Summed in logs: p**k of a long run (thousands of steps) is below the smallest float."""
    if led <= 0:
        return 1.0
    p = 1 / max(2, ranks)
    lp, lq, lsteps = math.log(p), math.log1p(-p), math.lgamma(steps + 1)
    terms = [lsteps - math.lgamma(k + 1) - math.lgamma(steps - k + 1) + k * lp + (steps - k) * lq
             for k in range(led, steps + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def lateness(jf: JobFacts, rank: int) -> list[float]:
    """Per measured step, how much later `rank` was ready than the other ranks' mean (signed:
    negative when it was early), by DDP's timestamps or, without them, by its own work."""
    out = []
    for row in jf.by_step.values():
        me = next(s for s in row if s.rank == rank)
        others = [s for s in row if s.rank != rank]
        if not others:
            continue
        if me.ready_at is not None and all(o.ready_at is not None for o in others):
            out.append(me.ready_at - statistics.fmean(o.ready_at for o in others))
        else:
            out.append((me.step.duration_s - me.exposed_s)
                       - statistics.fmean(o.step.duration_s - o.exposed_s for o in others))
    return out


def beyond_spread(jf: JobFacts, rank: int, wait_s: float) -> str | None:
    """None when the others' wait for `rank` is more than the ranks' measured spread explains;
    else why it is not: a rank late by less than its step-to-step scatter is noise."""
    late = lateness(jf, rank)
    if len(late) < 2:
        return "too few steps to tell a straggler from noise"
    mean, sem = statistics.fmean(late), statistics.stdev(late) / math.sqrt(len(late))
    if mean <= Z_95 * sem:
        return (f"rank {rank} is {ms(mean):.2f} ms later on average, within its step-to-step scatter "
                f"(±{ms(Z_95 * sem):.2f} ms at 95 %)")
    durations = [row[0].step.duration_s for row in jf.by_step.values()]
    band = relative_sem(durations)
    if band is not None and wait_s <= Z_95 * band * jf.step_s:
        return (f"the others' wait, {ms(wait_s):.2f} ms per step, is within the job's step-time noise "
                f"(±{ms(Z_95 * band * jf.step_s):.2f} ms)")
    return None


def straggler_reason(record: RunRecord, rank: int, kind: str, excess: float):
    """What the straggler does more than the others (`own_excess`), and the line in the user's
    code where it does it (None when that line is a library's: the library is named instead)."""
    views = {v.rank: v for v in record.ranks}
    view = views[rank]
    more = ms(max(0.0, excess))
    if kind == "extra":
        site = _extra_site(view, [views[r] for r in views if r != rank])
        if site is not None:
            where = site.location or site.inner_location
            return (f"it spends {more:.1f} ms per step more than the others in {site.kind} at {_said(where)}, which "
                    f"only it runs"), _own(where)
        return f"it spends {more:.1f} ms per step more than the others in evaluation, checkpoints or logging", None
    if kind == "data":
        where = view.loader_location
        return (f"it waits {more:.1f} ms per step more than the others for its next batch (its loader at "
                f"{_said(where)})"), _own(where)
    line = _extra_line(view, [views[r] for r in views if r != rank])
    if line is not None:
        return f"it computes {more:.1f} ms per step more than the others, most at {_said(line)}", _own(line)
    return f"it computes {more:.1f} ms per step more than the others", None


def _own(location):
    """The location when it is in the user's own code, else None."""
    return location if location is not None and library_of(location.path) is None else None


def _said(location) -> str:
    if location is None:
        return "an unknown line"
    library = library_of(location.path)
    return f"{location.path}:{location.line}" if library is None else f"{library}'s own code (not yours)"


def _extra_site(view, others):
    def elsewhere(site) -> float:
        return statistics.fmean(sum(p.in_measured_steps_s for p in o.phases if p.kind == site.kind
                                    and p.location == site.location) for o in others) if others else 0.0

    candidates = [(p.in_measured_steps_s - elsewhere(p), p) for p in view.phases if p.in_measured_steps_s > 0]
    return max(candidates, key=lambda c: c[0])[1] if candidates else None


def _extra_line(view, others):
    """The line where the straggler spent the most more than the others (a library's is named
    as the library's by the caller, never put on the user's code)."""
    def elsewhere(hits) -> float:
        same = [h.seconds for o in others for h in o.top_lines if (h.location.path, h.location.line) ==
                (hits.location.path, hits.location.line)]
        return sum(same) / max(1, len(others))

    if not view.top_lines:
        return None
    best = max(view.top_lines, key=lambda h: h.seconds - elsewhere(h))
    return best.location if best.seconds - elsewhere(best) > 0 else None


class ScalingVerdict(DistributedRule):
    code = "TD606"
    slug = "scaling-verdict"
    title = "What N ranks give against one, and what each fix would give"
    rationale = (
        "Data-parallel training pays off only while communication stays hidden behind backward. "
        "When the gradients cannot cross the link in time, N ranks can train slower than one; "
        "the verdict compares the measured job with one rank alone and predicts each fix from the "
        "communication it removes."
    )
    fix = (
        "Apply the fix with the best predicted throughput (accumulate with `no_sync()`, compress "
        "gradients with `bf16_compress_hook`, repair the link); when none beats one rank, train on "
        "one GPU. Measure both side by side: `torchdoctor tune --nproc-per-node N train.py` runs "
        "`nproc=1` and each knob."
    )
    example = "torchrun --nproc_per_node 2 train.py  # 1.4 it/s, against 4.9 it/s on one GPU"

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        jf = facts.job
        if jf is None:
            return []
        n, t_n = jf.world_size, jf.step_s
        base = scaling_base(record, jf)
        predictions = predict_fixes(record, jf, base)
        ratio = base.ratio
        fixes = [p for p in predictions if p.fix != "now"]
        best = max(fixes, key=lambda p: p.ratio)
        efficiency = ratio / n
        grad_bytes, synced = grads_per_step(record)
        link = self._link_text(record, grad_bytes)
        moved = f"; {_mb(grad_bytes * synced)} MB of gradients per step{link}" if grad_bytes else link
        listed = "; ".join(f"{p.fix}: {p.ratio:.2f}x" for p in fixes)
        sharing = shared_compute(record)
        evidence = {"ranks": n, "throughput_vs_one_rank": round(ratio, 3), "efficiency": round(efficiency, 3),
                    "step_ms": ms(t_n), "one_rank_step_ms": ms(base.one_step_s),
                    "exposed_transfer_ms": ms(jf.transfer_s),
                    "modelled_ratio": round(n * jf.one_rank_step_s() / t_n, 3),
                    "one_rank": "measured" if base.measured is not None else "modelled",
                    "shared_compute": sharing,
                    "predictions": {p.fix: round(p.ratio, 3) for p in predictions}, "best": best.fix}
        comm_text = f"exposed communication is {ms(jf.transfer_s):.1f} ms of a {ms(t_n):.1f} ms step{moved}"
        if base.measured is None:
            return [self._modelled(record, n, ratio, efficiency, comm_text, listed, sharing, evidence)]
        one, band = base.measured, base.change
        evidence["band"] = None if band.noise is None else round(band.noise, 3)
        slower = band.significant and ratio < 1
        severity = Severity.HIGH if slower else Severity.MEDIUM if efficiency < LOW_EFFICIENCY else Severity.INFO
        speedup = best.ratio / ratio if best.ratio > ratio else None
        noise = f"±{band.noise:.1%}" if band.noise is not None else "noise unknown: too few steps"
        said = (f"{n} ranks give {ratio:.2f}x of one rank's throughput ({noise}; {efficiency:.0%} per rank), measured: "
                f"the job's {band.measure} against one rank alone ({one.source}: {one.steps} steps of "
                f"{ms(one.step_s):.1f} ms, {one.seconds:.0f} s)")
        if slower:
            said += f"; {n} ranks are slower than one"
        extra = "".join(f" {x[0].upper()}{x[1:]}." for x in (sharing, base.per_rank_batch_note) if x)
        return [self.finding(
            title=f"{n} ranks give {ratio:.2f}x of one rank's throughput (measured)",
            message=f"{said}; {comm_text}.{extra} Predicted from the measured ratio: {listed}.",
            location=_location(record), evidence=evidence,
            speedup=self.reported(speedup, below=severity)[0], severity=severity,  # ranked by the verdict itself
            basis=(f"measured: the job's throughput over one rank's ({one.source}, same script, limits and threads "
                   "per rank); each fix is predicted from that ratio and the communication it removes"))]

    def _modelled(self, record: RunRecord, n: int, ratio: float, efficiency: float, comm_text: str, listed: str,
                  sharing: str | None, evidence: dict) -> Finding:
        """No one-rank run: the model's figure, said as a model, info-level, never ranked as a fact."""
        caveat = (f" It is likely wrong here: {sharing}, so one rank alone would run faster than a rank of the job."
                  if sharing else "")
        return self.finding(
            title=f"{n} ranks would give ~{ratio:.2f}x of one rank's throughput, by a model (one rank not measured)",
            message=(f"Modelled, not measured: one rank alone is taken as a rank's step without the communication the "
                     f"job adds, which assumes the ranks share no compute (each its own cores or GPU). By that model "
                     f"{n} ranks give {ratio:.2f}x ({efficiency:.0%} per rank); {comm_text}.{caveat} Predicted the "
                     f"same way: {listed}. Measure one rank: torchdoctor run --nproc-per-node {n} --one-rank always "
                     f"(or tune --nproc-per-node {n}, which runs nproc=1 beside {n} ranks)."),
            location=_location(record), evidence=evidence, speedup=None, severity=Severity.INFO,
            basis="a model, not a measurement: one rank's step = a rank's step minus the exposed all-reduce of the "
                  "rank nobody waited for")

    @staticmethod
    def _link_text(record: RunRecord, grad_bytes: int) -> str:
        comm = record.distributed.comm if record.distributed else None
        if comm is None:
            return ""
        row = comm.at(grad_bytes or 25 * MB)
        text = f" at {row.busbw_gbps:.2f} GB/s" if row and row.busbw_gbps else ""
        if comm.simulated_link_gbps:
            text += f" (link simulated at {comm.simulated_link_gbps:g} GB/s)"
        if comm.link and comm.link.expected_gbps:
            text += f"; this link should give ≥ {comm.link.expected_gbps:.1f} GB/s ({comm.link.description})"
        return text


def _mb(nbytes: float) -> str:
    """Megabytes with the digits a small model needs (0.1 MB is not 0)."""
    mb = nbytes / MB
    return f"{mb:.0f}" if mb >= 10 else f"{mb:.1f}" if mb >= 0.1 else f"{mb:.2g}"
