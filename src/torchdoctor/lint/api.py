"""Lint paths or files: the entry points `torchdoctor lint` and `torchdoctor run` share.

`lint_paths` covers a command line's worth of paths (discovery, configuration, severity
filter, optional worker processes); `lint_files` is the small API for callers that already
know which files they want linted, such as `run` for the files a script executed.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from torchdoctor.machine.cpus import usable_cpus
from torchdoctor.model.findings import Finding
from torchdoctor.lint.config import SEVERITIES, LintConfig, find_config, load_config
from torchdoctor.lint.discovery import discover, display_path, force_excluded
from torchdoctor.lint.engine import FileOutcome, LintFinding, lint_source
from torchdoctor.lint.selection import Selection
from torchdoctor.lint.source import Problem, SourceFile, decode_python, read_source

PARALLEL_MIN_FILES = 48  # below this, starting worker processes costs more than it saves


@dataclass
class LintOptions:
    select: list[str] | None = None  # parsed codes; None: the config's (or everything)
    ignore: list[str] | None = None
    config: Path | None = None  # an explicit pyproject.toml
    isolated: bool = False  # ignore every pyproject.toml
    min_severity: str | None = None  # None: the config's ("low")
    jobs: int = 0  # 0: one per CPU for large trees, 1: in this process
    force_exclude: bool = False  # apply `exclude` to paths named explicitly too (pre-commit passes every file)


@dataclass
class LintResult:
    findings: list[LintFinding] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files_found: int = 0
    files_linted: int = 0
    hidden_by_severity: Counter = field(default_factory=Counter)  # findings below the minimum severity
    root: Path | None = None  # the folder display paths are relative to (the working directory)
    file_jobs: dict[str, _Job] = field(default_factory=dict, repr=False)  # display path → how it was linted

    @property
    def nothing_readable(self) -> bool:
        return self.files_linted == 0

    @property
    def files(self) -> dict[str, Path]:
        """Display path → path on disk, for every file found."""
        return {shown: job.path for shown, job in self.file_jobs.items()}

    @property
    def hidden(self) -> int:
        return sum(self.hidden_by_severity.values())

    def relint(self, display: str, raw: bytes) -> list[LintFinding]:
        """Findings (those shown) for new contents of a linted .py file, linted as the file was:
        how `--fix` checks its rewrite for fixes that have become possible."""
        job = self.file_jobs[display]
        source = decode_python(raw, job.path, job.shown)
        return [] if isinstance(source, Problem) else _lint_read(job, source)[0].findings


@dataclass(frozen=True)
class _Job:
    path: Path
    shown: str
    selection: Selection
    max_bytes: int
    relative: str  # for per-file ignores: the path from the config's folder
    min_rank: int  # findings of a lower severity (a higher rank) are hidden
    root: Path | None = None  # the config's folder


def lint_paths(paths: list[Path], options: LintOptions | None = None, cwd: Path | None = None) -> LintResult:
    options = options or LintOptions()
    cwd = cwd or Path.cwd()
    result = LintResult(root=cwd)
    jobs: list[_Job] = []
    for config, targets in _group_by_config(paths, options):
        selection = Selection(options.select if options.select is not None else config.select,
                              options.ignore if options.ignore is not None else config.ignore,
                              config.per_file_ignores)
        min_rank = SEVERITIES.index(options.min_severity or config.min_severity)
        found = discover(targets, config.exclude, config.root, cwd, force_exclude=options.force_exclude)
        result.problems += found.problems
        result.notes += found.notes
        jobs += [_Job(path, shown, selection, config.max_file_bytes, _relative(path, config.root), min_rank,
                      config.root) for path, shown in found.files]
    result.files_found = len(jobs)
    result.file_jobs = {job.shown: job for job in jobs}
    followed: list[tuple[_Job, str]] = []  # a followed module's job, and the launcher it was followed from
    seen: set[str] | None = None
    for job, (outcome, hidden) in zip(jobs, _run(jobs, options.jobs)):
        result.problems += outcome.problems
        result.files_linted += outcome.linted
        result.findings += outcome.findings
        result.hidden_by_severity.update(hidden)
        if outcome.follow:
            seen = seen if seen is not None else {_resolved(j.path) for j in jobs}
            for module in outcome.follow:
                if module not in seen:
                    seen.add(module)
                    path = Path(module)
                    followed.append((_Job(path, display_path(path, cwd), job.selection, job.max_bytes,
                                          _relative(path, job.root), job.min_rank, job.root), job.shown))
    _lint_followed(followed, result)
    result.findings.sort(key=LintFinding.sort_key)
    result.problems.sort(key=lambda p: (p.display, p.cell or 0, p.line))
    return result


def lint_text(text: str, display: str, options: LintOptions | None = None, cwd: Path | None = None) -> LintResult:
    """Lint source that is not on disk (an editor buffer on stdin); `display` names it in the output.
    The configuration is looked up from `display` as if the file were there."""
    options = options or LintOptions()
    cwd = cwd or Path.cwd()
    where = cwd / display  # where the file would be: its config, and its path for per-file ignores
    config = _group_by_config([where], options)[0][0]
    result = LintResult(root=cwd)
    if options.force_exclude and force_excluded(where, config.exclude, config.root, cwd):
        return result  # as ruff does: an excluded file gives no findings, whatever the editor sends
    selection = Selection(options.select if options.select is not None else config.select,
                          options.ignore if options.ignore is not None else config.ignore, config.per_file_ignores)
    job = _Job(where, display, selection, config.max_file_bytes, _relative(where, config.root),
               SEVERITIES.index(options.min_severity or config.min_severity))
    outcome, hidden = _lint_read(job, SourceFile(Path(display), display, text))
    result.problems, result.files_found, result.files_linted = outcome.problems, 1, int(outcome.linted)
    result.findings, result.hidden_by_severity = sorted(outcome.findings, key=LintFinding.sort_key), hidden
    return result


def lint_files(paths: list[Path], select: list[str] | None = None) -> list[Finding]:
    """Findings for these files (all severities, `info` included), in path and line order.

    Configuration and `# noqa` apply as on the command line; files that cannot be read or
    parsed give no findings. Runs in this process (safe to call with torch loaded).
    """
    options = LintOptions(select=select, min_severity="info", jobs=1)
    return [f.finding for f in lint_paths(list(paths), options).findings]


def _lint_followed(followed: list[tuple[_Job, str]], result: LintResult) -> None:
    """Modules a launcher script trains through (`project.training_modules`): reported, with a note
    naming the launcher, only when they hold a training step themselves, and never rewritten (`--fix`
    changes named files only)."""
    for job, launcher in followed:
        outcome, hidden = _lint_one(job)
        if not outcome.trains:
            continue
        result.notes.append(f"{launcher} has no training step of its own and calls into {job.shown} in a loop: "
                            "linted with it")
        result.files_linted += outcome.linted
        for finding in outcome.findings:
            finding.fixes, finding.notebook_fix = [], False
        result.findings += outcome.findings
        result.hidden_by_severity.update(hidden)


def _resolved(path: Path) -> str:
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):
        return str(path)


def _group_by_config(paths: list[Path], options: LintOptions) -> list[tuple[LintConfig, list[Path]]]:
    if options.isolated:
        return [(LintConfig(), list(paths))]
    if options.config is not None:
        return [(load_config(options.config), list(paths))]
    loaded: dict[Path | None, LintConfig] = {}
    groups: dict[int, tuple[LintConfig, list[Path]]] = {}
    for path in paths:
        where = find_config(path)
        if where not in loaded:
            loaded[where] = load_config(where)
        config = loaded[where]
        groups.setdefault(id(config), (config, []))[1].append(path)
    return list(groups.values())


def _relative(path: Path, root: Path | None) -> str:
    if root is None:
        return path.as_posix()
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a symbolic link loop (Python < 3.13)
        return path.as_posix()


def _lint_one(job: _Job) -> tuple[FileOutcome, Counter]:
    source = read_source(job.path, job.shown, job.max_bytes)
    if isinstance(source, Problem):
        return FileOutcome(problems=[source]), Counter()
    return _lint_read(job, source)


def _lint_read(job: _Job, source: SourceFile) -> tuple[FileOutcome, Counter]:
    """Lint a file already read; findings below the minimum severity are counted, not kept."""
    outcome = lint_source(source, job.selection, job.relative)
    shown = [f for f in outcome.findings if SEVERITIES.index(f.finding.severity.value) <= job.min_rank]
    hidden = Counter(f.finding.severity.value for f in outcome.findings
                     if SEVERITIES.index(f.finding.severity.value) > job.min_rank)
    outcome.findings = shown
    return outcome, hidden


def _run(jobs: list, workers: int):
    if workers == 0:
        workers = min(usable_cpus(), 8) if len(jobs) >= PARALLEL_MIN_FILES else 1
    if workers <= 1 or len(jobs) < 2:
        return map(_lint_one, jobs)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_lint_one, jobs, chunksize=max(1, len(jobs) // (workers * 8))))


__all__ = ["LintFinding", "LintOptions", "LintResult", "display_path", "lint_files", "lint_paths", "lint_text"]
