"""Planted TD602 (slow-interconnect) and the TD606 scaling verdict: a 5.3M-parameter model
(21 MB of fp32 gradients per step) trained with DDP over a link that carries only
0.25 GB/s, like the first reference report's two GPUs under WSL2 with NCCL_SHM_DISABLE=1
(1 GB/s where PCIe should give 20+). Two ranks then train slower than one.

On a CPU machine the slow link is simulated: the header below sets torchdoctor's test hook
TORCHDOCTOR_SIMULATED_LINK_GBPS, which delays every collective to that bus bandwidth (see
src/torchdoctor/comm/slow_link.py). Run it by hand the same way:
`TORCHDOCTOR_SIMULATED_LINK_GBPS=0.25 torchdoctor run --nproc-per-node 2 examples/ddp_slow_link.py`.

Fix: repair the link (`torchdoctor comm` shows the path and what cripples it); until then
send less: gradient accumulation with no_sync(), bf16_compress_hook, or one GPU.
"""
# torchdoctor-example: planted
# torchdoctor-nproc: 2
# torchdoctor-env: TORCHDOCTOR_SIMULATED_LINK_GBPS=0.25
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        return x + self.ff(self.norm(x))


def main(steps_per_epoch=64, epochs=10):
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 512), *[Block(512) for _ in range(2)], nn.Linear(512, 8))
    model = DDP(model)  # expect: TD602, TD606
    data = TensorDataset(torch.randn(steps_per_epoch * 32, 64), torch.randint(0, 8, (steps_per_epoch * 32,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)  # verdict: TD306 (the CPU's for-loop default)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
