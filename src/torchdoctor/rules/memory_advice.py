"""What to change when memory runs out, each with the bytes it saves, worked out from the
breakdown (rules/memory.py words it). Pure arithmetic on the record's numbers."""

from __future__ import annotations

import math
from dataclasses import dataclass

from torchdoctor.rules.memory_fit import predict
from torchdoctor.model.memory_record import (ACTIVATIONS, OPTIMIZER_STATES, TEMPORARIES, BatchScaling, MemoryBreakdown,
                                       ModuleMemory, OomEvent)
from torchdoctor.model.record import OptimizerInfo
from torchdoctor.model.units import GIB, format_bytes

# Optimizer states per parameter (torch.optim's own classes): what "fewer states" can save.
STATES_PER_PARAMETER = {"Adam": 2, "AdamW": 2, "Adamax": 2, "NAdam": 2, "RAdam": 2, "Adadelta": 2,
                        "Adagrad": 1, "RMSprop": 1, "SGD": 1, "ASGD": 2, "Rprop": 2}
AUTOCAST_SHARE = 0.5  # bf16 keeps 2 of fp32's 4 bytes; ops autocast leaves in fp32 keep theirs: an upper bound
# Reserved-but-unused memory worth the allocator setting: 1 GiB, or 10 % of the device.
FRAGMENTATION_MIN_BYTES = GIB
FRAGMENTATION_MIN_SHARE = 0.10


@dataclass
class Advice:
    change: str  # what to change, with its numbers
    saves_bytes: int
    basis: str  # how the saving was worked out
    code: str = ""


def smaller_batch(batch: int | None, parts: dict[str, int], requested: int, capacity: int | None,
                  scaling: BatchScaling | None) -> Advice | None:
    """The batch that fits, with gradient accumulation to keep the effective batch."""
    if not batch or batch < 2:
        return None
    if scaling is not None and scaling.fits and (scaling.verified_max_batch or scaling.predicted_max_batch):
        fitting = scaling.verified_max_batch or scaling.predicted_max_batch
        if not fitting or fitting >= batch:
            return None
        saves = int((predict(scaling.fits, batch) or 0) - (predict(scaling.fits, fitting) or 0))
        basis = f"from the fit of {len(scaling.trials)} measured batch sizes"
    else:
        scaling_bytes = parts.get(ACTIVATIONS, 0) + parts.get(TEMPORARIES, 0) + requested
        fixed = fixed_bytes(parts)
        if not scaling_bytes or capacity is None or capacity <= fixed:
            return None
        fitting = math.floor(batch * (capacity - fixed) / scaling_bytes)
        if fitting < 1 or fitting >= batch:
            return None
        saves = int(scaling_bytes * (1 - fitting / batch))
        basis = (f"activations and temporaries grow with the batch: {format_bytes(scaling_bytes)} for {batch} samples when "
                 f"it failed, against {format_bytes(capacity - fixed)} left beside parameters, gradients and optimizer "
                 f"states. The step failed partway and needed more, so {fitting} is an upper bound: "
                 "`torchdoctor memory train.py --device-memory SIZE` measures the batch that fits")
        steps = math.ceil(batch / fitting)
        return Advice(f"batch at most {fitting} with {steps} accumulation steps (effective batch {fitting * steps})",
                      saves, basis, _accumulation_code(fitting, steps))
    steps = math.ceil(batch / fitting)
    return Advice(f"batch {fitting} with {steps} accumulation steps (effective batch {fitting * steps})", saves, basis,
                  _accumulation_code(fitting, steps))


def _accumulation_code(fitting: int, steps: int) -> str:
    return (f"loader = DataLoader(ds, batch_size={fitting}, ...)\nfor i, (x, y) in enumerate(loader):\n"
            f"    (loss_fn(model(x), y) / {steps}).backward()\n    if (i + 1) % {steps} == 0:\n"
            "        optimizer.step(); optimizer.zero_grad()")


def checkpoint_blocks(modules: list[ModuleMemory]) -> Advice | None:
    """Checkpoint the blocks of the container that saves the most: each keeps its input only,
    and backward recomputes one block at a time."""
    containers: dict[str, list[ModuleMemory]] = {}
    for m in modules:
        if m.container is not None and m.saved_bytes:
            containers.setdefault(m.container, []).append(m)
    unseen = 0
    if containers:
        name, blocks = max(containers.items(), key=lambda kv: sum(b.saved_bytes for b in kv[1]))
        # a failure can come before the last blocks ran: they would save as much as the largest that did
        unseen = max(0, blocks[0].container_size - len(blocks))
        label = f"the {len(blocks) + unseen} {blocks[0].kind} modules in {name or 'the model'}"
    else:
        blocks = [m for m in modules if m.module and "." not in m.module and m.saved_bytes][:3]
        if len(blocks) < 2:
            return None
        label = ", ".join(b.module for b in blocks)
    largest = max(b.saved_bytes for b in blocks)
    saved = sum(b.saved_bytes for b in blocks) + unseen * largest
    kept = sum(min(b.input_bytes, b.saved_bytes) for b in blocks) + unseen * min(blocks[0].input_bytes, largest) \
        + largest
    if saved <= kept:
        return None
    first = blocks[0].module.rsplit(".", 1)
    loop = f"self.{first[0].split('.')[-1]}" if len(first) == 2 else "blocks"
    ran = (f"the {len(blocks)} that ran before the failure saved {format_bytes(saved - unseen * largest)}, all "
           f"{len(blocks) + unseen} would save ~{format_bytes(saved)}" if unseen else f"they save {format_bytes(saved)}")
    return Advice(f"activation checkpointing of {label}", saved - kept,
                  f"{ran} for backward; checkpointed they keep their inputs and one block's activations at a "
                  "time during backward (a second forward of each block)",
                  f"from torch.utils.checkpoint import checkpoint\nfor block in {loop}:\n"
                  "    x = checkpoint(block, x, use_reentrant=False)")


def autocast(parts: dict[str, int], dtype_of_activations: str, device: str) -> Advice | None:
    activations = parts.get(ACTIVATIONS, 0)
    if not activations or dtype_of_activations not in ("float32", ""):
        return None
    return Advice("bf16 autocast around forward and loss", int(activations * AUTOCAST_SHARE),
                  f"activations saved in bf16 take half their fp32 {format_bytes(activations)}; ops autocast keeps in fp32 "
                  "(softmax, norms, losses) keep theirs, so this is the most it saves",
                  f"with torch.autocast({device!r}, dtype=torch.bfloat16):\n    loss = loss_fn(model(x), y)")


def fewer_states(parts: dict[str, int], optimizers: list[OptimizerInfo]) -> Advice | None:
    states = parts.get(OPTIMIZER_STATES, 0)
    if not states or not optimizers:
        return None
    kind = optimizers[0].class_name
    per_param = STATES_PER_PARAMETER.get(kind)
    if per_param is None or per_param < 2:
        return None
    return Advice(f"an optimizer with fewer states than {kind}'s {per_param} per parameter", states // 2,
                  f"{kind} keeps {format_bytes(states)} of states; SGD with momentum keeps one per parameter (half), an 8-bit "
                  "Adam (bitsandbytes) keeps Adam's two in a byte each (about three quarters less)",
                  "optimizer = torch.optim.SGD(model.parameters(), lr=..., momentum=0.9)")


def bucket_view(memory: MemoryBreakdown | None) -> Advice | None:
    parallel = memory.parallel if memory is not None else None
    if parallel is None or not parallel.bucket_bytes:
        return None
    return Advice("gradient_as_bucket_view=True for DistributedDataParallel", parallel.bucket_bytes,
                  "DDP's flat gradient buckets hold a second copy of every gradient; as views they are the gradients",
                  "model = DDP(model, device_ids=[rank], gradient_as_bucket_view=True)")


def expandable_segments(reserved_unused: int | None, total: int | None) -> Advice | None:
    if not reserved_unused:
        return None
    if reserved_unused < FRAGMENTATION_MIN_BYTES and (not total or reserved_unused < FRAGMENTATION_MIN_SHARE * total):
        return None
    return Advice("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", reserved_unused,
                  f"{format_bytes(reserved_unused)} was reserved by the caching allocator but not allocated (blocks too "
                  "fragmented for the request); expandable segments grow one segment instead",
                  "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py")


# Advice saving less than this share of the allocation that failed cannot make it fit: left out.
MIN_SHARE_OF_REQUEST = 0.10
MIN_SHARE_OF_LIVE = 0.01  # when the request's size is unknown


def failing_op_batch(failure: OomEvent) -> Advice | None:
    """After the accounted steps only the failing allocation is known: it grows with the batch
    (its first dimension is the batch's), so a smaller batch shrinks it in proportion."""
    batch, request = failure.batch_size, failure.requested_bytes
    if failure.accounted or not batch or batch < 2 or not request:
        return None
    if failure.shape and failure.shape[0] != batch:
        return None  # the failing tensor is not batch-sized: the batch does not size it
    half = batch // 2
    what = f"the {_shape(failure)} output of {failure.op}" if failure.shape else "the failing allocation"
    return Advice(f"batch {half} with 2 accumulation steps (effective batch {half * 2})", request - request * half // batch,
                  f"{what} ({format_bytes(request)}) grows with the batch of {batch}: half the batch, half of it; "
                  "the step's other batch-sized tensors shrink with it (not measured after the accounted steps)",
                  _accumulation_code(half, 2))


def cap_growth(failure: OomEvent, ran: list[int] | None) -> Advice | None:
    """The batch or sequence grew and the larger one failed: cap it at the size that ran."""
    now, request = failure.batch_shape, failure.requested_bytes
    if not now or not ran or not request or len(ran) != len(now):
        return None
    ratio = math.prod(ran) / max(1, math.prod(now))
    if ratio >= 1:
        return None
    grown = [k for k in range(len(now)) if now[k] != ran[k]]
    what = "batch" if grown == [0] else "sequence length" if grown and grown[0] == 1 else "input size"
    cap = ran[grown[0]] if grown else None
    return Advice(f"cap the {what} at {cap} (it ran at {_dims(ran)}, failed at {_dims(now)})", int(request * (1 - ratio)),
                  f"the failing allocation ({format_bytes(request)}) is taken to grow in proportion to the input; an "
                  f"op that grows faster (attention: with the square of the sequence) saves more",
                  "x = x[:, :max_len]  # or bucket/truncate sequences in the collate_fn" if what == "sequence length"
                  else "")


def _shape(failure: OomEvent) -> str:
    return "x".join(map(str, failure.shape)) + (f" {failure.dtype}" if failure.dtype else "")


def oom_advice(failure: OomEvent, memory: MemoryBreakdown | None, scaling: BatchScaling | None,
               optimizers: list[OptimizerInfo], ran: list[int] | None = None) -> list[Advice]:
    """Every change that applies and saves enough to matter, most bytes saved first. `ran`:
    the largest training batch shape that ran before the failure, when the input grew."""
    parts = failure.parts or (memory.parts if memory is not None else {})
    capacity = None
    if failure.live_bytes is not None:
        capacity = failure.live_bytes + (failure.device_free_bytes or 0)
    modules = failure.modules or (memory.modules if memory is not None else [])
    dtype = next((a.dtype for a in failure.largest if a.part == ACTIVATIONS), "")
    candidates = [
        smaller_batch(failure.batch_size, parts, failure.requested_bytes or 0, capacity, scaling),
        checkpoint_blocks(modules),
        autocast(parts, dtype, failure.device),
        fewer_states(parts, optimizers),
        bucket_view(memory),
        expandable_segments(failure.reserved_unused_bytes, failure.device_total_bytes),
        failing_op_batch(failure),
        cap_growth(failure, ran),
    ]
    if failure.requested_bytes:
        enough = MIN_SHARE_OF_REQUEST * failure.requested_bytes
    else:
        enough = MIN_SHARE_OF_LIVE * (failure.live_bytes or 0)
    return sorted((a for a in candidates if a is not None and a.saves_bytes > 0 and a.saves_bytes >= enough),
                  key=lambda a: -a.saves_bytes)


def fixed_bytes(parts: dict[str, int]) -> int:
    """What does not shrink with the batch: every part but activations and temporaries."""
    return sum(v for k, v in parts.items() if k not in (ACTIVATIONS, TEMPORARIES))


def _dims(shape: list[int]) -> str:
    return "x".join(map(str, shape))
