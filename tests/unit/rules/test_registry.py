import re

from pathlib import Path

from torchdoctor.rules.docs import explain_rule, rules_markdown, rules_table
from torchdoctor.rules.registry import CATALOGUE, DETECTORS, ENGINES, RUNTIME_RULES, engines_for

DESIGN_CODES = {"TD101", "TD102", "TD103", "TD104", "TD201", "TD202", "TD203", "TD204", "TD301", "TD302",
                "TD303", "TD401", "TD402", "TD403", "TD501", "TD502", "TD701", "TD702", "TD703", "TD801", "TD802"}


def test_codes_and_slugs_are_unique():
    assert len({r.code for r in CATALOGUE}) == len(CATALOGUE)
    assert len({r.slug for r in CATALOGUE}) == len(CATALOGUE)


def test_every_runtime_code_of_the_catalogue_has_a_rule():
    assert DESIGN_CODES <= {r.code for r in RUNTIME_RULES}


def test_every_catalogue_entry_is_detected_somewhere_and_runtime_rules_by_run():
    for rule in RUNTIME_RULES:
        assert "run" in engines_for(rule.code)
    assert all(engines_for(r.code) for r in CATALOGUE if r.code not in {"TD304", "TD404", "TD405", "TD601",
                                                                        "TD602", "TD603", "TD604", "TD105", "TD704"})


def test_every_rule_is_documented():
    for rule in CATALOGUE:
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


def _own_codes(detector) -> set[str]:
    """The codes a detector declares itself: a Rule's code, a Check's or a trace rule's codes."""
    loaded = detector.load()
    return {loaded.code} if detector.engine == "run" else set(loaded.codes)


def test_the_registry_codes_are_the_detectors_own_and_in_the_catalogue():
    catalogue = {r.code for r in CATALOGUE}
    for detector in DETECTORS:
        own = _own_codes(detector)
        assert set(detector.codes) == own, f"{detector.module}.{detector.name} emits {sorted(own)}"
        assert own <= catalogue, f"{detector.name} emits {sorted(own - catalogue)}, which the catalogue lacks"


def test_every_catalogue_code_has_a_detector():
    detected = {code for d in DETECTORS for code in d.codes}
    assert {r.code for r in CATALOGUE} - detected == set()


def test_every_engine_is_registered_and_listed_once():
    assert {d.engine for d in DETECTORS} == set(ENGINES)
    assert len({(d.module, d.name) for d in DETECTORS}) == len(DETECTORS)


def test_a_detector_with_a_code_outside_the_catalogue_fails_the_check(monkeypatch):
    from torchdoctor.lint.checks.launch import ForeachOff

    monkeypatch.setattr(ForeachOff, "codes", ("TD999",))
    (detector,) = [d for d in DETECTORS if d.name == "ForeachOff"]
    assert set(detector.codes) != _own_codes(detector)
