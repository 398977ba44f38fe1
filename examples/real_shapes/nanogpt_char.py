"""Imitates a single-file character-level GPT trainer in the style of nanoGPT's train.py:
module-level hyperparameters as argparse defaults, a `get_batch(split)` helper that
slices random windows out of a host-side token tensor, an `estimate_loss()` evaluation
at iteration 0 and every `eval_interval` iterations, gradient accumulation, gradient
clipping, a cosine learning-rate schedule and a log line every `log_interval` iterations.
The text is generated here (a seeded toy grammar), so nothing is downloaded.

Planted: `log_interval` defaults to 1, so `loss.item()` reads the loss from the device
every iteration (TD201).

Traps: `get_batch` iterates a host `torch.randint` index per element (a host tensor in a
GPU run too, and 2 x 16 slices per micro-step are ~1 % of it); the evaluation ran once at
iteration 0 and runs again only every 250 iterations; the evaluation's per-batch
`.item()` runs inside that rare evaluation; the per-iteration print formats Python
floats; AdamW is fused on a GPU (the per-tensor loop seen here is torch's CPU default).
"""
# torchdoctor-example: planted
import argparse
import math
import random
import time
from contextlib import nullcontext

import torch
from torch import nn
from torch.nn import functional as F


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="train a tiny character-level GPT")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--block-size", type=int, default=48)
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--min-lr", type=float, default=1e-4)
    parser.add_argument("--max-iters", type=int, default=60)
    parser.add_argument("--warmup-iters", type=int, default=10)
    parser.add_argument("--eval-interval", type=int, default=250)
    parser.add_argument("--eval-iters", type=int, default=8)
    parser.add_argument("--log-interval", type=int, default=1)
    parser.add_argument("--grad-accum", type=int, default=2)
    parser.add_argument("--grad-clip", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1337)
    return parser.parse_args()


def toy_corpus(n_chars: int, seed: int) -> str:
    """Sentences from a small grammar: enough structure for the loss to fall."""
    rng = random.Random(seed)
    who = ["the miller", "a sailor", "my lord", "the queen", "old tom", "her brother", "the clerk"]
    does = ["speaks of", "remembers", "sells", "forgets", "guards", "praises", "curses"]
    what = ["the harbour", "a bitter winter", "his horses", "the northern road", "our bread", "the last letter"]
    lines, size = [], 0
    while size < n_chars:
        line = f"{rng.choice(who)} {rng.choice(does)} {rng.choice(what)}{rng.choice('.!?,;')}\n".capitalize()
        lines.append(line)
        size += len(line)
    return "".join(lines)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float):
        super().__init__()
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.dropout = n_head, dropout

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    def __init__(self, vocab_size: int, args: argparse.Namespace):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, args.n_embd)
        self.pos = nn.Embedding(args.block_size, args.n_embd)
        self.blocks = nn.ModuleList(Block(args.n_embd, args.n_head, args.dropout) for _ in range(args.n_layer))
        self.ln_f = nn.LayerNorm(args.n_embd)
        self.head = nn.Linear(args.n_embd, vocab_size, bias=False)
        self.head.weight = self.tok.weight  # weight tying

    def forward(self, idx, targets=None):
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def get_batch(data: torch.Tensor, args: argparse.Namespace, device: str):
    # The index is made on the host and stays there in a GPU run too (the token tensor is a
    # host tensor): reading its elements syncs nothing, and 16 slices are ~1 % of a micro-step.
    ix = torch.randint(len(data) - args.block_size, (args.batch_size,))
    x = torch.stack([data[i:i + args.block_size] for i in ix])  # trap: TD201, TD301
    y = torch.stack([data[i + 1:i + 1 + args.block_size] for i in ix])  # trap: TD201, TD301
    if device == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


@torch.no_grad()
def estimate_loss(model, splits: dict, args: argparse.Namespace, device: str) -> dict:
    model.eval()
    result = {}
    for name, data in splits.items():
        losses = torch.zeros(args.eval_iters)
        for k in range(args.eval_iters):
            xb, yb = get_batch(data, args, device)
            _, loss = model(xb, yb)
            # 16 reads per evaluation, and the evaluation runs once per 250 iterations.
            losses[k] = loss.item()  # trap: TD201, TD203
        result[name] = losses.mean().item()
    model.train()
    return result


def lr_at(it: int, args: argparse.Namespace) -> float:
    if it < args.warmup_iters:
        return args.learning_rate * (it + 1) / args.warmup_iters
    progress = (it - args.warmup_iters) / max(1, args.max_iters - args.warmup_iters)
    return args.min_lr + 0.5 * (1 + math.cos(math.pi * min(1.0, progress))) * (args.learning_rate - args.min_lr)


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    autocast = nullcontext() if device == "cpu" else torch.autocast(device_type=device, dtype=torch.bfloat16)

    text = toy_corpus(60_000, args.seed)
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([stoi[ch] for ch in text], dtype=torch.long)
    cut = int(0.9 * len(data))
    splits = {"train": data[:cut], "val": data[cut:]}

    model = CharGPT(len(chars), args).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    fused = {"fused": True} if device == "cuda" else {}
    # On a GPU this optimizer is fused; on this CPU the per-tensor loop is torch's default
    # for CPU tensors, not a setting the script chose.
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, betas=(0.9, 0.95), **fused)  # trap: TD302

    xb, yb = get_batch(splits["train"], args, device)
    t0 = time.time()
    iter_num = 0
    while True:
        lr = lr_at(iter_num, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if iter_num % args.eval_interval == 0:
            # Runs at iteration 0 and then every 250: 2 x 8 forward passes per 250 iterations,
            # ~1 % of training. One evaluation in a short window says nothing about its share.
            losses = estimate_loss(model, splits, args, device)  # trap: TD701
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        for _ in range(args.grad_accum):
            with autocast:
                _, loss = model(xb, yb)
                loss = loss / args.grad_accum
            xb, yb = get_batch(splits["train"], args, device)  # prefetch while the device works
            loss.backward()
        if args.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if iter_num % args.log_interval == 0:
            # log_interval 1: the host waits for the device every iteration, so it cannot queue
            # the next iteration's kernels while the device runs this one. Cause: log every N.
            lossf = loss.item() * args.grad_accum  # expect: TD201
            # A print of two Python floats: microseconds against a step of milliseconds.
            print(f"iter {iter_num}: loss {lossf:.4f}, lr {lr:.2e}, time {dt * 1000:.1f} ms")  # trap: TD703
        iter_num += 1
        if iter_num > args.max_iters:
            break


if __name__ == "__main__":
    main()
