"""What torch's own API returns, for the kind inference in kinds.py: which `torch.*` calls give
tensors, which give plain values (`torch.cuda.is_available()`), which methods read a value back
to the host, and what a parameter's annotation or default says about it."""

from __future__ import annotations

import ast
from typing import Callable

TENSOR, BOOL, MODULE, LOADER, OPTIMIZER, DATASET, OTHER = (
    "tensor", "bool", "module", "loader", "optimizer", "dataset", "other")

# Attributes of a tensor that are plain Python values, not tensors (reading them never syncs).
META_ATTRS = {"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "layout", "names",
              "grad_fn", "is_leaf", "itemsize", "nbytes", "training"}
TENSOR_ATTRS = {"grad", "data", "T", "mT", "H", "mH", "real", "imag", "weight", "bias"}
# Tensor methods that return Python values or None.
PLAIN_METHODS = {"item", "tolist", "numpy", "dim", "ndimension", "numel", "nelement", "element_size",
                 "data_ptr", "get_device", "stride", "storage_offset", "backward", "register_hook", "size",
                 "__len__", "untyped_storage", "type", "equal", "allclose"}
# torch functions / tensor methods that return a Python bool computed on the device: the call
# itself reads the device (a host sync), and what it returns is a plain value.
HOST_READING = {"allclose", "equal"}
BOOL_METHODS = {"bool", "eq", "ne", "gt", "lt", "ge", "le", "isnan", "isinf", "isfinite", "any", "all",
                "logical_and", "logical_or", "logical_not", "logical_xor", "isclose", "eq_", "signbit"}
MODULE_METHODS = {"to", "cuda", "cpu", "train", "eval", "half", "float", "double", "bfloat16",
                  "requires_grad_", "to_empty", "share_memory"}
# torch.* functions that do not return tensors.
_TORCH_PLAIN = {"device", "Size", "Generator", "no_grad", "enable_grad", "inference_mode", "set_grad_enabled",
                "compile", "load", "save", "manual_seed", "seed", "initial_seed", "get_default_dtype",
                "set_default_dtype", "is_tensor", "is_floating_point", "is_complex", "numel", "get_num_threads",
                "set_num_threads", "is_grad_enabled", "autocast", "use_deterministic_algorithms",
                "set_float32_matmul_precision", "get_float32_matmul_precision", "typename", "is_storage",
                "set_printoptions", "finfo", "iinfo", "dtype", "is_inference_mode_enabled", "vmap"}
_BOOL_FUNCTIONS = {"isnan", "isinf", "isfinite", "logical_and", "logical_or", "logical_not", "logical_xor",
                   "isclose", "eq", "ne", "gt", "lt", "ge", "le", "isin", "signbit", "isneginf", "isposinf"}
_TENSOR_NAMESPACES = ("torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.")
# Callables named like this are models or losses when the file does not say otherwise.
_MODULE_NAMES = {"model", "net", "network", "module", "criterion", "loss_fn", "loss_func", "lossfn",
                 "encoder", "decoder", "classifier", "backbone", "generator", "discriminator"}
FORWARD_NAMES = {"forward", "training_step", "validation_step", "test_step", "predict_step", "compute_loss"}


def qualified_kind(name: str, call: ast.Call, kind_of: Callable[[ast.expr], str | None]) -> str | None:
    """The kind a call of the torch (or torchvision) API `name` returns; None when unknown."""
    parts = name.split(".")
    leaf = parts[-1]
    if name == "torch.utils.data.DataLoader":
        return LOADER
    if name.startswith("torch.utils.data.") and leaf.endswith("Dataset"):
        return DATASET
    if name == "torch.nn.Parameter":
        return TENSOR
    if name.startswith("torch.nn.") and leaf[:1].isupper() and not name.startswith("torch.nn.functional."):
        return MODULE
    if name.startswith("torch.optim.") and len(parts) == 3 and leaf[:1].isupper():
        return OPTIMIZER
    if name == "torch.compile":
        return kind_of(call.args[0]) if call.args else OTHER
    if name.startswith(_TENSOR_NAMESPACES):
        return TENSOR
    if name.startswith(("torch.cuda.", "torch.backends.", "torch.distributed.")):
        return OTHER  # device queries, settings, ranks: plain values
    if len(parts) == 2 and parts[0] == "torch":
        if leaf in _TORCH_PLAIN or leaf in HOST_READING or leaf[:1].isupper() or leaf.startswith("is_"):
            return OTHER
        if leaf.startswith("_"):
            return None  # private helpers return all sorts of things
        return BOOL if leaf in _BOOL_FUNCTIONS else TENSOR
    if name.startswith(("torchvision.datasets.", "torchaudio.datasets.")):
        return DATASET
    return None


def combine(kinds: list[str | None]) -> str | None:
    """One kind for a name bound several ways: a tensor if any binding is one."""
    known = [k for k in kinds if k is not None]
    if not known:
        return None
    if all(k == BOOL for k in known):
        return BOOL
    if any(k in (TENSOR, BOOL) for k in known):
        return TENSOR
    for kind in (MODULE, LOADER, OPTIMIZER, DATASET):
        if kind in known:
            return kind
    return OTHER


def fallback_kind(name: str) -> str | None:
    """What a name alone suggests when the file does not say: `model`, `criterion`, `*_loader`."""
    lowered = name.lower()
    if lowered in _MODULE_NAMES or lowered.endswith("model"):
        return MODULE
    if lowered.endswith("loader"):
        return LOADER
    return None


_PLAIN_ANNOTATIONS = ("bool", "int", "float", "str", "dict", "list", "tuple", "Callable", "Sequence")


NO_DEFAULT = object()


def parameter(function: ast.AST, name: str) -> tuple[ast.arg | None, object]:
    """(the `ast.arg`, the default expression or NO_DEFAULT) of parameter `name` of a function
    or lambda node, positional or keyword-only; (None, NO_DEFAULT) when it has none such."""
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return None, NO_DEFAULT
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults):], args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    for arg in (*positional, *args.kwonlyargs):
        if arg.arg == name:
            return arg, defaults.get(name, NO_DEFAULT)
    return None, NO_DEFAULT


def declared(name: str, function: ast.AST) -> tuple[str | None, object]:
    """(kind from the annotation or None, the default expression or NO_DEFAULT) of a parameter:
    `x: Tensor` is a tensor, `flag: bool = False` is not."""
    arg, default = parameter(function, name)
    if arg is None:
        return None, NO_DEFAULT
    kind = None
    annotation = getattr(arg, "annotation", None)
    if annotation is not None:
        text = ast.unparse(annotation)
        if _is_container(annotation):
            kind = OTHER  # `list[Tensor]`: indexing it picks a tensor, `len()` counts tensors
        elif "Tensor" in text:
            kind = TENSOR
        elif any(word in text for word in _PLAIN_ANNOTATIONS):
            kind = OTHER
    return kind, default


_CONTAINERS = {"list", "List", "tuple", "Tuple", "Sequence", "Iterable", "dict", "Dict", "Mapping", "set", "Set"}


def _is_container(annotation: ast.expr) -> bool:
    """`list[Tensor]`, `Optional[tuple[Tensor, Tensor]]`, `Sequence[Tensor] | None`: a container
    (when it is anything), not a tensor."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        sides = [s for s in (annotation.left, annotation.right) if not _is_none(s)]
        return len(sides) == 1 and _is_container(sides[0])
    if isinstance(annotation, ast.Subscript):
        base = annotation.value
        outer = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
        if outer == "Optional":
            return _is_container(annotation.slice)
        return outer in _CONTAINERS
    return False


def _is_none(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is None
