"""Overhead workload (benchmarks/overhead.py): a small GPT (4 pre-norm transformer blocks,
width 64, context 64, batch 8) trained with AdamW on random tokens, batches cut with a
`get_batch` helper as single-file GPT trainers do, with gradient clipping. It times each
of its own steps (_steptimes.py) and writes them to the JSON file named by argv[1]; argv[2]
is the number of steps to run."""
import sys

import torch
from torch import nn
from torch.nn import functional as F

from _steptimes import StepTimes

torch.manual_seed(0)
torch.set_num_threads(1)  # steadier timings on a shared 2-core machine
VOCAB, CONTEXT, WIDTH, HEADS, DEPTH, BATCH = 96, 64, 64, 4, 4, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(c, dim=2))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.Sequential(*(Block() for _ in range(DEPTH)))
        self.ln_f, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.ln_f(self.blocks(x)))


def get_batch(data):
    starts = torch.randint(len(data) - CONTEXT - 1, (BATCH,))
    rows = torch.stack([data[s:s + CONTEXT + 1] for s in starts.tolist()])
    return rows[:, :-1], rows[:, 1:]


n_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 150
data = torch.randint(0, VOCAB, (50_000,))
model = TinyGPT()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
clock = StepTimes(sys.argv[1])
try:
    for _ in range(n_steps):
        x, y = get_batch(data)
        loss = F.cross_entropy(model(x).view(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        clock.tick()
finally:
    clock.write()
