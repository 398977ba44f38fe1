"""Rule documentation generated from the registry: `torchdoctor rules` and docs/rules.md."""

from __future__ import annotations

from torchdoctor.rules.base import Rule
from torchdoctor.rules.registry import RUNTIME_RULES


def _needs(rule: type[Rule]) -> str:
    return "a CUDA device" if rule.needs_cuda else "CPU or CUDA runs"


def rules_table() -> str:
    return "".join(f"{r.code}  {r.slug:<24} {r.title}{'  [CUDA]' if r.needs_cuda else ''}\n"
                   for r in RUNTIME_RULES)


def explain_rule(rule: type[Rule]) -> str:
    return (f"{rule.code} {rule.slug}: {rule.title}\n\nWhy: {rule.rationale}\n\n"
            f"Measured on: {_needs(rule)}\n\nFix:\n{rule.fix}\n")


def rules_markdown() -> str:
    out = ["# torchdoctor rules", "",
           "Generated from the rule registry by `torchdoctor rules --format md`; do not edit by hand.", "",
           "| code | slug | cause | measured on |", "|---|---|---|---|"]
    out += [f"| [{r.code}](#{r.code.lower()}-{r.slug}) | {r.slug} | {r.title} | {_needs(r)} |" for r in RUNTIME_RULES]
    for r in RUNTIME_RULES:
        out += ["", f"## {r.code} {r.slug}", "", f"**{r.title}.** {r.rationale}", "",
                f"Measured on {_needs(r)}.", "", "**Fix:**", "", r.fix]
    return "\n".join(out) + "\n"
