"""Planted TD601 (grad-accum-no-sync): gradient accumulation over 4 micro-batches on a
DDP model, with every micro-batch's backward all-reducing the whole gradient. Only the last
all-reduce of each optimizer step is needed; the first three cross the link for nothing.

Launch: `torchdoctor run --nproc-per-node 2 examples/ddp_grad_accum.py` (or torchrun).

Fix: run the non-final micro-batches (forward and backward) under `model.no_sync()`;
`--set no_sync=true` measures the fix without editing the script.
"""
# torchdoctor-example: planted
# torchdoctor-nproc: 2
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def build_model():
    return nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 16))


def train_one_epoch(model, loader, optimizer, accum_steps):
    model.train()
    for i, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y) / accum_steps
        loss.backward()  # expect: TD601
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--accum-steps", type=int, default=4)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 256), torch.randint(0, 16, (4096,)))
    sampler = DistributedSampler(data, num_replicas=dist.get_world_size(), rank=dist.get_rank())
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = DDP(build_model())  # verdict: TD606
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # verdict: TD306 (the CPU's for-loop default)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        train_one_epoch(model, loader, optimizer, args.accum_steps)
    if int(os.environ.get("RANK", "0")) == 0:
        print("done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
