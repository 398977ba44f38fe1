"""SIGTERM is a stop, not a loss: what a scheduler (Slurm, Kubernetes, `timeout`) sends to end
a job. Each command gets it mid-measurement, sent to its own process only (as `timeout` and
`kill` do), and must leave a readable run (or tune, memory) directory, exit 143, and leave no
process behind: none in its process group, and none anywhere carrying the test's mark in its
environment (torchrun's ranks and a trial's processes run in sessions of their own)."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("ddp_job.py")
LIMIT_S = 180
pytestmark = pytest.mark.slow

# Steps that never end by themselves, with DataLoader workers; READY appears after some steps.
SCRIPT = """
import os, sys, time, torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1)), batch_size=8, num_workers=2)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
while True:
    for x, y in loader:
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step == 12:
            open(os.environ["READY_FILE"], "a").close()
        time.sleep(0.02)
"""


def marked_processes(mark: str) -> list[int]:
    """Every process on the machine whose environment carries `mark`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if mark.encode() in (entry / "environ").read_bytes():
                stat = (entry / "stat").read_text()
                if stat[stat.rindex(")") + 2] not in "ZX":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def terminate_when_ready(args: list[str], ready: Path, cwd: Path, **env) -> tuple[int, str, float]:
    """Start `torchdoctor ARGS` in a session of its own, send SIGTERM to it alone once `ready`
    exists; returns (exit code, stderr, seconds from the signal to the exit). Asserts that no
    process is left."""
    mark = f"TD_SIGTERM_TEST={uuid.uuid4().hex}"
    environment = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", READY_FILE=str(ready),
                       TD_SIGTERM_TEST=mark.split("=")[1], **env)
    environment.pop("TORCHDOCTOR_SIMULATED_LINK_GBPS", None)
    child = subprocess.Popen([sys.executable, "-m", "torchdoctor", *args], cwd=cwd, env=environment,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + LIMIT_S
        while not ready.exists():
            assert child.poll() is None, child.communicate()[1]
            assert time.monotonic() < deadline, "the script never got going"
            time.sleep(0.1)
        signalled = time.monotonic()
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=LIMIT_S)
        took = time.monotonic() - signalled
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    left = time.monotonic() + 10  # a killed process takes a moment to be reaped by init
    while (group_alive(child.pid) or marked_processes(mark)) and time.monotonic() < left:
        time.sleep(0.2)
    assert not group_alive(child.pid), "a process of the command's group outlived it"
    assert not marked_processes(mark), f"processes left behind: {marked_processes(mark)}"
    assert "Traceback" not in err, err
    return child.returncode, err, took


def readable(run_dir: Path) -> dict:
    """The directory's record, and `torchdoctor report` re-renders it."""
    again = subprocess.run([sys.executable, "-m", "torchdoctor", "report", str(run_dir), "--format", "json"],
                           capture_output=True, text=True, timeout=LIMIT_S, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert again.returncode == 0, again.stderr
    json.loads(again.stdout)
    return json.loads((run_dir / "record.json").read_text())


def _run_with_dataloader_workers(folder: Path):
    (folder / "train.py").write_text(SCRIPT)
    return terminate_when_ready(["run", "--steps", "100000", "--max-seconds", "300", "--out", str(folder / "run"),
                                 "train.py"], folder / "ready", folder)


def test_run_with_dataloader_workers(flows):
    code, err, took = flows.result("run_with_dataloader_workers")
    out = flows.folder("run_with_dataloader_workers") / "run"
    assert code == 143, err
    assert "terminated (SIGTERM); the partial run is in" in err
    record = readable(out)
    assert record["run"]["status"] == "interrupted" and record["run"]["exit_code"] == 143
    assert record["run"]["ended_by"].startswith("SIGTERM") and len(record["steps"]) >= 12
    assert (out / "report.html").exists() and (out / "report.md").exists()
    print(f"run: SIGTERM to exit {took:.2f} s")


def _run_with_two_ranks(folder: Path):
    return terminate_when_ready(["run", "--nproc-per-node", "2", "--steps", "500", "--out", str(folder / "run"),
                                 str(JOB)], folder / "ready", folder, FAULT="slow")


def test_run_with_two_ranks(flows):
    (code, err, took), out = flows.result("run_with_two_ranks"), flows.folder("run_with_two_ranks") / "run"
    assert code == 143, err
    ranks = {p.parent.name: json.loads(p.read_text()) for p in out.glob("rank-*/record.json")}
    assert sorted(ranks) == ["rank-0", "rank-1"]
    assert all(r["run"]["status"] == "interrupted" and r["steps"] for r in ranks.values())
    merged = readable(out)
    assert merged["run"]["status"] == "interrupted" and merged["run"]["exit_code"] == 143
    print(f"run --nproc-per-node 2: SIGTERM to exit {took:.2f} s")


def _tune(folder: Path):
    (folder / "train.py").write_text(SCRIPT)
    return terminate_when_ready(["tune", "--steps", "100000", "--max-seconds", "300", "--out", str(folder / "tune"),
                                 "train.py"], folder / "ready", folder)


def test_tune(flows):
    (code, err, took), out = flows.result("tune"), flows.folder("tune") / "tune"
    assert code == 143, err
    assert (out / "tune.json").exists() and (out / "tune.html").exists()
    tuned = json.loads((out / "tune.json").read_text())
    assert any("Interrupted" in note for note in tuned["notes"])
    baseline = next(out.glob("01-baseline*/record.json")).parent
    assert readable(baseline)["run"]["exit_code"] == 143  # the trial got the SIGTERM too, and wrote its run
    print(f"tune: SIGTERM to exit {took:.2f} s")


def _memory(folder: Path):
    (folder / "train.py").write_text(SCRIPT)
    return terminate_when_ready(["memory", "--device-memory", "1GiB", "--steps", "100000", "--max-seconds", "300",
                                 "--out", str(folder / "memory"), "train.py"], folder / "ready", folder)


def test_memory(flows):
    (code, err, took), out = flows.result("memory"), flows.folder("memory") / "memory"
    assert code == 143, err
    record = readable(out)
    assert record["run"]["status"] == "interrupted"
    assert any("interrupted during the first trial" in n["message"] for n in record["probe_notes"])
    print(f"memory: SIGTERM to exit {took:.2f} s")


WATCHED = """
import os, time, torch, torchdoctor
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1)), batch_size=8, num_workers=2)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with torchdoctor.watch(steps=100000, max_seconds=300, out="run"):
    for step, (x, y) in enumerate(loader):
        (model(x) - y).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if step == 12:
            open(os.environ["READY_FILE"], "a").close()
        time.sleep(0.02)
print("after the block: never reached, the SIGTERM ends the process once the run is written")
"""


def sigterm_once(argv: list[str], cwd: Path, environment: dict, started, settle_s: float = 0.0) -> tuple[int, str]:
    """Run `argv` in a session of its own, send SIGTERM to it alone once `started()` is true
    (and `settle_s` more); returns (exit code, stderr)."""
    child = subprocess.Popen(argv, cwd=cwd, env=environment, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + LIMIT_S
        while not started() and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.1)
        time.sleep(settle_s)
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=LIMIT_S)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    left = time.monotonic() + 10  # a killed process takes a moment to be reaped by init
    while group_alive(child.pid) and time.monotonic() < left:
        time.sleep(0.2)
    assert not group_alive(child.pid), "a process of the group outlived it"
    return child.returncode, err


def _watch_block(folder: Path):
    (folder / "train.py").write_text(WATCHED)
    ready = folder / "ready"
    environment = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", READY_FILE=str(ready))
    return sigterm_once([sys.executable, "train.py"], folder, environment, ready.exists)


def test_watch_block(flows):
    code, err = flows.result("watch_block")
    assert code == -signal.SIGTERM, err  # ended by SIGTERM, as without torchdoctor: 143 in a shell
    assert "Traceback" not in err
    record = readable(flows.folder("watch_block") / "run")
    assert record["run"]["status"] == "interrupted" and record["run"]["exit_code"] == 143


def _lightning_callback(folder: Path):
    script = ROOT / "tests" / "integration" / "frameworks" / "lightning_blobs.py"
    out = folder / "run"
    environment = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    # the callback made the run directory: the fit is under way
    return sigterm_once([sys.executable, str(script), "--epochs", "1000", "--doctor-out", str(out),
                         "--doctor-steps", "100000", "--doctor-warmup", "2"], folder, environment, out.exists,
                        settle_s=3)


def test_lightning_callback(flows):
    """The callback's fit gets SIGTERM: the measuring stops, the run directory is written. Lightning
    installs its own SIGTERM handler, which stays in charge of how the process ends (its fit ends
    cleanly); torchdoctor's stop still comes through the signal's wakeup."""
    pytest.importorskip("lightning")
    code, err = flows.result("lightning_callback")
    out = flows.folder("lightning_callback") / "run"
    assert code in (0, -signal.SIGTERM), err
    record = readable(out)
    assert record["run"]["status"] == "interrupted" and record["run"]["exit_code"] == 143 and record["steps"]


FLOWS = {"run_with_dataloader_workers": _run_with_dataloader_workers, "run_with_two_ranks": _run_with_two_ranks,
         "tune": _tune, "memory": _memory, "watch_block": _watch_block, "lightning_callback": _lightning_callback}


class _Flows:
    """Each selected test's command, started, sent SIGTERM once under way and waited for (with the
    check that no process outlived it), made before the tests read them, two at a time (the
    machine's two cores): every command gets its own mark, session and folder, and nothing here is
    timed (the seconds from the signal to the exit are printed, never compared)."""

    def __init__(self, base: Path, names: list[str]):
        self.base, self.names, self._flows = base, names, None

    def folder(self, name: str) -> Path:
        return self.base / name

    def result(self, name: str):
        """The flow's (exit code, stderr[, seconds]); its failure (an assertion of
        `terminate_when_ready` or `sigterm_once`) is raised in its own test."""
        if self._flows is None:
            for each in self.names:
                self.folder(each).mkdir()
            with ThreadPoolExecutor(max_workers=2) as pool:  # waits for every flow
                self._flows = {each: pool.submit(FLOWS[each], self.folder(each)) for each in self.names}
        return self._flows[name].result()


@pytest.fixture(scope="module")
def flows(request, tmp_path_factory) -> _Flows:
    names = []
    for item in request.session.items:
        name = item.originalname.removeprefix("test_")
        if item.module is request.module and name in FLOWS and name not in names:
            if name == "lightning_callback" and importlib.util.find_spec("lightning") is None:
                continue  # its test skips
            names.append(name)
    return _Flows(tmp_path_factory.mktemp("sigterm"), names)
