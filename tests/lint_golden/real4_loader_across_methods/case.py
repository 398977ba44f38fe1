"""Real shape 4: the DataLoader is built in one method or function and iterated in another:
returned from a factory, stored on `self`, handed to a constructor. `# want: CODE` lines must
be reported at low or above; `# trap` lines must not be."""
import os

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Shards(Dataset):
    def __init__(self, root):
        self.files = sorted(os.listdir(root))

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return torch.load(self.files[i])


class ShardTrainer:
    def __init__(self, model, dataset, optimizer, local_rank, batch_size=64):
        self.device = torch.device(f"cuda:{local_rank}")
        self.model = model.to(self.device)
        self.optimizer = optimizer
        self.loader = self._prepare_dataloader(dataset, batch_size)

    def _prepare_dataloader(self, dataset, batch_size):
        return DataLoader(dataset, batch_size=batch_size, pin_memory=True, num_workers=4,
                          persistent_workers=True, sampler=DistributedSampler(dataset))

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        self.loader.sampler.set_epoch(epoch)
        for source, targets in self.loader:
            source = source.to(self.device)  # want: TD104
            targets = targets.to(self.device)  # want: TD104
            self._run_batch(source, targets)

    def fit(self, epochs):
        for epoch in range(epochs):
            self._run_epoch(epoch)


def prepare_dataloader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=2)  # want: TD103, TD102


def prepare_eval_loader(dataset):
    return DataLoader(dataset, batch_size=256, num_workers=2, pin_memory=True, persistent_workers=True)


class EpochRunner:
    def __init__(self, model, train_data, optimizer):
        self.model = model
        self.train_data = train_data
        self.optimizer = optimizer

    def run(self, epochs, device):
        for _ in range(epochs):
            for x, y in self.train_data:
                x, y = x.to(device), y.to(device)
                F.mse_loss(self.model(x), y).backward()
                self.optimizer.step()
                self.optimizer.zero_grad()


def evaluate(model, loader, device):
    model.eval()
    with torch.no_grad():
        for x, y in loader:
            pred = model(x.to(device, non_blocking=True))  # trap: already non-blocking
            del pred, y


def main():
    model = torch.nn.Linear(32, 32)
    optimizer = torch.optim.AdamW(model.parameters())
    train_data = prepare_dataloader(Shards("data/train"), batch_size=128)
    runner = EpochRunner(model.cuda(), train_data, optimizer)
    runner.run(epochs=10, device="cuda")
    evaluate(model, prepare_eval_loader(Shards("data/val")), "cuda")
    ShardTrainer(model, Shards("data/train"), optimizer, int(os.environ["LOCAL_RANK"])).fit(5)
