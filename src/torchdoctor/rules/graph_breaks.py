"""Graph breaks at run time (TD406), one finding per cause.

Dynamo's log has one entry per place a graph broke. Many entries can share one cause: a break
Dynamo met inside a nested call and could not resume from makes it skip the whole calling
function ("Failed to handle graph break gracefully": it runs eagerly), so one cause appears once
per function it reaches; a wrapper built in a way Dynamo does not trace (FSDP1 without
`use_orig_params=True`) breaks at every unit; breaks inside an installed library are reached
from one user line. Each group is one finding, at the line to change, with its places listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchdoctor.model.compile_record import GraphBreak as Break
from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.location import Location
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.base import HAZARD_BASIS_CPU, Rule
from torchdoctor.rules.compile import compiled_calls_per_step, graphs_per_step
from torchdoctor.rules.facts import RunFacts

# Dynamo's reason for a function it skipped after a break it could not resume from; the cause
# is the break its detail names.
SKIPPED_FUNCTION = "Failed to handle graph break gracefully"
FSDP_ORIG_PARAMS = "FSDP with use_orig_params=False"
FSDP_ORIG_PARAMS_FIX = (
    "Build the FSDP wrapper with `use_orig_params=True`, which torch.compile needs for an FSDP1 model, or move "
    "to FSDP2 (`fully_shard`), which it traces:\n```python\nmodel = FSDP(model, auto_wrap_policy=policy, "
    "use_orig_params=True)\nmodel = torch.compile(model)\n```"
)
HOST_READ_FIX = (
    "Keep the value a tensor inside the compiled code (or read it outside, every N steps):\n```python\n"
    "scale = x.abs().max()            # a 0-d tensor, no .item(): the graph stays whole\n"
    "return ((x - y) / scale).pow(2).mean()\n```\nOr let Dynamo capture it "
    "(`torch._dynamo.config.capture_scalar_outputs = True`): one graph, still a host sync on a GPU."
)
MAX_PLACES = 6


@dataclass
class _Cause:
    first: Break  # the break that names the cause
    places: list[Break] = field(default_factory=list)  # further breaks of the same cause
    skipped: list[Break] = field(default_factory=list)  # functions Dynamo then ran eagerly

    @property
    def key_detail(self) -> str:
        return self.first.detail or self.first.reason


def _user_key(brk: Break) -> tuple:
    if brk.reason.startswith(FSDP_ORIG_PARAMS):
        return ("fsdp-orig-params",)
    if brk.library and brk.called_from is not None:  # not the user's to change: the call that leads there is
        return ("library", brk.library, str(brk.called_from))
    return ("line", str(brk.location), brk.reason)


def group_breaks(breaks: list[Break]) -> list[_Cause]:
    causes: dict[tuple, _Cause] = {}
    for brk in breaks:
        if brk.reason.startswith(SKIPPED_FUNCTION):
            continue
        key = _user_key(brk)
        if key in causes:
            causes[key].places.append(brk)
        else:
            causes[key] = _Cause(brk)
    for brk in breaks:
        if not brk.reason.startswith(SKIPPED_FUNCTION):
            continue
        # its cause: the break its detail names, or a break in the same library reached from the same line
        key = _user_key(brk)
        root = next((c for c in causes.values() if brk.detail and brk.detail == c.key_detail), None) \
            or causes.get(key)
        if root is not None:
            root.skipped.append(brk)
        else:
            causes[("skipped",) + key[1:]] = _Cause(brk)
    return list(causes.values())


def _where(brk: Break) -> str:
    loc = brk.location
    return f"{loc.path}:{loc.line}" + (f" ({loc.function})" if loc.function and loc.function != "<module>" else "")


def _fsdp_site(record: RunRecord) -> Location | None:
    """Where the fix goes: the `use_orig_params=` the FSDP1 call wrote (open_lm passes a flag there, six lines
    below the call's first line), else the call."""
    dist = record.distributed
    units = [u for u in (dist.fsdp if dist is not None else []) if u.version == 1 and u.created_at is not None]
    for unit in units:
        if unit.use_orig_params_at is not None and unit.use_orig_params is not True:
            return unit.use_orig_params_at
    return units[0].created_at if units else None


class GraphBreak(Rule):
    code = "TD406"
    slug = "graph-break"
    title = "torch.compile splits the step at a graph break"
    rationale = (
        "Where Dynamo cannot trace a line (a `.item()`, a `print`, data-dependent control flow, an "
        "unsupported call) it ends the graph, runs that line in Python and starts another graph: each break "
        "returns to the interpreter, stops fusion across it, and a host read there waits for the device. A "
        "break it cannot resume from makes it run the whole calling function uncompiled."
    )
    fix = (
        "Keep values on the device inside compiled code and move host reads and prints out of it; "
        "`fullgraph=True` lists every break:\n```python\nmodel = torch.compile(model, fullgraph=True)   # "
        "raises at each break, with its line\n```"
    )
    example = "@torch.compile\ndef loss_fn(x, y):\n    scale = x.abs().max().item()   # graph break: a host read\n    return ((x - y) / scale).pow(2).mean()"

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        info = record.compile
        if info is None or not info.breaks:
            return []
        graphs = graphs_per_step(record)
        calls = compiled_calls_per_step(record)
        return [self._finding(record, facts, cause, graphs, calls) for cause in group_breaks(info.breaks)]

    def _finding(self, record, facts, cause: _Cause, graphs, calls) -> Finding:
        brk = cause.first
        fsdp = brk.reason.startswith(FSDP_ORIG_PARAMS)
        where = f"inside {brk.library}" if brk.library else "in your code"
        per_step = (f"; a training step ran {graphs:.0f} compiled graphs" + (f" in {calls:.0f} compiled calls" if calls else "")
                    if graphs else "")
        count = brk.count + sum(b.count for b in cause.places)
        reason = brk.reason if brk.reason.endswith((".", ":", ")")) or not brk.detail else brk.reason + "."
        message = (f"Dynamo broke the graph {where}: {reason}" + (f" {brk.detail}" if brk.detail else "")
                   + f" It broke there in {count} compile" + ("s" if count != 1 else "") + per_step + ".")
        if cause.places:
            shown = [_where(b) for b in [brk, *cause.places]]
            same = (f"Dynamo broke the graph inside {brk.library} {len(shown)} times on the way from that call"
                    if brk.library and not fsdp else f"The same cause broke the graph at {len(shown)} places")
            message += f" {same}: {', '.join(shown[:MAX_PLACES])}" + (
                f" and {len(shown) - MAX_PLACES} more." if len(shown) > MAX_PLACES else ".")
        if cause.skipped:
            shown = [_where(b) for b in cause.skipped]
            message += (f" Dynamo could not resume after it and ran {len(shown)} calling function"
                        + ("s" if len(shown) != 1 else "") + f" uncompiled: {', '.join(shown[:MAX_PLACES])}"
                        + (f" and {len(shown) - MAX_PLACES} more." if len(shown) > MAX_PLACES else "."))
        if brk.called_from is not None:
            message += f" Your line that leads there: {brk.called_from}."
        fix, location = self.fix, brk.location if brk.library is None or brk.called_from is None else brk.called_from
        if fsdp:
            site = _fsdp_site(record)
            location = site or location
            keyword = site is not None and any(u.use_orig_params_at == site for u in record.distributed.fsdp)
            message += ((f" The cause is the `use_orig_params=` the FSDP wrapper's call writes at {site}, false in this "
                         "run" if keyword else " The cause is how the FSDP wrapper was built" + (f" at {site}" if site else ""))
                        + ": FSDP1 without `use_orig_params=True` is not traced by torch.compile.")
            fix = FSDP_ORIG_PARAMS_FIX
        elif brk.host_sync:
            message += (" The break is a host read of a tensor value: the compiled region stops there and, on a GPU, "
                        "the host waits for the device every step.")
            fix = HOST_READ_FIX
        every_step = graphs is not None and graphs >= 2
        severity = Severity.MEDIUM if (brk.library is None and every_step) or fsdp or cause.skipped else Severity.LOW
        basis = ("not estimated: a break costs a return to Python and the fusion across it, which depends on the "
                 "graph; `torchdoctor compare` a run with the fix")
        if brk.host_sync and not facts.cuda_used:
            basis = HAZARD_BASIS_CPU
        title = ("Graph breaks at every FSDP unit: FSDP1 built without use_orig_params=True" if fsdp else
                 f"Graph break{' at a host read' if brk.host_sync else ''}: {brk.reason[:90]}")
        return self.finding(
            title=title, message=message, location=location,
            evidence={"reason": brk.reason, "detail": brk.detail, "compiles": count, "library": brk.library,
                      "graphs_per_step": graphs, "compiled_calls_per_step": calls, "host_sync": brk.host_sync,
                      "break_at": str(brk.location), "places": [str(b.location) for b in cause.places],
                      "functions_run_uncompiled": [str(b.location) for b in cause.skipped]},
            speedup=None, severity=severity, basis=basis, fix=fix)
