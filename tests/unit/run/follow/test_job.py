"""The launcher's side of a followed multi-rank job (run/follow/job.py): each rank's timeline read as
it grows (and again whole after the rank thinned it), the exporters handed each rank's points with
its rank, a rank that becomes a straggler told to them, the panel's row per rank, and the ranks' lines
passed through the panel without splitting it."""

import io
import os

from msgspec import json as mjson

from helpers.records import rank_points as points
from torchdoctor.model.follow_record import ChangePoint, Level
from torchdoctor.model.serialize import to_plain
from torchdoctor.run.follow.follower import FollowOptions
from torchdoctor.run.follow.job import JobOutput, JobWatch, TimelineTail
from torchdoctor.run.follow.panel import ERASE_UP, LivePanel


def write(path, pts, mode="ab"):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode) as f:
        f.write(b"".join(mjson.encode(p) + b"\n" for p in pts))


def test_a_timeline_is_read_as_it_grows_and_whole_after_a_rewrite(tmp_path):
    path = tmp_path / "timeline.jsonl"
    tail = TimelineTail(path)
    assert tail.read() == ([], False)  # not written yet
    pts = points(0, steps=30)
    write(path, pts[:10])
    with open(path, "ab") as f:
        f.write(mjson.encode(pts[10])[:20])  # a line half written
    got, rewritten = tail.read()
    assert [p.step for p in got] == list(range(1, 11)) and not rewritten
    with open(path, "ab") as f:
        f.write(mjson.encode(pts[10])[20:] + b"\n")
    assert [p.step for p in tail.read()[0]] == [11]
    tmp = tmp_path / "t.tmp"  # the rank thinned its timeline: a new file replaces it
    write(tmp, pts[:5], mode="wb")
    os.replace(tmp, path)
    got, rewritten = tail.read()
    assert rewritten and [p.step for p in got] == [1, 2, 3, 4, 5]


class Sink:
    def __init__(self):
        self.points, self.changes = {}, []

    def on_points(self, pts, rank=None):
        self.points.setdefault(rank, []).extend(p.step for p in pts)

    def on_change(self, change):
        self.changes.append(change)


def test_the_exporters_get_each_ranks_points_and_the_straggler(tmp_path):
    sink = Sink()
    watch = JobWatch(tmp_path, [0, 1], FollowOptions(every_s=0.0, sinks=[sink]))
    for rank in (0, 1):
        write(tmp_path / f"rank-{rank}" / "timeline.jsonl", points(rank, steps=150))
    watch.tick()
    for rank in (0, 1):
        write(tmp_path / f"rank-{rank}" / "timeline.jsonl", points(rank)[150:])
    watch.tick(final=True)
    assert sink.points == {0: list(range(1, 401)), 1: list(range(1, 401))}
    assert watch.state()["last_change"].startswith("rank 1 became the straggler at step")
    [change] = sink.changes
    assert change.kind == "straggler" and change.rank == 1 and abs(change.step - 200) <= 5
    # a rank's own change, as its follower wrote it, goes to the exporters with its rank
    own = ChangePoint(kind="step-time", step=201, t=2.0, detected_step=221, before=Level(0.01, 0.0004, 100),
                      after=Level(0.04, 0.0004, 20), threshold=0.002)
    with open(tmp_path / "rank-0" / "changes.jsonl", "ab") as f:
        f.write(mjson.encode(to_plain(own)) + b"\n")
    watch.tick(final=True)
    assert [(c.kind, c.rank) for c in sink.changes] == [("straggler", 1), ("step-time", 0)]
    assert watch.state()["last_change"] == "rank 0: step-time changed at step 201"
    rows = watch.state()["ranks"]
    assert [r["rank"] for r in rows] == [0, 1] and rows[0]["comm_ms"] > rows[1]["comm_ms"]


def test_the_panel_has_a_row_per_rank_and_rank_lines_erase_it_first(tmp_path):
    screen = io.StringIO()
    panel = LivePanel(screen, width=100)
    state = {"ranks": [{"rank": 0, "step": 1200, "step_ms": 33.0, "wait_ms": 0.1, "comm_ms": 31.9, "samples_s": 480.0,
                        "mem": 2**30},
                       {"rank": 1, "step": 1199, "step_ms": 33.1, "wait_ms": 0.1, "comm_ms": 0.9, "samples_s": 480.0,
                        "mem": 2**30}],
             "t": 40.0, "changes": 1, "last_change": "rank 1 became the straggler at step 152"}
    panel.show(state)
    text = screen.getvalue()
    assert "31.90 ms" in text and "0.90 ms" in text and "rank 1 became the straggler at step 152" in text
    drawn = panel._lines
    with JobOutput(tmp_path / "logs", panel):
        import sys

        sys.stdout.write("[rank1]:epoch 3 loss 0.25\n")
    assert screen.getvalue().endswith(ERASE_UP.format(n=drawn)) and panel._lines == 0  # erased, then the line
    assert (tmp_path / "logs").is_dir()
