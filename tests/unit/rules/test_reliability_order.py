"""The order of the ranked causes: a cause the run timed, whose estimate the spread check held back,
comes before a cause of the same severity that was never timed (a GPU hazard not measurable on a CPU)."""

from torchdoctor.model.findings import Finding, Severity


def _finding(code: str, severity: Severity, speedup: float | None = None, held: float | None = None) -> Finding:
    evidence = {"estimate_if_steady": held} if held is not None else {}
    return Finding(code=code, slug="x", severity=severity, title=code, message="", location=None,
                   evidence=evidence, fix="", estimated_speedup=speedup, estimate_basis="")


def test_a_held_back_estimate_ranks_before_an_untimed_cause_of_the_same_severity():
    untimed = _finding("TD201", Severity.MEDIUM)
    held = _finding("TD301", Severity.MEDIUM, held=1.9)
    printed = _finding("TD101", Severity.LOW, speedup=1.1)
    high = _finding("TD203", Severity.HIGH)
    ordered = sorted([untimed, held, printed, high], key=Finding.sort_key)
    assert [f.code for f in ordered] == ["TD101", "TD203", "TD301", "TD201"]
    smaller = _finding("TD302", Severity.MEDIUM, held=1.2)
    assert [f.code for f in sorted([untimed, smaller, held], key=Finding.sort_key)] == ["TD301", "TD302", "TD201"]
