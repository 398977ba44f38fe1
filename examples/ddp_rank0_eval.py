"""Planted TD605 (straggler-rank): rank 0 alone evaluates on the whole validation set every
2 optimizer steps, inside the training loop, while the other ranks wait for it in the next
backward's all-reduce. Every rank trains at the pace of rank 0's evaluation.

Launch: `torchdoctor run --nproc-per-node 2 examples/ddp_rank0_eval.py` (or torchrun).

Fix: shard the evaluation over every rank (a DistributedSampler on the validation set, then
all-reduce the metric), or evaluate every few hundred steps.
"""
# torchdoctor-example: planted
# torchdoctor-nproc: 2
import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Trainer:
    def __init__(self, args):
        self.rank = dist.get_rank()
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        self.model = DDP(net)  # verdict: TD606
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        train = TensorDataset(torch.randn(8192, 128), torch.randint(0, 10, (8192,)))
        self.sampler = DistributedSampler(train)
        self.train_loader = DataLoader(train, batch_size=64, sampler=self.sampler)
        val = TensorDataset(torch.randn(6144, 128), torch.randint(0, 10, (6144,)))
        self.val_loader = DataLoader(val, batch_size=256)
        self.eval_every = args.eval_every

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        correct = torch.zeros(())
        for x, y in self.val_loader:
            correct += (self.model.module(x).argmax(1) == y).sum()
        self.model.train()
        return correct / len(self.val_loader.dataset)

    def fit(self, epochs):
        step = 0
        for epoch in range(epochs):
            self.sampler.set_epoch(epoch)
            for x, y in self.train_loader:
                loss = nn.functional.cross_entropy(self.model(x), y)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                step += 1
                if self.rank == 0 and step % self.eval_every == 0:
                    self.evaluate()  # expect: TD605, TD701


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--eval-every", type=int, default=2)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    Trainer(args).fit(args.epochs)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
