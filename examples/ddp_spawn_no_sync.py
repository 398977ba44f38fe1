"""Planted TD601 (grad-accum-no-sync), the subtle form: gradient accumulation where
`model.no_sync()` wraps only `loss.backward()`. DDP decides in the forward whether the next
backward all-reduces, so this no_sync() skips nothing: all 4 micro-batches all-reduce. The
script starts its own ranks with torch.multiprocessing.spawn, as many tutorials do; the
doctor runs each spawned rank under its probes.

Launch: `torchdoctor run examples/ddp_spawn_no_sync.py` (it spawns 2 ranks itself).

Fix: put the forward inside no_sync() too:
    with model.no_sync():
        loss = criterion(model(x), y) / accum
        loss.backward()
"""
# torchdoctor-example: planted
import contextlib
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

WORLD_SIZE = 2
ACCUM = 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, world_size, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(rank)
    model = DDP(nn.Sequential(nn.Linear(128, 1024), nn.Tanh(), nn.Linear(1024, 1024), nn.Tanh(), nn.Linear(1024, 1)))  # verdict: TD606
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    criterion = nn.MSELoss()
    for it in range(400):
        x, y = torch.randn(32, 128), torch.randn(32, 1)
        loss = criterion(model(x), y) / ACCUM
        last = (it + 1) % ACCUM == 0
        with contextlib.nullcontext() if last else model.no_sync():  # expect: TD601
            loss.backward()
        if last:
            optimizer.step()
            optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(WORLD_SIZE, free_port()), nprocs=WORLD_SIZE)
