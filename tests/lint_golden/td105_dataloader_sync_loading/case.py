"""TD105: a DataLoader with num_workers=0 (or missing) that feeds the training loop."""
import argparse

import torch
from torch.utils.data import DataLoader as DL, Dataset, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--num-workers", type=int, default=0)
args = parser.parse_args()
WORKERS = 0


class Images(Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return torch.randn(3, 64, 64), i % 10


model = torch.nn.Linear(10, 10)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
train = DL(Images(), batch_size=32, shuffle=True)  # triggers: own Dataset, num_workers missing
by_constant = DL(Images(), 32, True, None, None, WORKERS)  # triggers: positional num_workers=WORKERS=0
in_memory = DL(TensorDataset(torch.randn(64, 10)), batch_size=8)  # no finding: in-memory tensors
from_cli = DL(Images(), batch_size=32, num_workers=args.num_workers)  # info: the command line decides
with_workers = DL(Images(), batch_size=32, num_workers=4, persistent_workers=True)  # no finding
for loader in (train, by_constant, in_memory, from_cli, with_workers):
    pass
for x, y in train:
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
for x, y in by_constant:
    model(x).sum().backward()
    opt.step()
for (x,) in in_memory:
    model(x).sum().backward()
    opt.step()
for x, y in from_cli:
    model(x).sum().backward()
    opt.step()
for x, y in with_workers:
    model(x).sum().backward()
    opt.step()


def make_loader():
    return DL(Images(), batch_size=32)  # info: where it is iterated cannot be followed


@torch.no_grad()
def evaluate(val_loader):
    return sum(model(x).sum() for x, _ in val_loader)


evaluate(DL(Images(), batch_size=64))  # no finding: only evaluation reads it
