"""Input-pipeline rules: waiting for batches, worker restarts, host→device copies."""

from __future__ import annotations

import statistics
from bisect import bisect_right

from torchdoctor.model.units import MIB, format_bytes
from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.record import ApiCall, LoaderStats, RunRecord
from torchdoctor.rules.base import MIN_REPORTED_SPEEDUP, Rule, amdahl, ms, severity_for
from torchdoctor.rules.facts import (
    RunFacts, core_duration, loading_cpu_share, starved_of_cpu, training_loader, waits_on_storage, workers_for_fix,
)

# Exposed data wait below this share of a step is normal prefetch jitter.
DATA_WAIT_MIN_SHARE = 0.05
# Host→device bytes per step below which a pageable copy is not worth a finding (1 MiB).
TRANSFER_MIN_BYTES = MIB


def _startup_per_step(record: RunRecord, facts: RunFacts) -> float:
    """Epoch start-up time spread over the steps it served: TD102's share, not TD101's.

    Start-up is the iterator's creation plus, when workers restart each epoch, the wait
    for their first batch.
    """
    total_steps = len(record.steps)
    starts = 0.0
    for loader in record.loaders:
        starts += sum(loader.iterator_starts_s)
        if loader.num_workers > 0 and not loader.persistent_workers:
            starts += sum(loader.first_batch_waits_s)
    return starts / total_steps if total_steps else 0.0


def _core_caveat(record: RunRecord) -> str:
    """On a CPU run workers overlap only on cores the model's threads leave free."""
    env = record.environment
    if env.cuda_used or not env.cpu_count or not env.num_threads or env.num_threads < env.cpu_count:
        return ""
    return (f"; on this CPU run torch already uses {env.num_threads} threads on {env.cpu_count} cores, so workers "
            f"compete with the model: free a core (`--set threads={max(1, env.cpu_count - 1)}`) or make "
            "`__getitem__` cheaper")


TENSOR_DATASET = "torch.utils.data.dataset.TensorDataset"
TENSOR_DATASET_FIX = (
    "Index the tensors once per batch: a BatchSampler as the sampler and `batch_size=None` hand "
    "`TensorDataset.__getitem__` a list of indices, which it applies to each tensor at once:\n```python\n"
    "from torch.utils.data import BatchSampler, RandomSampler\n"
    "loader = DataLoader(ds, sampler=BatchSampler(RandomSampler(ds), batch_size=128, drop_last=True),\n"
    "                    batch_size=None)  # each item is already a batch\n```\n"
    "Or skip the DataLoader: `perm = torch.randperm(len(x)); for i in range(0, len(x), bs): "
    "idx = perm[i:i + bs]; xb, yb = x[idx], y[idx]`."
)


class DataLoaderStall(Rule):
    code = "TD101"
    slug = "dataloader-stall"
    example = (
        "loader = DataLoader(ImageFolder(root, transform=heavy_augment), batch_size=256)  # num_workers=0\n"
        "for x, y in loader:  # every step first waits here for decoding and augmentation"
    )
    title = "Training steps wait for the next batch"
    rationale = (
        "While the main process waits in `next(loader)`, the model does nothing. The loader "
        "should prepare batches in worker processes ahead of the step that needs them."
    )
    fix = (
        "Load batches in parallel and ahead of time; move heavy per-sample work out of "
        "`__getitem__` (pre-process once, cache, or do it batched on the device):\n"
        "```python\nloader = DataLoader(ds, batch_size=64, num_workers=4, "
        "persistent_workers=True,\n                    prefetch_factor=4, pin_memory=True)\n```"
    )

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        loader = training_loader(record)
        if loader is None or not facts.step_s:
            return []
        if loader.num_workers > 0 and not loader.persistent_workers and len(loader.iterator_starts_s) > 1:
            return []  # restarting workers explain the wait (TD102); judge the rest after that fix
        step = facts.step_s
        wait = max(0.0, facts.mean("data_wait_s") - _startup_per_step(record, facts))
        share = wait / step
        if share < DATA_WAIT_MIN_SHARE or amdahl(step, wait) < MIN_REPORTED_SPEEDUP:
            return []
        workers = loader.num_workers
        cpu_share = loading_cpu_share(loader)
        if workers == 0 and loader.dataset_type == TENSOR_DATASET:
            # Workers would pickle every sample's tensors across processes: the cheaper fix is
            # to index the tensors once per batch instead of once per sample.
            cause = ("the dataset is tensors already in memory (TensorDataset), indexed one sample at a time "
                     f"({loader.batch_size or 'batch-size'} `__getitem__` calls) and stacked again by the collate "
                     "function in every step")
            speedup = amdahl(step, wait)
            basis = ("upper bound: Amdahl with the whole wait removed; one indexing per batch costs a few "
                     "tensor ops instead of a Python call per sample, so most of it goes")
            fix = TENSOR_DATASET_FIX
        else:
            cause = (
                "the loader has num_workers=0, so every batch is built in the training process"
                if workers == 0
                else f"{workers} worker(s) cannot keep up with the model"
            )
            if starved_of_cpu(loader):
                cause += (f"; the loading thread was ready to run but had no CPU {loader.runqueue_share:.0%} of "
                          "that time: other processes were using the CPUs, so part of this wait is the busy machine's")
            elif cpu_share is not None:
                cause += (f"; {cpu_share:.0%} of that time was CPU work" if not waits_on_storage(loader) else
                          f"; only {cpu_share:.0%} of that time was CPU work, the rest waited (storage, network)")
            speedup, basis = _parallel_loading_estimate(record, facts, loader, wait)
            fix = None
        return [
            self.finding(
                title=f"Steps wait {ms(wait):.1f} ms for data ({share:.0%} of each step)",
                message=(
                    f"Each measured step waited {ms(wait):.1f} ms of {ms(step):.1f} ms in "
                    f"`next(loader)`: {cause}."
                ),
                location=loader.created_at or loader.iterated_at,
                evidence={
                    "data_wait_ms_per_step": ms(wait),
                    "step_ms": ms(step),
                    "share_of_step_time": round(share, 3),
                    "num_workers": workers,
                    "loading_cpu_share": round(cpu_share, 3) if cpu_share is not None else None,
                    # ...measured on this share of the loading time (the CPU clock is read on some batches)
                    "loading_cpu_share_measured_on": _cpu_timed_share(loader) if cpu_share is not None else None,
                    "loading_runqueue_share": (round(loader.runqueue_share, 3)
                                               if loader.runqueue_share is not None else None),
                    "workers_for_fix": workers_for_fix(record, loader),
                    "speedup_if_fully_hidden": round(amdahl(step, wait), 3),
                    "batch_size": loader.batch_size,
                    "batches": loader.batches,
                },
                speedup=speedup,
                basis=basis,
                fix=fix,
                # the size of the stall, which a cheaper `__getitem__` can win back even where
                # workers cannot; the part of it other processes' CPU use explains is the
                # machine's, not the loader's: ranked by what is left
                severity=_stall_severity(loader, step, wait),
            )
        ]


def _parallel_loading_estimate(record: RunRecord, facts: RunFacts, loader, wait: float) -> tuple[float | None, str]:
    """Amdahl with the loading spread over the workers this machine can run at once.

    With N workers busy, one batch per step means each takes a worker N steps; with none, the
    training process spends the wait itself. W workers then deliver a batch every load / W.
    On a CPU run the model's threads already use every core, so the CPU time the loading still
    needs (measured in the training process) is taken from training: compute + cpu / cores.
    """
    step = facts.step_s or 0.0
    current = loader.num_workers
    workers = workers_for_fix(record, loader)
    cores = record.environment.cpu_count or 1
    load = step * current if current else wait  # one step's batch, in worker (or process) time
    compute = step - wait
    storage = waits_on_storage(loader)
    if workers <= current:
        return None, (f"the loader already has {current} workers, as many as {cores} cores run beside training when "
                      "loading computes (inside workers its CPU share is not measurable); make `__getitem__` "
                      "cheaper, or let `torchdoctor tune --trials workers=N` measure more workers; "
                      "`--set data=cached` measures the ceiling")
    if workers == 1 and not storage:
        bound = step / max(compute, load)
        return None, (f"one core to spare: a worker can overlap the loading with compute but not split it, so at "
                      f"most {bound:.2f}x before worker overheads (collation into shared memory, IPC) that can "
                      "cancel it; `torchdoctor tune` measures it, `--set data=cached` the ceiling of a cheaper "
                      "`__getitem__`")
    cpu = loading_cpu_share(loader)
    taken = wait * cpu / cores if cpu is not None and not record.environment.cuda_used else 0.0
    new_step = max(compute + taken, load / workers)
    plural = "s" if workers != 1 else ""
    why = ("the fix's count: loading waits rather than computes, so workers need no core each" if storage
           else f"one per core left beside the training process ({cores} cores)" + _core_caveat(record))
    basis = (f"Amdahl with loading spread over {workers} worker{plural}: step = max(compute {ms(compute):.1f} ms"
             + (f" + {ms(taken):.1f} ms of loading CPU taken from it" if taken else "")
             + f", loading {ms(load):.1f} ms / {workers}) = {ms(new_step):.1f} ms; {workers} worker{plural}: {why}; "
             "worker overheads (IPC, collation into shared memory) not counted")
    return amdahl(step, step - new_step), basis


def _stall_severity(loader, step: float, wait: float) -> Severity:
    own = wait * (1 - loader.runqueue_share) if starved_of_cpu(loader) else wait
    if own / step < DATA_WAIT_MIN_SHARE:
        return Severity.LOW  # without the busy machine's share, under the stall worth a finding
    return severity_for(amdahl(step, own))


def _epoch_start_excess(facts: RunFacts, loader) -> float | None:
    """Per measured step, what restarting workers adds to an epoch.

    Each of the N fresh workers serves one of the epoch's first N steps, so those steps carry
    the restart (old workers shut down, new ones start and take CPU from training); the steps
    after them show the undisturbed step time. Their excess over it, less the epoch's
    first-batch wait, which persistent workers still pay (they resume, then build the first
    batch; measured: the same wait), is the restart's cost. None when the run has too few
    steps of either kind.
    """
    first_steps = [n + 1 for n in loader.epoch_start_steps]
    first_wait = dict(zip(first_steps, loader.first_batch_waits_s))
    starts, pool = sorted(first_steps), max(1, loader.num_workers)
    disturbed, calm = [], []
    for s in facts.measured:
        epoch = bisect_right(starts, s.index)  # epochs begun by this step; 0: before the first
        served_by_fresh_worker = epoch > 0 and s.index - starts[epoch - 1] < pool
        (disturbed if served_by_fresh_worker else calm).append(s)
    if len(calm) < 2:  # epochs no longer than the pool: compare with the other steps instead
        disturbed = [s for s in facts.measured if s.index in first_wait]
        calm = [s for s in facts.measured if s.index not in first_wait]
    if not disturbed or len(calm) < 2:
        return None
    typical = statistics.median(core_duration(s) for s in calm)
    excess = sum(core_duration(s) - typical for s in disturbed) - sum(first_wait.get(s.index, 0.0) for s in disturbed)
    return max(0.0, excess) / len(facts.measured)


class WorkerRespawn(Rule):
    code = "TD102"
    slug = "worker-respawn"
    example = (
        "loader = DataLoader(ds, batch_size=64, num_workers=8)  # persistent_workers=False\n"
        "for epoch in range(100):\n"
        "    for x, y in loader: ...  # 8 workers start again every epoch"
    )
    title = "DataLoader workers restart every epoch"
    rationale = (
        "With `persistent_workers=False` every epoch shuts the worker processes down and "
        "starts new ones, which re-import, re-build the dataset and refill the prefetch queue."
    )
    fix = (
        "Keep the workers alive across epochs:\n```python\nloader = DataLoader(ds, "
        "batch_size=64, num_workers=4, persistent_workers=True)\n```"
    )

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        findings = []
        for loader in record.loaders:
            restarts = loader.iterator_starts_s[1:]
            if loader.num_workers == 0 or loader.persistent_workers or not restarts or not facts.step_s:
                continue
            epochs = len(loader.iterator_starts_s)
            steps_per_epoch = max(1.0, (loader.batches - loader.batches_in_eval) / epochs)
            saved = _epoch_start_excess(facts, loader)
            basis = ("Amdahl: the extra time of the steps that start an epoch, one per fresh worker, over the "
                     "median later step (worker shutdown and start-up, CPU taken from training), less the "
                     "first-batch wait persistent workers still pay, removed")
            if saved is None:  # too few measured epoch starts: the restart's own timings
                typical = statistics.median([s.data_wait_s for s in facts.measured] or [0.0])
                first_waits = loader.first_batch_waits_s[1:len(restarts) + 1]
                saved = (statistics.fmean(restarts) + max(
                    0.0, (statistics.fmean(first_waits) if first_waits else 0.0) - typical)) / steps_per_epoch
                basis = "Amdahl: measured restart time (iterator start + first-batch latency) spread over the steps of an epoch"
            per_epoch = saved * steps_per_epoch
            speedup = amdahl(facts.step_s, saved)
            if speedup < MIN_REPORTED_SPEEDUP:
                continue
            findings.append(
                self.finding(
                    title=f"Worker processes restart every epoch ({ms(per_epoch):.0f} ms each time)",
                    message=(
                        f"{epochs} epochs started in this run; each restart of the "
                        f"{loader.num_workers} workers cost {ms(per_epoch):.0f} ms, about "
                        f"{ms(saved):.1f} ms per step over {steps_per_epoch:.1f} steps per epoch."
                    ),
                    location=loader.created_at or loader.iterated_at,
                    evidence={
                        "epochs_started": epochs,
                        "restart_ms": ms(per_epoch),
                        "steps_per_epoch": round(steps_per_epoch, 1),
                        "num_workers": loader.num_workers,
                        "persistent_workers": False,
                    },
                    speedup=speedup,
                    basis=basis,
                )
            )
        return findings


def _h2d_calls(record: RunRecord) -> list[ApiCall]:
    return [c for c in record.dispatch.api_calls if c.kind == "transfer-h2d" and c.phase == "train"]


def _per_step(record: RunRecord, count: int) -> float:
    return count / max(1, record.dispatch.sampled_steps)


class PageableTransfer(Rule):
    code = "TD103"
    slug = "pageable-transfer"
    example = (
        "loader = DataLoader(ds, batch_size=64, num_workers=4)  # pin_memory=False\n"
        "x = x.to(\"cuda\")  # staged through a pageable bounce buffer"
    )
    title = "Host→device copies from pageable memory"
    needs_cuda = True
    rationale = (
        "A copy from ordinary (pageable) host memory is staged through a pinned buffer by the "
        "driver and cannot overlap with compute; pinned memory copies at full PCIe speed, async."
    )
    fix = (
        "Pin the batches in the loader and copy them asynchronously:\n```python\n"
        "loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)\n"
        "x = x.to(device, non_blocking=True)\n```"
    )

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        calls = [c for c in _h2d_calls(record) if c.detail.get("pinned", 0) < c.count]
        total_bytes = sum(c.detail.get("bytes", 0) for c in calls)
        if not calls or _per_step(record, total_bytes) < TRANSFER_MIN_BYTES:
            return []
        loader = training_loader(record)
        location = loader.created_at if loader and not loader.pin_memory else calls[0].location
        return [
            self.finding(
                title=f"{format_bytes(_per_step(record, total_bytes))} per step copied from pageable memory",
                message=(
                    f"{sum(c.count for c in calls)} host→device copies in "
                    f"{record.dispatch.sampled_steps} sampled steps came from unpinned memory "
                    f"(first at {calls[0].location})."
                ),
                location=location,
                evidence={
                    "bytes_per_step": int(_per_step(record, total_bytes)),
                    "copies_per_step": round(_per_step(record, sum(c.count for c in calls)), 2),
                    "loader_pin_memory": loader.pin_memory if loader else None,
                },
                speedup=None,
                basis="copy time is on the GPU timeline: `torchdoctor trace` on this run's trace sizes it",
                severity=Severity.MEDIUM,
            )
        ]


class BlockingTransfer(Rule):
    code = "TD104"
    slug = "blocking-transfer"
    example = (
        "loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)\n"
        "x = x.to(\"cuda\")  # the host waits for the copy to finish"
    )
    title = "Pinned batches copied without non_blocking=True"
    needs_cuda = True
    rationale = (
        "`.to(device)` from pinned memory without `non_blocking=True` makes the host wait for "
        "the copy, so the next step's Python work cannot overlap with it."
    )
    fix = "Copy pinned batches asynchronously:\n```python\nx = x.to(device, non_blocking=True)\n```"

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        findings = []
        for call in _h2d_calls(record):
            blocking_pinned = call.detail.get("pinned", 0) - min(
                call.detail.get("pinned", 0), call.detail.get("non_blocking", 0))
            if blocking_pinned <= 0:
                continue
            findings.append(
                self.finding(
                    title=f"Blocking copy of pinned memory at {call.location}",
                    message=f"{blocking_pinned} pinned host→device copies at this line waited for completion.",
                    location=call.location,
                    evidence={"blocking_pinned_copies": blocking_pinned,
                              "bytes_per_step": int(_per_step(record, call.detail.get("bytes", 0)))},
                    speedup=None,
                    basis="overlap gain depends on the GPU timeline: `torchdoctor trace` on this run's trace sizes it",
                    severity=Severity.MEDIUM,
                )
            )
        return findings


def _cpu_timed_share(loader: LoaderStats) -> float | None:
    """The share of the loading wait whose CPU time was read: all of it in records before schema 8."""
    if loader.cpu_timed_wait_s is None:
        return 1.0
    if loader.wait_total_s <= 0:
        return None
    return round(min(1.0, loader.cpu_timed_wait_s / loader.wait_total_s), 3)
