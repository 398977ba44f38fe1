"""The fit and the search, on trials whose memory follows known lines: the largest batch is
found within one step of the search, in at most 8 trials, and the bad cases say why."""

import pytest

from torchdoctor.errors import UsageError
from torchdoctor.rules.memory_fit import FitPoint, fit_line, fit_points, grid_step, max_batch, predict
from torchdoctor.memory.search import MAX_TRIALS, BatchSearch, Capacity, Unreachable
from torchdoctor.memory.sizes import gpu_memory, parse_size
from torchdoctor.model.memory_record import FAILED, FITS, FORWARD, OOM, OPTIMIZER, OVER_LIMIT, BatchTrial

MIB = 2**20


class LineTrials:
    """Trials of a model whose forward/backward peak is fixed + b * per_sample and whose optimizer
    step peaks at a constant; `device_limit`: trials above it fail as a device would (OOM)."""

    def __init__(self, b0=32, fixed=200 * MIB, per_sample=2 * MIB, optimizer=260 * MIB, device_limit=None,
                 unreachable=None, fail_at=None, knob_refused_at=None, micro_batches=1):
        self.b0, self.fixed, self.per_sample, self.optimizer = b0, fixed, per_sample, optimizer
        self.device_limit, self.unreachable = device_limit, unreachable
        self.fail_at, self.knob_refused_at = fail_at, knob_refused_at
        self.micro_batches = micro_batches  # gradient accumulation: batches delivered per step
        self.asked = []

    def peak(self, b):
        return max(self.fixed + b * self.per_sample, self.optimizer)

    def baseline(self):
        return self.at(self.b0, first=True), self.unreachable

    def at(self, batch, first=False):
        if not first:
            self.asked.append(batch)
        if batch == self.knob_refused_at:
            raise Unreachable("the DataLoader at train.py:9 batches with its own sampler")
        if self.fail_at is not None and batch >= self.fail_at:
            return BatchTrial(batch, FAILED, detail="ValueError: Tried to step 7 times")
        if self.device_limit is not None and self.peak(batch) > self.device_limit:
            return BatchTrial(batch, OOM, detail="CUDA out of memory")
        phases = {FORWARD: self.fixed + batch * self.per_sample, OPTIMIZER: self.optimizer}
        return BatchTrial(batch, FITS, samples=batch * self.micro_batches, peak_bytes=self.peak(batch), phase_peaks=phases,
                          samples_per_s=100.0 * batch ** 0.5, step_s=0.01)


def real_max(trials: LineTrials, usable: int) -> int:
    return max(b for b in range(1, 100_000) if trials.peak(b) <= usable)


def test_with_gradient_accumulation_the_search_speaks_in_loader_batches():
    """Four micro-batches per step deliver 4x the rows, yet the peak grows with one batch: a
    prediction in rows would promise a batch four times too large."""
    trials = LineTrials(micro_batches=4)
    scaling = BatchSearch(trials, Capacity(1000 * MIB, 0, "test")).run()
    truth = real_max(trials, 1000 * MIB)
    assert abs(scaling.predicted_max_batch - truth) <= scaling.search_step
    assert scaling.verified_max_batch <= truth and abs(scaling.verified_max_batch - truth) <= scaling.search_step
    assert abs(scaling.fits[0].per_sample_bytes - 2 * MIB) < 1


@pytest.mark.parametrize("usable_mib", [600, 1000, 5000, 20_000])
def test_the_largest_batch_is_found_within_one_search_step_in_at_most_8_trials(usable_mib):
    trials = LineTrials()
    scaling = BatchSearch(trials, Capacity(usable_mib * MIB, 0, "test")).run()
    truth = real_max(trials, usable_mib * MIB)
    assert len(scaling.trials) <= MAX_TRIALS
    assert abs(scaling.verified_max_batch - truth) <= scaling.search_step
    assert scaling.verified_max_batch <= truth  # what a trial ran within the capacity
    assert abs(scaling.predicted_max_batch - truth) <= scaling.search_step
    assert [f.phase for f in scaling.fits] == [FORWARD, OPTIMIZER]
    fb = scaling.fits[0]
    assert fb.fixed_bytes == pytest.approx(200 * MIB) and fb.per_sample_bytes == pytest.approx(2 * MIB)


def test_a_real_out_of_memory_above_the_limit_is_treated_like_a_measured_one():
    trials = LineTrials(device_limit=1000 * MIB)
    scaling = BatchSearch(trials, Capacity(1000 * MIB, 0, "this GPU")).run()
    assert scaling.verified_max_batch == real_max(trials, 1000 * MIB) - real_max(trials, 1000 * MIB) % scaling.search_step
    assert any(t.outcome == OOM for t in scaling.trials)


def test_the_scripts_own_batch_that_does_not_fit_is_halved_until_one_does():
    trials = LineTrials(b0=512)
    scaling = BatchSearch(trials, Capacity(400 * MIB, 0, "test")).run()
    outcomes = {t.batch_size: t.outcome for t in scaling.trials}
    assert outcomes[512] == OVER_LIMIT and outcomes[256] == OVER_LIMIT and outcomes[64] == FITS
    assert 0 <= real_max(trials, 400 * MIB) - scaling.verified_max_batch <= scaling.search_step


def test_a_model_that_does_not_fit_at_batch_1_says_so():
    trials = LineTrials(b0=4)
    scaling = BatchSearch(trials, Capacity(100 * MIB, 0, "test")).run()
    assert [t.batch_size for t in scaling.trials] == [1, 2, 4]
    assert all(t.outcome == OVER_LIMIT for t in scaling.trials)
    assert scaling.verified_max_batch is None


def test_without_a_capacity_larger_batches_are_measured_for_throughput():
    trials = LineTrials(b0=16)
    scaling = BatchSearch(trials, None).run()
    assert sorted(t.batch_size for t in scaling.trials) == [8, 16, 32, 64]
    assert scaling.predicted_max_batch is None and scaling.verified_max_batch is None


def test_a_loader_the_knob_cannot_reach_leaves_one_measurement():
    trials = LineTrials(unreachable="no DataLoader fed the training steps")
    scaling = BatchSearch(trials, Capacity(1000 * MIB, 0, "test")).run()
    assert len(scaling.trials) == 1 and scaling.unreachable.startswith("no DataLoader")


def test_a_knob_refused_in_a_later_trial_stops_the_search_and_says_why():
    trials = LineTrials(knob_refused_at=16)
    scaling = BatchSearch(trials, Capacity(1000 * MIB, 0, "test")).run()
    assert "own sampler" in scaling.unreachable and len(scaling.trials) == 1


def test_a_size_at_which_the_script_fails_bounds_the_search():
    trials = LineTrials(fail_at=200)
    scaling = BatchSearch(trials, Capacity(5000 * MIB, 0, "test")).run()
    failed = [t for t in scaling.trials if t.outcome == FAILED]
    assert failed and scaling.verified_max_batch < 200
    assert all(t.batch_size < 200 for t in scaling.trials if t.outcome == FITS)


def test_fit_and_max_batch_arithmetic():
    assert fit_line([1, 2, 3], [3, 5, 7]) == pytest.approx((1, 2))
    points = [FitPoint(b, 0, {FORWARD: 10 + 2 * b, OPTIMIZER: 30 + b // 8}) for b in (8, 16, 32)]
    fits = fit_points(points)
    assert predict(fits, 4) == pytest.approx(30.5)  # the optimizer's line is higher at small batches
    assert predict(fits, 64) == pytest.approx(138)
    assert max_batch(fits, 138) == 64 and max_batch(fits, 10) == 0
    flat = fit_points([FitPoint(b, 50, {}) for b in (1, 2)])
    assert max_batch(flat, 100) is None  # a peak that does not grow with the batch bounds nothing
    assert [grid_step(b) for b in (7, 16, 100, 3000)] == [1, 2, 8, 256]  # 1/16 to 1/8 of the batch


def test_sizes_and_gpu_names():
    assert parse_size("24GiB") == parse_size("24GB") == parse_size("24G") == 24 * 2**30  # one rule: powers of 1024
    for bad, says in (("24", "a unit"), ("24Gb", "bits"), ("24 gigs", "not a size"), ("12KB", "less than 1 MiB")):
        with pytest.raises(UsageError, match=says):
            parse_size(bad)
    assert gpu_memory("h100-80gb") == ("H100-80GB", 81_559 * MIB)
    with pytest.raises(UsageError, match="--device-memory"):
        gpu_memory("B300")


def test_the_trial_budget_holds_whatever_the_first_trials_show():
    for trials in (LineTrials(b0=512), LineTrials(b0=1), LineTrials(fail_at=40)):
        assert len(BatchSearch(trials, Capacity(700 * MIB, 0, "test"), max_trials=3).run().trials) <= 3


class SaturatingTrials(LineTrials):
    """Samples/s rises with the batch until `knee`, then stays flat (plus a small dip past it);
    a batch beyond `rows` gets only `rows` rows, as a loader over a small dataset gives."""

    def __init__(self, knee=128, rows=None, **kw):
        super().__init__(**kw)
        self.knee, self.rows = knee, rows

    def at(self, batch, first=False):
        trial = super().at(batch, first)
        got = min(batch, self.rows) if self.rows else batch
        if trial.outcome == FITS:
            trial.samples = got
            trial.samples_per_s = 1000.0 * min(got, self.knee) / self.knee * (0.97 if got > 2 * self.knee else 1.0)
            trial.relative_sem = 0.005
        return trial


def test_the_search_stops_at_the_dataset_and_says_so():
    """6,000 rows, room in memory for ~500,000: no batch beyond 6,000 is tried or recommended."""
    trials = SaturatingTrials(rows=6000, b0=64, fixed=10 * MIB, per_sample=4096, optimizer=20 * MIB)
    scaling = BatchSearch(trials, Capacity(2048 * MIB, 0, "test"), data_bound=6000,
                          data_bound_basis="the training loader's dataset has 6,000 rows").run()
    assert max(trials.asked) == 6000 and scaling.verified_max_batch <= 6000
    assert any("stopped at batch 6000" in n and "6,000 rows" in n for n in scaling.notes)
    assert scaling.data_bound == 6000
    assert scaling.predicted_max_batch > 6000  # memory alone would allow more: the data is the bound


def test_the_recommended_batch_is_the_fastest_that_fits_not_the_largest():
    from torchdoctor.rules.memory import recommended_batch

    trials = SaturatingTrials(knee=128, b0=32, fixed=10 * MIB, per_sample=MIB, optimizer=20 * MIB)
    scaling = BatchSearch(trials, Capacity(2048 * MIB, 0, "test")).run()
    assert scaling.verified_max_batch > 512
    best = recommended_batch(scaling)
    assert best == 128  # the knee: larger batches measured no more samples/s (and past 256 a little less)
    # a trial that asked for more rows than the data has is measured as the rows it got
    capped = SaturatingTrials(rows=100, b0=32).at(400)
    assert capped.fit_batch == 100
