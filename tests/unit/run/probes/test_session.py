"""RunSession with an injected clock: step intervals, categories, sampling schedule, stop."""

import pytest
from helpers.session_fakes import FakeClock, FakeWindow

from torchdoctor.run.session import RunSession, SessionConfig, StopRun


def test_step_intervals_and_categories_are_exact():
    clock = FakeClock()
    session = RunSession(SessionConfig(warmup=1, steps=5), clock)
    clock.advance(0.5)
    session.add_time("data_wait", 0.1)
    session.ledger.add_samples(32)
    session.on_optimizer_step()
    clock.advance(0.2)
    session.enter_eval()
    clock.advance(0.3)
    session.add_time("data_wait", 0.25)  # inside eval: belongs to eval only
    session.exit_eval()
    session.on_optimizer_step()
    first, second = session.steps
    assert (first.start, first.end, first.data_wait_s, first.samples, first.warmup) == (0.0, 0.5, 0.1, 32, True)
    assert second.duration_s == pytest.approx(0.5) and second.eval_s == pytest.approx(0.3)
    assert second.data_wait_s == 0.0 and second.samples is None and not second.warmup


def test_sampled_steps_follow_the_schedule_and_are_flagged():
    clock = FakeClock()
    session = RunSession(SessionConfig(warmup=2, steps=10, sampled_steps=3), clock)
    session.sampler = FakeWindow()
    for _ in range(9):
        clock.advance(0.01)
        session.on_optimizer_step()
    flags = [s.sampled for s in session.steps]
    assert flags == [False, False, False, True, True, True, False, False, False]
    assert session.sampler.activations == 3 and not session.sampler.active


def test_stop_after_the_last_measured_step_and_stays_stopping():
    clock = FakeClock()
    session = RunSession(SessionConfig(warmup=1, steps=2), clock)
    session.on_optimizer_step()
    session.on_optimizer_step()
    with pytest.raises(StopRun, match="step-limit"):
        session.on_optimizer_step()
    with pytest.raises(StopRun):
        session.raise_if_stopping()
    assert len(session.steps) == 3


def test_time_limit_stops_even_without_steps():
    clock = FakeClock()
    session = RunSession(SessionConfig(max_seconds=1.0), clock)
    session.check_time()
    clock.advance(1.5)
    with pytest.raises(StopRun, match="time-limit"):
        session.check_time()


def test_a_stop_that_lands_in_a_finalizer_is_not_printed_as_the_scripts_error(monkeypatch):
    """A StopRun raised into the script's thread while a `__del__` runs cannot propagate;
    Python would print "Exception ignored in ..." with our StopRun. The watchdog's hook drops
    it (and raises the stop again later); anything else still reaches the previous hook."""
    import sys
    import time

    from torchdoctor.run.session import RunSession, SessionConfig, StopRun
    from torchdoctor.run.watchdog import Watchdog

    class Leaky:
        def __init__(self, error):
            self.error = error

        def __del__(self):
            raise self.error

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: reported.append(unraisable.exc_type))
    before = sys.unraisablehook
    session = RunSession(SessionConfig(), clock=time.perf_counter)
    with Watchdog(session, max_seconds=60, abandon=lambda reason: None, end_process=False) as dog:
        Leaky(StopRun("step-limit"))
        Leaky(ValueError("the script's own"))
    assert sys.unraisablehook is before and dog.lost_in_finalizers == 1
    assert reported == [ValueError]
