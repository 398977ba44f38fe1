"""The knobs `torchdoctor run --set KNOB=VALUE` understands: names, values, what each changes.

Parsing only; the knobs themselves live in the modules named by `KnobSpec.family`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from torchdoctor.errors import UsageError

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _flag(text: str) -> bool:
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("expected true or false")


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise ValueError(f"expected an integer ≥ {minimum}")
        return value
    return parse


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError("expected a number > 0")
    return value


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return text.lower()
    return parse


@dataclass(frozen=True)
class KnobSpec:
    name: str
    parse: Callable[[str], Any]
    values: str  # what the user may write, for help and error messages
    changes: str  # one honest sentence: what the knob does to the run
    upper_bound: bool = False  # a measurement of a ceiling, not a fix to keep


KNOB_SPECS: tuple[KnobSpec, ...] = (
    KnobSpec("workers", _count(0), "N", "DataLoader(num_workers=N) for every loader"),
    KnobSpec("pin_memory", _flag, "true|false", "DataLoader(pin_memory=...) for every loader (CUDA only)"),
    KnobSpec("persistent_workers", _flag, "true|false",
             "DataLoader(persistent_workers=...) for loaders with worker processes; the worker seed "
             "is then drawn once, so shuffle order after epoch 1 differs as it would after the edit"),
    KnobSpec("prefetch_factor", _count(1), "N", "DataLoader(prefetch_factor=N) for loaders with workers"),
    KnobSpec("batch_size", _count(1), "N",
             "DataLoader(batch_size=N); compare samples/s, and scale the learning rate if you keep it"),
    KnobSpec("non_blocking", _flag, "true", "host→device tensor copies use non_blocking=True (CUDA only)"),
    KnobSpec("tf32", _flag, "true|false", "TF32 for fp32 matmuls and convolutions (CUDA, Ampere or newer)"),
    KnobSpec("amp", _choice("bf16", "fp16", "off"), "bf16|fp16",
             "autocast around the trained model's forward (fp16 only when the script has a GradScaler)"),
    KnobSpec("compile", _flag, "true", "torch.compile the model whose parameters the optimizer updates"),
    KnobSpec("channels_last", _flag, "true", "the trained model in channels_last memory format (conv nets)"),
    KnobSpec("threads", _count(1), "N",
             "torch.set_num_threads(N) in the training process, e.g. to leave cores to DataLoader workers"),
    KnobSpec("cudnn_benchmark", _flag, "true|false", "torch.backends.cudnn.benchmark (CUDA only)"),
    KnobSpec("foreach", _flag, "true|false", "optimizers update all parameters with multi-tensor (foreach) kernels"),
    KnobSpec("fused", _flag, "true", "fused optimizer kernels (Adam, AdamW, SGD)"),
    KnobSpec("zero_grad", _choice("none"), "none", "zero_grad(set_to_none=True) whatever the script asks"),
    KnobSpec("data", _choice("cached", "loader-only"), "cached|loader-only",
             "cached: replay the first batches from memory (ceiling of any data-loading fix); "
             "loader-only: iterate the training DataLoader without the model, then stop",
             upper_bound=True),
    KnobSpec("eval", _choice("off"), "off",
             "evaluation loaders yield one sample of their first batch (from memory after the first pass), "
             "to measure what evaluation costs", upper_bound=True),
    KnobSpec("checkpoint", _choice("off"), "off",
             "torch.save writes nothing, to measure what checkpointing costs", upper_bound=True),
    KnobSpec("no_sync", _flag, "true",
             "DDP skips the all-reduce on the micro-batches before the last of each optimizer step (as no_sync() "
             "around their forward and backward would); the count is the micro-batches per step seen so far"),
    KnobSpec("bucket_cap_mb", _positive, "MB", "DistributedDataParallel(bucket_cap_mb=MB) for every DDP wrapper"),
    KnobSpec("gradient_as_bucket_view", _flag, "true|false", "DistributedDataParallel(gradient_as_bucket_view=...)"),
    KnobSpec("static_graph", _flag, "true|false", "DistributedDataParallel(static_graph=...)"),
    KnobSpec("comm_hook", _choice("bf16", "fp16"), "bf16|fp16",
             "DDP all-reduces gradients compressed to bf16/fp16 (bf16_compress_hook / fp16_compress_hook)"),
    KnobSpec("find_unused_parameters", _flag, "false|true", "DistributedDataParallel(find_unused_parameters=...)"),
    KnobSpec("broadcast_buffers", _flag, "false|true", "DistributedDataParallel(broadcast_buffers=...)"),
    KnobSpec("nproc", _count(1), "N", "launch N ranks on this machine (as --nproc-per-node N), e.g. 1 to compare "
             "one rank with N"),
)
SPEC_BY_NAME = {spec.name: spec for spec in KNOB_SPECS}


def knob_help() -> str:
    return "\n".join(f"  {s.name}={s.values:<20} {s.changes}" for s in KNOB_SPECS)


def parse_settings(settings: list[str]) -> dict[str, Any]:
    """`["workers=4", "amp=bf16"]` → `{"workers": 4, "amp": "bf16"}`, or a UsageError that
    names the problem and the valid choices."""
    parsed: dict[str, Any] = {}
    for setting in settings:
        name, sep, text = setting.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not text.strip():
            raise UsageError(f"--set {setting!r} needs KNOB=VALUE, e.g. --set workers=4")
        spec = SPEC_BY_NAME.get(name)
        if spec is None:
            raise UsageError(f"unknown knob {name!r}; valid knobs: {', '.join(SPEC_BY_NAME)}")
        try:
            value = spec.parse(text.strip())
        except ValueError as exc:
            raise UsageError(f"bad value {text!r} for knob {name}: {exc}; write {name}={spec.values}") from None
        if name in parsed and parsed[name] != value:
            raise UsageError(f"knob {name} set twice ({parsed[name]} and {value}); keep one --set {name}=...")
        parsed[name] = value
    _check_conflicts(parsed)
    return parsed


def _check_conflicts(knobs: dict[str, Any]) -> None:
    if knobs.get("fused") and knobs.get("foreach"):
        raise UsageError("knobs fused=true and foreach=true conflict: an optimizer uses one or the other; keep one")
    if knobs.get("data") == "loader-only" and len(knobs) > 1:
        others = ", ".join(k for k in knobs if k != "data")
        raise UsageError(f"data=loader-only measures the loader alone; drop the other knobs ({others}) from this run")
    if knobs.get("workers") == 0 and (knobs.get("persistent_workers") or "prefetch_factor" in knobs):
        raise UsageError("persistent_workers and prefetch_factor need worker processes; drop them or set workers ≥ 1")


def format_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
