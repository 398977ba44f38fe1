"""The followed run's timeline (run/follow/timeline.py): appended as JSON lines, bounded by
thinning its older part, read back bounded."""

from torchdoctor.model.follow_record import TimelinePoint
from torchdoctor.run.follow.timeline import Timeline, merge, read_timeline, thin


def point(i, step_s=0.01, mem=None):
    return TimelinePoint(step=i, t=i * 0.01, step_s=step_s, data_wait_s=step_s / 10, samples=32, mem_bytes=mem)


def test_points_are_appended_and_read_back(tmp_path):
    timeline = Timeline(tmp_path / "timeline.jsonl")
    timeline.add([point(i) for i in range(1, 11)])
    timeline.flush()
    timeline.add([point(i) for i in range(11, 16)])
    timeline.flush()
    back = read_timeline(tmp_path / "timeline.jsonl")
    assert [p.step for p in back] == list(range(1, 16))


def test_the_timeline_stays_bounded_and_keeps_its_recent_steps_whole(tmp_path):
    timeline = Timeline(tmp_path / "timeline.jsonl", max_points=100, keep_recent=40)
    for start in range(1, 1001, 50):
        timeline.add([point(i) for i in range(start, start + 50)])
        timeline.flush()
    assert len(timeline.points) <= 100
    assert [p.step for p in timeline.points[-40:]] == list(range(961, 1001))
    assert sum(p.span for p in timeline.points) == 1000  # every step is still stood for
    back = read_timeline(tmp_path / "timeline.jsonl")
    assert [(p.step, p.span) for p in back] == [(p.step, p.span) for p in timeline.points]
    assert timeline.thinned_to > 1


def test_merging_weights_by_span_and_keeps_the_memory_peak():
    a, b = point(1, 0.01, mem=10), point(2, 0.03, mem=30)
    b.span = 3
    m = merge(a, b)
    assert m.span == 4 and abs(m.step_s - 0.025) < 1e-12 and m.mem_bytes == 30 and m.step == 1


def test_thin_leaves_a_short_timeline_alone():
    points = [point(i) for i in range(10)]
    assert thin(points, keep_recent=20) == points


def test_a_damaged_line_is_skipped(tmp_path):
    path = tmp_path / "timeline.jsonl"
    path.write_text('{"step": 1, "t": 0.1, "step_s": 0.01}\n{"step": -2, "t": 0.2, "step_s": 0.01}\nnot json\n'
                    '{"step": 3, "t": 0.3, "step_s": 0.01}\n')
    assert [p.step for p in read_timeline(path)] == [1, 3]


def test_kept_steps_count_every_step_and_hold_the_first_and_the_last():
    from torchdoctor.run.follow.kept import KeptSteps

    steps = KeptSteps()
    for i in range(1, 5001):
        steps.append(i)
        if i % 100 == 0:
            steps.trim(first=200, last=1000)
    assert len(steps) == 5000  # the session numbers the next step len(steps) + 1
    held = list(steps)
    assert held[:200] == list(range(1, 201)) and held[-1000:] == list(range(4001, 5001))
    assert len(held) < 200 + 1000 + 1000 and steps[-1] == 5000 and bool(steps)


def test_merging_keeps_the_compute_time_of_the_points_that_timed_it():
    # a long run's bare steps time no backward or optimizer (StepSample.split_timed): their points say None,
    # and a merge neither averages a None in as zero nor drops the neighbour's timed figure
    timed, bare = point(1, 0.01), point(2, 0.01)
    timed.compute_s, bare.compute_s = 0.004, None
    assert merge(timed, bare).compute_s == 0.004 and merge(bare, timed).compute_s == 0.004
    bare2 = point(3, 0.01)
    bare2.compute_s = None
    assert merge(bare, bare2).compute_s is None
