import re

from pathlib import Path

from torchdoctor.rules.docs import explain_rule, rules_markdown, rules_table
from torchdoctor.rules.registry import RUNTIME_RULES

DESIGN_CODES = {"TD101", "TD102", "TD103", "TD104", "TD201", "TD202", "TD203", "TD204", "TD301", "TD302",
                "TD303", "TD401", "TD402", "TD403", "TD501", "TD502", "TD701", "TD702", "TD703", "TD801", "TD802"}


def test_codes_and_slugs_are_unique():
    assert len({r.code for r in RUNTIME_RULES}) == len(RUNTIME_RULES)
    assert len({r.slug for r in RUNTIME_RULES}) == len(RUNTIME_RULES)


def test_every_runtime_code_of_the_catalogue_has_a_rule():
    assert DESIGN_CODES <= {r.code for r in RUNTIME_RULES}


def test_every_rule_is_documented():
    for rule in RUNTIME_RULES:
        assert re.fullmatch(r"TD\d{3}", rule.code)
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.slug)
        assert rule.title and len(rule.rationale) > 40 and rule.fix
        assert rule.slug in rules_table() and rule.rationale in explain_rule(rule)


def test_committed_rule_docs_match_the_registry(update_goldens):
    path = Path(__file__).resolve().parents[3] / "docs" / "rules.md"
    if update_goldens:
        path.parent.mkdir(exist_ok=True)
        path.write_text(rules_markdown())
    assert path.read_text() == rules_markdown(), "regenerate with: pytest --update-goldens"
