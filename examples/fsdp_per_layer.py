"""Planted TD608 (fsdp-unit-granularity): the same residual-MLP model as fsdp_clean.py, but
`fully_shard` is applied to every `nn.Linear` and `nn.LayerNorm` on its own. Each step then runs
an all-gather per layer in forward and again in backward (and a reduce-scatter per layer): three
times as many collectives for the same bytes, each paying the link's latency, and units too small
to overlap with their neighbours' compute.

Fix: shard whole blocks (`fully_shard(block)` for each block, then the root), as fsdp_clean.py does.

Launch: `torchdoctor run --nproc-per-node 2 examples/fsdp_per_layer.py` (or torchrun).
"""
# torchdoctor-example: planted
# torchdoctor-nproc: 2
import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class Model(nn.Module):
    def __init__(self, dim=256, depth=4, classes=16):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    model = Model()
    for layer in model.modules():
        if isinstance(layer, (nn.Linear, nn.LayerNorm)):
            fully_shard(layer, mesh=mesh)  # expect: TD608  # verdict: TD606
    fully_shard(model, mesh=mesh)  # verdict: TD606
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)  # one multi-tensor update (not TD306)
    gen = torch.Generator().manual_seed(dist.get_rank())
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 256, generator=gen)
        y = torch.randint(0, 16, (args.batch_size,), generator=gen)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
