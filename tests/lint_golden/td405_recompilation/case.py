"""TD405: torch.compile called inside a loop or the step."""
import torch

model = torch.nn.Linear(8, 8)
compiled = torch.compile(model)  # no finding: once, before the loop
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x):
    fast = torch.compile(model)  # triggers: train_step runs every step
    fast(x).sum().backward()
    opt.step()


for step in range(10):
    out = torch.compile(model)(torch.randn(2, 8))  # triggers
    out.sum().backward()
    opt.step()
    train_step(torch.randn(2, 8))
