"""Memory rules: room for a bigger batch, too little room, and running out.

They read the CUDA allocator's statistics of a run, the breakdown every run accounts, and the
batch-size trials of `torchdoctor memory` (RunRecord.batch_scaling) when there are some.
"""

from __future__ import annotations

from torchdoctor.rules.noise import Change, Throughput, change
from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.memory_record import FITS, PARTS, BatchScaling, BatchTrial
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.base import Rule
from torchdoctor.rules.facts import RunFacts, training_loader
from torchdoctor.model.units import format_bytes
from torchdoctor.rules.memory_advice import expandable_segments, oom_advice

HEADROOM_MAX_USE = 0.40  # peak under 40 % of the card: a 2x batch would still fit
HEADROOM_MIN_ROOM = 2  # a trial-verified batch at least twice the script's
PRESSURE_MIN_USE = 0.95  # peak reserved above 95 %: the allocator is close to failing
NOT_CUDA = "CUDA memory statistics were not available and no batch-size trials were run (`torchdoctor memory`)"


def memory_not_measurable(record: RunRecord, facts: RunFacts) -> str | None:
    """TD501 and TD502 judge batch-size trials, or else a CUDA run's allocator statistics."""
    scaling = record.batch_scaling
    if scaling is not None and scaling.capacity_bytes:
        return None
    return None if record.cuda_memory and facts.cuda_used else NOT_CUDA


def trial_change(scaling: BatchScaling, larger: BatchTrial) -> Change | None:
    """Samples/s at `larger` against the script's own batch, with the trials' own noise."""
    mine = scaling.trial(scaling.user_batch_size) if scaling.user_batch_size else None
    if mine is None or not (mine.samples_per_s and larger.samples_per_s and mine.step_s and larger.step_s):
        return None
    return change(_throughput(mine), _throughput(larger))


def _throughput(trial: BatchTrial) -> Throughput:
    return Throughput(trial.step_s, 1.0 / trial.step_s, trial.samples_per_s, trial.relative_sem)


def recommended_trial(scaling: BatchScaling) -> BatchTrial | None:
    """The fitting trial (within the capacity and its headroom, never beyond the data) with the
    most samples/s; of the trials within that one's noise, the smallest batch: as fast, less
    memory, less change to the training recipe. The largest batch that fits is often not it."""
    fitting = [t for t in scaling.trials if t.outcome == FITS and t.samples_per_s and t.step_s]
    if not fitting:
        return None
    best = max(fitting, key=lambda t: t.samples_per_s)
    alike = [t for t in fitting if not change(_throughput(t), _throughput(best)).significant]
    return min([best, *alike], key=lambda t: t.fit_batch)


def recommended_batch(scaling: BatchScaling) -> int | None:
    trial = recommended_trial(scaling)
    return trial.fit_batch if trial is not None else None


def best_larger_trial(scaling: BatchScaling) -> BatchTrial | None:
    """The recommended trial when it is above the script's batch."""
    mine = scaling.user_batch_size or 0
    best = recommended_trial(scaling)
    return best if best is not None and best.fit_batch > mine else None


class MemoryHeadroom(Rule):
    code = "TD501"
    slug = "memory-headroom"
    example = "loader = DataLoader(ds, batch_size=16)  # peak memory 3 GB of an 80 GB GPU"
    title = "Peak memory far below capacity"
    rationale = "Unused memory is unused batch: a larger batch usually raises throughput."
    fix = "Raise the batch size until peak memory is ~80 % of the card:\n```python\nloader = DataLoader(ds, batch_size=2 * old_batch_size, ...)\n```"

    def not_measurable(self, record, facts):
        return memory_not_measurable(record, facts)

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        scaling = record.batch_scaling
        if scaling is not None and scaling.capacity_bytes:
            return self._from_trials(scaling, facts)
        mem = record.cuda_memory
        use = mem.peak_reserved_bytes / mem.device_total_bytes if mem and mem.device_total_bytes else None
        if use is None or use >= HEADROOM_MAX_USE:
            return []
        loader = training_loader(record)
        return [self.finding(
            title=f"Peak GPU memory is {use:.0%} of the card",
            message=f"Peak reserved {format_bytes(mem.peak_reserved_bytes)} of {format_bytes(mem.device_total_bytes)}.",
            location=loader.created_at if loader else None,
            evidence={"peak_reserved_bytes": mem.peak_reserved_bytes, "device_total_bytes": mem.device_total_bytes,
                      "batch_size": loader.batch_size if loader else None},
            speedup=None,
            basis="the largest batch that fits and its throughput are measured by `torchdoctor memory SCRIPT`",
            severity=Severity.LOW,
        )]

    def _from_trials(self, scaling: BatchScaling, facts: RunFacts) -> list[Finding]:
        mine, top = scaling.user_batch_size, scaling.verified_max_batch
        if not mine or not top or top < HEADROOM_MIN_ROOM * mine:
            return []
        best = best_larger_trial(scaling)
        gain = trial_change(scaling, best) if best is not None else None
        measured = gain is not None and gain.significant and gain.ratio > 1.0
        told_by_td401 = any(f.code == "TD401" for f in facts.earlier)
        rate = (f" At batch {best.fit_batch}, the fitting trial with the most samples/s, the trials measured "
                f"{gain.describe()} against batch {mine}." if best is not None and gain is not None else
                " No larger batch measured more samples/s than the script's beyond noise.")
        bound = (f" The data bounds the batch at {scaling.data_bound:,}: {scaling.data_bound_basis}."
                 if scaling.data_bound and scaling.predicted_max_batch and scaling.predicted_max_batch > scaling.data_bound
                 else "")
        pick = best.fit_batch if best is not None and measured else top
        return [self.finding(
            title=f"Batch {top} fits in {format_bytes(scaling.capacity_bytes)}; the script uses {mine}",
            message=(f"A trial at batch {top} ran within {format_bytes(scaling.capacity_bytes)} ({scaling.capacity_source}, "
                     f"{format_bytes(scaling.headroom_bytes)} kept free); the fit predicted {scaling.predicted_max_batch} "
                     f"by memory alone." + bound
                     + rate + (" The gain is TD401's (small batch)." if measured and told_by_td401 else "")),
            location=None,
            evidence={"user_batch_size": mine, "verified_max_batch": top, "recommended_batch": pick,
                      "data_bound": scaling.data_bound,
                      "predicted_max_batch": scaling.predicted_max_batch, "capacity_bytes": scaling.capacity_bytes,
                      "throughput_ratio": round(gain.ratio, 3) if gain else None},
            speedup=gain.ratio if measured and not told_by_td401 else None,
            basis=("measured: samples/s of the trial at the larger batch against the script's own"
                   if measured and not told_by_td401 else
                   "memory measured by trials; throughput gain " + ("counted under TD401" if told_by_td401 else
                                                                     "within the trials' noise")),
            severity=Severity.MEDIUM if measured else Severity.LOW,
            fix=(f"Raise the batch size to {pick}, the fitting batch with the most measured samples/s (scale the "
                 f"learning rate with it):\n```python\nloader = DataLoader(ds, batch_size={pick}, ...)\n```"
                 if measured else
                 f"A larger batch fits, but no trial measured it faster; raise it only for the training recipe's sake "
                 f"(up to {top}):\n```python\nloader = DataLoader(ds, batch_size={top}, ...)\n```"),
        )]


class MemoryPressure(Rule):
    code = "TD502"
    slug = "memory-pressure"
    example = "loader = DataLoader(ds, batch_size=512)  # peak memory 79 of 80 GB, allocator retries"
    title = "Memory near capacity, allocator retries or fragmentation"
    rationale = "When the caching allocator runs out it frees its cache and retries (a sync, slow)."
    fix = (
        "Lower peak memory: smaller batch with gradient accumulation, activation checkpointing, or\n"
        "```bash\nPYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py\n```"
    )

    def not_measurable(self, record, facts):
        return memory_not_measurable(record, facts)

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        findings = []
        mem = record.cuda_memory
        if mem is not None and mem.device_total_bytes:
            use = mem.peak_reserved_bytes / mem.device_total_bytes
            if mem.alloc_retries or mem.ooms or use >= PRESSURE_MIN_USE:
                findings.append(self.finding(
                    title=f"{mem.alloc_retries} allocator retries; peak {use:.0%} of the card",
                    message="The caching allocator had to free and retry allocations during the run.",
                    location=None,
                    evidence={"alloc_retries": mem.alloc_retries, "ooms": mem.ooms, "peak_share": round(use, 3)},
                    speedup=None,
                    basis="the cost of a retry is a device sync plus cudaFree/cudaMalloc; see the trace",
                    severity=Severity.MEDIUM,
                ))
        memory = record.memory
        fragmented = expandable_segments(memory.reserved_unused_bytes, memory.device_total_bytes) if memory else None
        if fragmented is not None and memory.failure is None:
            findings.append(self.finding(
                title=f"{format_bytes(fragmented.saves_bytes)} reserved by the allocator but never allocated at the peaks",
                message=fragmented.basis + ".", location=None,
                evidence={"reserved_unused_bytes": fragmented.saves_bytes,
                          "peak_reserved_bytes": memory.peak_reserved_bytes},
                speedup=None, basis="memory, not time: it is what a larger batch could have used",
                severity=Severity.LOW, fix=f"```bash\n{fragmented.code}\n```"))
        findings.extend(self._from_trials(record.batch_scaling))
        return findings

    def _from_trials(self, scaling: BatchScaling | None) -> list[Finding]:
        if scaling is None or not scaling.capacity_bytes or not scaling.user_batch_size:
            return []
        mine = scaling.trial(scaling.user_batch_size)
        need = mine.device_peak_bytes or mine.peak_bytes if mine is not None else None
        usable = scaling.capacity_bytes - scaling.headroom_bytes
        if need is None or usable <= 0 or need < PRESSURE_MIN_USE * usable:
            return []
        return [self.finding(
            title=f"The script's batch {scaling.user_batch_size} needs {need / usable:.0%} of the usable memory",
            message=(f"Peak {format_bytes(need)} of {format_bytes(usable)} usable ({format_bytes(scaling.capacity_bytes)}, "
                     f"{scaling.capacity_source}, minus {format_bytes(scaling.headroom_bytes)} kept free): a longer sequence "
                     "or a larger batch later in training will not fit."),
            location=None, evidence={"need_bytes": need, "usable_bytes": usable},
            speedup=None, basis="memory measured by the trial at the script's batch size", severity=Severity.MEDIUM)]


SIGKILL = 9


def _killed_ranks(record: RunRecord) -> list:
    return [v for v in record.ranks if v.status == "lost" and v.exit_code == -SIGKILL]


def input_growth(record: RunRecord, failure) -> tuple[str, list[int]] | None:
    """(a sentence, the largest shape that ran) when the training batch's shape at the failure
    differs from the one the run started with: a batch or a sequence that grew."""
    now = failure.batch_shape
    shapes = [(s.index, s.batch_shape) for s in record.steps if s.batch_shape]
    if not now or not shapes or shapes[0][1] == now:
        return None
    first_step, first = shapes[0]
    ran = max((shape for _, shape in shapes if len(shape) == len(now)), key=lambda s: _numel(s), default=first)
    if _numel(ran) >= _numel(now):
        return None  # it ran at this size or larger before: not the growth
    grown = [k for k in range(min(len(now), len(first))) if now[k] != first[k]]
    what = "batch" if grown == [0] else "sequence length" if grown and grown[0] == 1 else "input shape"
    at = next((i for i, shape in shapes if shape == ran), first_step)
    middle = f", {_dims(ran)} by step {at}" if ran != first else ""
    return (f"The training input's {what} grew during the run: {_dims(first)} at step {first_step}{middle}, "
            f"{_dims(now)} at the failure in step {failure.step}"), ran


def _numel(shape: list[int]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def _dims(shape: list[int]) -> str:
    return "x".join(map(str, shape))


class OutOfMemory(Rule):
    code = "TD503"
    slug = "out-of-memory"
    example = "loss = loss_fn(model(x), y)  # torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    title = "The script ran out of memory"
    rationale = ("An out-of-memory error ends training. What filled memory when it failed (parameters, gradients, "
                 "optimizer states, activations, temporaries) decides which change frees enough.")
    fix = ("Free what the breakdown shows is largest: a smaller batch with gradient accumulation, activation "
           "checkpointing, bf16 autocast, an optimizer with fewer states, or, when the allocator's cache is "
           "fragmented:\n```bash\nPYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py\n```")

    def not_measurable(self, record, facts):
        return None

    def _killed(self, record: RunRecord) -> list[Finding]:
        """A rank ended by SIGKILL with no Python exception: killed from outside, most often by the
        kernel's out-of-memory killer. Not an allocator out-of-memory error: said apart."""
        killed = _killed_ranks(record)
        if not killed:
            return []
        first = killed[0]
        where = f"; it was last at {first.last_position}" if first.last_position else ""
        steps = max((len(v.steps) for v in record.ranks if v.steps), default=0)
        return [self.finding(
            title=f"Rank {first.rank} was killed (SIGKILL) with no Python exception: host memory, not the allocator",
            message=(f"{first.error}{where}. No out-of-memory error was raised inside the script, so PyTorch's "
                     f"allocator did not fail: the process was ended from outside. The other ranks' records (up to "
                     f"{steps} steps) are kept. Host RAM is used by DataLoader workers (each a copy of the dataset "
                     "object), pinned buffers and the CPU side of the model; `torchdoctor memory` measures the "
                     "training step's own tensors."),
            location=None,
            evidence={"ranks": [v.rank for v in killed], "signal": "SIGKILL", "kind": "host-oom-kill"},
            speedup=None, basis="the launcher's exit codes and the memory cgroup's OOM-kill count",
            severity=Severity.HIGH,
            fix=("Find what holds host memory: fewer DataLoader workers or a dataset that reads lazily instead of "
                 "holding everything in each worker's copy, `pin_memory=False` to test, a smaller `prefetch_factor`; "
                 "raise the container's memory limit if the job needs it. `dmesg | grep -i oom` shows the kill."))]

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        memory = record.memory
        failure = memory.failure if memory is not None else None
        if failure is None:
            return self._killed(record)
        grew = input_growth(record, failure)
        advice = oom_advice(failure, memory, record.batch_scaling, record.optimizers, grew[1] if grew else None)
        parts = ", ".join(f"{p.replace('_', ' ')} {format_bytes(failure.parts[p])}" for p in PARTS if failure.parts.get(p))
        live = f" with {format_bytes(failure.live_bytes)} live" if failure.live_bytes is not None else ""
        asked = f"{format_bytes(failure.requested_bytes)} requested" if failure.requested_bytes else "an allocation failed"
        op = ""
        if failure.op or failure.shape:
            shape = "x".join(map(str, failure.shape)) + (f" {failure.dtype}" if failure.dtype else "")
            inputs = ", ".join("x".join(map(str, s)) for s in failure.input_shapes)
            op = (f" The allocation was {failure.op or 'an op'}'s" + (f" {shape} output" if failure.shape else " output")
                  + (f" (inputs {inputs})" if inputs else "") + ".")
        where = f" (batch of {failure.batch_size})" if failure.batch_size else ""
        ranked = "; ".join(f"{i}. {a.change}: saves ~{format_bytes(a.saves_bytes)}" for i, a in enumerate(advice, 1))
        fix = "\n".join(f"{i}. {a.change} — saves ~{format_bytes(a.saves_bytes)} ({a.basis})"
                        + (f"\n```python\n{a.code}\n```" if a.code and not a.code.startswith("PYTORCH") else
                           f"\n```bash\n{a.code}\n```" if a.code else "")
                        for i, a in enumerate(advice, 1)) or self.fix
        return [self.finding(
            title=f"Out of memory in step {failure.step}{where}: {asked}{live}",
            message=(f"{failure.message}.{op}" + (f" {grew[0]}." if grew else "")
                     + f" When it failed ({failure.phase or 'after the accounted steps'}): {parts or 'no breakdown'}."
                     + (f" What to change, most memory saved first: {ranked}." if ranked else
                        " No change torchdoctor can size saves a tenth of the failed allocation; see the breakdown.")),
            location=failure.location,
            evidence={"requested_bytes": failure.requested_bytes, "live_bytes": failure.live_bytes,
                      "shape": failure.shape or None, "op": failure.op or None,
                      "input_grew": grew[0] if grew else None,
                      "parts": dict(failure.parts), "step": failure.step, "batch_size": failure.batch_size,
                      "advice": [{"change": a.change, "saves_bytes": a.saves_bytes} for a in advice]},
            speedup=None,
            basis="memory saved, not time: each figure is worked out from what was live when it failed",
            severity=Severity.HIGH,
            fix=fix,
        )]
