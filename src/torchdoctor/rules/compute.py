"""Compute-efficiency rules: batch size, precision (GPU-only: judged from CUDA runs), and
steps made of many small ops that a compiler could fuse."""

from __future__ import annotations

from dataclasses import dataclass

from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.location import Location
from torchdoctor.model.record import DispatchSample, RunRecord
from torchdoctor.rules.base import MEDIUM_SPEEDUP, MIN_REPORTED_SPEEDUP, Rule, amdahl
from torchdoctor.rules.compile import script_compiles
from torchdoctor.rules.facts import RunFacts, training_loader
from torchdoctor.rules.memory import best_larger_trial, trial_change

# A matmul doing fewer FLOPs than this is far too small to fill a modern GPU
# (an H100 SM does ~1 TFLOP/s-per-SM of fp16: 1e8 FLOPs ≈ 1 µs across 132 SMs).
SMALL_MATMUL_FLOPS = 1e8
LOW_GPU_UTIL = 60.0  # percent; NVML "utilization" is time with ≥1 kernel running
TENSOR_CORE_MAJOR = 7  # Volta and newer have fp16 tensor cores
TF32_MAJOR = 8  # Ampere and newer have TF32
# A step of this many aten ops (forward, backward and optimizer) whose typical op touches
# few elements is dominated by per-op overhead: the case torch.compile's fusion targets. A
# small CNN or MLP step issues a few dozen to a couple of hundred ops.
COMPILE_MIN_OPS_PER_STEP = 500
COMPILE_SMALL_OP_NUMEL = 64 * 1024
# An op's fixed cost (dispatch, a kernel launch) is ~5-20 µs: when the step's time per op is ten
# times that, arithmetic (a few large matmuls among many small ops), not overhead, sets the pace
COMPILE_MAX_STEP_S_PER_OP = 200e-6


class SmallBatch(Rule):
    code = "TD401"
    slug = "small-batch"
    example = "loader = DataLoader(ds, batch_size=4)  # a few hundred FLOPs per op on a GPU"
    title = "Batch too small for the hardware"
    rationale = ("Tiny matmuls leave most of the device idle and per-op overhead dominates: a sample costs more at "
                 "a small batch than at a larger one.")
    fix = (
        "Raise the batch size (scale the learning rate with it), or accumulate:\n```python\n"
        "loader = DataLoader(ds, batch_size=256, ...)   # `torchdoctor memory train.py` finds the largest that fits\n```"
    )

    def not_measurable(self, record, facts):
        if record.batch_scaling is not None and record.batch_scaling.trials:
            return None
        if not facts.cuda_used:
            return ("needs a CUDA device (work per op on the GPU) or batch-size trials: `torchdoctor memory SCRIPT` "
                    "measures samples/s at larger batches on any device")
        return None

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        if record.batch_scaling is not None and record.batch_scaling.trials:
            return self._from_trials(record)
        flops = record.dispatch.matmul_flops_per_op
        util = _mean_util(record)
        if flops is None or flops >= SMALL_MATMUL_FLOPS or (util is not None and util >= LOW_GPU_UTIL):
            return []
        loader = training_loader(record)
        return [
            self.finding(
                title=f"Matmuls average {flops / 1e6:.1f} MFLOP: too small to fill the GPU",
                message=f"Mean matmul/conv work per op was {flops:.3g} FLOPs"
                + (f" at batch size {loader.batch_size}" if loader else "")
                + (f"; GPU utilization averaged {util:.0f}%." if util is not None else "."),
                location=loader.created_at if loader else None,
                evidence={"matmul_flops_per_op": flops, "gpu_util_mean": util,
                          "batch_size": loader.batch_size if loader else None},
                speedup=None,
                basis="throughput vs batch size must be measured: `torchdoctor tune --set batch_size=N`",
                severity=Severity.MEDIUM,
            )
        ]


    def _from_trials(self, record: RunRecord) -> list[Finding]:
        scaling = record.batch_scaling
        best = best_larger_trial(scaling)
        gain = trial_change(scaling, best) if best is not None else None
        if gain is None or not gain.significant or gain.ratio < MEDIUM_SPEEDUP:
            return []
        mine = scaling.trial(scaling.user_batch_size)
        loader = training_loader(record)
        return [self.finding(
            title=f"A sample costs {gain.ratio:.1f}x as much at batch {mine.batch_size} as at batch {best.fit_batch}",
            message=(f"Measured {1000 / mine.samples_per_s:.3f} ms per sample at the script's batch {mine.batch_size} "
                     f"and {1000 / best.samples_per_s:.3f} ms at {best.fit_batch} ({gain.describe()})."),
            location=loader.created_at if loader else None,
            evidence={"batch_size": mine.batch_size, "larger_batch": best.fit_batch,
                      "samples_per_s": round(mine.samples_per_s, 2), "larger_samples_per_s": round(best.samples_per_s, 2),
                      "noise": gain.noise},
            speedup=gain.ratio,
            basis=(f"measured: samples/s over the timed steps of a fresh-process trial at batch {best.fit_batch} "
                   f"against one at {mine.batch_size}; each step's memory stayed within the capacity"
                   if scaling.capacity_bytes else
                   f"measured: samples/s over the timed steps of a fresh-process trial at batch {best.fit_batch} "
                   f"against one at {mine.batch_size} (no capacity given: check it fits your device)"),
            fix=(f"Raise the batch size (scale the learning rate with it):\n```python\n"
                 f"loader = DataLoader(ds, batch_size={best.fit_batch}, ...)\n```"),
        )]


class NoMixedPrecision(Rule):
    code = "TD402"
    slug = "no-mixed-precision"
    example = "loss = loss_fn(model(x.cuda()), y.cuda())  # fp32 matmuls, no torch.autocast"
    title = "fp32 matmuls on a GPU with tensor cores"
    needs_cuda = True
    rationale = "bf16/fp16 matmuls run several times faster on tensor cores than fp32."
    fix = (
        "Run forward and loss under autocast:\n```python\nwith torch.autocast('cuda', "
        "dtype=torch.bfloat16):\n    loss = loss_fn(model(x), y)\nloss.backward()\n```"
    )

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        cap = record.environment.compute_capability or [0, 0]
        d = record.dispatch
        if d.fp32_matmul_ops_cuda == 0 or d.autocast_seen or cap[0] < TENSOR_CORE_MAJOR:
            return []
        bound = Fp32MatmulBound.of(record, facts.step_s)
        return [
            self.finding(
                title=f"{d.fp32_matmul_ops_cuda / max(1, d.sampled_steps):.0f} fp32 matmul/conv ops per step, no autocast",
                message=f"The GPU (compute capability {cap[0]}.{cap[1]}) has tensor cores, but every sampled matmul ran in fp32.",
                location=_most_fp32_matmuls(d),
                evidence={"fp32_matmul_ops_per_step": d.fp32_matmul_ops_cuda / max(1, d.sampled_steps),
                          **(bound.evidence() if bound else {})},
                speedup=None,
                basis=Fp32MatmulBound.basis(bound, "precision gains depend on the model; "
                                                   "`torchdoctor tune --set amp=bf16` measures it"),
                severity=Fp32MatmulBound.severity(bound),
            )
        ]


class NoTf32(Rule):
    code = "TD403"
    slug = "no-tf32"
    example = "torch.backends.cuda.matmul.allow_tf32 = False"
    title = "fp32 matmuls with TF32 disabled on Ampere or newer"
    needs_cuda = True
    rationale = "TF32 tensor cores run fp32 matmuls ~8x faster with 10-bit mantissa inputs."
    fix = "Allow TF32 for matmuls:\n```python\ntorch.set_float32_matmul_precision('high')\n```"

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        env = record.environment
        cap = env.compute_capability or [0, 0]
        if cap[0] < TF32_MAJOR or env.tf32_matmul or record.dispatch.fp32_matmul_ops_cuda == 0:
            return []
        bound = Fp32MatmulBound.of(record, facts.step_s)
        return [
            self.finding(
                title="TF32 is off for fp32 matmuls",
                message=f"float32_matmul_precision is '{env.float32_matmul_precision}' on a compute capability {cap[0]}.{cap[1]} GPU.",
                location=None,
                evidence={"float32_matmul_precision": env.float32_matmul_precision, "allow_tf32": env.tf32_matmul,
                          **(bound.evidence() if bound else {})},
                speedup=None,
                basis=Fp32MatmulBound.basis(bound, "`torchdoctor tune --set tf32=true` measures it"),
                severity=Fp32MatmulBound.severity(bound),
            )
        ]


@dataclass(frozen=True)
class Fp32MatmulBound:
    """What faster fp32 matmuls can gain at most, from the profiled GPU timeline: Amdahl with the
    fp32 matmul/conv kernels' time removed entirely. TF32 or bf16 only make those kernels faster,
    so a bound under the ranking threshold means the step waits on something else (on a tiny
    model the GPU idles for the host; the H200 run of host_sync_item.py: 0.06 ms in a 2.7 ms step)."""

    matmul_ms_per_step: float
    step_ms: float
    at_most: float

    @classmethod
    def of(cls, record: RunRecord, measured_step_s: float | None) -> "Fp32MatmulBound | None":
        """The kernels' time per profiled step against the shorter of the profiled step and the
        mean unsampled one: profiling slows the host, not the kernels, so the shorter step gives
        the larger share, the bound that cannot understate the gain."""
        if record.trace is None:
            return None
        best = None
        for rank in record.trace.ranks:
            for dev in rank.devices:
                steps = max(1, len(dev.steps))
                step_us, matmul_us = dev.total.window_us / steps, dev.matmul_fp32_us / steps
                if step_us > 0 and (best is None or matmul_us / step_us > best[0] / best[1]):
                    best = (matmul_us, step_us)
        if best is None:
            return None
        matmul_us, step_us = best
        if measured_step_s:
            step_us = min(step_us, measured_step_s * 1e6)
        return cls(round(matmul_us / 1e3, 3), round(step_us / 1e3, 3), round(amdahl(step_us, matmul_us), 3))

    def evidence(self) -> dict:
        return {"fp32_matmul_ms_per_step_in_trace": self.matmul_ms_per_step, "step_ms": self.step_ms,
                "at_most_if_fp32_matmuls_took_no_time": self.at_most}

    @staticmethod
    def severity(bound: "Fp32MatmulBound | None") -> Severity:
        """Medium at most (a bound, no estimate), and no higher than the bound itself would rank."""
        return Severity.LOW if bound is not None and bound.at_most < MEDIUM_SPEEDUP else Severity.MEDIUM

    @staticmethod
    def basis(bound: "Fp32MatmulBound | None", otherwise: str) -> str:
        if bound is None:
            return otherwise
        measured = (f"the profiled GPU timeline: fp32 matmul/conv kernels {bound.matmul_ms_per_step:.2f} ms of a "
                    f"{bound.step_ms:.2f} ms step, so faster matmuls gain at most {bound.at_most:.3f}x (Amdahl with "
                    "them taking no time)")
        if bound.at_most < MIN_REPORTED_SPEEDUP:
            return f"{measured}, under the {MIN_REPORTED_SPEEDUP}x a fix must gain to be ranked: the step waits on other work"
        return f"{measured}; {otherwise}"


def _most_fp32_matmuls(d: DispatchSample) -> Location | None:
    """The user line that issued the most fp32 CUDA matmuls (the forward call autocast should wrap)."""
    sites = [s for s in d.sites if s.fp32_matmul_ops_cuda and s.library is None and s.location.line > 0]
    return max(sites, key=lambda s: s.fp32_matmul_ops_cuda).location if sites else None


def _mean_util(record: RunRecord) -> float | None:
    return record.nvml.mean("gpu_util") if record.nvml else None


class CompileCandidate(Rule):
    code = "TD404"
    slug = "no-compile"
    title = "Candidate for torch.compile or CUDA graphs"
    rationale = (
        "A step made of many small elementwise ops spends its time in kernel launches and "
        "memory round trips that a compiler can fuse away. Informational: measure it."
    )
    fix = "Compile the model once, outside the loop, and compare step times:\n```python\nmodel = torch.compile(model)\n```"
    example = "model = MyModel().cuda()  # many small elementwise ops, never compiled"

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        d = record.dispatch
        if script_compiles(record):  # already compiled: the ops left are what compiling left
            return []
        if not d.sampled_steps or not d.sites:
            return []
        per_step = d.total_ops / d.sampled_steps
        numel = _op_weighted_median_numel(d.sites)
        if per_step < COMPILE_MIN_OPS_PER_STEP or numel > COMPILE_SMALL_OP_NUMEL:
            return []
        per_op_s = facts.step_s / per_step if facts.step_s else None
        if per_op_s is not None and per_op_s > COMPILE_MAX_STEP_S_PER_OP:
            return []  # the step's time is in large ops: fusing the small ones around them saves little
        pace = (f" (the step takes {per_op_s * 1e6:.0f} µs per op)" if per_op_s is not None else "")
        return [self.finding(
            title=f"{per_step:.0f} ops per step of {numel:,} elements (median): a candidate for torch.compile",
            message=(f"The sampled steps issued {per_step:.0f} aten ops each, the typical one over {numel:,} "
                     f"elements{pace}: per-op overhead, not arithmetic, sets the pace. A compiler can fuse "
                     f"chains of such ops into few kernels."),
            location=None,
            evidence={"ops_per_step": round(per_step, 1), "median_numel": numel, "sampled_steps": d.sampled_steps,
                      "step_us_per_op": round(per_op_s * 1e6, 1) if per_op_s is not None else None},
            speedup=None,
            basis="not estimated: what fusion gains depends on the model; measure it with "
                  "`torchdoctor run --set compile=true` or `torchdoctor tune`",
            severity=Severity.INFO,
        )]


def _op_weighted_median_numel(sites) -> int:
    """The median elements per op over all sampled ops (each site's median, weighted by its ops)."""
    ordered = sorted((s.median_numel, s.ops) for s in sites if s.ops)
    half, seen = sum(ops for _, ops in ordered) / 2, 0
    for numel, ops in ordered:
        seen += ops
        if seen >= half:
            return numel
    return 0
