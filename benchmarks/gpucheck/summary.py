"""SUMMARY.md of a GPU check: the device, the date, what passed, every number each step
measured, and what was skipped and why. Rendered from the work folder after every step, so
a run cut short still says how far it got. A result that cannot be read is said so, never
filled in."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

HONESTY = ("Evidence from one run of `python3 dev.py gpu`. Every number below is what this run measured on this "
           "machine; nothing beyond these numbers is claimed.")
REHEARSAL = ("**CPU rehearsal: no GPU was used.** This proves the orchestration (budgets, results, packing) only; "
             "nothing here is GPU evidence, and `--unpack` refuses it for the project.")


def _json(work: Path, name: str) -> dict:
    return json.loads((work / name).read_text())


def _cell(value) -> str:
    return "—" if value is None or value == "" else str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(_cell(v) for v in row) + " |" for row in rows)]


def junit(path: Path) -> tuple[dict, list[list]]:
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    rows = []
    for case in suite.iter("testcase"):
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                outcome, message = kind, (node.get("message") or "").splitlines()[0][:200] if node.get("message") else ""
        rows.append([case.get("name"), outcome, case.get("time"), message])
    return counts, rows


def _tests(work: Path, xml: str) -> list[str]:
    counts, rows = junit(work / xml)
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return [f"{counts['tests']} tests: {passed} passed, {counts['failures']} failed, {counts['errors']} errors, "
            f"{counts['skipped']} skipped.", "", *_table(["test", "outcome", "seconds", "message"], rows)]


def _install(work: Path) -> list[str]:
    r = _json(work, "install.json")
    lines = [f"- wheels: {', '.join(r['wheels']) or 'none'} (installed: {r['wheels_installed']})",
             f"- torchdoctor: {r['torchdoctor']}", f"- PYTHONPATH of the later steps: {', '.join(r['pythonpath'])}"]
    lines += [f"- import {k}: {v}" for k, v in r.get("imports", {}).items()]
    return lines + [f"- note: {n}" for n in r["notes"]]


def _machine(work: Path) -> list[str]:
    m = _json(work, "machine.json")
    pk = m.get("packages", {})
    return [f"- {name}: " + (f"{p['version']} ({p['from']})" if p.get("ok") else f"NOT IMPORTABLE: {p.get('error')}")
            for name, p in pk.items()]


def _accuracy(work: Path) -> list[str]:
    a = _json(work, "accuracy.json")
    rows = [[r["example"], r["status"], f"{len(r['found'])}/{len(r['expected'])}" if "found" in r else None,
             ", ".join(r.get("false_positives", [])), "; ".join(r.get("findings", [])) or r.get("error")]
            for r in a["rows"]]
    return [f"Planted causes found at their line as high/medium: {a['found']}/{a['planted_causes']}; high/medium false "
            f"positives: {a['false_positives']}; complete: {a.get('complete', True)}.", "",
            *_table(["example", "status", "found", "false positives", "findings (code@line:severity:estimate)"], rows)]


def _overhead(work: Path) -> list[str]:
    return [f"- {k}: {v}" for k, v in _json(work, "overhead.json").items()]


def _tune(work: Path) -> list[str]:
    t = _json(work, "tune.json")
    lines = [f"{t['method']}; complete: {t['complete']}."]
    for r in t["rows"]:
        lines += ["", f"**{r['example']}**"]
        if "skipped" in r or "error" in r:
            lines.append(f"- {r.get('skipped') or r.get('error')}")
            continue
        lines.append(f"- baseline findings: {', '.join(r['baseline_findings']) or 'none'}; trials the tune would plan "
                     f"itself: {', '.join(r['planned_by_findings']) or 'none'}; baseline drift: {r['baseline_drift']}")
        lines += [""] + _table(["trial", "tests", "speedup", "noise (95 %)", "significant", "seconds", "error"],
                               [[x["trial"], ", ".join(x["tests"]), x["speedup"], x["noise"], x["significant"],
                                 x["seconds"], x["error"]] for x in r["trials"]])
        if r["estimates"]:
            lines += ["", *_table(["finding", "where", "trial", "estimated", "measured", "agreement", "within tolerance"],
                                  [[e["finding"], e["where"], e["trial"], e["estimated"], e["measured"], e["agreement"],
                                    e["within_tolerance"]] for e in r["estimates"]])]
        lines += [""] + [f"- skipped trial: {s}" for s in r["skipped_trials"]]
    return lines


def _demo(work: Path) -> list[str]:
    d = _json(work, "demo.json")
    lines = [f"{d['method']}; pairs compared: {d.get('pairs', 0)}; complete: {d['complete']}."]
    lines += [f"- run {r['script']}: {'ok' if r['ok'] else 'FAILED: ' + str(r['error'])} ({r['seconds']} s)"
              for r in d["runs"]] or ["- no run had finished"]
    if "measured" in d:
        ref = d["reference"]
        lines += [f"- the doctor's estimate for the loop (TD301): {d['loop_estimate']} (per run: "
                  f"{d['loop_estimates_per_run']})",
                  f"- measured, original -> fixed: {d['measured']['describe']}; median step {d['step_ms']['original']} ms"
                  f" -> {d['step_ms']['fixed']} ms; CUDA used: {d['cuda_used']}",
                  f"- reference: {ref['speedup']}x on an {ref['device']} ({ref['source']})", "",
                  *_table(["finding", "line", "severity", "estimate", "basis"],
                          [[f["code"], f["line"], f["severity"], f["estimated_speedup"], f["estimate_basis"]]
                           for f in d["findings"]])]
    return lines


def _fixtures(work: Path) -> list[str]:
    meta = _json(work, "fixtures/meta.json")
    lines = [f"Tags: {json.dumps(meta['tags'])}", "",
             *_table(["file", "KB", "what"], [[n, f"{f['bytes'] / 1024:.1f}", f["what"]] for n, f in meta["files"].items()])]
    return lines + [""] + [f"- not recorded: {n}: {why}" for n, why in meta["skipped"].items()]


def _memory(work: Path) -> list[str]:
    m = _json(work, "memory.json")
    device = m.get("device") or {}
    lines = [f"`torchdoctor memory {m['limit']}` on {m['example']}: complete {m['complete']}; predicted largest "
             f"batch {m.get('predicted_max_batch')}, verified {m.get('verified_max_batch')} (search step "
             f"{m.get('search_step')}); kept free {m.get('headroom_bytes')} bytes ({m.get('headroom_basis')})."]
    lines += [f"- {k}: {v}" for k, v in device.items()]
    rows = [[t["batch_size"], t["outcome"], t["peak_bytes"], t["device_peak_bytes"], t["samples_per_s"], t["detail"]]
            for t in m.get("trials", [])]
    return lines + ["", *_table(["batch", "outcome", "tensor peak", "reserved peak", "samples/s", "detail"], rows)]


DIGESTS = {"install": _install, "memory": _memory, "machine": _machine, "gpu-tests": lambda w: _tests(w, "gpu-tests.xml"),
           "accuracy": _accuracy, "overhead": _overhead, "tune": _tune, "demo": _demo, "fixtures": _fixtures,
           "fixture-twins": lambda w: _tests(w, "fixture-twins.xml")}


def _digest(name: str, work: Path) -> list[str]:
    try:
        return DIGESTS[name](work)
    except FileNotFoundError:
        return ["No result file was written."]
    except Exception as exc:  # a partial or unexpected file: say so, never guess
        return [f"Its result could not be read: {type(exc).__name__}: {exc}"]


def _machine_rows(work: Path, state) -> list[list]:
    try:
        m = _json(work, "machine.json")
    except (OSError, ValueError):
        return [["machine", "machine.json was not written"]]
    prepared = m.get("prepared") or {}
    device = (f"{m['device_name']} (compute capability {m.get('compute_capability')}, {m.get('multiprocessors')} SMs, "
              f"{(m.get('device_memory_bytes') or 0) / 2**30:.1f} GiB)" if m.get("device_name")
              else "no CUDA device (torch.cuda.is_available() is False)")
    return [["device", device],
            ["driver / CUDA / cuDNN / NCCL", f"{m.get('driver')} / {m.get('cuda')} / {m.get('cudnn')} / {m.get('nccl')}"],
            ["torch / Python", f"{m.get('torch')} / {m.get('python')} ({m.get('executable')})"],
            ["torchdoctor commit", f"{prepared.get('commit')} (wheels prepared {prepared.get('prepared_at')}; "
                                   f"uncommitted changes then: {prepared.get('uncommitted_changes')})"],
            ["CPU cores / platform", f"{m.get('cpu_count')} / {m.get('platform')}"]]


def _quiet(read, default):
    try:
        return read()
    except Exception:  # unreadable results are reported in their own section
        return default


def skipped(state, work: Path) -> list[str]:
    """Every step, example, trial, test and fixture that did not run, grouped by reason."""
    items = [("step", s.name, s.reason) for s in state.steps if s.status == "skipped"]
    acc = _quiet(lambda: _json(work, "accuracy.json")["rows"], [])
    items += [("accuracy", r["example"], r["status"]) for r in acc if "found" not in r]
    for r in _quiet(lambda: _json(work, "tune.json")["rows"], []):
        items += [("tune", r["example"], r["skipped"])] if "skipped" in r else []
        items += [("tune", f"{r['example']}, trial {t.split(' (')[0]}", t.partition(" (")[2].rstrip(")"))
                  for t in r.get("skipped_trials", [])]
    for name, xml in (("gpu-tests", "gpu-tests.xml"), ("fixture-twins", "fixture-twins.xml")):
        items += [(name, r[0], r[3]) for r in _quiet(lambda: junit(work / xml)[1], []) if r[1] == "skipped"]
    meta = _quiet(lambda: _json(work, "fixtures/meta.json"), {})
    items += [("fixture", n, why) for n, why in meta.get("skipped", {}).items()]
    grouped: dict[tuple[str, str], list[str]] = {}
    for group, what, reason in items:
        grouped.setdefault((group, reason), []).append(what)
    return [f"- {group}: {', '.join(whats)}: {reason}" for (group, reason), whats in grouped.items()] or ["- nothing"]


def render(state, work: Path, files: list[Path]) -> str:
    lines = [f"# GPU check: {state.tag}", "", REHEARSAL if state.rehearsal else HONESTY, ""]
    if not state.finished:
        lines += [f"**Incomplete:** written after {len(state.steps)} of the steps; the run had not finished.", ""]
    if getattr(state, "not_selected", None):
        lines += [f"**A rerun of some steps** (`--steps`); not run this time: {', '.join(state.not_selected)}.", ""]
    lines += _table(["", ""], [["started", state.started_at], *_machine_rows(work, state),
                               ["time", f"{state.seconds:.0f} s of the {state.total_budget_s:.0f} s allowed"]])
    lines += ["", "## Steps", "", *_table(["step", "status", "seconds / budget", "why"],
                                          [[s.name, s.status, f"{s.seconds:.1f} / {s.budget_s:.0f}", s.reason]
                                           for s in state.steps])]
    for s in state.steps:
        lines += ["", f"## {s.name}: {s.status}", "", s.title + ".", ""]
        lines += [f"Skipped: {s.reason}."] if s.status == "skipped" else _digest(s.name, work)
        if s.log_tail:
            lines += ["", f"End of its log ({s.reason}):", "", "```", s.log_tail, "```"]
    lines += ["", "## Skipped, and why", "", *skipped(state, work)]
    lines += ["", "## Files in this bundle", "", *(f"- {p.name}" for p in files)]
    return "\n".join(lines) + "\n"
