#!/usr/bin/env python3
"""Bring the third-party sources of the benchmark corpus into .sources/.

For every entry of manifest.json this script takes the entry's files from a
local git mirror of its repository, at the pinned commit, with `git archive`,
and unpacks them into benchmarks/corpus/.sources/<owner>__<name>/.  Then it
runs the entry's data generator (our own code under data/), if it has one.

It needs no network.  The mirrors are git directories, one per repository, at
<mirrors>/<owner>+<name>/repo (a bare repository, or a clone whose .git is
used).  A missing mirror is reported with the repository to fetch.

    python benchmarks/corpus/fetch_sources.py                # all entries
    python benchmarks/corpus/fetch_sources.py --only ID ...  # some entries
    python benchmarks/corpus/fetch_sources.py --mirrors DIR --no-data
    python benchmarks/corpus/fetch_sources.py --install-deps     # also pip-install .deps
"""
import argparse
import io
import json
import os
import subprocess
import sys
import tarfile

CORPUS = os.path.dirname(os.path.abspath(__file__))


def git_dir(mirrors, repo):
    """The git directory of repo's mirror, or None."""
    base = os.path.join(mirrors, repo.replace("/", "+"))
    for cand in (os.path.join(base, "repo", ".git"), os.path.join(base, "repo"),
                 os.path.join(base, ".git"), base):
        if os.path.isfile(os.path.join(cand, "HEAD")) and os.path.isdir(os.path.join(cand, "objects")):
            return cand
    return None


def git(gdir, *args, binary=False):
    out = subprocess.run(["git", "--git-dir", gdir, *args], capture_output=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.decode(errors="replace").strip())
    return out.stdout if binary else out.stdout.decode()


def expand(text, src):
    return (text.replace("{src}", src).replace("{corpus}", CORPUS)
            .replace("{deps}", os.path.join(CORPUS, ".deps")))


def materialize(entry, gdir, dest):
    """Unpack the entry's files at its commit into dest; return the file count."""
    commit = entry["commit"]
    git(gdir, "cat-file", "-e", commit + "^{commit}")  # raises if the commit is absent
    data = git(gdir, "archive", "--format=tar", commit, "--", *entry["files"], binary=True)
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = [m for m in tar.getmembers() if m.isfile() or m.isdir()]
        tar.extractall(dest, members=members, filter="data")
    return sum(1 for m in members if m.isfile())


def run_generator(entry, src):
    gen = entry.get("data")
    if not gen:
        return ""
    argv = [sys.executable, os.path.join(CORPUS, gen["generator"])]
    argv += [expand(a, src) for a in gen.get("args", [])]
    out = subprocess.run(argv, cwd=CORPUS, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"data generator failed: {out.stderr.strip()[-300:]}")
    return "; data: " + (out.stdout.strip().splitlines() or ["ok"])[-1]


def install_deps(manifest):
    """pip-install the extra packages, without their dependencies, into .deps/."""
    pkgs = manifest["extra_packages"] + manifest["extra_packages_support"]
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
            "--target", os.path.join(CORPUS, ".deps"), *pkgs]
    print("installing", len(pkgs), "packages into .deps/ (no torch is pulled: --no-deps)")
    subprocess.run(argv, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mirrors", default="/work/.mirror", help="folder of git mirrors (default: %(default)s)")
    ap.add_argument("--dest", default=os.path.join(CORPUS, ".sources"), help="where to unpack (default: %(default)s)")
    ap.add_argument("--only", nargs="*", help="entry ids to bring (default: all)")
    ap.add_argument("--no-data", action="store_true", help="do not run the data generators")
    ap.add_argument("--install-deps", action="store_true", help="pip-install the extra packages into .deps/ first")
    args = ap.parse_args()

    with open(os.path.join(CORPUS, "manifest.json")) as f:
        manifest = json.load(f)
    if args.install_deps:
        install_deps(manifest)
    entries = manifest["entries"]
    if args.only:
        unknown = set(args.only) - {e["id"] for e in entries}
        if unknown:
            sys.exit(f"unknown entry ids: {', '.join(sorted(unknown))}")
        entries = [e for e in entries if e["id"] in args.only]

    failures = 0
    for entry in entries:
        repo, short = entry["repo"], entry["commit"][:12]
        gdir = git_dir(args.mirrors, repo)
        if gdir is None:
            failures += 1
            print(f"MISSING {entry['id']}: no mirror of {repo} under {args.mirrors}; "
                  f"bring it with the search tool's fetch (source github:{repo}), then rerun")
            continue
        src = os.path.join(args.dest, repo.replace("/", "__"))
        try:
            n = materialize(entry, gdir, src)
            note = "" if args.no_data else run_generator(entry, src)
        except RuntimeError as exc:
            failures += 1
            print(f"FAILED  {entry['id']}: {repo}@{short}: {exc}")
            continue
        print(f"OK      {entry['id']}: {repo}@{short} -> {os.path.relpath(src, CORPUS)} ({n} files){note}")
    print(f"{len(entries) - failures} of {len(entries)} entries ready")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
