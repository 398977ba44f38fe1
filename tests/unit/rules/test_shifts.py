"""The change tests of a followed run (rules/shifts.py): a persistent shift against the run's own
spread, where it began, and memory that creeps."""

import random

from torchdoctor.rules.shifts import best_split, memory_creep, recent_shift, spread


def noisy(n, level, sd, seed):
    rng = random.Random(seed)
    return [max(0.0, rng.gauss(level, sd)) for _ in range(n)]


def test_a_level_that_holds_is_found_where_it_began():
    series = noisy(300, 0.010, 0.0003, 1) + noisy(40, 0.014, 0.0003, 2)
    shift = recent_shift(series)
    assert shift is not None
    assert abs(shift.at - 300) <= 3
    assert shift.before_median < 0.0105 < 0.0135 < shift.after_median


def test_noise_alone_is_no_change():
    series = noisy(2000, 0.010, 0.001, 3)
    hits = [n for n in range(60, 2000, 10) if recent_shift(series[:n]) is not None]
    assert hits == []


def test_a_few_slow_steps_are_not_a_new_level():
    series = noisy(300, 0.010, 0.0003, 4)
    series += [0.050] * 4 + noisy(16, 0.010, 0.0003, 5)
    assert recent_shift(series) is None


def test_the_threshold_comes_from_the_spread_before_not_a_fixed_share():
    """The same 10 % shift is a change on a quiet series and noise on a noisy one."""
    quiet = noisy(300, 0.010, 0.0002, 6) + noisy(30, 0.011, 0.0002, 7)
    loud = noisy(300, 0.010, 0.002, 6) + noisy(30, 0.011, 0.002, 7)
    assert recent_shift(quiet) is not None
    assert recent_shift(loud) is None
    assert recent_shift(quiet).threshold < recent_shift(noisy(300, 0.010, 0.0005, 6) + [0.02] * 30).threshold


def test_a_spike_does_not_pull_the_split():
    values = [1.0] * 50 + [100.0] + [1.0] * 49 + [2.0] * 50
    assert best_split(values) == 100


def test_spread_is_robust():
    assert spread([1.0] * 99 + [1000.0]) == 0.0
    assert 0.9 < spread(noisy(5000, 10.0, 1.0, 8)) < 1.1


def test_memory_that_keeps_rising_toward_the_limit_creeps():
    times = [10.0 * t for t in range(20)]
    marks = [1_000_000_000 + t * 50_000_000 for t in range(20)]
    creep = memory_creep(times, marks, limit=4_000_000_000)
    assert creep is not None and creep.rate_bytes_per_s == 5_000_000
    assert 400 < creep.reaches_limit_in_s < 500
    # the same growth within the first seconds is a start filling its caches
    assert memory_creep([t / 10 for t in times], marks, limit=4_000_000_000) is None


def test_one_jump_is_not_a_creep():
    times = [10.0 * t for t in range(20)]
    marks = [1_000_000_000] * 10 + [2_000_000_000] * 10
    assert memory_creep(times, marks, limit=4_000_000_000) is None


def test_neighbours_preempting_some_steps_are_not_the_scripts_change():
    """On a shared machine a share of the steps takes a preemption slice longer; the share comes and
    goes (here 60 % of the steps from step 300) while the script does the same work."""
    rng = random.Random(9)
    clean = noisy(300, 0.0027, 0.00003, 10)
    contended = [rng.gauss(0.0067, 0.0001) if rng.random() < 0.6 else rng.gauss(0.0027, 0.00003) for _ in range(40)]
    assert recent_shift(clean + contended) is None
    # ... while the same series with every step slower from step 300 is a change
    assert recent_shift(clean + [v + 0.004 for v in noisy(40, 0.0027, 0.00003, 11)]) is not None
