"""Multi-rank runs end to end on CPU (gloo, 2 ranks): launched through torch.distributed.run,
by torchrun directly, by the script's own torch.multiprocessing.spawn, and as two nodes on
localhost; a rank that crashes, one that hangs, Ctrl-C; and `torchdoctor comm`. Every
subprocess has a timeout; each test checks that no rank outlived its launcher."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("ddp_job.py")
LIMIT_S = 120
pytestmark = pytest.mark.slow


def env(**extra):
    out = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", **extra)
    out.pop("TORCHDOCTOR_SIMULATED_LINK_GBPS", None)
    return out


def doctor(*args, fault="", extra_env=None, **kw):
    return subprocess.run([sys.executable, "-m", "torchdoctor", *args], capture_output=True, text=True,
                          timeout=LIMIT_S, env=env(FAULT=fault, **(extra_env or {})), **kw)


def rank_pids(run_dir: Path) -> list[int]:
    return [json.loads(p.read_text())["pid"] for p in run_dir.glob("rank-*/heartbeat.json")]


def assert_no_rank_left(run_dir: Path) -> None:
    deadline = time.monotonic() + 10
    alive = rank_pids(run_dir)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if Path(f"/proc/{pid}").exists()
                 and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]]
        time.sleep(0.2)
    assert not alive, f"ranks still running: {alive}"


def records(run_dir: Path) -> dict[int, dict]:
    return {int(p.parent.name[5:]): json.loads(p.read_text()) for p in run_dir.glob("rank-*/record.json")}


@pytest.fixture(scope="module")
def long_ddp_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """Two ranks for 1,100 measured steps (past ~1,000, where the straggler test's binomial sum
    overflowed a float): the long-run test's, and the run the merge-and-re-render test reads (it
    ran 6 steps of its own before; what it checks holds at any length)."""
    out = tmp_path_factory.mktemp("long_ddp") / "run"
    done = doctor("run", "--nproc-per-node", "2", "--steps", "1100", "--warmup", "1", "--max-seconds", "90",
                  "--one-rank", "never", "--out", str(out), "--format", "json", str(JOB),
                  extra_env={"STEPS": "1150"})
    return done, out


def test_two_ranks_are_measured_merged_and_re_rendered(tmp_path, long_ddp_run):
    done, out = long_ddp_run
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # stdout carries the report alone
    by_rank = records(out)
    assert sorted(by_rank) == [0, 1]
    jobs = {r["distributed"]["identity"]["job_id"] for r in by_rank.values()}
    assert len(jobs) == 1 and all(r["distributed"]["ddp_steps"] for r in by_rank.values())
    [accum] = [f for f in report["findings"] if f["code"] == "TD601"]
    assert accum["location"]["line"] == 18 and accum["evidence"]["all_reduces_per_step"] == 2
    assert {"Ranks", "All-reduce on this machine"} <= {t["title"] for t in report["tables"]}
    assert report["summary"]["steps_measured"] >= 1
    again = doctor("report", str(out), "--format", "json")
    assert again.returncode == 0 and "TD601" in {f["code"] for f in json.loads(again.stdout)["findings"]}
    # a rank folder of another launch is refused, with the reason
    mixed = tmp_path / "mixed"
    shutil.copytree(out / "rank-0", mixed / "rank-0")
    shutil.copytree(out / "rank-1", mixed / "rank-1")
    doc = json.loads((mixed / "rank-1" / "record.json").read_text())
    doc["distributed"]["identity"]["job_id"] = "0123456789abcdef"
    (mixed / "rank-1" / "record.json").write_text(json.dumps(doc))
    refused = doctor("report", str(mixed))
    assert refused.returncode == 2 and "is from another run" in refused.stderr and "Traceback" not in refused.stderr
    assert_no_rank_left(out)


def test_a_rank_that_crashes_mid_run_fails_the_job_and_every_record_is_kept(tmp_path):
    out = tmp_path / "run"
    done = doctor("run", "--nproc-per-node", "2", "--steps", "30", "--warmup", "1", "--out", str(out), str(JOB),
                  fault="crash")
    assert done.returncode == 1
    assert "rank 1 failed first" in done.stderr and "ValueError: bad batch at step 4" in done.stderr
    by_rank = records(out)
    assert by_rank[1]["run"]["status"] == "crashed" and by_rank[0]["steps"]  # rank 0's partial record
    assert json.loads((out / "report.json").read_text())["summary"]["status"] == "crashed"
    assert_no_rank_left(out)


def test_a_hung_rank_is_named_and_every_rank_stopped(tmp_path):
    out = tmp_path / "run"
    started = time.monotonic()
    done = doctor("run", "--nproc-per-node", "2", "--steps", "30", "--warmup", "1", "--stall-timeout", "3",
                  "--out", str(out), str(JOB), fault="hang")
    assert done.returncode == 1 and time.monotonic() - started < LIMIT_S
    message = done.stderr.split("the job stalled and was stopped: ", 1)[1]
    assert message.startswith("rank 1 made no progress") and "ddp_job.py:24" in message
    assert sorted(records(out)) == [0, 1]
    assert_no_rank_left(out)


def test_ctrl_c_stops_every_rank_and_keeps_what_each_measured(tmp_path):
    out = tmp_path / "run"
    launcher = subprocess.Popen([sys.executable, "-m", "torchdoctor", "run", "--nproc-per-node", "2", "--steps", "500",
                                 "--out", str(out), str(JOB)], env=env(FAULT="slow"), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + LIMIT_S
        while time.monotonic() < deadline:
            beats = [json.loads(p.read_text()) for p in out.glob("rank-*/heartbeat.json") if p.stat().st_size]
            if len(beats) == 2 and all(b["steps"] >= 3 for b in beats):
                break
            time.sleep(0.2)
        launcher.send_signal(signal.SIGINT)
        _, err = launcher.communicate(timeout=LIMIT_S)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert launcher.returncode == 130, err
    by_rank = records(out)
    assert sorted(by_rank) == [0, 1] and all(r["run"]["status"] == "interrupted" and r["steps"]
                                             for r in by_rank.values())
    assert_no_rank_left(out)


def test_two_launchers_meet_as_two_nodes_and_their_ranks_merge(tmp_path):
    port = 29000 + os.getpid() % 2000
    nodes = [subprocess.Popen([sys.executable, "-m", "torchdoctor", "run", "--nproc-per-node", "1", "--nnodes", "2",
                               "--node-rank", str(n), "--rdzv-endpoint", f"127.0.0.1:{port}", "--steps", "4",
                               "--warmup", "1", "--out", str(tmp_path / f"node{n}"), str(JOB)], env=env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for n in (0, 1)]
    try:
        errors = [node.communicate(timeout=LIMIT_S)[1] for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
    assert [node.returncode for node in nodes] == [0, 0], errors
    merged = tmp_path / "merged"
    shutil.copytree(tmp_path / "node0" / "rank-0", merged / "rank-0")
    shutil.copytree(tmp_path / "node1" / "rank-1", merged / "rank-1")
    done = doctor("report", str(merged), "--format", "md")
    assert done.returncode == 0, done.stderr
    ranks = done.stdout.split("## Ranks", 1)[1].split("\n\n", 2)[1]
    assert "| 0 |" in ranks and "| 1 |" in ranks and "lost" not in ranks


def test_ranks_started_by_torchrun_directly_write_one_merged_run(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                           "-m", "torchdoctor", "run", "--steps", "4", "--warmup", "1", "--out", str(out), str(JOB)],
                          capture_output=True, text=True, timeout=LIMIT_S, env=env())
    assert done.returncode == 0, done.stderr
    merged = json.loads((out / "report.json").read_text())
    assert [row[0] for row in next(t for t in merged["tables"] if t["title"] == "Ranks")["rows"]] == [0, 1]


def test_ranks_the_script_spawns_itself_are_measured(tmp_path):
    out = tmp_path / "run"
    done = doctor("run", "--steps", "5", "--warmup", "1", "--out", str(out), "--format", "json",
                  str(ROOT / "examples" / "ddp_spawn_no_sync.py"))
    assert done.returncode == 0, done.stderr
    assert sorted(records(out)) == [0, 1]
    assert all(r["distributed"]["identity"]["launcher"] == "mp.spawn" for r in records(out).values())
    [accum] = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "TD601"]
    assert accum["location"]["line"] == 46 and "wraps only `backward()`" in accum["message"]


def test_comm_measures_all_reduce_between_two_ranks_here():
    done = doctor("comm", "--sizes", "1M,4M", "--repeats", "2", "--warmup", "1", "--format", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["backend"] == "gloo" and result["world_size"] == 2
    assert [s["bytes"] for s in result["sizes"]] == [2**20, 4 * 2**20]
    assert all(s["busbw_gbps"] > 0 and len(s["times_s"]) == 2 for s in result["sizes"])
    assert result["link"]["kind"] == "loopback-tcp" and result["link"]["expected_gbps"] > 0


@pytest.mark.gpu
def test_comm_over_nccl_reads_the_transport_and_the_path():
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA GPUs")
    done = doctor("comm", "--nproc-per-node", "2", "--sizes", "4M,64M", "--format", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["backend"] == "nccl" and result["link"]["kind"] in ("nvlink", "pcie")
    assert result["link"]["topology_level"] and result["link"]["expected_gbps"] > 0
    assert all(s["busbw_gbps"] > 0 for s in result["sizes"])


def _one_cpu():
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def _another_cpu():
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})


def test_ranks_sharing_cores_get_a_scaling_verdict_from_a_measured_one_rank_run(tmp_path):
    """Two ranks pinned to one CPU core: the model (a rank's step minus its communication)
    would say ~2x; one rank alone is measured in the same command instead. The `--one-rank never`
    run, pinned too, goes on another core at the same time where there is one: each job has a
    core to itself, as when they ran one after the other."""
    out = tmp_path / "run"
    never_args = ("run", "--nproc-per-node", "2", "--steps", "6", "--warmup", "1", "--one-rank", "never",
                  "--out", str(tmp_path / "never"), "--format", "json", str(JOB))
    with ThreadPoolExecutor(max_workers=1) as pool:
        alongside = pool.submit(doctor, *never_args, preexec_fn=_another_cpu) if len(os.sched_getaffinity(0)) > 1 else None
        done = doctor("run", "--nproc-per-node", "2", "--steps", "20", "--warmup", "1", "--out", str(out),
                      "--format", "json", str(JOB), preexec_fn=_one_cpu)
        never = alongside.result() if alongside is not None else doctor(*never_args, preexec_fn=_one_cpu)
    assert done.returncode == 0, done.stderr
    assert "measuring one rank alone" in done.stderr
    [verdict] = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "TD606"]
    assert verdict["evidence"]["one_rank"] == "measured" and "(measured)" in verdict["title"]
    assert "share cores" in verdict["message"] or "waited for a CPU" in verdict["message"]
    assert verdict["evidence"]["throughput_vs_one_rank"] < 1.5  # two ranks taking turns on one core
    assert (out / "one-rank" / "rank-0" / "record.json").exists()
    again = json.loads(doctor("report", str(out), "--format", "json").stdout)  # re-rendered: still measured
    assert [f for f in again["findings"] if f["code"] == "TD606"][0]["evidence"]["one_rank"] == "measured"
    [model] = [f for f in json.loads(never.stdout)["findings"] if f["code"] == "TD606"]
    assert model["severity"] == "info" and "by a model" in model["title"] and "likely wrong here" in model["message"]
    assert_no_rank_left(out)


def test_a_long_ddp_run_reports_without_error(long_ddp_run):
    """Past 1,000 measured steps: the straggler test's binomial sum overflowed a float past ~1,000."""
    done, _ = long_ddp_run
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["summary"]["steps_measured"] >= 1000 and "TD606" in {f["code"] for f in report["findings"]}
    assert "Traceback" not in done.stderr


def test_a_rank_killed_by_sigkill_is_told_apart_from_an_allocator_out_of_memory(tmp_path):
    """No Python exception, exit by SIGKILL: what the kernel's OOM killer does. The report says
    host memory, not the allocator, keeps the other rank's record, and exits 1."""
    out = tmp_path / "run"
    done = doctor("run", "--nproc-per-node", "2", "--steps", "30", "--warmup", "1", "--out", str(out),
                  "--format", "json", str(JOB), fault="sigkill")
    assert done.returncode == 1, done.stderr[-4000:]
    report = json.loads(done.stdout)
    [killed] = [f for f in report["findings"] if f["code"] == "TD503"]
    assert "killed (SIGKILL)" in killed["title"] and "not the allocator" in killed["title"]
    assert killed["evidence"]["kind"] == "host-oom-kill" and killed["evidence"]["ranks"] == [1]
    assert "SIGKILL with no Python exception" in killed["message"]
    merged = json.loads((out / "record.json").read_text())
    assert (merged.get("memory") or {}).get("failure") is None  # not an allocator failure
    assert records(out)[0]["steps"]  # rank 0's partial record is kept
    assert_no_rank_left(out)
