"""`torchdoctor rules [CODE] [--format text|md]`: the catalogue, or one rule explained.

Reads the catalogue and the registry's static detector table only: no torch, no linter."""

from __future__ import annotations

import sys
from typing import Sequence

from torchdoctor.commands.parser import CommandParser
from torchdoctor.errors import EXIT_OK, UsageError

# this command's line in `torchdoctor --help` too (cli.py reads it from here)
HELP = "list the rules, or explain one (torchdoctor rules TD301)"


def main(argv: Sequence[str]) -> int:
    from torchdoctor.rules.docs import explain_rule, rules_markdown, rules_table
    from torchdoctor.rules.registry import rule_by_code

    p = CommandParser(prog="torchdoctor rules", description=HELP)
    p.add_argument("code", nargs="?")
    p.add_argument("--format", choices=["text", "md"], default="text")
    opts = p.parse_args(argv)
    if opts.code is None:
        sys.stdout.write(rules_markdown() if opts.format == "md" else rules_table())
        return EXIT_OK
    rule = rule_by_code(opts.code)
    if rule is None:
        raise UsageError(f"no rule {opts.code!r}; `torchdoctor rules` lists them")
    sys.stdout.write(explain_rule(rule))
    return EXIT_OK
