"""Rule documentation generated from the catalogue: `torchdoctor rules` and docs/rules.md."""

from __future__ import annotations

from torchdoctor.rules.base import RuleInfo
from torchdoctor.rules.registry import CATALOGUE, engines_for


def _needs(rule: type[RuleInfo]) -> str:
    return "a CUDA device" if rule.needs_cuda else "CPU or CUDA"


def _found_by(rule: type[RuleInfo]) -> str:
    return ", ".join(f"`{e}`" for e in engines_for(rule.code)) or "not detected yet"


def rules_table() -> str:
    return "".join(
        f"{r.code}  {r.slug:<24} {r.title}  [{', '.join(engines_for(r.code)) or '-'}]"
        f"{' [CUDA]' if r.needs_cuda else ''}\n"
        for r in CATALOGUE
    )


def explain_rule(rule: type[RuleInfo]) -> str:
    example = f"Example of the habit:\n```python\n{rule.example}\n```\n\n" if rule.example else ""
    return (f"{rule.code} {rule.slug}: {rule.title}\n\nWhy: {rule.rationale}\n\n"
            f"Found by: {_found_by(rule).replace('`', '')}; shows on: {_needs(rule)}\n\n"
            f"{example}Fix:\n{rule.fix}\n")


def rules_markdown() -> str:
    out = ["# torchdoctor rules", "",
           "Generated from the rule catalogue by `torchdoctor rules --format md`; do not edit by hand.", "",
           "| code | slug | cause | found by | shows on |", "|---|---|---|---|---|"]
    out += [f"| [{r.code}](#{r.code.lower()}-{r.slug}) | {r.slug} | {r.title} | {_found_by(r)} | {_needs(r)} |"
            for r in CATALOGUE]
    for r in CATALOGUE:
        out += ["", f"## {r.code} {r.slug}", "", f"**{r.title}.** {r.rationale}", "",
                f"Found by {_found_by(r)}; shows on {_needs(r)}."]
        if r.example:
            out += ["", "**Example of the habit:**", "", "```python", r.example, "```"]
        out += ["", "**Fix:**", "", r.fix]
    return "\n".join(out) + "\n"
