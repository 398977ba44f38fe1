"""How often a piece of code runs: every training step, every evaluation batch, in `forward`,
or none of these, and whether an `if step % N == 0:` guard thins it out.

A loop is a *training loop* when its own body (not a nested loop's) calls `.backward()` or
`optimizer.step()`, directly or through a function of the same file (two levels deep). A
function that itself steps (`train_step`) runs once per step. An *evaluation loop* is a loop
under `torch.no_grad()`/`inference_mode()`, in a `@torch.no_grad()` function, or after a
`model.eval()` in the same function; a `range` loop that draws no batches (`next(it)`) is a
generation loop, not an evaluation one. Functions called from any of these inherit the region,
two levels deep. The epoch loop around a training loop is not per-step: its own statements
run once per epoch (nor is it an evaluation loop, whatever its function is called).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from torchdoctor.lint.kinds import LOADER, MODULE, Kinds
from torchdoctor.lint.model import Block, FileModel, Scope, enclosing_loops, loop_iter
from torchdoctor.lint.names import dotted, last_name
from torchdoctor.lint.steps import find_step_calls

STEP, EVAL, FORWARD = "step", "eval", "forward"
CALL_DEPTH = 2  # how many calls deep a region reaches (the "one or two levels")
_NO_GRAD = {"torch.no_grad", "torch.inference_mode"}
_STEP_METHODS = {"training_step": STEP, "validation_step": EVAL, "test_step": EVAL, "predict_step": EVAL}
_EVAL_WORDS = ("eval", "valid", "test", "predict", "infer")


@dataclass(frozen=True)
class Region:
    kind: str | None  # STEP, EVAL, FORWARD or None
    guarded: bool = False  # behind a periodic `if` (every N steps), so not per-step
    via: str = ""  # words for messages: "the training loop at line 36"

    @property
    def per_step(self) -> bool:
        return self.kind in (STEP, FORWARD) and not self.guarded

    @property
    def per_eval_batch(self) -> bool:
        return self.kind == EVAL and not self.guarded

    def rank(self) -> int:
        order = {STEP: 0, FORWARD: 1, EVAL: 2, None: 6}
        return order[self.kind] + (3 if self.guarded and self.kind else 0)


NOWHERE = Region(None)


class Context:
    def __init__(self, model: FileModel, kinds: Kinds):
        self.model = model
        self.kinds = kinds
        self.imports = model.imports
        self.counters = _counters(model)
        self._callers: dict[int, list[tuple[ast.Call, Block]]] = {}
        self._callees: dict[int, Scope | None] = {}
        self._instantiations: dict[int, list[tuple[ast.Call, Block]]] = {}
        self._calls_in_scope: dict[int, list[tuple[ast.Call, Block]]] = {}
        self._regions: dict[int, Region] = {}
        self._scope_regions: dict[tuple[int, int], Region] = {}
        self._periodic: dict[int, bool] = {}
        self._model_loops: set[int] | None = None
        self._link_calls()
        self.steps = find_step_calls(model, kinds, self.local_callee)
        self.backward_calls = self.steps.backward + self.steps.helper_steps
        self.optimizer_steps = self.steps.optimizer_steps + self.steps.helper_steps + self.steps.manual_updates
        self.loss_loops = _loops_of(self.steps.loss_calls)  # loops that compute a loss
        # `batch = next(it)`: every next() call inside a loop, with its block and that innermost loop,
        # in source order; and id(loop) → the next() calls in it (the loops that draw batches so)
        self.next_calls = [(call, block, loop) for call, block in model.calls_named("next")
                           for loop in (nearest_loop(block),) if loop is not None]
        self.drawing_loops: dict[int, list[ast.Call]] = {}
        for call, _, loop in self.next_calls:
            self.drawing_loops.setdefault(id(loop), []).append(call)
        self.step_loops, self.step_functions = self._training_structure()
        self.loops_around_training = self._loops_around_training()
        self._first_eval_call = _first_eval_calls(model)
        self.eval_loops = {id(loop) for loop in model.loops if self._is_eval_loop(loop)}

    # -- public questions ------------------------------------------------------------------
    def region(self, block: Block, depth: int = 0) -> Region:
        if depth == 0 and id(block) in self._regions:
            return self._regions[id(block)]
        guarded = False
        result = NOWHERE
        for b in block.ancestors():
            if b.kind == "if":
                guarded = guarded or self.is_periodic(b)
            elif b.kind == "loop" and id(b) in self.step_loops:
                result = Region(STEP, guarded, f"the training loop at line {b.line}")
                break
            elif b.kind == "loop" and id(b) in self.eval_loops:
                result = Region(EVAL, guarded, f"the evaluation loop at line {b.line}")
                break
            elif b.kind == "scope":
                inner = self.scope_region(b.scope, depth)
                if inner.kind:
                    result = Region(inner.kind, guarded or inner.guarded, inner.via)
                break
        if depth == 0:
            self._regions[id(block)] = result
        return result

    def scope_region(self, scope: Scope, depth: int = 0) -> Region:
        key = (id(scope), depth)
        if key in self._scope_regions:
            return self._scope_regions[key]
        self._scope_regions[key] = NOWHERE  # cycle guard for recursive functions
        result = self._scope_region(scope, depth)
        self._scope_regions[key] = result
        return result

    def now_and_then(self, test: ast.expr) -> bool:
        """`(step + 1) % accum == 0`: true only now and then (a flag handed to a helper)."""
        return _periodic_branch(test, self.counters) == "body"

    def is_periodic(self, if_block: Block) -> bool:
        key = id(if_block)
        if key not in self._periodic:
            self._periodic[key] = _periodic_branch(if_block.node.test, self.counters) == if_block.branch
        return self._periodic[key]

    def local_callee(self, call: ast.Call, block: Block) -> Scope | None:
        """The function of this file that `call` runs: `f(...)` or `self.f(...)`."""
        key = id(call)
        if key not in self._callees:
            self._callees[key] = self._local_definition(call, block, "function")
        return self._callees[key]

    def instantiations(self, class_scope: Scope) -> list[tuple[ast.Call, Block]]:
        """`Trainer(model, loader)`: the calls that make an instance of the file's own class."""
        return self._instantiations.get(id(class_scope), [])

    def calls_in(self, scope: Scope) -> list[tuple[ast.Call, Block]]:
        return self._calls_in_scope.get(id(scope), [])

    def _local_definition(self, call: ast.Call, block: Block, kind: str) -> Scope | None:
        func = call.func
        if isinstance(func, ast.Name):
            scope: Scope | None = block.scope
            while scope is not None:
                found = scope.functions.get(func.id) if scope.kind != "class" else None
                if found is not None:
                    return found if found.kind == kind else None
                scope = scope.parent
            return None
        if kind == "function" and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            cls = block.scope.class_scope if func.value.id == "self" else self._instance_of(func.value.id, block)
            found = cls.functions.get(func.attr) if cls is not None else None
            return found if found is not None and found.kind == "function" else None
        return None

    def _instance_of(self, name: str, block: Block) -> Scope | None:
        """The file's own class `name` is an instance of: `engine` after `engine = Engine(...)`."""
        found = self.kinds.values.definition(name, block.scope)
        if found is None or not isinstance(found[0], ast.Call) or not isinstance(found[0].func, ast.Name):
            return None
        value, where = found
        return self._local_definition(value, where.block, "class")

    def callers(self, scope: Scope) -> list[tuple[ast.Call, Block]]:
        return self._callers.get(id(scope), [])

    def call_sites(self, function: Scope) -> list[tuple[ast.Call, Block]]:
        """Where `function` is called: its callers, and for an `__init__` the calls that make an
        instance of its class (`Trainer(model, loader)`)."""
        sites = list(self.callers(function))
        if function.name == "__init__" and function.class_scope is not None:
            sites += self.instantiations(function.class_scope)
        return sites

    def guard_between(self, block: Block, outer: Block) -> bool:
        """A periodic `if` between `block` and the enclosing `outer` block."""
        for b in block.ancestors():
            if b is outer:
                return False
            if b.kind == "if" and self.is_periodic(b):
                return True
        return False

    # -- building --------------------------------------------------------------------------
    def _link_calls(self) -> None:
        for call, block in self.model.calls:
            self._calls_in_scope.setdefault(id(block.scope), []).append((call, block))
            callee = self.local_callee(call, block)
            if callee is not None:
                self._callers.setdefault(id(callee), []).append((call, block))
            elif isinstance(call.func, ast.Name):
                cls = self._local_definition(call, block, "class")
                if cls is not None:
                    self._instantiations.setdefault(id(cls), []).append((call, block))

    def _training_structure(self) -> tuple[set[int], set[int]]:
        step_loops: set[int] = set()
        step_functions: set[int] = set()
        for _, block in (*self.backward_calls, *self.optimizer_steps):
            loop = nearest_loop(block)
            if loop is not None:
                step_loops.add(id(loop))
            elif block.scope.kind == "function":
                step_functions.add(id(block.scope))
        # A loop that calls a stepping function steps through one call; a function that calls a
        # stepping function outside any loop steps too, one level further. Level by level, so a
        # chain longer than CALL_DEPTH calls is not followed.
        level = [s for s in self.model.scopes if id(s) in step_functions]
        for depth in range(CALL_DEPTH):
            next_level = []
            for scope in level:
                for _, block in self.callers(scope):
                    loop = nearest_loop(block)
                    if loop is not None:
                        step_loops.add(id(loop))
                    elif block.scope.kind == "function" and id(block.scope) not in step_functions:
                        if depth + 1 < CALL_DEPTH:
                            step_functions.add(id(block.scope))
                            next_level.append(block.scope)
            level = next_level
        return step_loops, step_functions

    def _loops_around_training(self) -> set[int]:
        """Loops of the same function that hold a training loop (epochs, configurations), or call
        a function that trains (`train_one_epoch(...)`, the file's own or an imported one): each
        pass is a whole training run or epoch, not a step, and not an evaluation batch. A loop
        that steps the optimizer itself around a micro-batch loop that calls backward (gradient
        accumulation) is the training loop: each of its passes is one step."""
        around: set[int] = set()
        for loop in self.model.loops:
            if id(loop) in self.step_loops and loop.parent is not None:
                around.update(id(b) for b in enclosing_loops(loop.parent) if id(b) not in self.step_loops)
        training_functions = {id(loop.scope) for loop in self.model.loops if id(loop) in self.step_loops}
        epoch_calls = list(self.steps.epoch_helpers)
        for function_id in training_functions:
            epoch_calls += self._callers.get(function_id, [])
        for _, block in epoch_calls:
            around.update(id(b) for b in enclosing_loops(block) if id(b) not in self.step_loops)
        return around

    def _is_eval_loop(self, loop: Block) -> bool:
        if id(loop) in self.step_loops or id(loop) in self.loops_around_training:
            return False
        scope = loop.scope
        no_grad = eval_mode = False
        for b in loop.ancestors():
            if b.kind == "loop" and id(b) in self.step_loops:
                return False  # a loop inside the step (EMA update, metrics) is part of the step
            if b.kind == "with" and any(self._disables_grad(i.context_expr) for i in b.node.items):
                no_grad = True
            if b.kind == "scope":
                break
        if not no_grad and scope.kind == "function":
            no_grad = any(self._disables_grad(d) for d in scope.node.decorator_list)
            eval_mode = self._first_eval_call.get(id(scope), loop.line) < loop.line
            if not eval_mode and _named_like_eval(scope.name):
                eval_mode = _STEP_METHODS.get(scope.name) != STEP
        # no_grad alone is not evaluation (weight init, optimizer internals): the loop must
        # also read batches from a loader or run a model. A `range` loop that neither draws
        # batches nor computes a loss is a generation or rollout loop, token by token: not one
        # pass per evaluation batch. One that computes a loss walks held-out data in strides.
        if _is_counting_loop(loop) and not self.draws_data(loop):
            return False
        return (no_grad or eval_mode) and (self._iterates_loader(loop) or self._runs_model(loop)
                                           or id(loop) in self.loss_loops)

    def draws_data(self, loop: Block) -> bool:
        """The loop takes batches from data: iterates a loader, calls `next(it)` in its body, or
        computes a loss on what it takes (`criterion(model(x), y)`, `F.cross_entropy(...)`)."""
        return id(loop) in self.drawing_loops or id(loop) in self.loss_loops or self._iterates_loader(loop)

    def _iterates_loader(self, loop: Block) -> bool:
        iterable = _unwrapped(loop_iter(loop), ("enumerate", "tqdm", "iter"))
        return iterable is not None and self.kinds.of(iterable, loop.scope) == LOADER

    def _runs_model(self, loop: Block) -> bool:
        """The loop body calls a model or loss module (`model(x)`, `self.net(x)`)."""
        if self._model_loops is None:
            self._model_loops = set()
            for call, block in self.model.calls:
                func = call.func
                direct = isinstance(func, ast.Name) or (
                    isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self")
                if direct and self.kinds.of(func, block.scope) == MODULE:
                    for b in block.ancestors():
                        if b.kind == "scope":
                            break
                        if b.kind == "loop":
                            self._model_loops.add(id(b))
        return id(loop) in self._model_loops

    def _disables_grad(self, expr: ast.expr) -> bool:
        target = expr.func if isinstance(expr, ast.Call) else expr
        name = self.imports.qualify(target) or dotted(target) or ""
        if name in _NO_GRAD:
            return True
        if name == "torch.set_grad_enabled" and isinstance(expr, ast.Call) and expr.args:
            arg = expr.args[0]
            return isinstance(arg, ast.Constant) and arg.value is False
        return False

    def _scope_region(self, scope: Scope, depth: int) -> Region:
        if scope.kind != "function":
            return NOWHERE
        if id(scope) in self.step_functions:
            return Region(STEP, False, f"`{scope.name}()` (it runs a training step)")
        if scope.class_scope is not None and scope.name == "forward":
            return Region(FORWARD, False, f"`{scope.class_scope.name}.forward()`")
        if scope.class_scope is not None and scope.name in _STEP_METHODS:
            return Region(_STEP_METHODS[scope.name], False, f"`{scope.name}()`")
        if depth >= CALL_DEPTH:
            return NOWHERE
        best = NOWHERE
        for _, block in self.callers(scope):
            found = self.region(block, depth + 1)
            if found.rank() < best.rank():
                best = found
        if best.kind is None:
            return NOWHERE
        return Region(best.kind, best.guarded, f"`{scope.name}()` (called from {best.via})")


def _loops_of(calls: list[tuple[ast.Call, Block]]) -> set[int]:
    """The loops (in their function) around any of these calls."""
    return {id(loop) for _, block in calls for loop in enclosing_loops(block)}


def _first_eval_calls(model: FileModel) -> dict[int, int]:
    """scope → the line of its first `model.eval()` call."""
    first: dict[int, int] = {}
    for call, block in model.calls_named("eval"):
        if not call.args and isinstance(call.func, ast.Attribute):
            key = id(block.scope)
            first[key] = min(first.get(key, call.lineno), call.lineno)
    return first


def nearest_loop(block: Block) -> Block | None:
    """The innermost loop around `block` in the same function (None at a function boundary)."""
    return next(enclosing_loops(block), None)


def _is_counting_loop(loop: Block) -> bool:
    """`for i in range(n)` (also under enumerate/tqdm): the loop counts, it iterates no data."""
    iterable = _unwrapped(loop_iter(loop), ("enumerate", "tqdm"))
    return isinstance(iterable, ast.Call) and last_name(iterable.func) in ("range", "trange")


def _unwrapped(iterable: ast.expr | None, wrappers: tuple[str, ...]) -> ast.expr | None:
    """What a loop iterates under wrappers that pass it through: `x` in `enumerate(tqdm(x))`."""
    while isinstance(iterable, ast.Call) and last_name(iterable.func) in wrappers and iterable.args:
        iterable = iterable.args[0]
    return iterable


def _named_like_eval(name: str) -> bool:
    """`evaluate`, `run_validation`, `test_epoch`: a word of the name starts like evaluation."""
    return any(part.startswith(_EVAL_WORDS) for part in name.lower().split("_"))


def _counters(model: FileModel) -> set[str]:
    """Names that count steps: `step += 1` targets and `range`/`enumerate` loop indices."""
    found: set[str] = set()
    for scope in model.scopes:
        for target, value, how in scope.assigns:
            if how == "Add" and isinstance(value, ast.Constant):
                name = dotted(target)
                if name:
                    found.add(name)
            elif how == "for" and isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
                if value.func.id == "range" and isinstance(target, ast.Name):
                    found.add(target.id)
                elif value.func.id == "enumerate" and isinstance(target, ast.Tuple) and target.elts:
                    first = target.elts[0]
                    if isinstance(first, ast.Name):
                        found.add(first.id)
    return found


def _periodic_branch(test: ast.expr, counters: set[str]) -> str | None:
    """Which branch of `if test:` runs only now and then: "body", "orelse" or None.

    `step % N == 0` and `step == 0` (a step counter) run the body now and then; a bare
    `step % N` (non-zero most of the time) runs the else branch now and then.
    """
    if isinstance(test, ast.BoolOp):
        branches = [_periodic_branch(v, counters) for v in test.values]
        return "body" if "body" in branches else None  # `and`: at most as often; `or last_step`: nearly
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _periodic_branch(test.operand, counters)
        return {"body": "orelse", "orelse": "body"}.get(inner or "")
    if _is_mod(test):
        return "orelse"
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, sides = test.ops[0], (test.left, test.comparators[0])
        if any(_is_mod(s) for s in sides):
            return "body" if isinstance(op, ast.Eq) else "orelse" if isinstance(op, ast.NotEq) else None
        if isinstance(op, ast.Eq) and any(dotted(s) in counters for s in sides):
            return "body"
    return None


def _is_mod(expr: ast.expr) -> bool:
    return isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod) and not (
        isinstance(expr.left, ast.Constant) and isinstance(expr.left.value, str)) and not (  # "%d" % x formats
        isinstance(expr.right, ast.Constant) and expr.right.value == 1)  # `step % 1 == 0` holds every step
