"""Evidence added to a record once the script has ended: what `lint` says about the code the
run executed, and the analysis of the profiler window's trace.

Both are stored in the record, so `torchdoctor report RUN_DIR` needs neither the script nor
the trace again. Both are a bonus: a failure becomes a probe note and the run is kept.

Only code that ran counts: a file is linted when one of its functions was seen running (stack
samples, probe call sites) or it is the script, and a finding is kept when it is at module
level or inside a function that ran. A large library's unused model files are imported, not
executed: their findings would only be noise, and linting them costs seconds. One exception:
a function the training loop calls (directly or through the user's own functions) that the
bounded run did not reach (the evaluation at the end of an epoch, the checkpoint at step
1,000) keeps its findings, marked as not reached.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from torchdoctor.model.paths import recorded_path
from torchdoctor.model.record import ProbeNote, RunRecord, StaticFinding

MODULE_LEVEL = "<module>"


def add_evidence(record: RunRecord, run_dir: Path) -> None:
    try:
        record.static_findings = lint_executed(record)
    except Exception as exc:  # the static cross-check is a bonus; never lose the run for it
        record.probe_notes.insert(0, ProbeNote("lint", f"could not lint the executed files: {type(exc).__name__}: {exc}"))
    if record.trace_file:
        try:
            from torchdoctor.trace import analyze_trace_files  # the parser loads only for runs that saved one

            record.trace = analyze_trace_files([run_dir / record.trace_file])
        except Exception as exc:  # the trace is a bonus; the file stays for `torchdoctor trace`
            record.probe_notes.append(ProbeNote(
                "profiler", f"could not analyse {record.trace_file}: {type(exc).__name__}: {exc}"))


def lint_executed(record: RunRecord) -> list[StaticFinding]:
    from torchdoctor.lint.api import lint_files  # imported late: plain runs need no linter until here

    ran = executed_functions(record)
    script = recorded_path(record.run.script, record.run.cwd) if record.run.script.endswith(".py") else None
    files = [f for f in record.source_files if f in ran or f == script]
    ahead = called_from_the_loop(record, files)
    found = []
    for f in lint_files([Path(p) for p in files]):
        if f.location is None:
            continue
        path = recorded_path(f.location.path, record.run.cwd)
        function = f.location.function or MODULE_LEVEL
        reached = function == MODULE_LEVEL or function in ran.get(path, ())
        if not reached and function not in ahead.get(path, ()):
            continue  # inside a function the program never called
        found.append(StaticFinding(f.code, f.slug, f.severity.value, path, f.location.line, f.message, reached))
    return found


def executed_functions(record: RunRecord) -> dict[str, set[str]]:
    """Absolute path -> names of the functions seen running there (the last part of each
    qualified name, as the linter names the function around a line)."""
    ran: dict[str, set[str]] = defaultdict(set)
    for entry in record.functions_seen:
        path, _, qualname = entry.rpartition("::")
        ran[path].add(qualname.rsplit(".", 1)[-1])
    for location in _probe_locations(record):
        ran[recorded_path(location.path, record.run.cwd)].add(location.function.rsplit(".", 1)[-1])
    return ran


def _probe_locations(record: RunRecord):
    for loader in record.loaders:
        yield from (loc for loc in (loader.created_at, loader.iterated_at) if loc)
    for opt in record.optimizers:
        yield from (loc for loc in (opt.created_at, opt.step_location, opt.zero_grad_location) if loc)
    for phase in record.phases:
        yield from (loc for loc in (phase.location, phase.inner_location) if loc)
    yield from (site.location for site in record.dispatch.sites if site.location.line)
    yield from (call.location for call in record.dispatch.api_calls)
    yield from (hits.location for hits in record.line_profile.lines)


MAX_CALL_DEPTH = 4  # the loop -> evaluate() -> compute_metrics() -> ...: deeper is rarely per interval


def called_from_the_loop(record: RunRecord, files: list[str]) -> dict[str, set[str]]:
    """Absolute path -> names of the user's functions the training loop's function calls, by
    name, through its own functions (a static call graph of the executed files: a name that
    two files define counts in both)."""
    loop = record.run.loop_location
    if loop is None:
        return {}
    defs: dict[str, list[tuple[str, ast.AST]]] = defaultdict(list)
    trees = {}
    for path in files:
        try:
            trees[path] = ast.parse(Path(path).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(trees[path]):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs[node.name].append((path, node))
    start_path = recorded_path(loop.path, record.run.cwd)
    name = loop.function.rsplit(".", 1)[-1]
    frontier = [node for p, node in defs.get(name, []) if p == start_path]
    if name == MODULE_LEVEL and start_path in trees:
        frontier = [trees[start_path]]
    found: dict[str, set[str]] = defaultdict(set)
    for _ in range(MAX_CALL_DEPTH):
        called = {_call_name(c.func) for node in frontier for c in ast.walk(node) if isinstance(c, ast.Call)}
        frontier = []
        for callee in called - {""}:
            for path, node in defs.get(callee, []):
                if callee not in found[path]:
                    found[path].add(callee)
                    frontier.append(node)
        if not frontier:
            break
    return found


def _call_name(func: ast.AST) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
