"""DataLoader habits: TD105 dataloader-sync-loading, TD102 worker-respawn, TD103
pageable-transfer, TD104 blocking-transfer.

Each starts from a `DataLoader(...)` call of torch's (whatever the import alias), reads its
arguments by keyword or position (or, through `**kwargs`, from the call of the function or
wrapper class that builds it), and follows the loader to the loops that iterate it or draw
from it (`flow.py`). A loader no loop can be traced to is reported only where the finding does not
depend on its use; an argument whose value the file does not fix gives an `info` finding.
"""

from __future__ import annotations

import ast
from typing import Iterator

from torchdoctor.model.findings import Severity
from torchdoctor.lint.batches import is_dtype
from torchdoctor.lint.checks.base import Check, Hit, set_keyword
from torchdoctor.lint.facts import Facts
from torchdoctor.lint.flow import Loader, LoaderUse
from torchdoctor.lint.kinds import DATASET
from torchdoctor.lint.loop_bounds import FEW_PASSES, most_passes
from torchdoctor.lint.model import Scope, loop_targets
from torchdoctor.lint.names import short_source
from torchdoctor.lint.values import POSITIVE, WHEN_CUDA, Bound, Unknown, bind, truthy

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
#            pin_memory, drop_last, timeout, worker_init_fn, multiprocessing_context, generator,
#            *, prefetch_factor, persistent_workers, ...)
DATALOADER_PARAMS = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers",
                     "collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn",
                     "multiprocessing_context", "generator")


class _LoaderCheck(Check):
    def run(self, facts: Facts) -> Iterator[Hit]:
        for loader in facts.loaders.loaders:
            yield from self.check(loader, _arguments(loader), facts)

    def check(self, loader: Loader, args: Bound, facts: Facts) -> Iterator[Hit]:
        raise NotImplementedError

    @staticmethod
    def argument(loader: Loader, args: Bound, name: str, default, facts: Facts):
        expr = args.get(name)
        if expr is None:
            return Unknown("may be passed through **kwargs") if args.splat else default
        return facts.values.evaluate(expr, loader.scope_of(name))


class SyncLoading(_LoaderCheck):
    codes = ("TD105",)

    def check(self, loader: Loader, args: Bound, facts: Facts) -> Iterator[Hit]:
        workers = self.argument(loader, args, "num_workers", 0, facts)
        training = loader.feeds_training
        if not training and loader.uses:
            return  # only evaluation loops read it: not the training loop's stall
        if isinstance(workers, Unknown):
            if training or not loader.uses:
                yield Hit("TD105", loader.call, "DataLoader num_workers set at run time",
                          f"num_workers {workers.why}; if it is 0, every batch is loaded in the training "
                          f"process between steps. The runtime check (TD101) will decide", Severity.INFO,
                          {"num_workers": "unknown"})
            return
        if workers is POSITIVE or workers != 0:
            return
        dataset, kind = _dataset(args.get("dataset"), facts, loader.scope_of("dataset"))
        if kind in ("in-memory", "tiny"):
            return  # indexing in-memory tensors is cheaper than shipping them from worker processes
        spelled = "num_workers=0" if args.get("num_workers") is not None else "no num_workers (default 0)"
        if training:
            severity = Severity.MEDIUM if kind == "loads-data" else Severity.LOW
            where = f"feeds {next(u for u in loader.uses if u.region.kind == 'step').region.via}"
        else:
            severity, where = Severity.INFO, "is built here; where it is iterated could not be followed"
        yield Hit("TD105", loader.call, f"DataLoader with {spelled} loads batches in the training process",
                  f"DataLoader over {dataset} with {spelled} {where}: every batch is read, transformed and "
                  f"collated in the main process while the model waits", severity,
                  {"num_workers": 0, "dataset": dataset})


class WorkerRespawn(_LoaderCheck):
    codes = ("TD102",)

    def check(self, loader: Loader, args: Bound, facts: Facts) -> Iterator[Hit]:
        repeated = [u for u in loader.uses if u.repeats]
        if not repeated:
            return
        persistent = self.argument(loader, args, "persistent_workers", False, facts)
        if isinstance(persistent, Unknown) or truthy(persistent):
            return
        workers = self.argument(loader, args, "num_workers", 0, facts)
        use = min(repeated, key=lambda u: u.region.rank())
        training = use.region.kind == "step"
        if isinstance(workers, Unknown):
            yield Hit("TD102", loader.call, "DataLoader workers may restart every epoch",
                      f"num_workers {workers.why} and persistent_workers is off; the loader is iterated again "
                      f"and again ({use.region.via or f'loop at line {use.line}'}), so any workers start "
                      f"over each time. The runtime check will decide", Severity.INFO, {"num_workers": "unknown"})
            return
        if workers is not POSITIVE and (not isinstance(workers, (int, float)) or workers <= 0):
            return
        shown = "several" if workers is POSITIVE else str(workers)
        yield Hit("TD102", loader.call, f"{shown} DataLoader workers restart on every pass",
                  f"num_workers={shown} without persistent_workers=True: {_iterated_at(use)} "
                  f"iterates the loader again on every pass of an outer loop, and each pass starts "
                  f"{shown} worker processes (imports, dataset copy) before the first batch",
                  Severity.MEDIUM if training else Severity.LOW,
                  {"num_workers": shown, "iterated_at_line": use.line},
                  fix=set_keyword("persistent_workers") if args.editable else None)


class PageableTransfer(_LoaderCheck):
    codes = ("TD103",)

    def check(self, loader: Loader, args: Bound, facts: Facts) -> Iterator[Hit]:
        transfers = [(use, call) for use in loader.uses if not _few_batches(use, facts)
                     for call, _ in _transfers(use, facts)]
        if not transfers or _dataset(args.get("dataset"), facts, loader.scope_of("dataset"))[1] == "tiny":
            return
        use, call = min(transfers, key=lambda t: (t[0].region.rank(), t[1].lineno, t[1].col_offset))
        pinned = self.argument(loader, args, "pin_memory", False, facts)
        training = use.region.kind == "step"
        if isinstance(pinned, Unknown):
            if training:
                yield Hit("TD103", loader.call, "pin_memory set at run time",
                          f"pin_memory {pinned.why}; batches go to the device at line {call.lineno}. "
                          f"If it is off, every copy stages through pageable memory: the runtime check will "
                          f"decide", Severity.INFO, {"transfer_line": call.lineno})
            return
        if truthy(pinned):
            return
        yield Hit("TD103", loader.call, "Batches copied to the GPU from pageable memory",
                  f"pin_memory is off but the batches go to the device at line {call.lineno} "
                  f"(`{short_source(call)}`): on CUDA each copy is staged through a pageable bounce "
                  f"buffer and cannot overlap compute", Severity.MEDIUM if training else Severity.LOW,
                  {"transfer_line": call.lineno}, fix=set_keyword("pin_memory") if args.editable else None)


class BlockingTransfer(_LoaderCheck):
    codes = ("TD104",)

    def check(self, loader: Loader, args: Bound, facts: Facts) -> Iterator[Hit]:
        pinned = self.argument(loader, args, "pin_memory", False, facts)
        if isinstance(pinned, Unknown) or not truthy(pinned):
            return  # non_blocking only helps from pinned memory; TD103 covers the rest
        if _dataset(args.get("dataset"), facts, loader.scope_of("dataset"))[1] == "tiny":
            return  # a copy of a few numbers takes no time to wait for
        seen = set()
        for use in sorted(loader.uses, key=lambda u: u.region.rank()):
            for call, scope in _transfers(use, facts):
                argument = _non_blocking_argument(call, facts)
                if id(call) in seen or argument is None or _known_off(argument[0], facts, scope) is not True:
                    continue
                seen.add(id(call))
                when = " (pinned when on CUDA)" if pinned is WHEN_CUDA else ""
                if "pin_memory" in loader.forwarded:  # the wrapper's caller asked for pinned memory
                    when += f" (pin_memory passed at line {loader.forwarded['pin_memory'].lineno})"
                yield Hit("TD104", call, f"`{short_source(call, 32)}` blocks on a pinned batch",
                          f"`{short_source(call)}` copies a batch from the pinned DataLoader at line "
                          f"{loader.call.lineno}{when} without non_blocking=True: the host waits for each copy "
                          f"instead of queuing it behind compute",
                          Severity.MEDIUM if use.region.kind == "step" else Severity.LOW,
                          {"loader_line": loader.call.lineno},
                          fix=None if _whole_batch(call, use) else _non_blocking_fix(*argument))


def _arguments(loader: Loader) -> Bound:
    """The DataLoader's arguments, with those its builder's caller passes through `**kwargs`
    (never edited by --fix: the keyword belongs at that call)."""
    args = bind(loader.call, DATALOADER_PARAMS)
    if loader.forwarded_from is not None:
        for name, expr in loader.forwarded.items():
            args.args.setdefault(name, expr)
            args.unpacked.add(name)
        args.splat = any(isinstance(a, ast.Starred) for a in loader.call.args)  # `**kwargs` is resolved
    return args


def _few_batches(use: LoaderUse, facts: Facts) -> bool:
    """An evaluation that takes a handful of batches (`if i >= max_batches: break`): a handful of
    copies, whatever memory they come from."""
    if use.loop is None or use.region.kind == "step":
        return False
    passes = most_passes(use.loop, facts)
    return passes is not None and passes <= FEW_PASSES


def _iterated_at(use: LoaderUse) -> str:
    return f"the loop at line {use.line}" if use.loop is not None else f"{use.region.via} at line {use.line}"


def _transfers(use: LoaderUse, facts: Facts) -> list[tuple[ast.Call, Scope]]:
    """The batch copies of a use: none when an imported helper iterates the loader."""
    return facts.batches.transfers(use.loop, use.draws) if use.loop is not None else []


def _whole_batch(call: ast.Call, use: LoaderUse) -> bool:
    """`for batch in loader: batch.to(device)`: the batch may be a container (a Hugging Face
    BatchEncoding, a user class) whose `.to()` may not take non_blocking, so no automatic fix."""
    receiver = call.func.value
    return isinstance(receiver, ast.Name) and any(
        isinstance(t, ast.Name) and t.id == receiver.id for t in loop_targets(use.loop))


def _non_blocking_argument(call: ast.Call, facts: Facts) -> tuple[ast.expr | None, int | None] | None:
    """(the expression passed as non_blocking or None when left out, its position when passed
    positionally), or None when the call's arguments cannot be matched (`*args`, `**kwargs`, a
    `.to(a, b, c)` whose `b` is not a dtype)."""
    if any(isinstance(a, ast.Starred) for a in call.args):
        return None
    keyword = next((k.value for k in call.keywords if k.arg == "non_blocking"), None)
    if keyword is not None:
        return keyword, None
    if any(k.arg is None for k in call.keywords):
        return None
    # Tensor.cuda(device=None, non_blocking=False); Tensor.to(device=None, dtype=None,
    # non_blocking=False, copy=False). A device-first `.to(a, b, c)` is only that signature when
    # `b` is a dtype: `to(other, non_blocking, copy)` takes three positionals too.
    position = 1 if getattr(call.func, "attr", "") == "cuda" else 2
    if len(call.args) <= position:
        return None, None
    dtype = call.args[1] if position == 2 else None
    if dtype is not None and not (is_dtype(dtype, facts) or (isinstance(dtype, ast.Constant) and dtype.value is None)):
        return None
    return call.args[position], position


def _known_off(expr: ast.expr | None, facts: Facts, scope: Scope) -> bool | None:
    """non_blocking is off for certain (left out, or a value that is False); None: set at run time."""
    if expr is None:
        return True
    value = truthy(facts.values.evaluate(expr, scope))
    return None if value is None else not value


def _non_blocking_fix(expr: ast.expr | None, position: int | None):
    """Add the keyword; replace a positional `False` in place; leave a positional name alone (the
    edit would drop the name the user chose)."""
    if position is None:
        return set_keyword("non_blocking")
    if isinstance(expr, ast.Constant) and expr.value is False:
        return set_keyword("non_blocking", position=position)
    return None


def _dataset(expr: ast.expr | None, facts: Facts, scope: Scope) -> tuple[str, str]:
    """(how to name it, "tiny" | "in-memory" | "loads-data" | "unknown"). Tiny: in-memory tensors
    the file writes out as literals (a toy data set of a few numbers), whose copies cost nothing
    whatever memory they come from or however they are loaded."""
    expr, scope = _followed(expr, facts, scope)
    if isinstance(expr, ast.Name):
        return f"`{expr.id}`", "unknown"
    if not isinstance(expr, ast.Call):
        return ("the dataset", "unknown") if expr is None else (f"`{short_source(expr)}`", "unknown")
    shown = f"`{short_source(expr.func)}(…)`"
    name = facts.qualify(expr.func) or ""
    if name.startswith(("torchvision.datasets.", "torchaudio.datasets.")):
        return shown, "loads-data"
    own = isinstance(expr.func, ast.Name) and facts.kinds.class_kind(expr.func.id) == DATASET
    if name == "torch.utils.data.TensorDataset" or (own and _indexes_only(facts.model.module.functions[expr.func.id])):
        literal = expr.args and all(_literal_tensor(a, facts, scope) for a in expr.args)
        return shown, "tiny" if literal else "in-memory"
    if own:
        return shown, "loads-data"  # the file's own Dataset: its __getitem__ runs in the loop
    return shown, "unknown"


def _followed(expr: ast.expr | None, facts: Facts, scope: Scope) -> tuple[ast.expr | None, Scope]:
    for _ in range(3):  # follow `ds = TensorDataset(...)` through a couple of names
        if not isinstance(expr, ast.Name):
            break
        found = facts.values.definition(expr.id, scope)
        if found is None or found[0] is None:
            break
        expr, scope = found
    return expr, scope


def _indexes_only(dataset_class) -> bool:
    """The class's `__getitem__` only picks items out of what it holds (`self.x[i], self.y[i]`),
    calling nothing: in memory, like a TensorDataset."""
    method = dataset_class.functions.get("__getitem__")
    if method is None:
        return False
    return all(isinstance(statement, (ast.Assign, ast.Return)) and statement.value is not None
               and not any(isinstance(n, (ast.Call, ast.Lambda)) for n in ast.walk(statement.value))
               for statement in method.node.body)


def _literal_tensor(expr: ast.expr, facts: Facts, scope: Scope) -> bool:
    """`torch.tensor([[1.0, 2.0], [3.0, 4.0]])`: numbers written out in the file."""
    expr, scope = _followed(expr, facts, scope)
    if not (isinstance(expr, ast.Call) and facts.qualify(expr.func) in ("torch.tensor", "torch.as_tensor")
            and expr.args):
        return False
    return all(isinstance(n, (ast.List, ast.Tuple, ast.Constant, ast.UnaryOp, ast.Load, ast.USub, ast.UAdd))
               for n in ast.walk(expr.args[0]))
