"""Planted TD607 (nccl-transport-disabled), the first reference report's DDP setup: the
script turns off NCCL's shared-memory and peer-to-peer transports in code (a WSL2 workaround
that outlived its problem), so the two GPUs exchange gradients through sockets over loopback.
Needs 2 CUDA GPUs.

Launch: `torchdoctor run --nproc-per-node 2 examples/gpu_ddp_nccl_env.py` (or torchrun).

Fix: delete the two os.environ lines; `torchdoctor comm` then shows the transport NCCL picks.
Not yet run on a GPU by this project: the TD602 expectation follows NCCL's documented
behaviour (no P2P, no SHM within one host leaves NET/Socket), not a measurement.
"""
# torchdoctor-example: planted
# torchdoctor-requires: cuda
# torchdoctor-nproc: 2
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

os.environ["NCCL_SHM_DISABLE"] = "1"  # expect: TD607
os.environ["NCCL_P2P_DISABLE"] = "1"  # lint-expect: TD607


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(12)]).cuda()
    model = DDP(model, device_ids=[local_rank])  # expect: TD602
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(300):
        x = torch.randn(64, 2048, device="cuda")
        loss = model(x).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
