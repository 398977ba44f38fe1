"""Build RunRecords by hand for rule tests: each test states the measurements it needs."""

import random

from torchdoctor.model.follow_record import TimelinePoint
from torchdoctor.model.record import (ApiCall, DispatchSample, Environment, LineHits, LineProfile, LoaderStats,
                                Location, LoopSite, OpSite, OptimizerInfo, RunInfo, RunRecord, StepSample)


def record(step_s=0.1, steps=10, warmup=2, cuda=False, **per_step) -> RunRecord:
    info = RunInfo(script="train.py", argv=[], cwd="/w", started_at="2026-01-01T00:00:00+00:00",
                   torchdoctor_version="0", warmup=warmup, steps_requested=steps, max_seconds=60)
    env = Environment(python="3.11", platform="Linux", torch="2.13", cuda_available=cuda, cuda_used=cuda)
    rec = RunRecord(run=info, environment=env)
    for i in range(1, warmup + steps + 1):
        rec.steps.append(StepSample(index=i, start=(i - 1) * step_s, end=i * step_s, warmup=i <= warmup,
                                    sampled=False, samples=32, **per_step))
    return rec


def loader(**kw) -> LoaderStats:
    base = dict(loader_id=0, created_at=Location("train.py", 5, "<module>"), iterated_at=None, batch_size=32,
                num_workers=0, pin_memory=False, prefetch_factor=None, persistent_workers=False,
                drop_last=False, dataset_len=320, batches=12)
    base.update(kw)
    return LoaderStats(**base)


def sampled(rec, windows=3, sites=(), calls=(), eval_batches=0, line_hits=(), total_samples=0, loops=()):
    rec.dispatch = DispatchSample(sampled_steps=windows, sites=list(sites), api_calls=list(calls),
                                  eval_batches_sampled=eval_batches, loops=list(loops))
    rec.line_profile = LineProfile(total_samples=total_samples,
                                   lines=[LineHits(Location("train.py", line, "f"), n) for line, n in line_hits])
    return rec


def site(line, ops, internal=0, time_s=0.0):
    return OpSite(location=Location("train.py", line, "f"), ops=ops, internal_ops=internal, time_s=time_s,
                  op_counts={"aten::select": ops // 2, "aten::copy_": ops - ops // 2}, median_numel=8)


def loop(line, header, ops, turns, param_uses=0, params=0, time_s=0.0, lines=None, library=None):
    """A loop of `turns` iterations over the sampled steps, its busiest line `line`."""
    return LoopSite(location=Location("train.py", line, "f"), header_line=header, ops=ops, internal_ops=0,
                    time_s=time_s, iterations=turns, runs=3, param_uses=param_uses, params=params,
                    op_counts={"aten::select": ops // 2, "aten::copy_": ops - ops // 2}, median_numel=8,
                    lines=[Location("train.py", n, "f") for n in (lines or [line])], library=library)


def call(line, api, kind, count, phase="train", device="cpu", **detail):
    return ApiCall(Location("train.py", line, "f"), api, kind, phase, count, device, detail)


def optimizer(**kw) -> OptimizerInfo:
    base = dict(class_name="AdamW", param_tensors=100, params=10_000, foreach=None, fused=None,
                created_at=Location("train.py", 9, "<module>"))
    base.update(kw)
    return OptimizerInfo(**base)


def noisy(step_s, jitter, steps=30, samples=32, seed=0, **kw):
    """A record whose measured steps take step_s ± jitter (uniform)."""
    rng = random.Random(seed)
    rec = record(step_s=step_s, steps=steps, **kw)
    t = 0.0
    out = []
    for s in rec.steps:
        d = step_s * (1 + rng.uniform(-jitter, jitter))
        out.append(StepSample(index=s.index, start=t, end=t + d, warmup=s.warmup, sampled=False, samples=samples))
        t += d
    rec.steps = out
    return rec


def rank_points(rank, steps=400, slow_from=200, slow_rank=1, extra=0.030, seed=0):
    """DDP-like: every rank's step lasts as long as the slowest's; the others wait for the straggler in
    the step's collectives."""
    rng = random.Random(seed * 7 + rank)
    out, t = [], 0.0
    for i in range(1, steps + 1):
        slow = extra if i >= slow_from else 0.0
        base = 0.010 + rng.gauss(0, 0.0004)
        step = base + slow
        wait = 0.001 + abs(rng.gauss(0, 0.0002)) + (slow if rank != slow_rank else 0.0)
        t += step
        out.append(TimelinePoint(step=i, t=t, step_s=step, data_wait_s=0.0, compute_s=0.002 + wait, comm_wait_s=wait,
                                 warmup=i <= 3, sampled=4 <= i <= 10))
    return out
