"""Catalogue entries for causes that no runtime rule checks: they are found by `lint` (from
source) or `trace` (from a Kineto trace). Metadata only; the detectors point at these classes."""

from __future__ import annotations

from torchdoctor.rules.base import RuleInfo


class DataLoaderSyncLoading(RuleInfo):
    code = "TD105"
    slug = "dataloader-sync-loading"
    title = "DataLoader loads batches in the training process (num_workers=0)"
    rationale = (
        "With `num_workers=0` every batch is read, decoded, augmented and collated in the main "
        "process between steps, so the model waits for each one. `torchdoctor run` measures "
        "how long (TD101); the static check points at the loader that will do it."
    )
    fix = (
        "Give the loader worker processes that prepare batches ahead of the step:\n```python\n"
        "loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=4,\n"
        "                    persistent_workers=True, pin_memory=True)\n```"
    )
    example = "loader = DataLoader(train_set, batch_size=64, shuffle=True)  # num_workers defaults to 0"


class LaunchBound(RuleInfo):
    code = "TD304"
    slug = "launch-bound"
    title = "GPU idle between many short kernels"
    needs_cuda = True
    rationale = (
        "When kernels are shorter than the few microseconds the host needs to launch each one, "
        "the GPU finishes every kernel before the next arrives and sits idle in between: the "
        "step is bound by Python and the launch path, not by the GPU."
    )
    fix = (
        "Issue fewer, larger kernels: vectorize Python loops over tensors, use fused or "
        "`foreach` optimizers, and try `torch.compile` or CUDA graphs for the step:\n"
        "```python\nmodel = torch.compile(model)  # fuses elementwise chains into few kernels\n```"
    )
    example = "for i in range(x.shape[0]):\n    out[i] = x[i] * w + b  # one tiny kernel per row"


class Recompilation(RuleInfo):
    code = "TD405"
    slug = "recompilation"
    title = "torch.compile recompiles or graph-breaks in the step"
    rationale = (
        "Compiling costs seconds to minutes. Calling `torch.compile` inside the loop, or "
        "feeding shapes and Python values that change every step, compiles again and again "
        "instead of reusing the compiled graph."
    )
    fix = (
        "Compile once before the loop; mark changing sizes dynamic instead of recompiling:\n"
        "```python\nmodel = torch.compile(model, dynamic=True)\nfor x, y in loader:\n    loss = loss_fn(model(x), y)\n```"
    )
    example = "for x, y in loader:\n    out = torch.compile(model)(x)  # compiles every step"


class GradAccumNoSync(RuleInfo):
    code = "TD601"
    slug = "grad-accum-no-sync"
    title = "DDP all-reduces gradients on every micro-batch of gradient accumulation"
    rationale = (
        "DistributedDataParallel averages gradients across ranks in every `backward()`. With "
        "gradient accumulation only the last micro-batch needs it; the others send the whole "
        "gradient over the network for nothing, which dominates on a slow link."
    )
    fix = (
        "Skip the all-reduce on the micro-batches that do not step:\n```python\n"
        "ctx = model.no_sync() if (i + 1) % accum_steps else contextlib.nullcontext()\n"
        "with ctx:\n    (loss_fn(model(x), y) / accum_steps).backward()\n"
        "if (i + 1) % accum_steps == 0:\n    optimizer.step(); optimizer.zero_grad()\n```"
    )
    example = "loss.backward()  # DDP model, accumulating 8 micro-batches: 8 all-reduces per step"


class SlowInterconnect(RuleInfo):
    code = "TD602"
    slug = "slow-interconnect"
    title = "Collective bandwidth far below what the link should give"
    needs_cuda = True
    rationale = (
        "Gradient all-reduce time is set by the slowest link between ranks. Bandwidth far "
        "below the topology's (PCIe or Ethernet instead of NVLink/InfiniBand, a wrong NCCL "
        "interface) leaves the GPUs waiting for communication."
    )
    fix = (
        "Check the NCCL transport (`NCCL_DEBUG=INFO`), overlap communication with backward, "
        "send less often and in larger buckets:\n```python\nmodel = DDP(model, bucket_cap_mb=100, "
        "gradient_as_bucket_view=True)\n```"
    )
    example = "model = DDP(model)  # ranks on two hosts joined by 1 GB/s Ethernet"


class DdpConfig(RuleInfo):
    code = "TD603"
    slug = "ddp-config"
    title = "DDP settings that cost time"
    rationale = (
        "`find_unused_parameters=True` walks the autograd graph after every backward, and tiny "
        "buckets send many small messages; both slow every step when not needed."
    )
    fix = (
        "Turn off what the model does not need and use larger buckets:\n```python\n"
        "model = DDP(model, find_unused_parameters=False, bucket_cap_mb=50, gradient_as_bucket_view=True)\n```"
    )
    example = "model = DDP(model, find_unused_parameters=True)"


class DebugLeftover(RuleInfo):
    code = "TD704"
    slug = "debug-leftover"
    title = "Debugging aid left on in training"
    rationale = (
        "Anomaly detection records a stack trace for every op and checks every gradient for "
        "NaN (a sync per op); `gradcheck` runs the model many times in float64; deterministic "
        "algorithms swap in slower kernels. Useful while debugging, expensive in every step."
    )
    fix = (
        "Remove the call, or guard it with a debug flag:\n```python\n"
        "if args.debug:\n    torch.autograd.set_detect_anomaly(True)\n```"
    )
    example = "torch.autograd.set_detect_anomaly(True)"


CATALOGUE_ONLY: tuple[type[RuleInfo], ...] = (
    DataLoaderSyncLoading, LaunchBound, Recompilation,
    GradAccumNoSync, SlowInterconnect, DdpConfig, DebugLeftover,
)
