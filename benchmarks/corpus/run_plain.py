#!/usr/bin/env python3
"""Run the corpus's runnable entries with plain python (no torchdoctor).

Each entry runs in its workdir under .sources/, with the manifest's env and
argv ('python' is this interpreter).  The script prints the wall seconds and
checks the stdout fingerprint recorded in the manifest (line count and the
number of lines matching loss_line_regex), so a later run, e.g. under the
doctor, can be compared with the plain one.

    python benchmarks/corpus/run_plain.py                 # every runnable entry
    python benchmarks/corpus/run_plain.py --only ID ...   # some entries
    python benchmarks/corpus/run_plain.py --write         # store the measurements in manifest.json
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

CORPUS = os.path.dirname(os.path.abspath(__file__))


def expand(text, src):
    return (text.replace("{src}", src).replace("{corpus}", CORPUS)
            .replace("{deps}", os.path.join(CORPUS, ".deps")))


def run(entry, timeout):
    src = os.path.join(CORPUS, ".sources", entry["repo"].replace("/", "__"))
    argv = [sys.executable if a == "python" else expand(a, src) for a in entry["argv"]]
    env = dict(os.environ)
    env.update({k: expand(v, src) for k, v in entry["env"].items()})
    t0 = time.monotonic()
    try:
        out = subprocess.run(argv, cwd=os.path.join(src, entry["workdir"]), env=env,
                             capture_output=True, text=True, timeout=timeout)
        rc, stdout, stderr = out.returncode, out.stdout, out.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = 124, exc.stdout or "", exc.stderr or ""
        stdout = stdout.decode(errors="replace") if isinstance(stdout, bytes) else stdout
        stderr = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
    seconds = time.monotonic() - t0
    lines = stdout.splitlines()
    measured = {"seconds": round(seconds, 1), "rc": rc, "stdout_lines": len(lines),
                "first_line": lines[0][:120] if lines else ""}
    regex = entry.get("measured", {}).get("loss_line_regex")
    if regex:
        measured["loss_line_regex"] = regex
        measured["loss_lines"] = sum(1 for line in lines if re.search(regex, line))
    return measured, stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="entry ids (default: every runnable entry)")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--write", action="store_true", help="store the new measurements in manifest.json")
    args = ap.parse_args()
    path = os.path.join(CORPUS, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    entries = [e for e in manifest["entries"] if e["kind"] == "runnable"
               and (not args.only or e["id"] in args.only)]
    bad = 0
    for entry in entries:
        measured, stderr = run(entry, args.timeout)
        old = entry.get("measured", {})
        same = (measured["rc"] == 0 and measured["stdout_lines"] == old.get("stdout_lines")
                and measured.get("loss_lines") == old.get("loss_lines"))
        bad += measured["rc"] != 0
        print(f"{entry['id']:28s} rc={measured['rc']} {measured['seconds']:6.1f}s "
              f"lines={measured['stdout_lines']} loss_lines={measured.get('loss_lines', '-')} "
              f"fingerprint={'same' if same else 'DIFFERENT'}")
        if measured["rc"] != 0:
            print("   " + "\n   ".join(stderr.strip().splitlines()[-5:]))
        if args.write:
            entry["measured"] = measured
    if args.write:
        with open(path, "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
