"""A small DDP job for the multi-rank integration tests. FAULT (environment) plants a failure on rank 1:
crash (ValueError at step 4), hang (sleeps at step 4), slow (every step sleeps), sigkill (SIGKILL at step 4)."""
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

FAULT = os.environ.get("FAULT", "")


def train(model, optimizer, rank, steps=300, accum=2):
    for step in range(steps):
        for _ in range(accum):
            loss = model(torch.randn(16, 32)).pow(2).mean() / accum
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if rank == 1 and step == 4 and FAULT == "crash":
            raise ValueError("bad batch at step 4")
        if rank == 1 and step == 4 and FAULT == "hang":
            time.sleep(300)
        if FAULT == "slow":
            time.sleep(0.05)
        if rank == 1 and step == 4 and FAULT == "sigkill":  # as the kernel's out-of-memory killer ends a process
            os.kill(os.getpid(), 9)
        if step == 8 and os.environ.get("READY_FILE"):  # the SIGTERM test signals from here on
            open(os.environ["READY_FILE"], "a").close()


def main():
    dist.init_process_group("gloo")
    model = DDP(nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 4)))
    train(model, torch.optim.SGD(model.parameters(), lr=0.01), dist.get_rank(), steps=int(os.environ.get("STEPS", 300)))


if __name__ == "__main__":
    main()
