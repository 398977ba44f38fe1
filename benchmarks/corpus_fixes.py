#!/usr/bin/env python3
"""Does the doctor's fix hold on third-party code? `tune` on the corpus findings nobody vouched for.

The corpus score (benchmarks/corpus.py) judges each ranked `run` finding against ground truth
written before the doctor ran. A finding the ground truth does not list (`unlisted`), lists as
debatable, or calls a trap counts against strict precision whatever the script does. This
benchmark asks the script instead: for every runnable entry with such a finding, it runs
`torchdoctor tune` (a baseline, the knobs the baseline's findings suggest, the baseline again)
in the entry's working directory and environment, and keeps, per trial, the measured ratio,
whether it is beyond the run-to-run noise of the two baselines, and whether the script's losses
stayed within the knob's tolerance. It never changes the corpus score: it is evidence beside it.

    .venv/bin/python benchmarks/corpus_fixes.py                          # results/corpus_fixes.json
    .venv/bin/python benchmarks/corpus_fixes.py --only jcjohnson-optim --out /tmp/f.json

A finding counts as
* confirmed: a trial for its rule code ran, its gain is beyond the noise band and the losses are
  within the knob's tolerance (or the unseeded script's own repeat differs as much);
* not confirmed: a trial ran and the gain is inside the noise band, or the losses moved beyond it;
* no trial: the finding's fix is a code change no knob can try (a loop, a sync); it stays a
  judgement, written in the closing note.
Timing is only as good as the machine: the load average before and after each entry, and the
tune's own busy-machine warning, are written beside each result.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.corpus import ROOT, child_env, load, src_root  # noqa: E402

# a finding the ground truth vouches for needs no second opinion
VOUCHED = ("habit",)


def questioned(results: dict) -> dict[str, list[dict]]:
    """Ranked run findings (not info) whose verdict is not a plain habit, by entry id."""
    out: dict[str, list[dict]] = {}
    for v in results["verdicts"]:
        if v["tool"] == "run" and v["severity"] != "info" and v["verdict"] not in VOUCHED and v["file"]:
            out.setdefault(v["entry"], []).append(
                {k: v[k] for k in ("code", "severity", "verdict", "file", "line", "title")})
    return out


def numerics_rows(tune: dict) -> dict[str, dict]:
    """The tune's numerics table as {run: {verdict, detail}}."""
    for table in tune.get("tables", []):
        if table.get("title", "").startswith("Numerics"):
            cols = table["columns"]
            return {row[0]: {"losses": row[cols.index("losses")], "detail": row[cols.index("detail")]}
                    for row in table["rows"]}
    return {}


def tune_entry(entry: dict, args) -> dict:
    out_dir = os.path.join(args.tunedirs, entry["id"])
    shutil.rmtree(out_dir, ignore_errors=True)
    argv = [args.python, "-m", "torchdoctor", "tune", "--format", "json", "--out", out_dir,
            "--budget", str(args.budget)] + [a.replace("{src}", src_root(entry)) for a in entry["argv"][1:]]
    load_before, t0 = os.getloadavg(), time.monotonic()
    try:
        p = subprocess.run(argv, cwd=os.path.join(src_root(entry), entry["workdir"]), env=child_env(entry, args.src),
                           capture_output=True, text=True, timeout=args.timeout)
        rc, stdout, stderr = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        rc, stdout, stderr = 124, "", "timed out"
    row = {"seconds": round(time.monotonic() - t0, 1), "rc": rc,
           "load_average_before": [round(x, 2) for x in load_before],
           "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    try:
        tune = json.loads(stdout)
        with open(os.path.join(out_dir, "estimates.json")) as f:
            estimates = json.load(f)
    except (ValueError, OSError):
        row["error"] = " | ".join(stderr.strip().splitlines()[-2:])[:400]
        return row
    numerics = numerics_rows(tune)
    row["busy_machine"] = [w[:200] for w in tune.get("warnings", []) if "Busy machine" in w]
    row["baseline_repeat_losses"] = numerics.get("baseline (repeat)", {}).get("losses")
    row["trials"] = [dict(e, losses=numerics.get(e["trial"], {}).get("losses"),
                          losses_detail=numerics.get(e["trial"], {}).get("detail")) for e in estimates]
    return row


def outcome(finding: dict, row: dict) -> str:
    trials = [t for t in row.get("trials", []) if t.get("code") == finding["code"] and t.get("measured")]
    if not trials:
        return "no trial"
    # an unseeded script's repeated baseline differs too: its losses cannot tell a knob's effect
    unseeded = row.get("baseline_repeat_losses") in ("CHANGED", "differs")
    for t in trials:
        losses_ok = t["losses"] in (None, "bit-identical", "within tolerance") or unseeded
        if t["significant"] and t["measured"] > 1 and losses_ok:
            return "confirmed"
    return "not confirmed"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results", "corpus.json"),
                    help="a corpus.py results file: which findings to question")
    ap.add_argument("--only", nargs="*", help="entry ids")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "corpus_fixes.json"))
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the doctor")
    ap.add_argument("--src", help="put this folder first on PYTHONPATH (another checkout's src/)")
    ap.add_argument("--budget", type=float, default=120, help="seconds for one entry's whole tune")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per tune command")
    ap.add_argument("--tunedirs", help="where tune directories go (default: a new folder under /tmp)")
    args = ap.parse_args()
    args.src = os.path.abspath(args.src) if args.src else None
    args.tunedirs = args.tunedirs or tempfile.mkdtemp(prefix="torchdoctor-corpus-fixes-")
    with open(args.results) as f:
        asked = questioned(json.load(f))
    entries = {e["id"]: e for e in load("manifest.json")["entries"] if e["kind"] == "runnable"}
    chosen = [i for i in asked if i in entries and (not args.only or i in args.only)]
    started, rows, tally = time.time(), {}, {}
    for entry_id in chosen:
        row = tune_entry(entries[entry_id], args)
        row["findings"] = [dict(f, outcome=outcome(f, row)) for f in asked[entry_id]]
        rows[entry_id] = row
        for f in row["findings"]:
            tally.setdefault(f["code"], {}).setdefault(f["outcome"], 0)
            tally[f["code"]][f["outcome"]] += 1
        print(f"{entry_id:28s} {row['seconds']:6.1f}s load {row['load_average_after'][0]:.1f}  "
              + "; ".join(f"{f['code']} {f['outcome']}" for f in row["findings"]), flush=True)
    result = {"date": _dt.datetime.now().isoformat(timespec="seconds"), "seconds": round(time.time() - started),
              "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version()},
              "results_questioned": os.path.relpath(args.results, ROOT), "command": sys.argv,
              "method": __doc__.split("A finding counts as")[1].strip(), "by_code": tally, "entries": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
