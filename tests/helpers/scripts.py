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
