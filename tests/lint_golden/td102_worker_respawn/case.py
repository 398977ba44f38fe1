"""TD102: worker processes restarted on every pass of an outer (epoch) loop."""
import torch
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.randn(96, 32), torch.randint(0, 4, (96,)))
model = torch.nn.Linear(32, 4)
opt = torch.optim.Adam(model.parameters())


def train_one_epoch(loader):
    for x, y in loader:
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()


def main(epochs=10):
    respawning = DataLoader(data, batch_size=32, num_workers=4)  # triggers: epoch loop below
    persistent = DataLoader(data, batch_size=32, num_workers=4, persistent_workers=True)  # no finding
    positional = DataLoader(data, 32, True, None, None, 2)  # triggers: num_workers=2 by position
    via_function = DataLoader(data, batch_size=32, num_workers=2)  # triggers: iterated by train_one_epoch
    once = DataLoader(data, batch_size=32, num_workers=2)  # no finding: iterated once
    single_epoch = DataLoader(data, batch_size=32, num_workers=2)  # no finding: range(1)
    for epoch in range(epochs):
        for x, y in respawning:
            model(x).sum().backward()
            opt.step()
        for x, y in persistent:
            model(x).sum().backward()
            opt.step()
        for x, y in positional:
            model(x).sum().backward()
            opt.step()
        train_one_epoch(via_function)
    for x, y in once:
        model(x).sum().backward()
        opt.step()
    for epoch in range(1):
        for x, y in single_epoch:
            model(x).sum().backward()
            opt.step()
