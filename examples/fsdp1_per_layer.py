"""Planted TD608 (fsdp-unit-granularity) under FSDP1: `FullyShardedDataParallel` with an
auto-wrap policy that makes every `nn.Linear` its own unit, and backward prefetching turned off.
Each step gathers every layer separately in forward and again in backward, each gather waiting
for its turn.

Fix: wrap blocks (`ModuleWrapPolicy({Block})`) and keep `backward_prefetch=BackwardPrefetch.BACKWARD_PRE`.

Launch: `torchdoctor run --nproc-per-node 2 examples/fsdp1_per_layer.py` (or torchrun).
"""
# torchdoctor-example: planted
# torchdoctor-nproc: 2
import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy


def block(dim):
    return nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(*[block(256) for _ in range(4)], nn.Linear(256, 16))
    model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({nn.Linear}), backward_prefetch=None,  # expect: TD608  # verdict: TD606
                 device_id=torch.device("cpu"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
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
