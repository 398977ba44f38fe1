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
    DataLoaderSyncLoading, LaunchBound,
    DebugLeftover,
)
