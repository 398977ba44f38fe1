"""torch.compile at run time: code that recompiles (TD405); graphs that break (TD406) are graph_breaks.py's.

Both read `record.compile` (run/probes/compile.py): Dynamo's own compile events, guard
failures and graph-break log, timed on the run's clock. The guard Dynamo printed is said in
plain words (a dimension that changed and the values seen, a Python number that changes, an
attribute), with the line where the compiled code was called and, where the run shows it, where
the changing value comes from (the training batches' shapes, the line that computed a number).
"""

from __future__ import annotations

from collections import Counter

import re
from dataclasses import dataclass, field

from torchdoctor.model.compile_record import DYNAMO, CompileEvent, CompileInfo
from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.location import Location
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.base import MIN_REPORTED_SPEEDUP, Rule, amdahl, severity_for
from torchdoctor.rules.facts import RunFacts, training_loader

_SIZE = re.compile(r"tensor '(?P<name>[^']+)' size mismatch at index (?P<dim>\d+)\. expected (?P<expected>\d+), "
                   r"actual (?P<actual>\d+)")
_TENSOR_OTHER = re.compile(r"tensor '(?P<name>[^']+)' (?P<what>[\w ]+?) mismatch")
_VALUE = re.compile(r"(?P<name>L\['[^']+'\](?:\.[\w.]+)?|___stack\d+|[A-Za-z_][\w.\[\]']*)\s*(?:==|<=|>=|<|>|!=)\s*"
                    r"(?P<value>-?[\d.]+(?:e-?\d+)?|True|False|'[^']*')")
_SOURCE_NOTE = re.compile(r"#\s*(?P<code>[^#]+?)\s*#\s*(?P<file>\S+):(?P<line>\d+)")
_ATTRIBUTE = re.compile(r"L\['(?P<obj>\w+)'\]\.(?P<attr>[\w.]+)")
_GRAD_MODE = re.compile(r"grad[_ ]mode", re.I)


@dataclass
class Guard:
    """One recompile's failed guard, in plain words."""

    kind: str  # size | value | attribute | tensor | grad-mode | other
    subject: str  # "dimension 1 of the first argument", "the Python value `scale`"
    seen: list[str] = field(default_factory=list)  # the values that made it recompile, in order
    raw: str = ""
    value_line: Location | None = None  # where the changing value was computed, when Dynamo said
    dim: int | None = None
    argument: str = ""


def _argument(name: str) -> str:
    match = re.fullmatch(r"args\[(\d+)\]", name)
    if match:
        n = int(match.group(1))
        return ["the first argument", "the second argument", "the third argument"][n] if n < 3 else f"argument {n + 1}"
    inner = re.fullmatch(r"L\['([^']+)'\](.*)", name)
    return f"`{inner.group(1)}{inner.group(2)}`" if inner else f"`{name}`"


def read_guard(reason: str) -> Guard:
    """Dynamo's guard failure ("0/2: tensor 'x' size mismatch at index 1. expected 37, actual 52")
    in plain words."""
    text = reason.split(":", 1)[1].strip() if re.match(r"^\d+/\d+:", reason) else reason.strip()
    first = text.splitlines()[0] if text else ""
    size = _SIZE.search(first)
    if size:
        return Guard("size", f"dimension {size['dim']} of {_argument(size['name'])}",
                     [size["expected"], size["actual"]], first, dim=int(size["dim"]), argument=size["name"])
    other = _TENSOR_OTHER.search(first)
    if other:
        return Guard("tensor", f"the {other['what']} of {_argument(other['name'])}", [], first, argument=other["name"])
    if _GRAD_MODE.search(first):
        return Guard("grad-mode", "grad mode (called with and without `torch.no_grad()`)", [], first)
    attribute = _ATTRIBUTE.search(first)
    value = _VALUE.search(first)
    note = _SOURCE_NOTE.search(first)
    line = Location(note["file"], int(note["line"])) if note else None
    if attribute and attribute["obj"] == "self":
        return Guard("attribute", f"the attribute `self.{attribute['attr']}`",
                     [value["value"]] if value else [], first, line)
    if value:
        name = value["name"]
        subject = (f"a Python number computed in the function (`{note['code'].strip()}`)" if name.startswith("___stack")
                   and note else "a Python number computed in the function" if name.startswith("___stack")
                   else f"the Python value {_argument(name)}")
        return Guard("value", subject, [value["value"]], first, line)
    return Guard("other", first or "a guard", [], first)


@dataclass
class _Frame:
    """One code object Dynamo compiled, with all its compiles."""

    frame_id: str
    events: list[CompileEvent]  # Dynamo's compiles of the frame, in order
    backward: list[CompileEvent] = field(default_factory=list)  # the backward graphs compiled for them

    def seconds(self, events: list[CompileEvent]) -> float:
        """The compiles' time, with the backward graph each one made."""
        ids = {e.compile_id for e in events}
        return sum(e.seconds for e in events) + sum(b.seconds for b in self.backward if b.compile_id in ids)

    @property
    def first(self) -> CompileEvent:
        return self.events[0]

    @property
    def recompiles(self) -> list[CompileEvent]:
        return [e for e in self.events if e.recompile_reason]

    @property
    def limit(self) -> CompileEvent | None:
        return next((e for e in self.events if e.limit_hit), None)

    def name(self) -> str:
        event = next((e for e in self.events if e.function), self.first)
        if event.module and (event.library == "torch" or not event.function):
            return f"{event.module}.forward (compiled module)"
        return event.function or "a compiled function"


def compiled_frames(info: CompileInfo) -> list[_Frame]:
    frames: dict[str, list[CompileEvent]] = {}
    backward: dict[str, list[CompileEvent]] = {}
    for event in info.events:
        (frames if event.trigger == DYNAMO else backward).setdefault(event.compile_id.split("/")[0], []).append(event)
    return [_Frame(fid, sorted(events, key=lambda e: e.start), backward.get(fid, [])) for fid, events in frames.items()]


# Steps after the compiling one in which no new variant came: the variants are then the step's own
# calls (one per parameter shape), compiled once and reused, a one-time cost in the wall-time table.
STABLE_AFTER_STEPS = 3


def _variants_of_one_step(record: RunRecord, frame: "_Frame", recompiles: list[CompileEvent]) -> bool:
    step = frame.first.step
    return all(e.step == step for e in recompiles) and sum(s.index > step for s in record.steps) >= STABLE_AFTER_STEPS


def _merge_guards(events: list[CompileEvent]) -> list[Guard]:
    """The guards of a frame's recompiles, one per subject, with every value seen."""
    merged: dict[str, Guard] = {}
    for event in events:
        guard = read_guard(event.recompile_reason)
        known = merged.get(guard.subject)
        if known is None:
            merged[guard.subject] = guard
            continue
        known.seen += [v for v in guard.seen if v not in known.seen]
    return list(merged.values())


def _measured_share(record: RunRecord, events: list[CompileEvent]) -> tuple[float, float]:
    """(compile seconds inside the measured steps, those steps' seconds)."""
    measured = {s.index: s for s in record.steps if not s.warmup}
    inside = sum(e.seconds for e in events if e.step in measured)
    return inside, sum(s.duration_s for s in measured.values())


def _batch_source(record: RunRecord, guard: Guard) -> tuple[Location | None, list[str]]:
    """Where the training batches come from, and their shapes, when the batches' own shape
    varied in the recompiling dimension."""
    shapes = [s.batch_shape for s in record.steps if s.batch_shape]
    if guard.dim is None or not shapes:
        return None, []
    sizes = {tuple(s)[guard.dim] for s in shapes if len(s) > guard.dim}
    if len(sizes) < 2:
        return None, []
    loader = training_loader(record)
    where = (loader.iterated_at or loader.created_at) if loader else None
    seen: list[str] = []
    for shape in shapes:
        text = "x".join(str(d) for d in shape)
        if text not in seen:
            seen.append(text)
    return where, seen[:6]


def _size_fix(guard: Guard, frame: _Frame) -> str:
    call = frame.first.call_text or "out = model(x)"
    arg = guard.argument if not guard.argument.startswith(("args[", "L[")) else "x"
    if guard.argument.startswith("L['"):
        arg = guard.argument[3:-2]
    return (f"Let dimension {guard.dim} vary without recompiling: mark it dynamic before the call, or compile "
            f"the whole model with dynamic shapes; or pad the lengths to a few sizes (buckets) so that only "
            f"those compile:\n```python\ntorch._dynamo.mark_dynamic({arg}, {guard.dim})   # before: {call}\n"
            f"# or: model = torch.compile(model, dynamic=True)\n"
            f"# or pad to a multiple of 64: x = F.pad(x, (0, (-x.shape[{guard.dim}]) % 64))\n```")


_FIXES = {
    "value": ("Pass the changing number as a tensor: the graph then reads it at run time instead of baking "
              "each value in as a constant (a number read from a tensor with `.item()` is better left a tensor):"
              "\n```python\nscale = torch.tensor(scale)   # or keep the tensor the number came from\n```"),
    "attribute": ("Keep the attribute fixed while training, or compile each setting once (two compiled "
                  "variants are cheap; one per step is not):\n```python\nmodel.train()   # set before the loop, "
                  "not toggled inside the compiled call\n```"),
    "grad-mode": ("Call the compiled code in one grad mode, or compile the evaluation path separately:\n"
                  "```python\neval_model = torch.compile(model)   # its own cache for torch.no_grad() calls\n```"),
    "tensor": ("Give the compiled code inputs of one dtype, device and layout (convert before the call), or "
               "compile one variant per kind on purpose."),
}


class Recompilation(Rule):
    code = "TD405"
    slug = "recompilation"
    title = "torch.compile recompiles in the step"
    rationale = (
        "Compiling costs seconds to minutes. Calling `torch.compile` inside the loop, or feeding shapes and "
        "Python values that change every step, compiles again and again instead of reusing the compiled "
        "graph; after `torch._dynamo.config.recompile_limit` variants the code stops compiling and runs "
        "uncompiled (eager) for every new variant."
    )
    fix = (
        "Compile once before the loop; mark changing sizes dynamic instead of recompiling:\n"
        "```python\nmodel = torch.compile(model, dynamic=True)\nfor x, y in loader:\n    loss = loss_fn(model(x), y)\n```"
    )
    example = "for x, y in loader:\n    out = torch.compile(model)(x)  # compiles every step"

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        info = record.compile
        if info is None:
            return []
        findings = []
        for frame in compiled_frames(info):
            recompiles = frame.recompiles
            limit = frame.limit
            ids = {e.compile_id for e in recompiles}
            inside, measured_s = _measured_share(record, recompiles + [b for b in frame.backward if b.compile_id in ids])
            if not recompiles and limit is None:
                continue
            if limit is None and len(recompiles) < 2 and inside <= 0:
                continue  # one recompile before measuring: Dynamo's automatic dynamic shapes took over
            if limit is None and inside <= 0 and _variants_of_one_step(record, frame, recompiles):
                continue  # one variant per kind of call in a step (an optimizer's per-shape kernel), then reused
            findings.append(self._finding(record, info, frame, recompiles, limit, inside, measured_s))
        return findings

    def _finding(self, record, info, frame, recompiles, limit, inside, measured_s) -> Finding:
        guards = _merge_guards(recompiles)
        main = guards[0] if guards else Guard("other", "a guard")
        name = frame.name()
        # where the recompiling calls came from (an evaluation, a generate()), else the first compile's call
        sites = Counter(str(e.called_from) for e in recompiles if e.called_from is not None)
        top = sites.most_common(1)[0][0] if sites else None
        busiest = next((e for e in recompiles if e.called_from is not None and str(e.called_from) == top), None)
        call = busiest.called_from if busiest is not None else frame.first.called_from
        call_text = busiest.call_text if busiest is not None else frame.first.call_text
        seconds = frame.seconds(recompiles)
        value_from, shapes = _batch_source(record, main)
        value_from = main.value_line or value_from
        plain = [f"{g.subject} changed" + (f" (values seen: {', '.join(g.seen[:8])})" if g.seen else "") for g in guards]
        message = (f"{name} was compiled {len(frame.events)} times: {len(recompiles)} recompiles took "
                   f"{seconds:.1f} s (with their backward graphs), of {frame.seconds(frame.events):.1f} s compiling it. "
                   f"The guard that failed: {'; '.join(plain)}.")
        if value_from is not None and shapes:
            message += f" The training batches change shape ({', '.join(shapes)}): they come from {value_from}."
        elif value_from is not None:
            message += f" The changing value comes from {value_from}."
        if call is not None:
            message += f" Called at {call}" + (f": `{call_text}`." if call_text else ".")
        evidence = {"function": name, "compiles": len(frame.events), "recompiles": len(recompiles),
                    "recompile_s": round(seconds, 3), "guards": [g.raw for g in guards][:4],
                    "plain": plain, "recompile_s_in_measured_steps": round(inside, 3),
                    "value_from": str(value_from) if value_from else None, "batch_shapes": shapes}
        fix = _size_fix(main, frame) if main.kind == "size" else _FIXES.get(main.kind, self.fix)
        if limit is not None:
            evidence.update(limit_step=limit.step, recompile_limit=info.recompile_limit)
            message = (f"{name} hit the recompile limit ({info.recompile_limit or 'torch._dynamo.config.recompile_limit'}) "
                       f"in step {limit.step}: from then on every call that fits none of the compiled variants runs "
                       f"uncompiled (eager). " + message)
            fix = (fix + "\n\nRaising `torch._dynamo.config.recompile_limit` only postpones the fallback and pays "
                   "a compile per new variant.")
            return self.finding(
                title=f"{name} hit the recompile limit: it runs eagerly from step {limit.step}",
                message=message, location=call, evidence=evidence, speedup=None, severity=Severity.HIGH, fix=fix,
                basis=(f"measured: Dynamo's compile events ({len(frame.events)} compiles; the recompiles {seconds:.1f} s) and its "
                       "recompile-limit failure; the eager fallback's cost is not estimated (the compiled and eager "
                       "variants run different calls): `torchdoctor compare` a run with the fix"))
        speedup = amdahl(measured_s, inside) if measured_s > 0 and inside > 0 else None
        if speedup is not None and speedup < MIN_REPORTED_SPEEDUP:
            speedup = None
        # grad mode has two values: its variant compiles once a run, however long, not per step
        once = bool(guards) and all(g.kind == "grad-mode" for g in guards)
        if once:
            speedup = None
        severity = severity_for(speedup) if speedup is not None else Severity.LOW
        basis = ("measured: Dynamo's compile events; a grad-mode variant (an evaluation under `torch.no_grad()`) "
                 "compiles once a run, so its cost does not grow with the run's length" if once else
                 f"measured: {inside:.2f} s of the measured steps' {measured_s:.2f} s were recompiling "
                 "(Dynamo's compile callbacks); removing them is the estimate"
                 if speedup is not None else
                 "measured: Dynamo's compile events; the recompiles fell before the measured steps, so a longer "
                 "run pays them once unless new values keep coming")
        return self.finding(title=f"{name} recompiled {len(recompiles)} times: {plain[0] if plain else 'a guard failed'}",
                            message=message, location=call, evidence=evidence, speedup=speedup, severity=severity,
                            basis=basis, fix=fix)


def _per_measured_step(record: RunRecord, counts: dict[str, int]) -> float | None:
    measured = [s.index for s in record.steps if not s.warmup]
    if not counts or not measured:
        return None
    return sum(counts.get(str(i), 0) for i in measured) / len(measured)


def graphs_per_step(record: RunRecord) -> float | None:
    """Compiled forward graphs a measured step's training ran, its evaluation's apart (None: not counted)."""
    return _per_measured_step(record, record.compile.graph_calls) if record.compile else None


def compiled_calls_per_step(record: RunRecord) -> float | None:
    return _per_measured_step(record, record.compile.compiled_calls) if record.compile else None


def script_compiles(record: RunRecord) -> bool:
    """The script compiled something itself (or the compile knob did)."""
    return bool(record.compile is not None and record.compile.compiled) or any(
        k.name == "compile" and k.applied for k in record.knobs)
