"""Planted TD603 (ddp-config): a text model that keeps a large precomputed table (sinusoidal
position encodings for 16k positions, 8 MB) as a registered buffer. DDP's default
`broadcast_buffers=True` sends every buffer from rank 0 to the others before every forward,
so the constant table crosses the link once per step.

Launch: `torchdoctor run --nproc-per-node 2 examples/ddp_constant_buffers.py` (or torchrun).

Fix: `DDP(model, broadcast_buffers=False)` (nothing in the model's buffers changes; a model
with BatchNorm would sync its statistics another way, e.g. SyncBatchNorm), or keep the table
out of the buffers (`register_buffer(..., persistent=False)` still counts as a buffer).
"""
# torchdoctor-example: planted
# torchdoctor-nproc: 2
import math

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def sinusoidal_table(positions, width):
    pos = torch.arange(positions).unsqueeze(1)
    freq = torch.exp(torch.arange(0, width, 2) * (-math.log(10000.0) / width))
    table = torch.zeros(positions, width)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return table


class TaggingModel(nn.Module):
    def __init__(self, vocab=2000, width=128, max_positions=16384):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.register_buffer("positions", sinusoidal_table(max_positions, width))
        self.encoder = nn.Sequential(nn.Linear(width, 256), nn.GELU(), nn.Linear(256, width))
        self.head = nn.Linear(width, 12)

    def forward(self, tokens):
        h = self.embed(tokens) + self.positions[: tokens.shape[1]]
        return self.head(self.encoder(h))


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    tokens = torch.randint(0, 2000, (4096, 64))
    tags = torch.randint(0, 12, (4096, 64))
    data = TensorDataset(tokens, tags)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = DDP(TaggingModel())  # expect: TD603  # verdict: TD606
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(4):
        sampler.set_epoch(epoch)
        for x, y in loader:
            logits = model(x)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
