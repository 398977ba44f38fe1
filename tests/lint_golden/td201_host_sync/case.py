"""TD201: reading a device tensor on the host in every training step."""
import logging

import torch
from torch import nn
from torch.utils.tensorboard import SummaryWriter

log = logging.getLogger(__name__)
writer = SummaryWriter()
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_fn = nn.MSELoss()
best = float("inf")
lr = 1e-3


def train_step(x, y):
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item()  # triggers: train_step runs one step


for epoch in range(3):
    running = torch.zeros((), device="cuda")
    for step in range(100):
        x, y = torch.randn(64, 32, device="cuda"), torch.randn(64, 1, device="cuda")
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        running += loss.detach()  # no finding: stays on the device
        value = float(loss)  # triggers
        print(loss)  # triggers
        log.warning("loss %s", loss)  # triggers: WARNING records are emitted (and formatted) by default
        log.info("loss %s", loss)  # no finding: formatted lazily, and INFO is off unless the file turns it on
        print("loss %.4f" % loss)  # triggers
        writer.add_scalar("loss", loss, step)  # triggers
        writer.add_scalar("lr", lr, step)  # no finding: a Python float
        if loss < best:  # triggers: branching on a tensor
            best = loss
        grads = [p.grad.norm().item() for p in model.parameters()]  # triggers
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f}")  # no finding: every 50 steps
        else:
            pass
        if step % 10:
            pass
        else:
            print(f"{loss}")  # no finding: the else of `step % 10` runs every 10 steps
        if step == 0:
            print(loss.tolist())  # no finding: first step only
        width = int(x.shape[0])  # no finding: shapes are host values
        scaled = float(lr)  # no finding: not a tensor
        train_step(x, y)
    print(f"epoch {epoch} loss {running.item() / 100:.4f}")  # no finding: once per epoch
