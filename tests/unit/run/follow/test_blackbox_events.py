"""A black box reaches the exporters when it is written, not when the job ends: a stalled run's
Prometheus textfile, TensorBoard event file and OTLP log records carry the stop while the run (or,
under --nproc-per-node, the job's launcher) is still going, read back with the libraries' own readers."""

import pytest

from helpers.follow_fakes import make, step
from helpers.otlp import gauge_points, log_records, otlp_receiver
from torchdoctor.integrations.exporters import OtlpExporter, PrometheusExporter, TensorBoardExporter
from torchdoctor.run.follow.blackbox import read_box
from torchdoctor.run.follow.follower import FollowOptions
from torchdoctor.run.follow.job import JobWatch

parser = pytest.importorskip("prometheus_client.parser")


def stall(follower, session):
    """Steps, then none for longer than the limit: the follower's thread finds the stall."""
    for _ in range(50):
        step(session, follower, 0.010)
    follower.tick()
    session.now += 2.5
    follower.tick()
    assert session.stop_reason == "stalled"


def prometheus(path):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in parser.text_string_to_metric_families(path.read_text()) for s in f.samples}


def test_a_stall_reaches_the_exporters_of_a_run_before_it_ends(tmp_path):
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    textfile = tmp_path / "torchdoctor.prom"
    with otlp_receiver() as (endpoint, received):
        sinks = [PrometheusExporter(textfile=textfile), TensorBoardExporter(tmp_path / "tb"), OtlpExporter(endpoint)]
        session, follower = make(tmp_path, every_s=100.0, stall_s=2.0, sinks=sinks)
        stall(follower, session)
        # the run is still going (its stop only requested, the follower not finished, no exporter closed)
        assert prometheus(textfile)[("torchdoctor_stopped", (("reason", "stall"),))] == 1
        events = EventAccumulator(str(tmp_path / "tb"))
        events.Reload()
        [text] = events.Tensors("torchdoctor/stopped/text_summary")
        assert text.step == 50 and "no step finished" in text.tensor_proto.string_val[0].decode()
        [(body, attrs)] = [r for r in log_records(received) if r[1]["torchdoctor.event"].string_value == "stopped"]
        assert "no step finished" in body and attrs["torchdoctor.reason"].string_value == "stall"
        box = read_box(tmp_path / "blackbox.json")  # the box on its own, its stall figures in it
        assert box.reason == "stall" and box.step == 50 and box.stall_limit_s == 2.0 and box.stall_s >= 2.0
        follower.finish()
        follower.close_sinks()


def test_a_ranks_stall_reaches_the_exporters_while_the_job_goes_on(tmp_path):
    """The rank's follower writes rank-1/blackbox.json; the launcher's next tick sends it, labelled with
    the rank; the merged record's boxes at the end are not sent again."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    textfile = tmp_path / "torchdoctor.prom"
    (tmp_path / "rank-1").mkdir()
    session, follower = make(tmp_path / "rank-1", every_s=100.0, stall_s=2.0)
    with otlp_receiver() as (endpoint, received):
        prom, otlp = PrometheusExporter(textfile=textfile, per_rank=True), OtlpExporter(endpoint)
        watch = JobWatch(tmp_path, [0, 1], FollowOptions(every_s=100.0, sinks=[prom, otlp]))
        watch.tick()
        assert not any(name == "torchdoctor_stopped" for name, _ in prometheus(textfile))
        stall(follower, session)
        watch.tick()  # a tick of the launcher's thread while the ranks run
        assert prometheus(textfile)[("torchdoctor_stopped", (("rank", "1"), ("reason", "stall")))] == 1
        stopped = [(body, attrs) for body, attrs in log_records(received)
                   if attrs["torchdoctor.event"].string_value == "stopped"]
        assert len(stopped) == 1 and stopped[0][0].startswith("rank 1: no step finished")
        assert stopped[0][1]["torchdoctor.rank"].int_value == 1
        assert watch.state()["stopped"].startswith("rank 1: no step finished")  # the panel's line
        # the job ends: the merged record holds the same box; the exporters have had it
        from types import SimpleNamespace

        watch.tick(final=True)
        watch.blackboxes(SimpleNamespace(ranks=[SimpleNamespace(rank=1, blackbox=follower.record.blackbox)]))
        otlp.close()
        prom.close()
    assert len([r for r in log_records(received) if r[1]["torchdoctor.event"].string_value == "stopped"]) == 1
    assert "torchdoctor.gpu.utilization" not in gauge_points(received)  # a CPU run: no GPU figure, not a 0


def test_an_unreadable_black_box_is_said_once_and_sent_from_the_record_at_the_end(tmp_path):
    (tmp_path / "rank-0").mkdir()
    (tmp_path / "rank-0" / "blackbox.json").write_text('{"schema_version": 10, "blackbox": {"reason": 3}}')
    sent = []
    sink = type("Sink", (), {"on_blackbox": lambda self, box, rank=None: sent.append((box, rank))})()
    watch = JobWatch(tmp_path, [0], FollowOptions(every_s=100.0, sinks=[sink]))
    watch.tick()
    watch.tick()
    assert sent == [] and len(watch.errors) == 1 and "rank 0's black box" in watch.errors[0]
    assert "\n" not in watch.errors[0]
    from types import SimpleNamespace

    box = SimpleNamespace(reason="exception", message="boom", t=1.0)
    watch.blackboxes(SimpleNamespace(ranks=[SimpleNamespace(rank=0, blackbox=box)]))
    assert sent == [(box, 0)]


def test_the_collective_a_rank_waits_in_is_read_from_its_stack():
    from torchdoctor.model.follow_record import StackFrame, ThreadStack
    from torchdoctor.model.location import Location
    from torchdoctor.run.follow.blackbox import waiting_in

    site = "/venv/lib/python3.11/site-packages/torch"
    user = StackFrame("train.py", 42, "<module>")
    where = Location("train.py", 42, "<module>")

    def stack(*frames):
        return ThreadStack(name="MainThread", ident=1, main=True, daemon=False, frames=[user, *frames])

    in_all_reduce = stack(StackFrame(f"{site}/distributed/c10d_logger.py", 81, "_exception_logger.<locals>.wrapper"),
                          StackFrame(f"{site}/distributed/distributed_c10d.py", 2806, "all_reduce"))
    assert waiting_in(in_all_reduce, where) == "all_reduce() at train.py:42 (torch.distributed)"
    in_backward = stack(StackFrame(f"{site}/_tensor.py", 625, "Tensor.backward"),
                        StackFrame(f"{site}/autograd/__init__.py", 354, "backward"),
                        StackFrame(f"{site}/autograd/graph.py", 829, "_engine_run_backward"))
    assert waiting_in(in_backward, where, distributed=True).startswith("backward() at train.py:42, where DDP's")
    assert waiting_in(in_backward, where, distributed=False) is None  # no process group: no one to wait for
    assert waiting_in(stack(StackFrame("time.py", 1, "sleep")), where, distributed=True) is None


def test_a_rank_killed_without_a_word_is_a_lost_stop_at_once(tmp_path):
    """SIGKILL (the out-of-memory killer) leaves no black box: the rank's heartbeat names a process that no
    longer runs and no record: a `lost` stop goes out, with its steps and line; a running rank's, or one
    that wrote its record, does not."""
    import json
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process now
    beats = {0: {"pid": gone.pid, "steps": 41, "position": "train.py:17 in <module>"},
             1: {"pid": __import__("os").getpid(), "steps": 41},  # runs (this test's process)
             2: {"pid": gone.pid, "steps": 41}}
    for rank, beat in beats.items():
        (tmp_path / f"rank-{rank}").mkdir()
        (tmp_path / f"rank-{rank}" / "heartbeat.json").write_text(json.dumps({"rank": rank, "state": "running",
                                                                              "t": 0.0, **beat}))
    (tmp_path / "rank-2" / "record.json").write_text("{}")  # ended after writing its record: not lost
    textfile = tmp_path / "torchdoctor.prom"
    prom = PrometheusExporter(textfile=textfile, per_rank=True)
    watch = JobWatch(tmp_path, [0, 1, 2], FollowOptions(every_s=100.0, sinks=[prom]))
    watch.tick()
    watch.tick()
    stopped = {k: v for k, v in prometheus(textfile).items() if k[0] == "torchdoctor_stopped"}
    assert stopped == {("torchdoctor_stopped", (("rank", "0"), ("reason", "lost"))): 1.0}
    box = watch.boxes[0]
    assert box.step == 41 and "after step 41, last seen at train.py:17 in <module>" in box.message
    assert watch.state()["stopped"].startswith("rank 0: the rank's process")
    prom.close()
