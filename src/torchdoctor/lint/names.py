"""Import aliases and qualified names: `DL(...)` after `from torch.utils.data import DataLoader
as DL` is `torch.utils.data.DataLoader`, `nn.DataParallel` is `torch.nn.DataParallel`.

Only what the file itself imports is resolved; a name nobody imported stays unresolved, so a
user's own `DataLoader` class is never mistaken for torch's.
"""

from __future__ import annotations

import ast

# Public names that torch re-exports from a private module: the spelling checks compare against.
CANONICAL = {
    "torch.utils.data.dataloader.DataLoader": "torch.utils.data.DataLoader",
    "torch.utils.data.dataset.TensorDataset": "torch.utils.data.TensorDataset",
    "torch.utils.data.dataset.Dataset": "torch.utils.data.Dataset",
    "torch.nn.parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.data_parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.data_parallel.data_parallel": "torch.nn.parallel.data_parallel",
    "torch.nn.parallel.distributed.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.modules.module.Module": "torch.nn.Module",
    "torch.autograd.anomaly_mode.set_detect_anomaly": "torch.autograd.set_detect_anomaly",
    "torch.autograd.anomaly_mode.detect_anomaly": "torch.autograd.detect_anomaly",
    "torch.autograd.gradcheck.gradcheck": "torch.autograd.gradcheck",
    "torch.autograd.gradcheck.gradgradcheck": "torch.autograd.gradgradcheck",
    "torch.autograd.grad_mode.no_grad": "torch.no_grad",
    "torch.autograd.no_grad": "torch.no_grad",
    "torch.autograd.grad_mode.inference_mode": "torch.inference_mode",
    "torch.autograd.inference_mode": "torch.inference_mode",
    "torch.autograd.grad_mode.set_grad_enabled": "torch.set_grad_enabled",
    "torch.autograd.set_grad_enabled": "torch.set_grad_enabled",
    "torch.compiler.compile": "torch.compile",
}


def dotted(expr: ast.expr) -> str | None:
    """`a.b.c` for a pure Name/Attribute chain, else None (calls, subscripts break the chain)."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


def last_name(expr: ast.expr) -> str:
    """The rightmost identifier of an expression: `self.opt` → "opt", `opt[0]` → ""."""
    if isinstance(expr, ast.Attribute):
        return expr.attr
    if isinstance(expr, ast.Name):
        return expr.id
    return ""


def call_tail(call: ast.Call) -> str:
    """The called name without its receiver: `x.to(d)` → "to", `print(x)` → "print"."""
    return last_name(call.func)


def short_source(node: ast.AST, limit: int = 48) -> str:
    """Code as the user wrote it (normalized), shortened for a one-line message."""
    try:
        text = ast.unparse(node)
    except (ValueError, RecursionError):  # pragma: no cover - malformed synthetic trees only
        return "…"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Imports:
    """What each imported local name stands for, as a dotted module path."""

    def __init__(self) -> None:
        self.alias: dict[str, str] = {}
        self.star_modules: list[str] = []

    def add(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for item in node.names:
                if item.asname:
                    self.alias[item.asname] = item.name
                else:  # `import torch.nn` binds `torch`
                    head = item.name.partition(".")[0]
                    self.alias[head] = head
            return
        if node.level or not node.module:
            return  # relative imports are the user's own modules
        for item in node.names:
            if item.name == "*":
                self.star_modules.append(node.module)
            else:
                self.alias[item.asname or item.name] = f"{node.module}.{item.name}"

    def qualify(self, expr: ast.expr) -> str | None:
        """The canonical dotted name `expr` refers to, or None when it is not imported."""
        name = dotted(expr)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        base = self.alias.get(head)
        if base is None:
            if not self.star_modules or not head[:1].isupper() and head not in _STAR_FUNCTIONS:
                return None
            base = f"{self.star_modules[-1]}.{head}"
        full = f"{base}.{rest}" if rest else base
        return canonical(full)

    def imports_torch(self) -> bool:
        return any(v == "torch" or v.startswith("torch.") for v in self.alias.values()) or any(
            m.startswith("torch") for m in self.star_modules)


# Lower-case names a `from torch... import *` may bring in that checks look for.
_STAR_FUNCTIONS = {"set_detect_anomaly", "detect_anomaly", "gradcheck", "compile", "no_grad", "inference_mode"}


def canonical(name: str) -> str:
    name = CANONICAL.get(name, name)
    # torch.optim.adamw.AdamW → torch.optim.AdamW: optimizers live in private modules
    parts = name.split(".")
    if (len(parts) == 4 and parts[:2] == ["torch", "optim"] and parts[2].islower() and parts[3][:1].isupper()
            and parts[2] not in ("lr_scheduler", "swa_utils")):
        return f"torch.optim.{parts[3]}"
    return name
