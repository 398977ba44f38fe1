"""`torchdoctor memory` end to end on small CPU scripts, and `torchdoctor run` on a script that
runs out of memory under an address-space limit (RLIMIT_AS) imposed on its process."""

import functools
import json
import os
import resource
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

import torchdoctor
from torchdoctor.cli import main

SRC = str(Path(torchdoctor.__file__).resolve().parent.parent)

TRAIN = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)
data = TensorDataset(torch.randn(8192, 128), torch.randint(0, 10, (8192,)))
loader = DataLoader(data, batch_size=16, shuffle=True)
model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10))
optimizer = torch.optim.Adam(model.parameters())
for epoch in range(5):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""

SMALL_DATA = TRAIN.replace("8192", "600").replace("range(5)", "range(40)")

NO_LOADER = """
import torch
model = torch.nn.Linear(32, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(50):
    x = torch.randn(64, 32)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""

# Gated blocks of elementwise ops (cheap to compute, each keeps three batch-sized tensors for
# backward); at this batch a tensor is 32 MiB, and six blocks need more than the limit leaves
OUT_OF_MEMORY = """
import torch
from torch import nn
torch.set_num_threads(1)

class Gate(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(d))

    def forward(self, x):
        a = torch.sigmoid(x * self.scale)
        return torch.tanh(a * x) * a

class Net(nn.Module):
    def __init__(self, d=1024):
        super().__init__()
        self.blocks = nn.ModuleList(Gate(d) for _ in range(6))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x.mean()

def train_one_epoch(model, optimizer, batch):
    for _ in range(10):
        loss = model(torch.randn(batch, 1024))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

model = Net()
train_one_epoch(model, torch.optim.AdamW(model.parameters()), batch=8192)
"""


def _memory_command(folder: Path, text: str, *options: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`torchdoctor memory OPTIONS --format json` on the script `text`, in a process of its own."""
    script = folder / "train.py"
    script.write_text(text)
    out = folder / "mem"
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "memory", *options, "--out", str(out),
                           "--format", "json", str(script)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": SRC})
    return done, out


# The two searches of many trials: (memory options, script). Their trials run one at a time inside
# each command, as always; the two commands run at once (the machine's two cores). What their tests
# check is the trials' outcomes and peak bytes, the data bound and the recommendation's place among
# the trials' own throughputs: nothing compared with a time.
SEARCHES = {
    "test_memory_finds_the_largest_batch_and_writes_a_memory_directory": (
        ("--device-memory", "8MiB", "--headroom", "0", "--max-trials", "6", "--steps", "3", "--warmup", "1"), TRAIN),
    "test_memory_on_a_dataset_smaller_than_its_candidates_stops_at_the_dataset": (
        ("--device-memory", "2GiB", "--headroom", "0", "--max-trials", "8", "--steps", "3", "--warmup", "1"),
        SMALL_DATA),
}


@pytest.fixture(scope="module")
def searches(request, tmp_path_factory) -> dict[str, Future]:
    """The selected tests' searches, run together when the first of them asks; done before any
    test goes on (a search's failure is raised in its own test, by its future)."""
    wanted = [item.originalname for item in request.session.items
              if item.module is request.module and item.originalname in SEARCHES]
    with ThreadPoolExecutor(max_workers=2) as pool:  # waits for both
        return {name: pool.submit(_memory_command, tmp_path_factory.mktemp("search"), SEARCHES[name][1],
                                  *SEARCHES[name][0]) for name in dict.fromkeys(wanted)}


def test_memory_finds_the_largest_batch_and_writes_a_memory_directory(searches, capsys):
    done, out = searches["test_memory_finds_the_largest_batch_and_writes_a_memory_directory"].result()
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "record.json").read_text())
    scaling = record["batch_scaling"]
    trials = sorted(scaling["trials"], key=lambda t: t["batch_size"])
    assert scaling["user_batch_size"] == 16 and 4 <= len(trials) <= 6
    fitting = [t for t in trials if t["outcome"] == "fits"]
    peaks = [t["peak_bytes"] for t in fitting]
    assert peaks == sorted(peaks) and peaks[-1] > peaks[0]  # more samples, more activations
    top = scaling["verified_max_batch"]
    assert top == max(t["batch_size"] for t in fitting) and top > 16
    assert next(t for t in trials if t["batch_size"] == top)["peak_bytes"] <= 8 * 2**20
    assert all(t["outcome"] == "over-limit" for t in trials if t["batch_size"] > top)
    phases = [f["phase"] for f in scaling["fits"]]  # a line per phase the trials measured, in step order
    assert phases[0] == "forward" and phases[-1] == "optimizer" and set(phases) <= {"forward", "backward", "optimizer"}
    assert next(f for f in scaling["fits"] if f["phase"] == "forward")["per_sample_bytes"] > 0
    report = json.loads(done.stdout)
    assert report["figures"]["scaling"]["verified_max_batch"] == top
    assert 'id="batch-scaling"' in (out / "report.html").read_text()
    assert main(["report", str(out), "--format", "md"]) == 0
    assert "Batch size trials" in capsys.readouterr().out


def test_a_script_without_a_dataloader_gets_its_one_batch_measured(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(NO_LOADER)
    out = tmp_path / "mem"
    assert main(["memory", "--for-gpu", "T4-16GB", "--steps", "2", "--warmup", "1", "--out", str(out),
                 str(script)]) == 0
    scaling = json.loads((out / "record.json").read_text())["batch_scaling"]
    assert len(scaling["trials"]) == 1 and "no DataLoader" in scaling["unreachable"]
    assert scaling["capacity_bytes"] == 15360 * 2**20 and "assumed" in scaling["headroom_basis"]


@pytest.mark.parametrize("argv, says", [
    (["--device-memory", "24Gb"], "lowercase b means bits"),
    (["--device-memory", "24"], "a number and a unit"),
    (["--for-gpu", "B300"], "not a GPU torchdoctor knows"),
    (["--device-memory", "8GiB", "--for-gpu", "T4-16GB"], "not allowed with"),
    (["--device-memory", "1GiB", "--headroom", "2GiB"], "leaves nothing"),
])
def test_bad_memory_arguments_are_one_line_errors(tmp_path, capsys, argv, says):
    script = tmp_path / "train.py"
    script.write_text(NO_LOADER)
    assert main(["memory", *argv, "--out", str(tmp_path / "m"), str(script)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and not (tmp_path / "m").exists()


@functools.cache  # the same interpreter and imports each time: measured once for both tests
def _address_space_after_import() -> int:
    probe = "import torch, torchdoctor.run.runner; print(open('/proc/self/status').read().split('VmSize:')[1].split()[0])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return int(out.stdout) * 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
def test_running_out_of_memory_under_an_address_space_limit_explains_itself(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(OUT_OF_MEMORY)
    limit = _address_space_after_import() + 384 * 2**20  # the imports, then 384 MiB for training

    def impose_limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    out = tmp_path / "run"
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", "--warmup", "1", "--steps", "3", "--out",
                           str(out), str(script)], capture_output=True, text=True, preexec_fn=impose_limit, env=env,
                          timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "ran out of memory" in done.stderr and "can't allocate memory" in done.stderr
    failure = json.loads((out / "record.json").read_text())["memory"]["failure"]
    assert failure["accounted"] and failure["step"] == 1 and failure["batch_size"] == 8192
    assert "RLIMIT_AS" in failure["limit"] and failure["requested_bytes"] == 8192 * 1024 * 4
    assert failure["location"]["function"] == "Gate.forward"
    oom = next(f for f in json.loads((out / "report.json").read_text())["findings"] if f["code"] == "TD503")
    changes = [a["change"] for a in oom["evidence"]["advice"]]
    assert oom["severity"] == "high" and any("checkpointing of the 6 Gate modules in blocks" in c for c in changes)
    assert any(c.startswith("batch at most") for c in changes)


DDP = """
import os
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
torch.manual_seed(0)
data = TensorDataset(torch.randn(2048, 32), torch.randint(0, 4, (2048,)))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=16, sampler=sampler)
model = DDP(nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
try:
    for epoch in range(5):
        sampler.set_epoch(epoch)
        for x, y in loader:
            if dist.get_rank() == 1 and len(x) > 8:  # rank 1 runs out of memory above batch 8
                torch.empty(2**60)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
finally:
    dist.destroy_process_group()
"""


def test_ddp_trials_fail_together_when_one_rank_runs_out_and_agree_when_all_fit(tmp_path):
    script = tmp_path / "train_ddp.py"
    script.write_text(DDP)
    out = tmp_path / "mem"
    assert main(["memory", "--nproc-per-node", "2", "--max-trials", "2", "--warmup", "1", "--steps", "2",
                 "--out", str(out), str(script)]) == 0
    scaling = json.loads((out / "record.json").read_text())["batch_scaling"]
    trials = {t["batch_size"]: t for t in scaling["trials"]}
    assert scaling["nproc_per_node"] == 2 and set(trials) == {16, 8}
    assert trials[16]["outcome"] == "oom" and trials[16]["detail"].startswith("rank 1: ")
    assert trials[8]["outcome"] == "fits" and trials[8]["peak_bytes"]
    verdict = json.loads((out / trials[8]["run_dir"] / "verdict.json").read_text())
    assert verdict["all_fit"] and verdict["world_size"] == 2 and verdict["max_peak_bytes"] == trials[8]["peak_bytes"]
    ranks = [json.loads((out / trials[8]["run_dir"] / f"rank-{r}" / "record.json").read_text()) for r in (0, 1)]
    assert max(r["memory"]["peak_bytes"] for r in ranks) == verdict["max_peak_bytes"]
    parallel = ranks[0]["memory"]["parallel"]
    assert parallel["wrapper"] == "DistributedDataParallel" and parallel["replicas"] == 2
    assert parallel["bucket_bytes"] == (32 * 128 + 128 + 128 * 4 + 4) * 4  # a second copy of the gradients



def test_memory_on_a_dataset_smaller_than_its_candidates_stops_at_the_dataset(searches):
    """600 rows in 2 GiB of room: the memory fit alone would allow batches of many thousands."""
    done, out = searches["test_memory_on_a_dataset_smaller_than_its_candidates_stops_at_the_dataset"].result()
    assert done.returncode == 0, done.stderr[-3000:]
    scaling = json.loads((out / "record.json").read_text())["batch_scaling"]
    assert scaling["data_bound"] == 600 and "600 rows" in scaling["data_bound_basis"]
    assert max(t["batch_size"] for t in scaling["trials"]) == 600 and scaling["verified_max_batch"] == 600
    assert scaling["predicted_max_batch"] > 600  # the memory fit alone
    assert any("stopped at batch 600" in n for n in scaling["notes"])
    fitting = [t for t in scaling["trials"] if t["outcome"] == "fits" and t["samples_per_s"]]
    best = max(fitting, key=lambda t: t["samples_per_s"])
    rec = scaling["recommended_batch"]
    assert rec is not None and rec <= best["batch_size"]  # the fastest, or a smaller one within its noise
    report = json.loads(done.stdout)
    for f in report["findings"]:
        for value in (f["evidence"].get("recommended_batch"), f["evidence"].get("larger_batch"),
                      f["evidence"].get("verified_max_batch")):
            assert value is None or value <= 600


# The sequence grows at the 8th batch, long after the accounted warmup step: the failing
# allocation is the projection's output inside Model.forward, not the loss line that called it.
GROWING = """
import torch
from torch import nn
from torch.utils.data import DataLoader

torch.set_num_threads(1)
calls = []

def collate(items):
    calls.append(1)
    length = 256 if len(calls) < 8 else 2**20
    return torch.randn(len(items), length), torch.randn(len(items))

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(1, 64)

    def forward(self, x):
        h = self.proj(x.unsqueeze(-1))
        return h.mean(dim=(1, 2))

model = Model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(list(range(4096)), batch_size=16, collate_fn=collate)
for x, y in loader:
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
def test_an_out_of_memory_after_the_window_names_the_allocating_line_and_the_growth(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(GROWING)
    limit = _address_space_after_import() + 768 * 2**20

    def impose_limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    out = tmp_path / "run"
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", "--warmup", "1", "--steps", "20", "--out",
                           str(out), "--format", "json", str(script)], capture_output=True, text=True,
                          preexec_fn=impose_limit, env=env, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    failure = json.loads((out / "record.json").read_text())["memory"]["failure"]
    assert not failure["accounted"] and failure["step"] == 8
    assert failure["location"]["function"] == "Model.forward"  # the innermost line of the user's code
    assert failure["batch_shape"] == [16, 2**20] and failure["requested_bytes"] >= 16 * 2**20 * 64 * 4
    oom = next(f for f in json.loads((out / "report.json").read_text())["findings"] if f["code"] == "TD503")
    assert "sequence length grew" in oom["message"] and "16x256" in oom["message"] and "16x1048576" in oom["message"]
    changes = [a["change"] for a in oom["evidence"]["advice"]]
    assert any(c.startswith("cap the sequence length at 256") for c in changes)
    assert all(a["saves_bytes"] >= 0.1 * failure["requested_bytes"] for a in oom["evidence"]["advice"])
