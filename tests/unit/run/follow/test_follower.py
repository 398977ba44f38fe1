"""The follower (run/follow/follower.py) driven by hand, without a script: steps in, its thread's
work done by calling its tick: changes planned as windows, periodic windows under the cost bound,
stalls stopped with the black box, the timeline and live record written."""

import json
from types import SimpleNamespace

import pytest

from helpers.follow_fakes import FakeSession, Lines, make, step
from torchdoctor.run.follow.follower import Follower, FollowOptions


def test_a_slowdown_is_found_and_a_window_planned_right_after_it(tmp_path):
    session, follower = make(tmp_path, every_s=1.0)
    for i in range(300):
        step(session, follower, 0.010 + (i % 7) * 1e-5)
    session.baseline_s = 0.010
    follower.tick()
    assert follower.record.changes == [] and session.planned == []
    for i in range(40):
        step(session, follower, 0.020 + (i % 5) * 1e-5, wait=0.010)
        if i % 10 == 9:
            follower.tick()
    [change] = follower.record.changes
    assert change.kind == "step-time" and abs(change.step - 301) <= 1
    assert change.figures_after["data_wait_s"] > change.figures_before["data_wait_s"] + 0.009
    [(name, first, count)] = session.planned
    assert name == "line_sampler" and change.detected_step < first <= change.detected_step + 12
    assert count == 13  # 0.25 s of the new 20 ms steps
    # the planned steps run under the sampler: the window is kept, tied to the change
    for i in range(count):
        step(session, follower, 0.021, probes=("line_sampler",), wait=0.010)
    step(session, follower, 0.020, wait=0.010)
    follower.tick()
    [window] = follower.record.windows
    assert window.reason == "change" and window.change == 0 and change.window == 0
    # each change is also a line of changes.jsonl as it is found (a followed job's launcher reads it)
    [line] = (tmp_path / "changes.jsonl").read_text().splitlines()
    assert json.loads(line)["kind"] == "step-time" and json.loads(line)["step"] == change.step


def test_periodic_windows_stay_under_the_cost_bound(tmp_path):
    session, follower = make(tmp_path, every_s=100.0, period_s=5.0, window_share=0.02)
    for i in range(100):
        step(session, follower, 0.010)
    session.baseline_s = 0.010
    session.now = 6.0
    follower.tick()
    assert len(session.planned) == 1  # the first periodic window
    first = session.planned[0][1]
    while len(session.steps) < first - 1:
        step(session, follower, 0.010)
    for i in range(25):  # the window: each step twice the usual, 0.25 s of excess in all
        step(session, follower, 0.020, probes=("line_sampler",))
    step(session, follower, 0.010)
    follower.tick()
    assert follower.record.windows_s > 0.2
    session.now = 12.0  # 0.25 s of windows is over 2 % of 12 s: the next one is skipped
    follower.tick()
    assert len(session.planned) == 1 and follower.record.windows_skipped == 1


def test_a_stall_is_stopped_with_every_threads_stack(tmp_path):
    session, follower = make(tmp_path, every_s=100.0, stall_s=2.0)
    for i in range(50):
        step(session, follower, 0.010)
    follower.tick()
    session.now += 1.0
    follower.tick()
    assert session.stop_reason is None
    session.now += 1.5
    follower.tick()
    assert session.stop_reason == "stalled"
    box = follower.record.blackbox
    assert box.reason == "stall" and box.step == 50 and box.stall_limit_s == 2.0
    assert any(t.main for t in box.threads) and box.last_points[-1].step == 50


def test_the_timeline_and_the_live_record_are_written(tmp_path):
    from helpers.records import record

    session, follower = make(tmp_path, every_s=0.5)
    follower.live_record = lambda: record(steps=2)
    for i in range(20):
        step(session, follower, 0.010)
    session.now = 1.0
    follower.tick()
    lines = (tmp_path / "timeline.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(1, 21))
    live = json.loads((tmp_path / "live.json").read_text())
    assert live["follow"]["live"] is True and live["follow"]["steps"] == 20


def test_a_steps_wait_in_collectives_is_written_once_the_next_step_closed(tmp_path):
    session = FakeSession()
    waits = {}  # DDP publishes a step's timings at the next step's forward
    probes = SimpleNamespace(lines=Lines(), comm_wait=lambda index: waits.get(index))
    follower = Follower(session, probes, tmp_path, FollowOptions(every_s=0.5))
    for i in range(1, 11):
        step(session, follower, 0.010)
        waits[i - 1] = 0.001 * (i - 1)  # step i's forward published step i-1's
    session.now = 1.0
    follower.tick()
    lines = [json.loads(line) for line in (tmp_path / "timeline.jsonl").read_text().splitlines()]
    assert [p["step"] for p in lines] == list(range(1, 10))  # the last step waits for its figure
    assert [p["comm_wait_s"] for p in lines] == pytest.approx([0.001 * i for i in range(1, 10)])
    waits[10] = 0.010
    follower.finish()
    last = json.loads((tmp_path / "timeline.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 10 and last["comm_wait_s"] == 0.010


def test_batches_of_an_evaluation_are_not_a_stall(tmp_path):
    session, follower = make(tmp_path, every_s=100.0, stall_s=2.0)
    for i in range(50):
        step(session, follower, 0.010)
    follower.tick()
    for _ in range(5):  # a long evaluation: no step for 5 s, but its batches keep coming
        session.now += 1.0
        session.last_batch_at = session.now  # the DataLoader probe's mark: a batch left the loader
        follower.tick()
    assert session.stop_reason is None and follower.record.blackbox is None
    session.now += 2.5
    follower.tick()
    assert session.stop_reason == "stalled"
    assert follower.record.blackbox.message.startswith("no step finished for 7.5 s after step 50")


def test_follow_in_the_api_has_no_limits_unless_given():
    import pytest

    from torchdoctor.errors import UsageError
    from torchdoctor.model.limits import DEFAULT_STEPS, FOLLOW_MAX_SECONDS, FOLLOW_STEPS
    from torchdoctor.run.inprocess import MeasureSpec

    spec = MeasureSpec.of(follow=True)
    assert spec.follow and spec.steps == FOLLOW_STEPS and spec.max_seconds == FOLLOW_MAX_SECONDS
    assert MeasureSpec.of(follow=True, steps=500, max_seconds=60).steps == 500
    assert MeasureSpec.of().steps == DEFAULT_STEPS and not MeasureSpec.of().follow
    with pytest.raises(UsageError, match="follow_every_s must be a positive number"):
        MeasureSpec.of(follow=True, follow_every_s=0)


def test_the_panels_top_findings_are_asked_at_each_live_record_write(tmp_path):
    """Made from the record just written as live.json (the report's ranking, handed in from above), only
    when there is a panel; a failure leaves the panel without them, said in the errors."""
    from helpers.records import record

    asked = []

    def top(rec):
        asked.append(len(rec.steps))
        return [f"TD902 From step {rec.follow.steps - 5}, steps became 2.00x slower and stayed so"]

    class Panel:
        def update(self, follower):
            self.top = list(follower.top_findings)

    panel = Panel()
    session, follower = make(tmp_path, every_s=0.5, panel=panel, top_findings=top)
    follower.live_record = lambda: record(steps=2)
    for _ in range(20):
        step(session, follower, 0.010)
    session.now = 1.0
    follower.tick()
    assert asked == [4] and panel.top == ["TD902 From step 15, steps became 2.00x slower and stayed so"]
    quiet_session, quiet = make(tmp_path / "q", every_s=0.5, top_findings=top)  # no panel: never asked
    (tmp_path / "q").mkdir()
    quiet.live_record = lambda: record(steps=2)
    quiet_session.now = 1.0
    quiet.tick()
    assert (tmp_path / "q" / "live.json").exists() and asked == [4]
    broken_session, broken = make(tmp_path / "b", every_s=0.5, panel=Panel(), top_findings=lambda rec: 1 / 0)
    (tmp_path / "b").mkdir()
    broken.live_record = lambda: record(steps=2)
    broken_session.now = 1.0
    broken.tick()
    assert broken.top_findings == [] and any("top findings: ZeroDivisionError" in e for e in broken.errors)


def test_a_followed_run_leaves_unmeasured_steps_lean_and_reads_them_from_its_thread(tmp_path):
    """A step listener made every step of a followed run build its sample and take the hooks' full paths
    (110 µs a step of the doctor's own time in benchmarks/results/follow_cost.json); the follower reads the
    steps from its own thread instead."""
    from torchdoctor.run.session import RunSession, SessionConfig

    now = [0.0]
    session = RunSession(SessionConfig(warmup=1, steps=10_000), clock=lambda: now[0])
    follower = Follower(session, SimpleNamespace(lines=Lines()), tmp_path, FollowOptions(every_s=100.0))
    session.subscribe(follower)
    for _ in range(200):
        now[0] += 0.01
        session.on_optimizer_step()
    assert session.lean and session._rows  # unmeasured steps kept as rows: no sample built, nobody notified
    follower.tick()
    assert [p.step for p in follower.timeline.points] == list(range(1, 201))
    now[0] += 0.01
    session.on_optimizer_step()
    follower.tick()
    assert follower.timeline.points[-1].step == 201 and follower.record.steps == 201


MIB = 2**20


def _followed_memory(tmp_path, rss, heap, seconds=150.0):
    """A steady 10 ms step for `seconds`, the follower ticking every 2 s; `rss(t)` and `heap(t)` are the
    machine's readings at t (heap None: a C library without a heap figure)."""
    session, follower = make(tmp_path, every_s=10.0)
    follower.read_peak_rss = lambda: rss(session.now)
    follower.read_heap_in_use = lambda: heap(session.now)
    follower.read_available = lambda: 8 * 2**30
    while session.now < seconds:
        for i in range(200):
            step(session, follower, 0.010)
        follower.tick()
    return follower


def test_a_resident_set_that_creeps_with_the_heap_flat_is_no_memory_change(tmp_path):
    """The allocator keeping freed memory (fragmentation, the doctor's own small allocations among the
    script's) grows the RSS high-water mark; what the program holds stays the same."""
    follower = _followed_memory(tmp_path, rss=lambda t: int(400 * MIB + 2 * MIB * t), heap=lambda t: 300 * MIB)
    assert not [c for c in follower.record.changes if c.kind == "memory"]
    assert follower.timeline.points[-1].mem_bytes > 600 * MIB  # the points still carry the RSS mark


def test_a_heap_that_keeps_growing_is_a_memory_creep_measured_on_the_heap(tmp_path):
    follower = _followed_memory(tmp_path, rss=lambda t: int(400 * MIB + 2 * MIB * t),
                                heap=lambda t: int(300 * MIB + 1 * MIB * t))
    [change] = [c for c in follower.record.changes if c.kind == "memory"]
    assert change.memory_measure == "heap-in-use"
    assert 0.9 * MIB < change.bytes_per_s < 1.1 * MIB
    # the limit is in the heap's own terms: what it held at the first check plus what is still available
    assert 8 * 2**30 + 300 * MIB < change.limit_bytes < 8 * 2**30 + 320 * MIB


def test_without_a_heap_figure_the_resident_set_is_read_and_said(tmp_path):
    follower = _followed_memory(tmp_path, rss=lambda t: int(400 * MIB + 2 * MIB * t), heap=lambda t: None)
    [change] = [c for c in follower.record.changes if c.kind == "memory"]
    assert change.memory_measure == "rss-high-water" and 1.8 * MIB < change.bytes_per_s < 2.2 * MIB


def test_a_heap_that_is_slow_to_read_is_read_less_often(tmp_path):
    """The heap's reading holds the allocator's locks while it walks the free lists (8 ms was seen on a
    fragmented 1.2 GiB heap): it is read again only after 1000x its cost."""
    import time

    calls = []

    def slow_heap(t):
        calls.append(t)
        time.sleep(0.004)  # 4 ms a reading: at most one every 4 s of the run
        return 300 * MIB

    follower = _followed_memory(tmp_path, rss=lambda t: 400 * MIB, heap=slow_heap, seconds=60.0)
    ticks = 30  # a tick every 2 s of the run
    assert 1 < len(calls) <= 60.0 / 4.0 + 1 < ticks
    assert all(b - a >= 4.0 for a, b in zip(calls, calls[1:]))
