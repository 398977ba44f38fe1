"""What a torch call or op is, for the op sampler: a host sync, a data-dependent op, a
transfer (and which way, pinned or not), a matmul and its FLOPs."""

from __future__ import annotations

import torch

# Tensor APIs whose result needs the device to finish first (a host sync on CUDA).
HOST_SYNC_APIS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__",
                  "__format__", "__repr__"}
DEVICE_TO_HOST_APIS = {"cpu", "numpy"}
# Ops whose output shape depends on the data: the host must wait for the device.
DATA_DEPENDENT_APIS = {"nonzero", "argwhere", "masked_select", "unique",
                       "unique_consecutive", "bincount"}
TRANSFER_APIS = {"to", "cuda"}
MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::convolution"}


def first_tensor(values) -> torch.Tensor | None:
    for value in values:
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
            return value[0]
    return None


def target_device(args, kwargs) -> torch.device | None:
    candidates = [kwargs.get("device")] + list(args[1:])
    for value in candidates:
        if isinstance(value, torch.device):
            return value
        if isinstance(value, torch.Tensor):
            return value.device
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            try:
                return torch.device(value)
            except (RuntimeError, TypeError):
                continue
    return None


def matmul_flops(name: str, args, out) -> float:
    try:
        if name == "aten::mm":
            (m, k), n = args[0].shape, args[1].shape[1]
            return 2.0 * m * k * n
        if name == "aten::addmm":
            (m, k), n = args[1].shape, args[2].shape[1]
            return 2.0 * m * k * n
        if name in ("aten::bmm", "aten::baddbmm"):
            a, b = (args[0], args[1]) if name == "aten::bmm" else (args[1], args[2])
            return 2.0 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
        if name == "aten::convolution":
            weight = args[1]
            return 2.0 * out.numel() * weight[0].numel()
    except (AttributeError, IndexError, TypeError):
        pass
    return 0.0


def _history(tensor) -> dict:
    """Whether the value read has autograd history (a loss, an activation): counted so a rule
    can tell a read of the loss from a read of a decision (a sampled action, an argmax, `.data`)."""
    return {"autograd": bool(tensor.requires_grad or tensor.grad_fn is not None),
            "integer": not (tensor.is_floating_point() or tensor.is_complex())}


def classify_call(name: str, tensor, args, kwargs) -> tuple[str | None, dict]:
    """(kind, detail) of a call the user wrote: host-sync, transfer-d2h, data-dependent,
    transfer-h2d (with pinned / non_blocking / bytes), or (None, {}) for anything else."""
    if name in HOST_SYNC_APIS:
        return "host-sync", _history(tensor)
    if name in DEVICE_TO_HOST_APIS:
        return "transfer-d2h", _history(tensor)
    if name in DATA_DEPENDENT_APIS:
        return "data-dependent", {}
    if name == "where" and len(args) == 1 and not kwargs:
        return "data-dependent", {}
    if name == "repeat_interleave" and "output_size" not in kwargs and isinstance(
        args[1] if len(args) > 1 else kwargs.get("repeats"), torch.Tensor
    ):
        return "data-dependent", {}
    if name == "__getitem__" and len(args) > 1:
        index = args[1] if isinstance(args[1], tuple) else (args[1],)
        if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index):
            return "data-dependent", {"boolean_mask": True}
        return None, {}
    if name in TRANSFER_APIS:
        target = torch.device("cuda") if name == "cuda" else target_device(args, kwargs)
        if target is None:
            return None, {}
        if tensor.device.type == "cpu" and target.type != "cpu":
            return "transfer-h2d", {
                "pinned": bool(tensor.is_pinned()),
                "non_blocking": bool(kwargs.get("non_blocking", False)),
                "bytes": tensor.numel() * tensor.element_size(),
            }
        if tensor.device.type != "cpu" and target.type == "cpu":
            return "transfer-d2h", _history(tensor)
    return None, {}

