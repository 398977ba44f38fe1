"""RunRecord -> the memory tables of a report: the breakdown at the peak, the modules that hold
the most activations, the largest live allocations, what was live at an out-of-memory failure,
and `torchdoctor memory`'s trials and fit."""

from __future__ import annotations

from torchdoctor.model.figures import MemoryFigure, ScalingFigure, ScalingPoint
from torchdoctor.model.findings import Table
from torchdoctor.model.memory_record import (FITS, PARTS, BatchScaling, LiveAllocation, MemoryBreakdown,
                                       OomEvent)
from torchdoctor.model.record import RunRecord
from torchdoctor.model.units import KIB, format_bytes

PART_WORDS = {"parameters": "parameters", "gradients": "gradients", "optimizer_states": "optimizer states",
              "activations": "activations saved for backward", "temporaries": "temporaries",
              "other": "other tensors held across steps"}
SHORT_PART = {"parameters": "parameter", "gradients": "gradient", "optimizer_states": "optimizer state",
              "activations": "activation", "temporaries": "temporary", "other": "other"}
SMALLEST_PART_SHARE = 0.001  # parts under 0.1 % of the peak (a running loss) are left out of the table
MODULE_ROWS = 5
ALLOCATION_ROWS = 3  # at a peak; at a failure, every one the record keeps


def memory_tables(record: RunRecord) -> list[Table]:
    tables: list[Table] = []
    memory = record.memory
    if memory is not None and memory.peak_bytes:
        tables.append(breakdown_table(memory))
        peak_step = next((st for st in record.steps if st.index == memory.peak_step), None)
        modules = module_table(memory, peak_step.micro_batches if peak_step is not None else 1)
        if modules is not None:
            tables.append(modules)
        if memory.largest:
            tables.append(allocation_table("Largest tensors live at the peak", memory.largest[:ALLOCATION_ROWS],
                                           "Each is one tensor storage; where: the line that created it."))
    if memory is not None and memory.failure is not None:
        tables.append(failure_table(memory.failure))
        if memory.failure.largest:
            tables.append(allocation_table("Largest tensors live when it ran out", memory.failure.largest,
                                           "Each is one tensor storage (on CUDA after the accounted steps: an "
                                           "allocator block); where: the line that created it."))
    if record.batch_scaling is not None:
        tables.extend(scaling_tables(record.batch_scaling))
    return tables


def breakdown_table(memory: MemoryBreakdown) -> Table:
    peak = memory.peak_bytes or 0
    rows = [[PART_WORDS[p], format_bytes(memory.parts[p]), _share(memory.parts[p], peak)] for p in PARTS
            if memory.parts.get(p, 0) > SMALLEST_PART_SHARE * peak]
    rows.append(["peak of tensor memory", format_bytes(peak), "100%"])
    if memory.device_missing is None and memory.peak_reserved_bytes is not None:
        reserved = memory.peak_reserved_bytes
        rows += [["allocator: peak allocated (whole run)", format_bytes(memory.peak_allocated_bytes or 0), ""],
                 ["allocator: reserved but unused at the peaks (fragmentation, cache)",
                  format_bytes(memory.reserved_unused_bytes or 0), _share(memory.reserved_unused_bytes or 0, reserved)],
                 ["outside PyTorch (CUDA context, NCCL, other processes)", format_bytes(memory.outside_pytorch_bytes or 0),
                  ""],
                 ["device total", format_bytes(memory.device_total_bytes or 0), ""]]
    where = f"step {memory.peak_step}" + (f", batch of {memory.batch_size}" if memory.batch_size else "")
    phase = max(memory.phase_peaks, key=memory.phase_peaks.get) if memory.phase_peaks else ""
    caption = (f"At the highest point of the accounted steps ({where}, in {phase}): {memory.method}. "
               + (memory.device_missing + "." if memory.device_missing else ""))
    return Table("Memory at the peak", ["part", "bytes", "share"], rows, caption.strip())


def module_table(memory: MemoryBreakdown, micro_batches: int = 1) -> Table | None:
    saved = max((m.saved_bytes for m in memory.modules), default=0)  # the model's own: everything inside it
    shown = [m for m in memory.modules if m.module and m.saved_bytes][:MODULE_ROWS]
    if not shown or not saved:
        return None
    rows = [[m.module, m.kind, format_bytes(m.saved_bytes), _share(m.saved_bytes, saved),
             format_bytes(m.input_bytes) if m.input_bytes else ""] for m in shown]
    return Table("Modules holding the most activations", ["module", "kind", "saved for backward", "share", "its input"],
                 rows, "Saved by the module and the modules inside it in the peak step"
                 + (f", summed over its {micro_batches} micro-batches (each backward() frees its own, so about "
                    f"1/{micro_batches} of this is live at once)" if micro_batches > 1 else "")
                 + " (share: of all the model saved). Checkpointing a module keeps only its input and recomputes the rest in backward.")


def allocation_table(title: str, allocations: list[LiveAllocation], caption: str) -> Table:
    rows = []
    for a in allocations:
        where = f"{a.location.path}:{a.location.line}" if a.location else "(autograd or before the step)"
        tensor = " ".join(p for p in (a.op.removeprefix("aten::"), a.dtype, "x".join(map(str, a.shape))) if p)
        rows.append([format_bytes(a.bytes), SHORT_PART.get(a.part, a.part), where, tensor, a.module or ""])
    return Table(title, ["bytes", "what", "where", "made by, tensor", "module"], rows, caption)


def failure_table(event: OomEvent) -> Table:
    rows = [[PART_WORDS.get(p, p), format_bytes(event.parts[p])] for p in PARTS if event.parts.get(p)]
    if event.live_bytes is not None:
        rows.append(["live when it failed", format_bytes(event.live_bytes)])
    if event.requested_bytes:
        rows.append(["the allocation that failed", format_bytes(event.requested_bytes)])
    if event.device_total_bytes:
        rows.append(["device total", format_bytes(event.device_total_bytes)])
    if event.reserved_unused_bytes:
        rows.append(["reserved but unused (fragmentation)", format_bytes(event.reserved_unused_bytes)])
    how = ("every live storage was accounted" if event.accounted else
           "after the accounted steps: parameters, gradients and optimizer states are exact, the rest is "
           "the allocator's total" if event.device == "cuda" else
           "after the accounted steps: only parameters, gradients and optimizer states can be told apart on CPU")
    where = f" at {event.location.path}:{event.location.line}" if event.location else ""
    return Table("Memory when it ran out", ["part", "bytes"], rows,
                 f"{event.message} (step {event.step}{where}; {how})."
                 + (f" Limit in force: {event.limit}." if event.limit else ""))


def scaling_tables(scaling: BatchScaling) -> list[Table]:
    rows = []
    for t in scaling.trials:
        per_sample = f"{1000 / t.samples_per_s:.3f}" if t.samples_per_s else ""
        notes = t.detail
        batch = f"{t.batch_size}"
        if t.samples and t.batch_size and t.samples < t.batch_size:  # measured as the rows it got, not as asked
            notes = (notes + "; " if notes else "") + (f"asked for {t.batch_size}, the data gave {t.samples} rows per "
                                                       f"step: measured as batch {t.samples}")
            batch = f"{t.samples}"
        mine = " (the script's)" if t.batch_size == scaling.user_batch_size else ""
        best = " (recommended)" if scaling.recommended_batch and t.outcome == FITS and \
            t.fit_batch == scaling.recommended_batch and t.samples_per_s else ""
        rows.append([f"{batch}{mine}{best}", t.outcome, format_bytes(t.peak_bytes) if t.peak_bytes else "",
                     format_bytes(t.device_peak_bytes) if t.device_peak_bytes else "",
                     round(t.samples_per_s, 1) if t.samples_per_s else None, per_sample, notes])
    caption = (f"One fresh process per batch size (batch_size knob{': ' + scaling.loader if scaling.loader else ''}); "
               f"peak: tensor memory of the accounted steps; samples/s over the timed steps.")
    if scaling.nproc_per_node > 1:
        caption += f" Each trial ran {scaling.nproc_per_node} DDP ranks; a size fits when every rank fits."
    if scaling.recommended_batch:
        caption += (f" Recommended: batch {scaling.recommended_batch}, the fitting trial with the most samples/s (the "
                    "smallest within its noise).")
    if scaling.data_bound:
        caption += f" The data bounds the batch at {scaling.data_bound:,}: {scaling.data_bound_basis}."
    if scaling.unreachable:
        caption += (f" The batch size could not be changed: {scaling.unreachable}; only the script's own batch "
                    "was measured.")
    tables = [Table("Batch size trials", ["batch", "outcome", "peak", "device peak", "samples/s", "ms per sample",
                                           "notes"], rows, caption)]
    if scaling.fits:
        fit_rows = [[f.phase, format_bytes(max(f.fixed_bytes, 0)), f"{f.per_sample_bytes / KIB:,.1f} KiB", f.points,
                     "" if f.max_error is None else f"{f.max_error:.1%}"] for f in scaling.fits]
        tables.append(Table("Fit: peak(b) = fixed + b x per sample", ["phase", "fixed", "per sample", "points",
                                                                      "largest error"], fit_rows,
                            _fit_caption(scaling)))
    return tables


def _fit_caption(scaling: BatchScaling) -> str:
    parts = ["The step's peak is the larger of its phases' lines."]
    if scaling.capacity_bytes:
        parts.append(f"Fitting in {format_bytes(scaling.capacity_bytes)} ({scaling.capacity_source}) minus "
                     f"{format_bytes(scaling.headroom_bytes)} kept free ({scaling.headroom_basis}).")
        if scaling.predicted_max_batch is not None:
            parts.append(f"Largest batch predicted by the fit: {scaling.predicted_max_batch}.")
        if scaling.verified_max_batch is not None:
            parts.append(f"Largest batch a trial ran within it: {scaling.verified_max_batch} "
                         f"(search step {scaling.search_step}).")
        elif not any(t.outcome == FITS for t in scaling.trials):
            parts.append("No trial fitted, not even the smallest.")
    else:
        parts.append("No capacity to fit in: pass --device-memory SIZE or --for-gpu NAME (on CUDA, the GPU's own).")
    parts.extend(n[0].upper() + n[1:] + "." for n in scaling.notes)
    return " ".join(parts)


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else ""


def memory_figure(record: RunRecord) -> MemoryFigure | None:
    memory = record.memory
    if memory is None:
        return None
    failure = memory.failure
    if memory.peak_bytes:
        batch = f", batch of {memory.batch_size}" if memory.batch_size else ""
        return MemoryFigure(title=f"peak of step {memory.peak_step}{batch}", peak_bytes=memory.peak_bytes,
                            parts=dict(memory.parts), timeline=[(p.event, p.bytes) for p in memory.timeline],
                            events=memory.timeline_events, backward_event=memory.backward_event,
                            optimizer_event=memory.optimizer_event, device_missing=memory.device_missing)
    if failure is not None and failure.parts:
        return MemoryFigure(title=f"when it ran out (step {failure.step})", peak_bytes=sum(failure.parts.values()),
                            parts=dict(failure.parts), device_missing=memory.device_missing)
    return None


def scaling_figure(record: RunRecord) -> ScalingFigure | None:
    scaling = record.batch_scaling
    if scaling is None or not scaling.trials:
        return None
    return ScalingFigure(
        points=[ScalingPoint(t.fit_batch, t.outcome, t.peak_bytes, t.device_peak_bytes or t.peak_bytes,
                             t.samples_per_s) for t in scaling.trials if t.batch_size],
        fits=[(f.phase, f.fixed_bytes, f.per_sample_bytes) for f in scaling.fits],
        usable_bytes=scaling.capacity_bytes - scaling.headroom_bytes if scaling.capacity_bytes else None,
        capacity_bytes=scaling.capacity_bytes, user_batch=scaling.user_batch_size,
        predicted_max_batch=scaling.predicted_max_batch, verified_max_batch=scaling.verified_max_batch)
