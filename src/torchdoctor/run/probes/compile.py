"""torch.compile probe: what compiling cost, which code recompiled and why, where graphs broke,
and how many compiled graphs a step runs, from torch's own sources.

- Dynamo's compile callbacks (`torch._dynamo.callback_handler`): when each compile started and
  ended (a frame traced, or a backward compiled lazily), in which step, and the innermost user
  line on the stack (the line that called the compiled code).
- Dynamo's compilation metrics (`torch._dynamo.utils.get_compilation_metrics`), read once at
  the end: the compiled code's name and file, the guard that failed when it recompiled, a
  failure (the recompile limit: from there the code runs without compiling new variants).
- Dynamo's `graph_breaks` log, through a handler of ours (it prints nothing the script did not
  ask for): each break's reason and user line.
- The backend's compiled graphs, counted as they run (one integer increment per graph call),
  training apart from the script's evaluation regions (a generation loop's graphs are no
  training step's), and scanned once when compiled for host reads compiled into the graph.

Nothing here runs per op. The doctor's own TorchFunctionModes (the op sampler's API watcher,
the backward timer's tagger) would be traced by Dynamo into the user's graphs and break them;
every compiled call lifts them off the mode stack for its duration (an enter hook on each
torch.compile context), and the doctor's TorchDispatchModes declare
`ignore_compile_internals`, so Dynamo compiles as it would without the doctor. On a torch that
lacks either, the op windows are switched off once the script compiles, and the record says so.

`torch._dynamo` is imported only when the script compiles (a patched `torch.compile`) or had
already imported it; a torch without a source leaves it "not measurable", never an error.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
import time
from typing import Any

import torch

from torchdoctor.model.compile_record import BACKWARD, DYNAMO, CompiledSync, CompileEvent, CompileInfo, GraphBreak
from torchdoctor.model.location import Location
from torchdoctor.model.record import ProbeNote, RunRecord, StepSample
from torchdoctor.run.probes.frames import (USER, classify_file, display_path, library_of, location_of,
                                           own_caller_location, source_text, user_frame)
from torchdoctor.run.probes.global_hooks import pause_own_module_hooks, quiet_global_hook_check
from torchdoctor.run.probes.patching import PatchSet
from torchdoctor.run.session import DONE, RunSession

GRAPH_BREAK_LOGGER = "torch._dynamo.symbolic_convert.__graph_breaks"
METRICS_KEPT = 4096  # compilation metrics torch keeps (its default, 64, drops the early ones of a long run)
_BREAK = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)\s*\nGraph Break Reason: (?P<reason>.*)", re.S)
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>[^\n]+)')
_HOST_READS = ("Tensor.item", "item()", "tolist", "Data-dependent", "data-dependent", "generic_jump",
               "_local_scalar_dense", "Tensor.__bool__", "numpy()")
_SYNC_TARGETS = ("item", "tolist", "_local_scalar_dense", "nonzero", "__bool__")


def _nothing() -> None:
    return None


class _BreakLog(logging.Handler):
    def __init__(self, probe: "CompileProbe") -> None:
        super().__init__(logging.DEBUG)
        self.probe = probe

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.probe._on_break(record.getMessage())
        except Exception:  # a log line must never fail the compile
            pass


class CompileProbe:
    name = "compile"
    # Until Dynamo is hooked, on_step looks for frames compiled without torch.compile: a poll (session.POLL_S).
    # Hooked, it needs no step: each count is kept under the step open when it was made (session.step_count
    # + 1), so a compiled script's unmeasured steps keep the session's lean path.
    polls_steps = True

    def __init__(self, session: RunSession) -> None:
        self.session = session
        self.patches = PatchSet()
        self.info = CompileInfo(torch_version=torch.__version__)
        self.hooked = False  # Dynamo's hooks are in
        # step index -> calls in it: graph calls in training (outside the script's evaluation regions), calls
        # into compiled code in training, graph calls inside them (model.eval() to model.train()): not a
        # training step's
        self.graph_calls: dict[int, int] = {}
        self.compiled_calls: dict[int, int] = {}
        self.eval_graph_calls: dict[int, int] = {}
        self._open: dict[tuple[str, str], CompileEvent] = {}
        self._events: list[CompileEvent] = []
        self._breaks: dict[tuple[str, int, str], GraphBreak] = {}
        self._syncs: dict[tuple[str, int, str], CompiledSync] = {}
        self._metrics_before = 0
        self._metrics_limit: int | None = None
        self._callbacks: list[tuple[Any, Any]] = []
        self._log_state: tuple[logging.Logger, logging.Handler, int, bool] | None = None
        self._modes_safe = True
        self._notes: list[str] = []

    # ---- install -------------------------------------------------------------------------
    def install(self) -> None:
        quiet_global_hook_check(self.patches)  # the doctor's global hooks never make Dynamo warn the script
        if hasattr(torch, "compile"):
            self.patches.wrap(torch, "compile", self._wrap_compile)
        if "torch._dynamo" in sys.modules and _frames_compiled():  # compiled before the probes (watch(), a callback)
            self._hook_dynamo(existing=True)

    def uninstall(self) -> None:
        self.patches.restore()
        for remove, callback in self._callbacks:
            try:
                remove(callback)
            except Exception:
                pass
        self._callbacks.clear()
        if self._log_state is not None:
            logger, handler, level, propagate = self._log_state
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
            self._log_state = None

    def compiling(self) -> bool:
        """A graph is being compiled now (its start seen, its end not yet)."""
        return bool(self._open)

    def _wrap_compile(self, original):
        probe = self

        @functools.wraps(original)
        def compile(*args, **kwargs):
            where = own_caller_location()
            if where is not None and where not in probe.info.compiled_at:
                probe.info.compiled_at.append(where)
            if not probe.hooked:
                probe._hook_dynamo(existing=False)
            return original(*args, **kwargs)

        return compile

    def _hook_dynamo(self, existing: bool) -> None:
        self.hooked = True
        try:
            import torch._dynamo as dynamo
            from torch._dynamo import eval_frame
        except Exception as exc:  # noqa: BLE001 - a torch without Dynamo: nothing to measure
            self.info.unavailable.append(f"torch._dynamo: {type(exc).__name__}: {exc}")
            return
        self._read_limit(dynamo)
        self._hook_callbacks(dynamo)
        self._hook_metrics()
        self._hook_break_log()
        self._hook_graphs()
        self._hook_contexts(eval_frame, existing)
        _skip_own_code(eval_frame)
        from torch.utils._python_dispatch import TorchDispatchMode

        if not hasattr(TorchDispatchMode, "ignore_compile_internals") or not self._modes_safe:
            self._modes_off()

    def _read_limit(self, dynamo) -> None:
        config = dynamo.config
        for name in ("recompile_limit", "cache_size_limit"):
            value = getattr(config, name, None)
            if isinstance(value, int):
                self.info.recompile_limit = value
                return

    def _hook_callbacks(self, dynamo) -> None:
        handler = getattr(dynamo, "callback_handler", None)
        if handler is None or not hasattr(handler, "register_start_callback"):
            self.info.unavailable.append("compile times per step: torch._dynamo.callback_handler is missing "
                                         "(the compilation metrics' own times are used)")
            return
        handler.register_start_callback(self._on_start)
        handler.register_end_callback(self._on_end)
        self._callbacks += [(handler.remove_start_callback, self._on_start),
                            (handler.remove_end_callback, self._on_end)]

    def _hook_metrics(self) -> None:
        try:
            from torch._dynamo import utils

            self._metrics_before = len(utils.get_compilation_metrics())
            deque = getattr(utils, "_compilation_metrics", None)
            if deque is not None and (deque.maxlen or 0) < METRICS_KEPT:
                utils.set_compilation_metrics_limit(METRICS_KEPT)
        except Exception as exc:  # noqa: BLE001
            self.info.unavailable.append(f"compilation metrics: {type(exc).__name__}: {exc}")

    def _hook_break_log(self) -> None:
        logger = logging.getLogger(GRAPH_BREAK_LOGGER)
        handler = _BreakLog(self)
        was_on = logger.isEnabledFor(logging.DEBUG)
        self._log_state = (logger, handler, logger.level, logger.propagate)
        logger.addHandler(handler)
        if not was_on:  # ours alone: keep it out of the script's own log output
            logger.setLevel(logging.DEBUG)
            logger.propagate = False

    def _hook_graphs(self) -> None:
        try:
            from torch._dynamo.output_graph import OutputGraph
        except Exception as exc:  # noqa: BLE001
            self.info.unavailable.append(f"graphs per step: {type(exc).__name__}: {exc}")
            return
        if not hasattr(OutputGraph, "call_user_compiler"):
            self.info.unavailable.append("graphs per step: OutputGraph.call_user_compiler is missing")
            return
        self.patches.wrap(OutputGraph, "call_user_compiler", self._wrap_backend)

    def _hook_contexts(self, eval_frame, existing: bool) -> None:
        context = getattr(eval_frame, "OptimizeContext", None)
        if context is None or not hasattr(torch._C, "_len_torch_function_stack"):
            self._modes_safe = False
            return
        self.patches.wrap(context, "__init__", self._wrap_context_init)
        if existing and _frames_compiled():  # contexts made before the probes went in
            for obj in existing_instances(context):
                self._add_enter_hook(obj)

    def _modes_off(self) -> None:
        config = self.session.config
        config.sampled_steps = config.backward_steps = config.memory_steps = 0
        self.info.probe_modes = "off"
        self._notes.append("op sampling, backward timing and memory accounting were off: this torch cannot keep "
                           "the doctor's modes out of the script's compiled graphs")

    # ---- compiled contexts and graphs -----------------------------------------------------
    def _wrap_context_init(self, original):
        probe = self

        @functools.wraps(original)
        def __init__(ctx, *args, **kwargs):
            original(ctx, *args, **kwargs)
            probe._add_enter_hook(ctx)

        return __init__

    def _add_enter_hook(self, ctx) -> None:
        hooks = getattr(ctx, "enter_exit_hooks", None)
        if isinstance(hooks, list) and self._enter_compiled not in hooks:
            hooks.append(self._enter_compiled)
        elif not isinstance(hooks, list):
            self._modes_safe = False
            self._modes_off()

    def _enter_compiled(self):
        """Every call into compiled code: count it, and lift the doctor's function modes off the
        stack until it returns (Dynamo would trace them into the graph)."""
        session = self.session
        if session.eval_started is None:
            calls, step = self.compiled_calls, session.step_count + 1
            calls[step] = calls.get(step, 0) + 1
        restore_hooks = pause_own_module_hooks()  # the memory accounting's, an evaluation sample's, a knob's
        depth = torch._C._len_torch_function_stack()
        if not depth:
            return restore_hooks or _nothing
        stack = [torch._C._get_function_stack_at(i) for i in range(depth)]
        if not any(getattr(mode, "torchdoctor_probe_mode", False) for mode in stack):
            return restore_hooks or _nothing
        for _ in range(depth):
            torch._C._pop_torch_function_stack()
        for mode in stack:
            if not getattr(mode, "torchdoctor_probe_mode", False):
                torch._C._push_on_torch_function_stack(mode)

        def restore() -> None:
            for _ in range(torch._C._len_torch_function_stack()):
                torch._C._pop_torch_function_stack()
            for mode in stack:
                torch._C._push_on_torch_function_stack(mode)
            if restore_hooks is not None:
                restore_hooks()

        return restore

    def _wrap_backend(self, original):
        probe = self

        @functools.wraps(original)
        def call_user_compiler(output_graph, gm, example_inputs):
            compiled = original(output_graph, gm, example_inputs)
            try:
                probe._scan_graph(gm)
            except Exception:  # noqa: BLE001 - a graph we cannot read is not the script's failure
                pass

            def counted(*args, **kwargs):
                session = probe.session
                calls = probe.graph_calls if session.eval_started is None else probe.eval_graph_calls
                step = session.step_count + 1
                calls[step] = calls.get(step, 0) + 1
                return compiled(*args, **kwargs)

            return counted

        return call_user_compiler

    def _scan_graph(self, gm) -> None:
        """Host reads that Dynamo compiled into the graph (capture_scalar_outputs): the line."""
        for node in gm.graph.nodes:
            if node.op not in ("call_method", "call_function"):
                continue
            target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
            if not any(target == t or target.startswith(t + ".") for t in _SYNC_TARGETS):
                continue
            frames = _frames_in(str(node.meta.get("stack_trace") or ""))
            where = _innermost_user(frames)
            if where is None:
                continue
            key = (where.path, where.line, target)
            if key not in self._syncs:
                self._syncs[key] = CompiledSync(location=where, op=target, text=_text(frames, where))

    # ---- compile callbacks -----------------------------------------------------------------
    def _on_start(self, args) -> None:
        trigger = BACKWARD if "BACKWARD" in str(getattr(args, "callback_trigger", "")) else DYNAMO
        if "AUTOTUN" in str(getattr(args, "callback_trigger", "")) or "CUDAGRAPH" in str(
                getattr(args, "callback_trigger", "")):
            trigger = str(args.callback_trigger).rsplit(".", 1)[-1].lower()
        session = self.session
        frame, _ = user_frame(sys._getframe(1))
        module = _called_module(sys._getframe(1), frame)
        event = CompileEvent(compile_id=str(getattr(args, "compile_id", "")), trigger=trigger,
                             start=session.clock() - session.t0, seconds=0.0, step=session.step_count + 1,
                             module=module)
        if frame is not None:
            event.called_from = location_of(frame)
            event.call_text = source_text(frame.f_code.co_filename, event.called_from.line)
        self._open[(event.compile_id, trigger)] = event
        self._events.append(event)

    def _on_end(self, args) -> None:
        trigger = BACKWARD if "BACKWARD" in str(getattr(args, "callback_trigger", "")) else DYNAMO
        event = self._open.pop((str(getattr(args, "compile_id", "")), trigger), None)
        if event is None and self._open:  # an id that changed between start and end
            event = self._open.pop(next(iter(self._open)))
        if event is not None:
            session = self.session
            event.seconds = session.clock() - session.t0 - event.start
            session.script_time_in_windows(event.seconds)

    # ---- graph breaks --------------------------------------------------------------------------
    def _on_break(self, message: str) -> None:
        match = _BREAK.search(message)
        if match is None:
            return
        reason_lines = [line.strip() for line in match.group("reason").splitlines() if line.strip()]
        # "Encountered graph break when attempting to trace CALL: ..." says where, the next line why
        specific = [line for line in reason_lines if not line.startswith(("Encountered graph break", "Explanation:",
                                                                             "Hint:", "Developer debug context:"))]
        reason = specific[0] if specific else reason_lines[0] if reason_lines else ""
        detail = next((line[len("Explanation:"):].strip() for line in reason_lines
                       if line.startswith("Explanation:")), "")
        frames = _frames_in(message)
        path, line = match.group("file"), int(match.group("line"))
        frames.append((path, line, ""))
        mine = _innermost_user(frames)  # the user's own line (the break's, or the one that led to it)
        library, called_from = library_of(path), None
        if classify_file(path) == USER and library is None:
            where = Location(display_path(path), line, frames[-2][2] if len(frames) > 1 else "")
        elif library is not None:  # inside an installed package: its line, and the user line that led there
            where, called_from = Location(display_path(path), line, ""), mine
        elif mine is not None:  # inside torch: the user line that led there
            where = mine
        else:
            return
        key = (where.path, where.line, reason)
        known = self._breaks.get(key)
        if known is not None:
            known.count += 1
            return
        text = source_text(path, line) if where.line == line and where.path == display_path(path) else _text(frames, where)
        self._breaks[key] = GraphBreak(location=where, reason=reason, detail=detail, library=library,
                                       called_from=called_from, text=text,
                                       host_sync=any(marker in reason or marker in detail for marker in _HOST_READS))

    # ---- per step ---------------------------------------------------------------------------------
    def on_step(self, step: StepSample):
        if not self.hooked and "torch._dynamo" in sys.modules and _frames_compiled():
            # compiled without torch.compile (torch._dynamo.optimize); torch's optimizers import
            # Dynamo in every script, so only what it compiled says the script compiles
            self._hook_dynamo(existing=True)
        return DONE if self.hooked else None

    def _counts_by_step(self) -> None:
        """The counts of the steps that closed (a call after the last step is no step's)."""
        closed = self.session.step_count
        info = self.info
        for counts, into in ((self.graph_calls, info.graph_calls), (self.compiled_calls, info.compiled_calls),
                             (self.eval_graph_calls, info.eval_graph_calls)):
            into.update((str(step), n) for step, n in sorted(counts.items()) if step <= closed)

    # ---- after the run ------------------------------------------------------------------------------
    def contribute(self, record: RunRecord) -> None:
        if not self.hooked or not (self.info.compiled_at or self._events or self.graph_calls):
            record.probe_notes += [ProbeNote(self.name, n) for n in self._notes]
            return
        self._read_metrics()
        self._counts_by_step()
        info = self.info
        info.events = self._events
        info.breaks = sorted(self._breaks.values(), key=lambda b: -b.count)
        info.syncs_in_graph = list(self._syncs.values())
        record.compile = info
        record.probe_notes += [ProbeNote(self.name, n) for n in self._notes]

    def _read_metrics(self) -> None:
        try:
            from torch._dynamo.utils import get_compilation_metrics

            metrics = list(get_compilation_metrics())[self._metrics_before:]
        except Exception as exc:  # noqa: BLE001
            self.info.unavailable.append(f"compilation metrics: {type(exc).__name__}: {exc}")
            return
        by_id: dict[tuple[str, str], CompileEvent] = {(e.compile_id, e.trigger): e for e in self._events}
        for m in metrics:
            forward = getattr(m, "is_forward", True) is not False
            trigger = DYNAMO if forward else BACKWARD
            compile_id = str(getattr(m, "compile_id", "") or "")
            event = by_id.get((compile_id, trigger))
            if event is None:  # no callbacks on this torch: the metrics' own clock
                event = self._event_from_metrics(m, compile_id, trigger)
                if event is None:
                    continue
                self._events.append(event)
                by_id[(compile_id, trigger)] = event
            self.info.logging_overhead_s += float(getattr(m, "structured_logging_overhead_s", 0) or 0)
            if not forward:
                continue
            name, filename = getattr(m, "co_name", None), getattr(m, "co_filename", None)
            if name:
                event.function = name
            if filename:
                event.location = Location(display_path(filename), int(getattr(m, "co_firstlineno", 0) or 0), name or "")
                event.library = library_of(filename)
            event.recompile_reason = str(getattr(m, "recompile_reason", "") or "")
            event.graph_ops = getattr(m, "graph_op_count", None)
            event.restart_reasons = [str(r).splitlines()[0] for r in (getattr(m, "restart_reasons", None) or ())]
            fail = str(getattr(m, "fail_reason", "") or "")
            if fail:
                event.failed = fail.strip().splitlines()[0]
                event.limit_hit = "recompile limit" in fail or "cache_size_limit" in fail or "recompile_limit" in fail
        for event in self._events:  # a backward graph is its forward frame's
            if event.trigger != DYNAMO and not event.function:
                forward = by_id.get((event.compile_id, DYNAMO))
                if forward is not None:
                    event.function, event.module = forward.function, forward.module
                    event.location, event.library = forward.location, forward.library
                    event.called_from = event.called_from or forward.called_from
        self._events.sort(key=lambda e: e.start)

    def _event_from_metrics(self, m, compile_id: str, trigger: str) -> CompileEvent | None:
        start_us = getattr(m, "start_time_us", None)
        seconds = getattr(m, "entire_frame_compile_time_s", None)
        if start_us is None:
            return None
        session = self.session
        start = start_us / 1e6 - (time.time() - session.elapsed())
        step = sum(1 for s in session.steps if s.end < start) + 1
        return CompileEvent(compile_id=compile_id, trigger=trigger, start=start, seconds=float(seconds or 0.0),
                            step=step)


def _frames_in(text: str) -> list[tuple[str, int, str]]:
    """(file, line, function) of each `File "...", line N, in f` in a formatted stack, outermost first."""
    return [(m.group("file"), int(m.group("line")), m.group("fn").strip()) for m in _FRAME.finditer(text)]


def _innermost_user(frames: list[tuple[str, int, str]]) -> Location | None:
    for path, line, function in reversed(frames):
        if classify_file(path) == USER and library_of(path) is None:
            return Location(display_path(path), line, function)
    return None


def _text(frames: list[tuple[str, int, str]], where: Location) -> str:
    for path, line, _ in frames:
        if line == where.line and display_path(path) == where.path:
            return source_text(path, line)
    return ""


def _skip_own_code(eval_frame) -> None:
    """Dynamo compiles every Python frame that starts while compiled code runs, the doctor's too
    (a hook autograd calls, a finalizer): mark each code object of the doctor's loaded modules to
    run as it is. (A function Dynamo inlines while tracing is not affected: none of ours is
    left on the path of a compiled call, see `_enter_compiled`.)"""
    skip = getattr(eval_frame, "skip_code", None)
    if skip is None:
        return
    seen: set[int] = set()

    def visit(code) -> None:
        if id(code) in seen:
            return
        seen.add(id(code))
        skip(code)
        for const in code.co_consts:
            if hasattr(const, "co_consts"):
                visit(const)

    for name, module in list(sys.modules.items()):
        if not name.startswith("torchdoctor.") or module is None:
            continue
        for value in list(vars(module).values()):
            for item in ([value] + list(vars(value).values()) if isinstance(value, type) else [value]):
                item = getattr(item, "__func__", item)  # classmethod, staticmethod
                code = getattr(item, "__code__", None)
                if code is not None and getattr(item, "__module__", "") == name:
                    try:
                        visit(code)
                    except Exception:  # noqa: BLE001 - a code object torch will not mark
                        return


def _called_module(frame, stop) -> str:
    """The class of the innermost nn.Module being called between the compile and the user's line
    (a compiled module's code is torch's wrapper, not the model: the class names it)."""
    while frame is not None and frame is not stop:
        owner = frame.f_locals.get("self") if frame.f_code.co_name in ("_call_impl", "_wrapped_call_impl", "__call__") else None
        if isinstance(owner, torch.nn.Module):
            inner = getattr(owner, "_orig_mod", owner)
            return type(inner).__name__
        frame = frame.f_back
    return ""


def compiled_code_in_use() -> bool:
    """The script has compiled code (Dynamo loaded and a frame compiled): a global module hook
    of the doctor's would be traced into its graphs, a graph break of the doctor's making."""
    return "torch._dynamo" in sys.modules and _frames_compiled()


_dynamo_counters = None  # torch._dynamo.utils.counters, once imported: read at every step's end


def _frames_compiled() -> bool:
    """Dynamo has compiled something in this process already."""
    global _dynamo_counters
    if _dynamo_counters is None:
        try:
            from torch._dynamo.utils import counters
        except Exception:  # noqa: BLE001
            return False
        _dynamo_counters = counters
    frames = _dynamo_counters.get("frames")  # .get: reading never adds an entry (a defaultdict of Counters)
    return bool(frames and frames.get("total"))


def existing_instances(cls: type) -> list:
    """The live objects of `cls`, found through the garbage collector's list. `type(obj)`, not
    `isinstance`: isinstance reads `__class__`, which warns on deprecated module proxies, and
    silencing that with `warnings.catch_warnings()` would reset every module's record of warnings
    already shown, so the script's own once-per-line warnings would print again."""
    import gc

    return [obj for obj in gc.get_objects() if issubclass(type(obj), cls)]
