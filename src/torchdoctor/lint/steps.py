"""The calls that make a loop a training loop, in the shapes real code writes them:

- a backward: `loss.backward()`, `scaler.scale(loss).backward()`, `accelerator.backward(loss)`,
  `fabric.backward(loss)`, `self.manual_backward(loss)`, `torch.autograd.backward(...)`;
- an optimizer step: `optimizer.step()`, `scaler.step(optimizer)`;
- a helper that does both, handed the loss and the optimizer: timm's
  `loss_scaler(loss, optimizer, clip_grad=..., parameters=...)`;
- a helper from another module of the project that runs a whole epoch of training on a loader
  it is given: `train_one_epoch(model, criterion, data_loader, optimizer, ...)`;
- a gradient-descent update written out by hand on a tensor that outlives the loop,
  `w1 -= learning_rate * grad_w1` (a training loop without autograd or an optimizer).

Also the calls that compute a loss (`criterion(out, y)`, `F.cross_entropy(...)`): a loop that
computes one evaluates or trains, it does not just time the model.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from torchdoctor.lint.kinds import Kinds
from torchdoctor.lint.model import Block, FileModel, Scope
from torchdoctor.lint.names import call_tail, last_name
from torchdoctor.lint.torch_api import LOADER, MODULE, OPTIMIZER, OTHER

_LOSS_FUNCTIONS = {
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "kl_div", "cosine_embedding_loss", "margin_ranking_loss", "ctc_loss",
    "triplet_margin_loss", "soft_margin_loss", "multilabel_soft_margin_loss", "poisson_nll_loss", "gaussian_nll_loss"}
_LOSS_WORDS = ("loss", "criterion")
# Words in the name of a helper from another module that trains on the loader it is given.
TRAINING_WORDS = ("train", "fit", "epoch")
_NOT_HELPERS = ("torch.", "torchvision.", "numpy.", "math.", "time.", "os.", "logging.")


@dataclass
class StepCalls:
    backward: list[tuple[ast.Call, Block]] = field(default_factory=list)
    optimizer_steps: list[tuple[ast.Call, Block]] = field(default_factory=list)
    helper_steps: list[tuple[ast.Call, Block]] = field(default_factory=list)  # backward and step in one call
    epoch_helpers: list[tuple[ast.Call, Block]] = field(default_factory=list)  # imported: train on a loader
    loss_calls: list[tuple[ast.Call, Block]] = field(default_factory=list)
    manual_updates: list[tuple[ast.AugAssign, Block]] = field(default_factory=list)  # `w -= lr * grad`


def find_step_calls(model: FileModel, kinds: Kinds, local_callee) -> StepCalls:
    found = StepCalls()
    imports = model.imports
    for call, block in model.calls_named("backward", "manual_backward"):
        if isinstance(call.func, ast.Attribute) or imports.qualify(call.func) == "torch.autograd.backward":
            found.backward.append((call, block))
    for call, block in model.calls_named("step"):
        if isinstance(call.func, ast.Attribute) and is_optimizer(call.func.value, block.scope, kinds):
            found.optimizer_steps.append((call, block))
    found.manual_updates = [(statement, block) for statement, block in model.assignments
                            if _descends(statement, block, kinds)]
    for call, block in model.calls:
        if not call.args:
            continue
        tail = call_tail(call)
        if _named_like_loss(tail):
            qualified = imports.qualify(call.func) or ""
            if computes_loss(call, qualified, block.scope, kinds):
                found.loss_calls.append((call, block))
            continue
        names = [a for a in (*call.args, *(k.value for k in call.keywords if k.arg))
                 if type(a) in (ast.Name, ast.Attribute, ast.BinOp)]
        if not names or tail in ("step", "backward") or local_callee(call, block) is not None:
            continue
        if (imports.qualify(call.func) or "").startswith(_NOT_HELPERS):
            continue
        if len(names) >= 2 and _steps_for_caller(names, block.scope, kinds):
            found.helper_steps.append((call, block))
        elif _trains_on_loader(call, names, block.scope, kinds):
            found.epoch_helpers.append((call, block))
    return found


def _descends(statement: ast.stmt, block: Block, kinds: Kinds) -> bool:
    """`w1 -= learning_rate * grad_w1` in a loop: a tensor bound before the loop (a weight) takes
    a step against a product with a tensor (a gradient)."""
    if not (isinstance(statement, ast.AugAssign) and isinstance(statement.op, ast.Sub)
            and isinstance(statement.target, ast.Name) and isinstance(statement.value, ast.BinOp)
            and isinstance(statement.value.op, ast.Mult)):
        return False
    loop = next((b for b in block.ancestors() if b.kind in ("loop", "scope")), None)
    if loop is None or loop.kind != "loop":
        return False
    name, scope = statement.target.id, block.scope
    start = (loop.node.lineno, loop.node.col_offset)
    bound = [b for b in scope.bindings.get(name, ()) if b.how != "Sub"]
    if not bound or any(b.position >= start for b in bound):
        return False  # a weight is made before the loop and only updated in it
    return kinds.is_tensor(statement.target, scope) and kinds.is_tensor(statement.value, scope)


def is_optimizer(receiver: ast.expr, scope: Scope, kinds: Kinds) -> bool:
    if kinds.of(receiver, scope) == OPTIMIZER:
        return True
    name = last_name(receiver).lower()
    if "sched" in name or name.startswith("lr") or name in ("env", "environment"):
        return False
    return name.startswith("opt") or "optim" in name or "scaler" in name


def _named_like_loss(tail: str) -> bool:
    name = tail.lower()
    return tail in _LOSS_FUNCTIONS or (any(word in name for word in _LOSS_WORDS) and "scale" not in name)


def computes_loss(call: ast.Call, qualified: str, scope: Scope, kinds: Kinds) -> bool:
    """`F.cross_entropy(...)`, `criterion(out, y)`, `self.loss_fn(...)`, `nn.MSELoss()(out, y)`."""
    tail = call_tail(call)
    if qualified.startswith("torch.nn.functional."):
        return tail in _LOSS_FUNCTIONS
    if qualified:
        return False
    name = tail.lower()
    return any(word in name for word in _LOSS_WORDS) and "backward" not in name and kinds.of(
        call.func, scope) != OTHER


def _steps_for_caller(args: list[ast.expr], scope: Scope, kinds: Kinds) -> bool:
    """`loss_scaler(loss, optimizer, ...)`: handed the loss and the optimizer, it can only be there
    to do the backward and the step (a learning-rate helper is handed no loss)."""
    if not any(_is_loss(a, scope, kinds) for a in args):
        return False
    return any(isinstance(a, (ast.Name, ast.Attribute)) and "scaler" not in last_name(a).lower()
               and is_optimizer(a, scope, kinds) for a in args)


def _is_loss(expr: ast.expr, scope: Scope, kinds: Kinds) -> bool:
    """A loss value: named for one, and a tensor rather than the criterion that computes it (open_lm hands
    `train_one_epoch(model, data, loss, optimizer=...)` its `loss = nn.CrossEntropyLoss()`)."""
    if isinstance(expr, ast.BinOp):  # `loss / accum_steps`
        return _is_loss(expr.left, scope, kinds)
    return isinstance(expr, (ast.Name, ast.Attribute)) and "loss" in last_name(expr).lower() and kinds.of(
        expr, scope) not in (OTHER, MODULE)


def _trains_on_loader(call: ast.Call, args: list[ast.expr], scope: Scope, kinds: Kinds) -> bool:
    """A helper the file does not define, handed a loader and named for training (or handed an
    optimizer too): `train_one_epoch(model, criterion, data_loader, optimizer, device, epoch)`.
    The names are read first: asking what every argument of every call holds costs more."""
    if not isinstance(call.func, (ast.Name, ast.Attribute)):
        return False
    named = any(word in call_tail(call).lower() for word in TRAINING_WORDS)
    if not named and not any(_named_like_optimizer(last_name(a)) for a in args):
        return False
    return any(kinds.of(a, scope) == LOADER for a in args)


def _named_like_optimizer(name: str) -> bool:
    name = name.lower()
    return (name.startswith("opt") or "optim" in name) and "sched" not in name
