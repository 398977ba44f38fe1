"""Small training scripts the integration tests run under the doctor, written to a file."""

LINEAR_LOOP = """
import time, torch
from torch import nn
model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 16)
for i in range({iterations}):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
{tail}"""


def linear_loop(iterations: int, tail: str) -> str:
    """A one-layer model trained for `iterations` steps; `tail`: the loop's last lines, indented."""
    return LINEAR_LOOP.format(iterations=iterations, tail=tail)


DDP_LOOP = """
import time, torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 32)
for i in range({iterations}):
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
{tail}"""


def ddp_loop(iterations: int, tail: str) -> str:
    """A DDP model trained on every rank for `iterations` steps (gloo, run it under --nproc-per-node);
    `tail`: the loop's last lines, indented (`rank` is the rank)."""
    return DDP_LOOP.format(iterations=iterations, tail=tail)
