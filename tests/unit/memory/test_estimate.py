"""`memory --estimate`: the script's steps on fake tensors give the same bytes a real step
accounts, use no memory, and say where a value was read or the data decided a shape."""

import textwrap

from torchdoctor.memory.child import TRIAL_SCHEDULE
from torchdoctor.memory.estimate import on_fake_tensors
from torchdoctor.model.memory_record import GRADIENTS, OPTIMIZER_STATES, PARAMETERS
from torchdoctor.run.runner import RunRequest, execute

TRAIN = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=2)
model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 10)).to("cpu")
opt = torch.optim.AdamW(model.parameters())
for step, (x, y) in enumerate(loader):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print(step, loss.item())
"""

MASKED = """
import torch
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    out = model(torch.randn(64, 16))
    loss = out[out > 0].sum()  # how many elements survive depends on the values
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def run(tmp_path, text, fake):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(text))
    request = RunRequest(target=str(script), warmup=2, steps=1, knobs={"workers": 0}, schedule=dict(TRIAL_SCHEDULE))
    out = tmp_path / ("fake" if fake else "real")
    out.mkdir()
    return on_fake_tensors(lambda: execute(request, out)) if fake else execute(request, out)


def test_an_estimate_accounts_the_same_bytes_as_a_real_step(tmp_path):
    fake, real = run(tmp_path, TRAIN, fake=True), run(tmp_path, TRAIN, fake=False)
    assert fake.run.status == real.run.status == "step-limit"
    params = (64 * 256 + 256 + 256 * 10 + 10) * 4
    for part, expected in ((PARAMETERS, params), (GRADIENTS, params)):
        assert fake.memory.parts[part] == real.memory.parts[part] == expected
    assert fake.memory.parts[OPTIMIZER_STATES] == real.memory.parts[OPTIMIZER_STATES]
    assert fake.memory.peak_bytes == real.memory.peak_bytes
    assert fake.memory.phase_peaks == real.memory.phase_peaks
    note = next(n.message for n in fake.probe_notes if n.probe == "estimate")
    assert "train.py:15 (1x)" in note and "answered 1" in note  # the logging line, read once in steps 1-3


def test_a_shape_that_depends_on_the_data_ends_the_estimate_and_says_where(tmp_path):
    fake = run(tmp_path, MASKED, fake=True)
    assert fake.run.status == "crashed" and not fake.steps
    note = next(n.message for n in fake.probe_notes if n.probe == "estimate")
    assert note.startswith("cannot go on") and "train.py:7" in note and "0 complete steps" in note
    assert fake.memory.parts[PARAMETERS] == (16 * 16 + 16) * 4  # what was accounted before it still stands


LOGGED = """
import copy
import torch
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
history = []
for step in range(10):
    loss = model(torch.randn(32, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss:.4f}")  # a fake tensor formatted in an f-string
    history.append(copy.deepcopy(loss.detach()))  # a logger keeping a copy (Lightning's self.log)
"""


def test_formatting_or_copying_a_fake_tensor_is_answered_not_blamed_on_the_script(tmp_path):
    fake = run(tmp_path, LOGGED, fake=True)
    assert fake.run.status == "step-limit", fake.run.error
    note = next(n.message for n in fake.probe_notes if n.probe == "estimate")
    assert "train.py:12" in note and "answered 1" in note
