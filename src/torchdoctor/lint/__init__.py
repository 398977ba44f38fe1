"""`torchdoctor lint`: the slow-training habits that can be proven from source, reported with
the same codes, slugs and fixes as `torchdoctor run`. Nothing here imports torch or runs user
code; files are parsed with `ast` and rewritten (`--fix`) with libcst."""

from torchdoctor.lint.api import LintFinding, LintOptions, LintResult, lint_files, lint_paths

__all__ = ["LintFinding", "LintOptions", "LintResult", "lint_files", "lint_paths"]
