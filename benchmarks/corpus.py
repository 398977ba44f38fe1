"""Score torchdoctor on the third-party corpus (benchmarks/corpus/): `run` on every runnable
entry, `lint` on every entry, each finding judged against ground_truth.json.

    .venv/bin/python benchmarks/corpus.py                       # everything, results/corpus.json
    .venv/bin/python benchmarks/corpus.py --only makemore-rnn --skip-lint
    .venv/bin/python benchmarks/corpus.py --src /tmp/wt-baseline/src --out benchmarks/results/corpus-baseline.json

The doctor always runs in a child process (`--python`, default this interpreter) with `--src`
first on PYTHONPATH, so another checkout can be measured; nothing of torchdoctor is imported here.

RULES (also written into the results file)
* run: `python -m torchdoctor run --format json --out RUNDIR SCRIPT ARGS` in the entry's workdir
  with the entry's env (as run_plain.py), the doctor's default options, a wall-clock timeout.
  Diagnosed (a usable diagnosis) = RUNDIR/report.json exists and has measured steps or findings. With --format json the doctor sends the script's stdout
  to stderr (stdout carries the report alone), so the script's output is read from stderr.
* follow (`--follow`): the same command with `run --follow`, so the script runs to its own end
  (no step limit); scored as run (its own recall and precision, tool "follow"). Its changes
  (TD902-TD905) are listed by title, those the report says are the machine's apart: no entry's
  ground truth holds a change partway through, so every other one is read by hand.
* output changed (against the manifest's plain fingerprint) when: stdout is not a single JSON
  document; a line holds a loss line (loss_line_regex without its ^/$ anchors) without matching
  the anchored regex (interleaved or re-formatted); there are more loss lines than the plain run;
  the script ran to its own end (status exited/completed) with a different count; or no line has
  the shape of the plain first line (digits ignored) while loss lines were printed or the script
  ended on its own. Fewer loss lines after the doctor's step-limit stop is NOT a change. A first
  line with the same shape but other numbers is recorded as `values_differ` (not a change:
  unseeded scripts differ from run to run anyway).
* internal error: a Traceback in stderr with a frame in the measured torchdoctor package (the
  doctor removes its frames from the script's own tracebacks, so any left are ours); a report
  note matching `failed to|rule \\w+ failed|internal error|could not|cannot parse|Traceback`, or
  a lint stderr line matching it; or the script crashing (or exiting non-zero) under the doctor although it exits 0 under
  plain python. The doctor's own refusals (`torchdoctor: error: ...`, e.g. no training step
  recognised) are recorded as `doctor_error`, not as internal errors.
* paths: a finding's path (relative to the cwd, or absolute) is made relative to the entry's
  source root (.sources/<owner>__<name>). Findings outside it (torch, site-packages, .deps) or
  without a location are listed apart and count in no precision.
* match: a finding matches a habit when the code family agrees (first 3 characters: TD201 ~ TD204;
  `other:` habits match nothing), the file agrees, and the line is within +-1 of the habit's line
  or one of its alt_lines (for `absence: true` habits any line of the file); of several, the one with
  the same code, then one at a line (not an absence), then a firm one. A finding that
  matches no habit is a `trap` when it lies on a trap's line (any code) or within +-1 of it
  (or an alt_line) with the family of the trap's looks_like; else `unlisted`.
  A habit beats a trap when both apply.
* ranked findings (the precision denominators): every run finding the reports list under
  "Causes, ranked" (high, medium and low) that lies in the entry's repo; for lint every finding
  printed at its default severity (low and above). Info findings (a read the host needs, a scaling
  verdict, a candidate with nothing measured to rank it by) are listed apart, under "Checked, not
  causes" (since 2026-11-28; until then the terminal ranked them with the causes): the precision
  with them counted as ranked is given beside (`*_with_info`), and over high and medium only.
* strict precision = findings matching a non-debatable habit / ranked findings; lenient
  precision = findings matching any habit / ranked findings (duplicates of one habit all count).
* run recall (runnable entries): matched CPU-observable habits / all CPU-observable habits, and
  the same over CPU-observable habits the bounded run reaches. `other:` habits stay in the
  denominators. lint recall (all entries): matched / habits whose category is a code
  `torchdoctor rules` marks [lint] (GPU-only ones included: lint reads source).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shutil
from pathlib import Path
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "benchmarks", "corpus")
NOTE_ERROR = re.compile(r"failed to|rule \w+ failed|internal error|could not|cannot parse|Traceback", re.I)
FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)')


def load(name):
    with open(os.path.join(CORPUS, name)) as f:
        return json.load(f)


def src_root(entry):
    return os.path.join(CORPUS, ".sources", entry["repo"].replace("/", "__"))


def child_env(entry, src_dir):
    def expand(text):
        return (text.replace("{src}", src_root(entry)).replace("{corpus}", CORPUS)
                .replace("{deps}", os.path.join(CORPUS, ".deps")))
    env = dict(os.environ)
    env.update({k: expand(v) for k, v in entry["env"].items()})
    if src_dir:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src_dir, env.get("PYTHONPATH")) if p)
    return env


def doctor_facts(python, src_dir):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (src_dir, os.environ.get("PYTHONPATH")) if p))
    code = "import torchdoctor, torch; print(torchdoctor.__file__); print(torch.__version__)"
    out = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    pkg = os.path.dirname(out[0])
    git = lambda *a: subprocess.run(["git", "-C", pkg, *a], capture_output=True, text=True).stdout.strip()
    rules = subprocess.run([python, "-m", "torchdoctor", "rules"], env=env, capture_output=True, text=True).stdout
    lint_codes = sorted(m.group(1) for m in re.finditer(r"^(TD\d+)\s.*\[[^\]]*\blint\b", rules, re.M))
    return {"torchdoctor_file": out[0], "package_dir": pkg, "torch_version": out[1],
            "commit": git("rev-parse", "HEAD"), "dirty_files": git("status", "--porcelain", "--", ".").splitlines(),
            "lint_codes": lint_codes}


def repo_path(path, entry, cwd):
    """A finding's path relative to the entry's source root, or None when it lies outside."""
    if not path:
        return None
    full = os.path.normpath(path if os.path.isabs(path) else os.path.join(cwd, path))
    rel = os.path.relpath(full, src_root(entry))
    return None if rel.startswith("..") else rel


def judge(code, rel, line, gt):
    """(verdict, ground-truth item) for one finding located in the repo."""
    def near(item, any_line=False):
        return item["file"] == rel and (any_line or line is not None and any(
            abs(line - n) <= 1 for n in [item["line"], *item.get("alt_lines", [])]))
    habits = [h for h in gt["habits"] if not h["category"].startswith("other:")
              and h["category"][:3] == code[:3] and near(h, h.get("absence", False))]
    if habits:  # the closest: the same code before the same family, a line before "anywhere in the file"
        best = min(habits, key=lambda h: (h["category"] != code, bool(h.get("absence")), bool(h.get("debatable"))))
        return ("debatable-habit" if best.get("debatable") else "habit"), best
    traps = [t for t in gt["traps"] if near(t) and (t["looks_like"][:3] == code[:3] or t["line"] == line)]
    return ("trap", traps[0]) if traps else ("unlisted", None)


def output_check(entry, stdout, stderr, status):
    m = entry.get("measured", {})
    lines = stderr.splitlines()
    res = {"stdout_is_json": True, "malformed_lines": [], "loss_lines": None, "plain_loss_lines": m.get("loss_lines"),
           "first_line_seen": None, "values_differ": False}
    try:
        json.loads(stdout)
    except ValueError:
        res["stdout_is_json"] = False
    ran_to_end = status in ("exited", "completed")
    regex = m.get("loss_line_regex")
    if regex:
        loose = re.compile(regex.lstrip("^").rstrip("$"))
        res["loss_lines"] = sum(1 for ln in lines if re.search(regex, ln))
        res["malformed_lines"] = [ln[:160] for ln in lines if loose.search(ln) and not re.search(regex, ln)][:5]
    shape = lambda s: re.sub(r"\d+", "#", s[:120])
    first = m.get("first_line", "")
    if first:
        exact = any(ln[:120] == first for ln in lines)
        shaped = exact or any(shape(ln) == shape(first) for ln in lines)
        res["first_line_seen"] = "exact" if exact else "shape" if shaped else "no"
        res["values_differ"] = shaped and not exact
    n, plain = res["loss_lines"], res["plain_loss_lines"]
    reasons = []
    if not res["stdout_is_json"]:
        reasons.append("stdout is not the JSON report alone")
    if res["malformed_lines"]:
        reasons.append("loss text not at the start of its line / re-formatted")
    if n is not None and plain is not None and (n > plain or (ran_to_end and n != plain)):
        reasons.append(f"{n} loss lines against {plain} plain")
    if res["first_line_seen"] == "no" and (ran_to_end or n):
        reasons.append("no line shaped like the plain first line")
    res["changed"], res["why_changed"] = bool(reasons), reasons
    return res


def our_tracebacks(stderr, pkg):
    found, block = [], None
    for ln in stderr.splitlines() + [""]:
        if ln.startswith("Traceback (most recent call last)"):
            block = []
        elif block is not None:
            frame = FRAME.match(ln)
            if frame:
                block.append(frame.group(1))
            elif not ln.startswith(" "):
                if any(f.startswith(pkg) for f in block):
                    found.append(f"{ln.strip()} (innermost frame {block[-1]})" if block else ln.strip())
                block = None
    return found


def follow_entry(entry, args, facts):
    return run_entry(entry, args, facts, follow=True)


def run_entry(entry, args, facts, follow=False):
    rundir = os.path.join(args.rundirs, entry["id"] + ("-follow" if follow else ""))
    shutil.rmtree(rundir, ignore_errors=True)
    cwd = os.path.join(src_root(entry), entry["workdir"])
    argv = [args.python, "-m", "torchdoctor", "run", *(["--follow"] if follow else []), "--format", "json",
            "--out", rundir] + [
        a.replace("{src}", src_root(entry)) for a in entry["argv"][1:]]
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, cwd=cwd, env=child_env(entry, args.src), capture_output=True, text=True,
                           timeout=args.timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        dec = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        rc, out, err = 124, dec(exc.stdout), dec(exc.stderr)
    seconds = round(time.monotonic() - t0, 1)
    with open(os.path.join(rundir + ".stderr.txt"), "w") as f:
        f.write(err)
    report_path = os.path.join(rundir, "report.json")
    report = load(report_path) if os.path.exists(report_path) else None
    status = report["summary"]["status"] if report and report.get("summary") else None
    errors = [f"traceback: {t}" for t in our_tracebacks(err, facts["package_dir"])]
    if report:
        errors += [f"note: {n}" for n in report.get("notes", []) if NOTE_ERROR.search(n)]
        errors += [f"not_measured {n['code']}: {n['reason']}" for n in report.get("not_measured", [])
                   if NOTE_ERROR.search(n.get("reason", ""))]
    if entry["measured"].get("rc") == 0 and (status == "crashed" or (status == "exited" and rc)):
        errors.append(f"script failed under the doctor only (rc {rc}, status {status}): "
                      + " | ".join(err.strip().splitlines()[-2:]))
    steps = report["summary"].get("steps_total") if status else None
    last = [ln for ln in err.splitlines() if ln.startswith("torchdoctor: error:")]
    row = {"id": entry["id"], "tool": "follow" if follow else "run", "rc": rc, "seconds": seconds,
           "plain_seconds": entry["measured"].get("seconds"), "report_exists": report is not None,
           "diagnosed": bool(report and (steps or report.get("findings"))), "status": status, "steps": steps,
           "doctor_error": last[-1][:300] if last else None, "timed_out": rc == 124,
           "internal_errors": errors, "output": output_check(entry, out, err, status), "run_dir": rundir}
    if follow and report:
        row["changes"] = changes_said(report.get("findings", []))
    return row, (report or {}).get("findings", []), cwd


def changes_said(findings):
    """A followed run's changes (TD902-TD905) by title: those the report says are the machine's (the
    training thread's wait for a CPU covers the added time, or every part of the step slowed alike)
    apart from the others, each of which is read by hand (the corpus marks no change in any script)."""
    changes = [f for f in findings if f["code"] in ("TD902", "TD903", "TD904", "TD905")]
    machine = lambda f: f["evidence"].get("busy_machine") or f["evidence"].get("slowed_alike")  # noqa: E731
    return {"machine": [f"{f['code']} {f['severity']}: {f['title']}" for f in changes if machine(f)],
            "script": [f"{f['code']} {f['severity']}: {f['title']}" for f in changes if not machine(f)]}


def lint_entry(entry, args, facts):
    files = [f for f in entry["files"] if f.endswith(".py")]
    files = [entry["script"]] + [f for f in files if f != entry["script"]]
    p = subprocess.run([args.python, "-m", "torchdoctor", "lint", "--format", "json", *files], cwd=src_root(entry),
                       env=child_env(entry, args.src), capture_output=True, text=True, timeout=args.timeout)
    try:
        findings = json.loads(p.stdout)
    except ValueError:
        findings = []
    # lint prints its problems (unparsable file, a check's internal error) on stderr
    errors = our_tracebacks(p.stderr, facts["package_dir"]) + [
        ln for ln in p.stderr.splitlines() if NOTE_ERROR.search(ln)]
    row = {"id": entry["id"], "tool": "lint", "rc": p.returncode, "files": files, "internal_errors": errors,
           "stderr": p.stderr.strip()[-1000:]}
    return row, findings, src_root(entry)


def verdicts(entry, tool, findings, cwd, gt, others):
    rows = []
    for f in findings:
        loc = f.get("location") or {}
        rel = repo_path(loc.get("path"), entry, cwd)
        row = {"entry": entry["id"], "tool": tool, "code": f["code"], "severity": f["severity"],
               "title": f.get("title", ""), "file": rel or loc.get("path"), "line": loc.get("line")}
        if rel is None:
            row["verdict"], row["item"] = "elsewhere" if loc else "no-location", None
        else:
            row["verdict"], item = judge(f["code"], rel, loc.get("line"), gt)
            row["item"] = item and {k: item[k] for k in ("file", "line", "category", "looks_like") if k in item}
            if row["verdict"] == "unlisted":  # same file in another entry (lint reads every --type's code)
                row["habit_of_other_entry"] = [o for o, g in others if judge(f["code"], rel, loc.get("line"), g)[0]
                                               in ("habit", "debatable-habit")]
        rows.append(row)
    return rows


def matched(habit, verdict_rows, entry_id, tool):
    return any(v["entry"] == entry_id and v["tool"] == tool and v["item"] and v["verdict"] != "trap"
               and v["item"]["file"] == habit["file"] and v["item"]["line"] == habit["line"]
               and v["item"]["category"] == habit["category"] for v in verdict_rows)


def ratio(a, b):
    return {"value": round(a / b, 3) if b else None, "num": a, "den": b}


def totals(tool, entries, gt, vrows, rows, lint_codes):
    ids = {e["id"] for e in entries}
    listed = [v for v in vrows if v["tool"] == tool and v["entry"] in ids and v["verdict"] not in ("elsewhere", "no-location")]
    ranked = [v for v in listed if v["severity"] != "info"]  # info is listed apart: "Checked, not causes"
    strong = [v for v in ranked if v["severity"] in ("high", "medium")]
    good = lambda vs, ok: sum(v["verdict"] in ok for v in vs)
    t = {"ranked_findings": len(ranked), "info_findings": len(listed) - len(ranked),
         "outside_repo_or_no_location": sum(v["tool"] == tool and v["entry"] in ids for v in vrows) - len(listed),
         "strict_precision": ratio(good(ranked, ("habit",)), len(ranked)),
         "lenient_precision": ratio(good(ranked, ("habit", "debatable-habit")), len(ranked)),
         "strict_precision_with_info": ratio(good(listed, ("habit",)), len(listed)),
         "lenient_precision_with_info": ratio(good(listed, ("habit", "debatable-habit")), len(listed)),
         "strict_precision_high_medium": ratio(good(strong, ("habit",)), len(strong)),
         "lenient_precision_high_medium": ratio(good(strong, ("habit", "debatable-habit")), len(strong))}
    habits = [(e["id"], h) for e in entries for h in gt[e["id"]]["habits"]]
    hit = lambda hs: ratio(sum(matched(h, vrows, i, tool) for i, h in hs), len(hs))
    if tool in ("run", "follow"):
        cpu = [(i, h) for i, h in habits if h["observable_on_cpu"]]
        t["recall_cpu_observable"] = hit(cpu)
        t["recall_cpu_observable_reached"] = hit([(i, h) for i, h in cpu if h["reached"]])
        t["recall_cpu_observable_no_other"] = hit([(i, h) for i, h in cpu if not h["category"].startswith("other:")])
        t["diagnosed"] = ratio(sum(r["diagnosed"] for r in rows), len(rows))
        t["changed_outputs"] = sum(r["output"]["changed"] for r in rows)
        t["values_differ"] = sum(r["output"]["values_differ"] for r in rows)
    else:
        t["recall"] = hit([(i, h) for i, h in habits if h["category"] in lint_codes])
    t["entries_with_internal_errors"] = sum(bool(r["internal_errors"]) for r in rows)
    t["missed"] = [{"entry": i, "category": h["category"], "where": f"{h['file']}:{h['line']}",
                    "reached": h["reached"], "observable_on_cpu": h["observable_on_cpu"],
                    "debatable": h.get("debatable", False)}
                   for i, h in habits if not matched(h, vrows, i, tool)
                   and (h["observable_on_cpu"] if tool in ("run", "follow") else h["category"] in lint_codes)]
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="entry ids")
    ap.add_argument("--jobs", type=int, default=1, help="entries at once (1 for timing)")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "corpus.json"))
    ap.add_argument("--skip-run", action="store_true")
    ap.add_argument("--skip-lint", action="store_true")
    ap.add_argument("--follow", action="store_true", help="also `run --follow` every runnable entry to its own end "
                                                           "(tool \"follow\", scored as run)")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the doctor")
    ap.add_argument("--src", help="put this folder first on PYTHONPATH (another checkout's src/)")
    ap.add_argument("--timeout", type=float, default=240, help="seconds per doctor command")
    ap.add_argument("--rundirs", help="where run directories go (default: a new folder under /tmp)")
    ap.add_argument("--rescore", metavar="RESULTS", help="re-judge a results file's findings by today's rules "
                                                         "(no doctor run); writes --out")
    args = ap.parse_args()
    if args.rescore:
        return rescore(args.rescore, args.out)
    args.src = os.path.abspath(args.src) if args.src else None
    args.rundirs = args.rundirs or tempfile.mkdtemp(prefix="torchdoctor-corpus-")
    manifest, gt = load("manifest.json"), load("ground_truth.json")["entries"]
    entries = [e for e in manifest["entries"] if not args.only or e["id"] in args.only]
    facts = doctor_facts(args.python, args.src)
    print(f"torchdoctor: {facts['torchdoctor_file']} @ {facts['commit'][:10]}"
          f"{' (dirty)' if facts['dirty_files'] else ''}; run dirs in {args.rundirs}", flush=True)
    load_before, started = os.getloadavg(), time.time()
    jobs = [(run_entry, e) for e in entries if e["kind"] == "runnable" and not args.skip_run]
    jobs += [(follow_entry, e) for e in entries if e["kind"] == "runnable" and args.follow]
    jobs += [(lint_entry, e) for e in entries if not args.skip_lint]

    def one(job):
        fn, entry = job
        row, findings, cwd = fn(entry, args, facts)
        others = [(e["id"], gt[e["id"]]) for e in manifest["entries"]
                  if e["repo"] == entry["repo"] and e["id"] != entry["id"]]
        vs = verdicts(entry, row["tool"], findings, cwd, gt[entry["id"]], others)
        extra = f"{row['seconds']:6.1f}s status={row['status']}" if row["tool"] != "lint" else ""
        print(f"{row['tool']:4s} {entry['id']:28s} rc={row['rc']:<3} {extra} findings={len(vs)} "
              f"errors={len(row['internal_errors'])}", flush=True)
        return row, vs

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        done = list(pool.map(one, jobs))
    rows = [r for r, _ in done]
    vrows = [v for _, vs in done for v in vs]
    result = {
        "date": _dt.datetime.now().isoformat(timespec="seconds"), "seconds": round(time.time() - started),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        "torchdoctor": facts, "command": sys.argv, "jobs": args.jobs, "timeout_s": args.timeout,
        "rules": __doc__.split("RULES (also written into the results file)")[1].strip(),
        "entries": rows, "verdicts": vrows, "totals": {}}
    for tool, skip in (("run", args.skip_run), ("follow", not args.follow), ("lint", args.skip_lint)):
        if not skip:
            chosen = [e for e in entries if tool == "lint" or e["kind"] == "runnable"]
            result["totals"][tool] = totals(tool, chosen, gt, vrows, [r for r in rows if r["tool"] == tool],
                                            facts["lint_codes"])
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print_summary(result)
    print(f"\nwritten: {args.out}")


def rescore(path, out):
    """The same findings judged by the current rules, so results written before a rule change
    compare with those after (the baseline keeps its own file; this writes another)."""
    result = json.loads(Path(path).read_text())
    manifest, gt = load("manifest.json"), load("ground_truth.json")["entries"]
    by_id = {e["id"]: e for e in manifest["entries"]}
    for v in result["verdicts"]:
        if v["verdict"] in ("elsewhere", "no-location"):
            continue
        v["verdict"], v["item"] = judge(v["code"], v["file"], v["line"], gt[v["entry"]])
    ids = {r["id"] for r in result["entries"]}
    for tool in list(result["totals"]):
        chosen = [by_id[i] for i in ids if tool == "lint" or by_id[i]["kind"] == "runnable"]
        result["totals"][tool] = totals(tool, chosen, gt, result["verdicts"],
                                        [r for r in result["entries"] if r["tool"] == tool],
                                        result["torchdoctor"]["lint_codes"])
    result["rescored"] = {"from": os.path.relpath(path, ROOT), "rules": __doc__.split(
        "RULES (also written into the results file)")[1].strip()}
    Path(out).write_text(json.dumps(result, indent=1) + "\n")
    print_summary(result)
    print(f"\nwritten: {out}")


def print_summary(result):
    fmt = lambda r: "-" if r["value"] is None else f"{r['value']:.2f} ({r['num']}/{r['den']})"
    print(f"\n{'entry':28s} {'rc':>3s} {'sec':>6s} {'plain':>5s} {'status':12s} diag changed errors")
    for r in result["entries"]:
        if r["tool"] != "lint":
            print(f"{r['tool'][:3]} {r['id']:24s} {r['rc']:3d} {r['seconds']:6.1f} {r['plain_seconds'] or 0:5.1f} "
                  f"{str(r['status']):12s} {'yes' if r['diagnosed'] else 'NO':4s} "
                  f"{'YES' if r['output']['changed'] else 'no':7s} {len(r['internal_errors'])}"
                  f"{'  ' + r['doctor_error'][:60] if r['doctor_error'] else ''}")
        for e in r["internal_errors"]:
            print(f"   {r['tool']} internal error: {e[:200]}")
        for kind, titles in (r.get("changes") or {}).items():
            for title in titles:
                print(f"   change said to be the {'machine' if kind == 'machine' else 'script'}'s: {title[:150]}")
    for tool, t in result["totals"].items():
        print(f"\n{tool}: " + ", ".join(f"{k} {fmt(v)}" for k, v in t.items() if isinstance(v, dict)))
        print("   " + ", ".join(f"{k} {v}" for k, v in t.items() if isinstance(v, int)))
    print(f"\n{'tool':4s} {'entry':28s} {'code':6s} {'severity':8s} {'verdict':16s} where")
    for v in result["verdicts"]:
        if v["verdict"] != "habit":
            print(f"{v['tool']:4s} {v['entry']:28s} {v['code']:6s} {v['severity']:8s} {v['verdict']:16s} "
                  f"{v['file']}:{v['line']}  {v['title'][:70]}")


if __name__ == "__main__":
    main()
