"""Overhead workload (benchmarks/overhead.py): training with a generation-heavy evaluation. A
small GPT (2 blocks, width 64, context 32) trained on random tokens; every 5 steps an
evaluation generates 48 tokens for each of 2 prompts, one forward per token, greedily, as
sampling scripts do (`model.eval()`, `torch.no_grad()`, the next token appended with
`torch.cat`). The evaluation is outside every sampling window after the first: it must run at
plain speed. It times each of its own steps (_steptimes.py) and each evaluation ("evals" in
the JSON file named by argv[1]); argv[2] is the number of steps to run."""
import json
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F

from _steptimes import StepTimes

torch.manual_seed(0)
torch.set_num_threads(1)
VOCAB, CONTEXT, WIDTH, HEADS, DEPTH, BATCH, EVAL_EVERY, NEW_TOKENS = 64, 32, 64, 4, 2, 16, 5, 48
n_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 40


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


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.Sequential(*[Block() for _ in range(DEPTH)])
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.blocks(x))


@torch.no_grad()
def generate(model, prompt):
    idx = prompt
    for _ in range(NEW_TOKENS):
        logits = model(idx[:, -CONTEXT:])[:, -1, :]
        idx = torch.cat([idx, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return idx


model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(0, VOCAB, (4096, CONTEXT + 1))
prompts = torch.randint(0, VOCAB, (2, 4))
clock = StepTimes(sys.argv[1])
evals: list[float] = []
try:
    step = 0
    while len(clock) < n_steps:
        rows = torch.randint(0, len(data), (BATCH,))
        batch = data[rows]
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % EVAL_EVERY == 0:
            started = time.perf_counter()
            model.eval()
            generate(model, prompts)
            model.train()
            evals.append(time.perf_counter() - started)
        clock.tick()
finally:
    clock.write(evals=evals)
