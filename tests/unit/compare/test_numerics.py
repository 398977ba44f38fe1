"""The numerics guard on loss traces built by hand."""

from torchdoctor.compare.numerics import CHANGED, IDENTICAL, NOT_COMPARED, WITHIN, judge
from torchdoctor.model.record import LossTrace


def trace(values, per_step=1):
    return LossTrace(steps=[1 + i // per_step for i in range(len(values))], values=[float(v).hex() for v in values],
                     dtype="float32")


BASE = trace([2.0, 1.8, 1.6, 1.5, 1.45, 1.4])


def test_a_knob_that_only_moves_work_must_keep_every_loss():
    assert judge(BASE, trace([2.0, 1.8, 1.6, 1.5, 1.45, 1.4]), {"workers": "4"}).status == IDENTICAL
    moved = judge(BASE, trace([2.0, 1.8, 1.6000001, 1.5, 1.45, 1.4]), {"workers": "4"})
    assert moved.status == CHANGED and "backward #3" in moved.text and "must not change numerics" in moved.text


def test_arithmetic_knobs_get_their_stated_tolerance():
    close = judge(BASE, trace([2.001, 1.801, 1.6, 1.501, 1.451, 1.4]), {"amp": "bf16"})
    assert close.status == WITHIN and "0.05" in close.tolerance
    far = judge(BASE, trace([2.5, 2.4, 2.3, 2.2, 2.1, 2.0]), {"tf32": "true"})
    assert far.status == CHANGED and "beyond" in far.text


def test_batch_size_is_judged_by_the_level_of_the_losses():
    assert judge(BASE, trace([2.0, 1.7, 1.55, 1.48, 1.43, 1.41]), {"batch_size": "64"}).status == WITHIN
    assert judge(BASE, trace([2.0, 2.2, 2.5, 3.0, 4.0, 5.0]), {"batch_size": "64"}).status == CHANGED


def test_an_unreproducible_script_is_judged_against_its_own_floor():
    jittered = trace([2.0001, 1.8002, 1.6, 1.5001, 1.45, 1.4001])
    v = judge(BASE, jittered, {"workers": "4"}, floor=3e-4)
    assert v.status == WITHIN and "cannot be checked" in v.text


def test_micro_batches_are_matched_by_step_and_position_and_missing_losses_say_so():
    base, other = trace([1.0, 2.0, 3.0, 4.0], per_step=2), trace([1.0, 2.0, 3.0], per_step=2)
    assert judge(base, other, {"foreach": "true"}).compared == 3
    assert judge(None, other, {}).status == NOT_COMPARED
