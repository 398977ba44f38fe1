"""Small training scripts the integration tests run under the doctor, written to a file."""

LOOP = """
import time, torch
from torch import nn
{setup}
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
    return LOOP.format(setup="model = nn.Linear(16, 4)", iterations=iterations, tail=tail)


def ddp_loop(iterations: int, tail: str) -> str:
    """The same model under DDP on every rank (gloo, run it under --nproc-per-node); `tail`: the
    loop's last lines, indented (`rank` is the rank)."""
    setup = ("import torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
             "dist.init_process_group(\"gloo\")\nrank = dist.get_rank()\nmodel = DDP(nn.Linear(16, 4))")
    return LOOP.format(setup=setup, iterations=iterations, tail=tail)
