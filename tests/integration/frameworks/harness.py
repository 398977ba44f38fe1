"""Running a framework script two ways in this process: unchanged under `torchdoctor run`
(zero-code), and as `python script.py --doctor-out DIR` (the callback); and what to compare."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from helpers.measure import measure

from torchdoctor.diagnosis.run import analyze
from torchdoctor.model.findings import Report
from torchdoctor.run.runner import RunRequest

HERE = Path(__file__).resolve().parent
STEPS, WARMUP = 10, 2


def zero_code(script: str, run_dir: Path, args: list[str]) -> Report:
    record = measure(RunRequest(target=str(HERE / script), args=args, warmup=WARMUP, steps=STEPS), run_dir)
    assert record.run.error is None, record.run.error
    return analyze(record)


def with_callback(script: str, out: Path, args: list[str]) -> Report:
    """Runs the script as `python script.py ARGS --doctor-out OUT` would; returns the report
    the callback wrote."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv[:] = [str(HERE / script), *args, "--doctor-out", str(out), "--doctor-steps", str(STEPS),
                   "--doctor-warmup", str(WARMUP)]
    sys.path.insert(0, str(HERE))
    try:
        runpy.run_path(str(HERE / script), run_name="__main__")
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path
    return Report.load(out / "report.json")


def causes(report: Report) -> set[tuple[str, str | None, int | None]]:
    """The findings a user acts on (high and medium), by code and place."""
    return {(f.code, f.location and f.location.path, f.location and f.location.line) for f in report.findings
            if f.severity.value in ("high", "medium")}


def planted(script: str) -> set[tuple[str, str, int]]:
    """(code, path, line) of every `# planted: CODE` line in the script and its helper."""
    out = set()
    paths = [HERE / script]
    if "from _metrics import" in paths[0].read_text():
        paths.append(HERE / "_metrics.py")
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "# planted: " in line:
                out.add((line.rsplit("# planted: ", 1)[1].strip(), path.name, number))
    return out


def by_file(found: set) -> set[tuple[str, str, int]]:
    return {(code, Path(path).name, line) for code, path, line in found if path}
