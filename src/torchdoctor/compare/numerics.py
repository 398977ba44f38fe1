"""The numerics guard: does a change keep the script's own losses (the values it passed to
`backward()`) as they were?

Knobs that only move work around (loader workers, pinning, prefetch, foreach optimizer
kernels, zero_grad, no_sync placement, DDP's buckets) must leave every loss bit-identical to the
baseline's over the same steps. Knobs that change arithmetic (AMP, TF32, compile, threads, fused
optimizer kernels, a compressed all-reduce) move them within a stated tolerance; knobs that change the data each
step sees (batch size, ranks, replayed batches) are compared by the level of their losses only.
A trial beyond its tolerance is flagged. When two runs of the script as written already differ
(unseeded data, nondeterministic kernels), that difference is the floor: bit-identity cannot
be asked of anything, and the verdict says so.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from torchdoctor.model.record import LossTrace, RunRecord

IDENTICAL, WITHIN, CHANGED, NOT_COMPARED = "bit-identical", "within tolerance", "CHANGED", "not compared"

# Knobs whose work must not touch numerics: the same losses, bit for bit.
EXACT = {"workers", "pin_memory", "persistent_workers", "prefetch_factor", "non_blocking", "foreach",
         "zero_grad", "no_sync", "bucket_cap_mb", "gradient_as_bucket_view", "static_graph",
         "find_unused_parameters", "broadcast_buffers", "eval", "checkpoint"}
# Knobs that change arithmetic, with the largest median relative difference per loss they may
# cause over a short run. bf16 keeps 8 bits of mantissa (2^-8 ≈ 0.4 % per rounding) and a
# loss sums many roundings; TF32 keeps 10 bits; compile and thread counts reorder reductions.
# Fused Adam/AdamW kernels compute the update in another order than the for-loop and foreach paths (which
# agree bit for bit): 1e-7 relative on the losses of 20 steps of a small MLP on a CPU, torch 2.13 (fused SGD
# agreed exactly); TD306's fix must still be measurable, so fused gets compile's tolerance.
TOLERANCE = {"amp": 0.05, "tf32": 0.01, "compile": 1e-3, "threads": 1e-3, "channels_last": 1e-3,
             "cudnn_benchmark": 1e-3, "comm_hook": 0.02, "fused": 1e-3}
# Knobs that change what data a step sees: only the level of the losses can be compared (the
# mean over the second half of the steps, within this share).
LEVEL = {"batch_size": 0.10, "nproc": 0.10, "data": 0.25}


@dataclass
class NumericsVerdict:
    status: str  # IDENTICAL | WITHIN | CHANGED | NOT_COMPARED
    compared: int  # losses compared
    max_rel: float | None  # the largest relative difference
    median_rel: float | None
    tolerance: str  # as said to the user
    text: str


def values(trace: LossTrace) -> list[tuple[tuple[int, int], str]]:
    """((step, k-th backward of that step), value) in call order."""
    seen: dict[int, int] = {}
    out = []
    for step, value in zip(trace.steps, trace.values):
        k = seen.get(step, 0)
        seen[step] = k + 1
        out.append(((step, k), value))
    return out


def _rel(a: float, b: float) -> float:
    if a == b or (math.isnan(a) and math.isnan(b)):
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def differences(base: LossTrace, other: LossTrace) -> tuple[int, bool, list[float]]:
    """(losses compared, bit-identical, relative differences) over the positions both have."""
    mine = dict(values(other))
    pairs = [(value, mine[key]) for key, value in values(base) if key in mine]
    identical = all(a == b for a, b in pairs)
    return len(pairs), identical, [_rel(float.fromhex(a), float.fromhex(b)) for a, b in pairs]


def _level(trace: LossTrace) -> float | None:
    finite = [v for v in (float.fromhex(x) for x in trace.values) if math.isfinite(v)]
    half = finite[len(finite) // 2:]
    return statistics.fmean(half) if half else None


def judge(base: LossTrace | None, other: LossTrace | None, knobs: dict[str, str],
          floor: float | None = None) -> NumericsVerdict:
    """`knobs`: what the other run changed; `floor`: the largest relative difference between two
    runs of the script as written (None: not measured, 0.0: they were bit-identical)."""
    if base is None or other is None or not base.values or not other.values:
        return NumericsVerdict(NOT_COMPARED, 0, None, None, "", "no losses recorded (no backward() in both runs)")
    if any(k == "data" and v == "loader-only" for k, v in knobs.items()):
        return NumericsVerdict(NOT_COMPARED, 0, None, None, "", "the loader alone: no model, no losses")
    level = [k for k in knobs if k in LEVEL]
    if level:
        share = max(LEVEL[k] for k in level)
        a, b = _level(base), _level(other)
        if a is None or b is None:
            return NumericsVerdict(NOT_COMPARED, 0, None, None, "", "no finite losses to compare")
        rel = _rel(a, b)
        said = f"mean loss of the second half within {share:.0%} ({', '.join(level)} changes each step's data)"
        ok = rel <= share
        return NumericsVerdict(WITHIN if ok else CHANGED, len(other.values), rel, rel, said,
                               f"mean loss {b:.4g} against {a:.4g} ({rel:.1%} apart): "
                               + ("the same level" if ok else "beyond the tolerance: check the change keeps training"))
    n, identical, rels = differences(base, other)
    if n == 0:
        return NumericsVerdict(NOT_COMPARED, 0, None, None, "", "no step in common")
    worst, middle = max(rels), statistics.median(rels)
    exact = all(k in EXACT for k in knobs)
    if identical:
        return NumericsVerdict(IDENTICAL, n, 0.0, 0.0, "bit-identical" if exact else "",
                               f"all {n} losses bit-identical to the baseline's")
    if floor is not None and floor > 0:
        # the script is not reproducible as written: nothing can be asked to be bit-identical
        allowed = max(floor * 2, max((TOLERANCE.get(k, 0.0) for k in knobs), default=0.0))
        ok = middle <= allowed
        return NumericsVerdict(WITHIN if ok else CHANGED, n, worst, middle,
                               f"twice the script's own run-to-run difference ({floor:.2g})",
                               f"median relative difference {middle:.2g} (largest {worst:.2g}); two runs of the script "
                               f"as written already differ by up to {floor:.2g}, so bit-identity cannot be checked")
    if exact:
        first = next(i for i, r in enumerate(rels) if r > 0)
        return NumericsVerdict(CHANGED, n, worst, middle, "bit-identical",
                               f"{sum(r > 0 for r in rels)} of {n} losses differ (first at backward #{first + 1}, "
                               f"largest relative difference {worst:.2g}): this knob must not change numerics")
    tol = max((TOLERANCE.get(k, 0.0) for k in knobs), default=0.0)
    ok = middle <= tol
    return NumericsVerdict(WITHIN if ok else CHANGED, n, worst, middle, f"median relative difference ≤ {tol:g}",
                           f"median relative difference {middle:.2g} (largest {worst:.2g}) over {n} losses"
                           + ("" if ok else f": beyond the {tol:g} this knob may cause"))


def floor_of(base: RunRecord | None, repeat: RunRecord | None) -> float | None:
    """The script's own run-to-run difference: two runs as written, compared loss by loss."""
    if base is None or repeat is None or base.losses is None or repeat.losses is None:
        return None
    n, identical, rels = differences(base.losses, repeat.losses)
    if n == 0:
        return None
    return 0.0 if identical else max(rels)


def knobs_of(record: RunRecord) -> dict[str, str]:
    """The knobs a run applied (those it could not apply changed nothing)."""
    return {k.name: k.value for k in record.knobs if k.applied}
