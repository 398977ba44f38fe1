"""The files a GPU check leaves in --out (at most 8, flat, plain names: what comes back from a
machine reached through a copying tool), and `--unpack`, which puts them where the project
keeps them: benchmarks/results/gpu/ and tests/fixtures/real/<tag>/.

Unpacking reads JSON and tar headers only; nothing from a bundle is executed or unpickled.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import tarfile
import zlib
from pathlib import Path

from benchmarks.gpucheck.plan import GPU_RESULTS, REAL_FIXTURES, ROOT

RESULT_FILES = ("accuracy", "overhead", "tune", "demo")  # work/<name>.json -> <name>-<tag>.json
LOG_SUFFIXES = (".log", ".xml")
LOG_KEEP_BYTES = 256 * 1024  # the end of each step's log: tracebacks and summaries live there
MAX_FILES = 8  # the copying tool brings back at most 8 files, 16 MiB each
MAX_FILE_BYTES = 16 * 1024 * 1024
SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
FIXTURE_SUFFIXES = (".json", ".json.gz", ".txt")
MAX_FIXTURE_FILES = 200


class BundleError(Exception):
    """A bundle that cannot be unpacked; the message says what is wrong and what to do."""


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def provisional_tag(rehearsal: bool) -> str:
    return "cpu-rehearsal" if rehearsal else "unknown-device"


def tag_for(machine: dict, rehearsal: bool, date: str) -> str:
    """`nvidia-h100-80gb-hbm3-2026-12-01`; a rehearsal says so in its name."""
    if rehearsal:
        return f"cpu-rehearsal-{date}"
    name = machine.get("device_name") or ("no cuda" if machine.get("cuda_available") is False else "unknown device")
    return f"{slug(name)}-{date}"


def _tar_gz(path: Path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))


def _log_members(work: Path) -> list[tuple[str, bytes]]:
    members = []
    for path in sorted(work.iterdir()):
        if path.is_file() and (path.suffix in LOG_SUFFIXES or path.name in ("install.json", "machine.json",
                                                                             "memory.json")):
            data = path.read_bytes()
            if len(data) > LOG_KEEP_BYTES:
                data = b"[... earlier output left out ...]\n" + data[-LOG_KEEP_BYTES:]
            members.append((path.name, data))
    return members


def _fixture_members(fixtures: Path, tag: str) -> list[tuple[str, bytes]]:
    return [(f"{tag}/{p.relative_to(fixtures).as_posix()}", p.read_bytes())
            for p in sorted(fixtures.rglob("*")) if p.is_file()]


def pack(state, work: Path, out: Path, previous: list[Path] | None = None) -> list[Path]:
    """Write the bundle for the results so far; remove what an earlier pack wrote under another tag."""
    from benchmarks.gpucheck.summary import render  # summary imports this module's names

    out.mkdir(parents=True, exist_ok=True)
    tag = state.tag
    written: list[Path] = []
    for name in RESULT_FILES:
        if (work / f"{name}.json").is_file():
            written.append(out / f"{name}-{tag}.json")
            shutil.copyfile(work / f"{name}.json", written[-1])
    fixtures = work / "fixtures"
    if fixtures.is_dir() and any(p.is_file() for p in fixtures.rglob("*")):
        written.append(out / f"fixtures-{tag}.tar.gz")
        _tar_gz(written[-1], _fixture_members(fixtures, tag))
    written.append(out / f"logs-{tag}.tar.gz")
    _tar_gz(written[-1], _log_members(work))
    written.append(out / f"summary-{tag}.json")
    written[-1].write_text(json.dumps(state.to_plain(), indent=2) + "\n")
    written.append(out / "SUMMARY.md")
    written[-1].write_text(render(state, work, written), encoding="utf-8")
    for stale in previous or []:
        if stale not in written and stale.exists():
            stale.unlink()
    assert len(written) <= MAX_FILES, written  # the plan has 4 results + fixtures + logs + 2 summaries
    return written


# ---- unpack ---------------------------------------------------------------------------------

def _read_state(src: Path) -> dict:
    if not src.is_dir():
        raise BundleError(f"{src} is not a folder; pass the folder `dev.py gpu --out` wrote")
    found = sorted(src.glob("summary-*.json"))
    if len(found) != 1:
        raise BundleError(f"{src} holds {len(found)} summary-*.json files; expected the one `dev.py gpu --out` wrote")
    try:
        state = json.loads(found[0].read_text())
    except ValueError as exc:
        raise BundleError(f"{found[0]} is not JSON ({exc}); copy the folder again") from None
    tag = state.get("tag") if isinstance(state, dict) else None
    if not isinstance(tag, str) or not SAFE_NAME.match(tag) or found[0].name != f"summary-{tag}.json":
        raise BundleError(f"{found[0]} names no valid tag; it was not written by `dev.py gpu`")
    return state


def _safe_member(member: tarfile.TarInfo, tag: str) -> bool:
    parts = member.name.split("/")
    return (parts[0] == tag and len(parts) >= 2 and all(SAFE_NAME.match(p) and p not in (".", "..") for p in parts)
            and (member.isdir() or (member.isfile() and member.name.endswith(FIXTURE_SUFFIXES)
                                    and member.size <= MAX_FILE_BYTES)))


def _fixture_files(archive: Path, tag: str) -> list[tuple[list[str], bytes]]:
    """Every file of the fixtures archive, checked before anything is written."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            bad = [m.name for m in members if not _safe_member(m, tag)]
            if bad or len(members) > MAX_FIXTURE_FILES:
                raise BundleError(f"{archive.name} holds unexpected entries ({', '.join(bad[:3]) or 'too many'}); "
                                  "nothing was unpacked")
            return [(m.name.split("/"), tar.extractfile(m).read()) for m in members if m.isfile()]
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise BundleError(f"{archive.name} is not a readable .tar.gz ({exc}); copy the folder again") from None


def unpack(src: Path, root: Path = ROOT) -> list[Path]:
    """Copy a bundle into `root`. A CPU rehearsal is no GPU evidence: only into a scratch root."""
    state = _read_state(src)
    tag = state["tag"]
    if (state.get("rehearsal") or not state.get("cuda")) and root.resolve() == ROOT:
        raise BundleError(f"{src} is from a run without a CUDA device ({tag}); it is no GPU evidence and is not "
                          "unpacked into the project. To look inside, pass --root SCRATCH_DIR")
    results = root / GPU_RESULTS
    plan: list[tuple[Path, Path]] = [(src / f"{name}-{tag}.json", results / f"{name}-{tag}.json")
                                     for name in (*RESULT_FILES, "summary")]
    plan += [(src / "SUMMARY.md", results / f"SUMMARY-{tag}.md"), (src / f"logs-{tag}.tar.gz", results / f"logs-{tag}.tar.gz")]
    for source, _ in plan:
        if source.suffix == ".json" and source.exists():
            try:
                json.loads(source.read_text())
            except ValueError as exc:
                raise BundleError(f"{source.name} is not JSON ({exc}); nothing was unpacked") from None
    archive = src / f"fixtures-{tag}.tar.gz"
    fixtures = _fixture_files(archive, tag) if archive.is_file() else []
    results.mkdir(parents=True, exist_ok=True)
    written = []
    for source, target in plan:
        if source.is_file():
            shutil.copyfile(source, target)
            written.append(target)
    for parts, data in fixtures:
        target = (root / REAL_FIXTURES).joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written.append(target)
    return written
