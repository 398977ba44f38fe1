"""TD104 (and the other loader checks) through a class of the script that builds the DataLoader
and passes its keyword arguments on, and hands out batches from a method."""
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Shards(Dataset):
    def __init__(self, count):
        self.count = count

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        return torch.load(f"shard_{i}.pt"), torch.tensor(i % 2)


class EndlessBatches:
    """Draws batches forever, starting the loader over when it runs out."""

    def __init__(self, dataset, **options):
        self.loader = DataLoader(dataset, shuffle=True, **options)
        self.batches = iter(self.loader)

    def next(self):
        try:
            batch = next(self.batches)
        except StopIteration:
            self.batches = iter(self.loader)
            batch = next(self.batches)
        return batch


class PlainBatches:
    def __init__(self, dataset, **options):
        self.loader = DataLoader(dataset, **options)
        self.batches = iter(self.loader)

    def take(self):
        return next(self.batches)


class SlowBatches:
    def __init__(self, dataset, workers, **options):
        self.loader = DataLoader(dataset, num_workers=workers, **options)
        self.batches = iter(self.loader)

    def take(self):
        return next(self.batches)


device = torch.device("cuda")
model = nn.Linear(16, 2).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
pinned = EndlessBatches(Shards(1000), batch_size=32, pin_memory=True, num_workers=4)
pageable = PlainBatches(Shards(1000), batch_size=32, num_workers=4)
single_process = SlowBatches(Shards(1000), 0, batch_size=32, pin_memory=True)  # triggers TD105

for step in range(1000):
    batch = pinned.next()
    inputs, labels = [t.to(device) for t in batch]  # triggers: pinned by the wrapper's caller
    nn.functional.cross_entropy(model(inputs), labels).backward()
    opt.step()

    # no TD104: the wrapper was not asked for pinned memory (TD103 instead, at its DataLoader)
    inputs, labels = [part.to(device) for part in pageable.take()]
    nn.functional.cross_entropy(model(inputs), labels).backward()
    opt.step()

    inputs, labels = single_process.take()
    inputs = inputs.to(device, non_blocking=True)  # no finding: already non-blocking
    labels = labels.to(device, non_blocking=True)
    nn.functional.cross_entropy(model(inputs), labels).backward()
    opt.step()
