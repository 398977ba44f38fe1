"""Clean: a small transformer-style model (residual MLP blocks) sharded with FSDP2 the way its
documentation recommends: `fully_shard` on each block, then on the root, default prefetching, one
micro-batch per optimizer step. torchdoctor should find nothing of high or medium severity.

Launch: `torchdoctor run --nproc-per-node 2 examples/fsdp_clean.py` (or torchrun).
"""
# torchdoctor-example: clean
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
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
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
