"""Clean DDP training (nothing planted): a small convolutional classifier whose gradients
(~0.1 MB) cross the link in a fraction of a millisecond, a DistributedSampler, one
all-reduce per optimizer step, evaluation sharded over the ranks with the metric
all-reduced, every rank doing the same work. The doctor should report nothing at high or
medium; its scaling verdict is an info line.

Launch: `torchdoctor run --nproc-per-node 2 examples/ddp_clean.py` (or torchrun).
"""
# torchdoctor-example: clean
# torchdoctor-nproc: 2
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def make_model():
    return nn.Sequential(
        nn.Conv2d(3, 24, 3, padding=1), nn.ReLU(), nn.Conv2d(24, 24, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(24, 48, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(48, 10))


def evaluate(model, loader):
    model.eval()
    correct = torch.zeros(())
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum()
    dist.all_reduce(correct)  # every rank evaluated its shard
    model.train()
    return correct


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    torch.manual_seed(0)
    train = TensorDataset(torch.randn(2048, 3, 32, 32), torch.randint(0, 10, (2048,)))
    val = TensorDataset(torch.randn(512, 3, 32, 32), torch.randint(0, 10, (512,)))
    sampler = DistributedSampler(train)
    train_loader = DataLoader(train, batch_size=32, sampler=sampler)
    val_loader = DataLoader(val, batch_size=128, sampler=DistributedSampler(val, shuffle=False))
    model = DDP(make_model())  # verdict: TD606
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in train_loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        correct = evaluate(model, val_loader)
        if rank == 0:
            print(f"epoch {epoch}: {correct.item()} / {len(val)} correct")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
