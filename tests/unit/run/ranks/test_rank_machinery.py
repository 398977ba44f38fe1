"""The parts of a multi-rank run that need no second process: the stall watch's verdict,
the simulated slow link, the launch's argument checks, spawned ranks' wrapper, the DDP knobs'
parsing and the tune trials for DDP findings."""

import pickle
import socket
import time

import pytest

from torchdoctor.errors import UsageError
from torchdoctor.run.knobs.spec import parse_settings
from torchdoctor.comm import slow_link
from torchdoctor.run.ranks.heartbeat import StallWatch
from torchdoctor.run.children import launcher_accepts
from torchdoctor.run.ranks.launch import LaunchRequest, check_endpoint, from_torchrun, is_torchrun, launcher_argv


def beat(rank, steps, position, waiting, state="running", slowest=0.05):
    return {"rank": rank, "pid": 100 + rank, "state": state, "steps": steps, "position": position,
            "waiting": waiting, "slowest_step_s": slowest}


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_rank_that_stops_stepping_while_the_others_wait_is_named():
    clock = Clock()
    watch = StallWatch(None, [0, 1], stall_s=30, clock=clock)
    assert watch.check({0: beat(0, 5, "train.py:48 in train", True), 1: beat(1, 5, "train.py:22", False)}) is None
    clock.now = 29
    assert watch.check({0: beat(0, 5, "train.py:48 in train", True), 1: beat(1, 5, "train.py:22", False)}) is None
    clock.now = 31
    stall = watch.check({0: beat(0, 5, "train.py:48 in train (inside _engine_run_backward)", True),
                         1: beat(1, 5, "train.py:22 in train", False)})
    assert stall.rank == 1
    assert stall.message.startswith("rank 1 made no progress for 31 s (after 5 steps; last seen at train.py:22")
    assert "rank 0 at train.py:48 in train (inside _engine_run_backward) waiting for the others" in stall.message


def test_progress_before_the_first_step_is_each_ranks_own_limit_and_slow_steps_widen_the_window():
    clock = Clock()
    watch = StallWatch(None, [0, 1], stall_s=10, clock=clock)
    clock.now = 100
    assert watch.check({0: beat(0, 0, "a", True), 1: beat(1, 0, "b", False)}) is None  # not training yet
    watch.check({0: beat(0, 1, "a", True, slowest=5.0), 1: beat(1, 1, "b", False, slowest=5.0)})
    clock.now = 130  # 30 s without a step, but ten 5 s steps is 50 s
    assert watch.check({0: beat(0, 1, "a", True, slowest=5.0), 1: beat(1, 1, "b", False, slowest=5.0)}) is None
    clock.now = 151
    assert watch.check({0: beat(0, 1, "a", True, slowest=5.0), 1: beat(1, 1, "b", False, slowest=5.0)}).rank == 1


def test_every_rank_waiting_in_a_collective_is_a_mismatch_not_one_rank():
    clock = Clock()
    watch = StallWatch(None, [0, 1], stall_s=5, clock=clock)
    watch.check({0: beat(0, 3, "a", True), 1: beat(1, 3, "b", True)})
    clock.now = 6
    stall = watch.check({0: beat(0, 3, "a", True), 1: beat(1, 3, "b", True)})
    assert stall.rank is None and "called different collectives" in stall.message


def test_the_simulated_link_finishes_a_transfer_after_the_collective():
    assert slow_link.transfer_s(10**9, 2, 1.0) == pytest.approx(1.0)  # all-reduce: 2(n-1)/n of the bytes
    assert slow_link.transfer_s(10**9, 4, 1.0, "all_gather") == pytest.approx(0.75)
    assert slow_link.transfer_s(10**9, 4, 1.0, "broadcast") == pytest.approx(1.0)

    class Done:
        def wait(self):
            return True

        def is_completed(self):
            return True

    work = slow_link.DelayedWork(Done(), seconds=0.05)
    assert not work.is_completed()  # the transfer has not started
    started = time.perf_counter()
    work.wait()
    assert time.perf_counter() - started >= 0.05 and work.is_completed()


def test_a_port_in_use_on_the_rendezvous_node_is_refused_with_a_free_one_named():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=f"port {port} on localhost is already in use.*--rdzv-endpoint localhost:"):
            check_endpoint(f"localhost:{port}", node_rank=0)
        assert check_endpoint(f"localhost:{port}", node_rank=1) == ("localhost", port)  # node 1 only connects
    with pytest.raises(UsageError, match="is not HOST:PORT"):
        check_endpoint("localhost", 0)


def test_the_ranks_are_started_by_torch_distributed_run():
    single = launcher_argv(LaunchRequest(nproc_per_node=2, child_argv=["train.py"]))
    assert single[:2] == ["--nproc-per-node", "2"] and "--standalone" in single
    assert single[-4:] == ["--", "torchdoctor", "run", "train.py"] and "--module" in single
    from torch.distributed.run import parse_args

    # a script argument that abbreviates one of torchrun's own options (--logs ~ --logs-specs) stays the script's
    with_logs = parse_args(launcher_argv(LaunchRequest(nproc_per_node=2, child_argv=["t.py", "--logs", "none"])))
    assert (with_logs.module, with_logs.training_script) == (True, "torchdoctor")
    assert with_logs.training_script_args == ["run", "t.py", "--logs", "none"]
    two = launcher_argv(LaunchRequest(nproc_per_node=1, nnodes=2, node_rank=1, rdzv_endpoint="host:29500",
                                      child_argv=["t.py"]))
    assert two[two.index("--node-rank") + 1] == "1" and two[two.index("--rdzv-endpoint") + 1] == "host:29500"
    args = parse_args(two)  # torchrun's own parser accepts what we build
    assert (args.nnodes, args.node_rank, args.rdzv_backend, args.max_restarts) == ("2", 1, "static", 0)


def test_a_torchrun_without_shutdown_timeout_is_not_given_it(monkeypatch):
    """torch 2.11's torchrun has no --shutdown-timeout and exits 2 on it (seen on the H200)."""
    import argparse

    import torch.distributed.run as torchrun

    real = torchrun.get_args_parser()
    assert "--shutdown-timeout" in launcher_argv(LaunchRequest(nproc_per_node=2, child_argv=["t.py"])) or \
        not any("--shutdown-timeout" in a.option_strings for a in real._actions)

    def older_parser():
        p = argparse.ArgumentParser()
        for action in real._actions:
            if action.option_strings and "--shutdown-timeout" not in action.option_strings and "-h" not in \
                    action.option_strings:
                p.add_argument(*action.option_strings, dest=action.dest, default=action.default)
        return p

    monkeypatch.setattr(torchrun, "get_args_parser", older_parser)
    launcher_accepts.cache_clear()  # asked once per process; this test swaps the launcher
    try:
        argv = launcher_argv(LaunchRequest(nproc_per_node=2, child_argv=["t.py"]))
    finally:
        launcher_accepts.cache_clear()
    assert "--shutdown-timeout" not in argv and argv[:2] == ["--nproc-per-node", "2"]


def _train(rank, scale):
    return rank * scale


def test_a_spawned_function_is_wrapped_picklably():
    from torchdoctor.run.ranks.spawned import SpawnedRank

    wrapped = SpawnedRank(fn=_train, nprocs=2, ranks_dir="/tmp/x", job_id="j", script="t.py", warmup=1, steps=2,
                          max_seconds=10, knobs={"no_sync": True})
    again = pickle.loads(pickle.dumps(wrapped))
    assert again.fn is _train and again.knobs == {"no_sync": True}


def test_ddp_knobs_parse_and_say_what_they_expect():
    assert parse_settings(["no_sync=true", "bucket_cap_mb=100", "comm_hook=fp16", "nproc=1",
                           "find_unused_parameters=false", "broadcast_buffers=false"]) == {
        "no_sync": True, "bucket_cap_mb": 100.0, "comm_hook": "fp16", "nproc": 1,
        "find_unused_parameters": False, "broadcast_buffers": False}
    with pytest.raises(UsageError, match="comm_hook=bf16|fp16"):
        parse_settings(["comm_hook=int8"])
    with pytest.raises(UsageError, match="expected a number > 0"):
        parse_settings(["bucket_cap_mb=0"])


SELF_STARTED = '''import multiprocessing


def train(rank):
    pass


if __name__ == "__main__":
    workers = [multiprocessing.get_context("spawn").Process(target=train, args=(r,)) for r in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
'''


def test_a_script_that_trains_in_processes_it_starts_is_told_how_to_launch(tmp_path):
    from torchdoctor.diagnosis.steps import no_step_explanation
    from torchdoctor.run.runner import RunRequest, execute

    script = tmp_path / "launcher.py"
    script.write_text(SELF_STARTED)
    record = execute(RunRequest(target=str(script), steps=3, warmup=0, max_seconds=60), tmp_path)
    why = no_step_explanation(record)
    assert "not measured" in why and "launcher.py:11" in why and "running train with multiprocessing" in why
    assert "--nproc-per-node N" in why


def test_a_torchrun_target_is_read_by_torchruns_parser_as_the_doctors_ranks():
    """`torchdoctor run -m torch.distributed.run ... -m pkg.train ARGS` would measure torchrun's agent."""
    assert is_torchrun("torch.distributed.run", module=True) and is_torchrun("/usr/bin/torchrun", module=False)
    assert not is_torchrun("train.py", module=False) and not is_torchrun("torchrun_helpers", module=True)
    job = from_torchrun(["--standalone", "--nproc_per_node=2", "-m", "--", "pkg.train", "--logs", "none"])
    assert (job.nproc_per_node, job.nnodes, job.target, job.module, job.args) == (
        2, 1, "pkg.train", True, ["--logs", "none"])
    nodes = from_torchrun(["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29400",
                           "--nproc-per-node", "4", "train.py"])
    assert (nodes.nnodes, nodes.node_rank, nodes.rdzv_endpoint, nodes.module) == (2, 1, "10.0.0.1:29400", False)
    for argv, named in ((["--nproc-per-node", "gpu", "t.py"], "--nproc-per-node gpu"),
                        (["--nnodes", "1:4", "--nproc-per-node", "2", "t.py"], "elastic"),
                        (["--max-restarts", "3", "--nproc-per-node", "2", "t.py"], "--max-restarts"),
                        (["--no-python", "--nproc-per-node", "2", "t.py"], "--no-python")):
        with pytest.raises(UsageError, match=named):
            from_torchrun(argv)
