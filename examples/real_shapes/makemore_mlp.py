"""Imitates a makemore-style character-level MLP language model (Bengio et al. 2003)
written with raw tensors, as in lecture notebooks turned into scripts: the parameters
are a plain list `[C, W1, b1, W2, b2]` created with `device=`, each step samples a
minibatch with `torch.randint`, clears gradients with `p.grad = None`, calls
`loss.backward()` and updates `for p in parameters: p.data += -lr * p.grad`; the loss
history is kept with `lossi.append(loss.log10().item())`. The names are generated from
syllables, so nothing is downloaded. No `torch.optim`: a step is the interval between
two `backward()` calls.

Planted: `lossi.append(loss.log10().item())` reads a device scalar at every step (TD201);
the update loop issues two kernels per tensor (TD305): only 5 tensors, but the whole step
is ~20 tiny ops, so the loop is ~15 % of it on this CPU and more on a launch-bound GPU
(one `torch._foreach_add_`, or `torch.optim.SGD(foreach=True)`, does it in one or two).
The parameters are created with `device=device`, not moved with `.to(device)`: a doctor
that tracks where tensors live must count factory calls with `device=` too.

Traps: the progress print reads the loss once per 1000 steps.
"""
# torchdoctor-example: planted
import argparse
import random

import torch
from torch.nn import functional as F


def make_names(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    onsets = ["b", "br", "c", "d", "el", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "st", "t", "v", "z"]
    vowels = ["a", "e", "i", "o", "u", "ia", "ae", "y"]
    codas = ["", "", "n", "l", "r", "s", "th", "x"]
    return ["".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(rng.randint(1, 3)))
            for _ in range(n)]


def build_dataset(words: list[str], stoi: dict, block_size: int):
    xs, ys = [], []
    for w in words:
        context = [0] * block_size
        for ch in w + ".":
            xs.append(context)
            ys.append(stoi[ch])
            context = context[1:] + [stoi[ch]]
    return torch.tensor(xs), torch.tensor(ys)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--block-size", type=int, default=3)
    parser.add_argument("--emb", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    words = make_names(4000, seed=42)
    chars = sorted(set("".join(words)))
    stoi = {ch: i + 1 for i, ch in enumerate(chars)}
    stoi["."] = 0
    vocab = len(stoi)
    random.Random(42).shuffle(words)
    cut = int(0.9 * len(words))
    Xtr, Ytr = build_dataset(words[:cut], stoi, args.block_size)
    Xtr, Ytr = Xtr.to(device), Ytr.to(device)

    g = torch.Generator(device=device).manual_seed(2147483647)
    C = torch.randn((vocab, args.emb), generator=g, device=device)
    W1 = torch.randn((args.block_size * args.emb, args.hidden), generator=g, device=device) * 0.2
    b1 = torch.randn(args.hidden, generator=g, device=device) * 0.01
    W2 = torch.randn((args.hidden, vocab), generator=g, device=device) * 0.01
    b2 = torch.zeros(vocab, device=device)
    parameters = [C, W1, b1, W2, b2]
    for p in parameters:
        p.requires_grad = True

    torch.manual_seed(0)
    lossi = []
    for i in range(args.steps):
        ix = torch.randint(0, Xtr.shape[0], (args.batch_size,))
        emb = C[Xtr[ix]]
        h = torch.tanh(emb.view(-1, args.block_size * args.emb) @ W1 + b1)
        logits = h @ W2 + b2
        loss = F.cross_entropy(logits, Ytr[ix])
        for p in parameters:
            p.grad = None
        loss.backward()
        lr = 0.1 if i < args.steps // 2 else 0.01
        for p in parameters:
            # Five tensors, two kernels each (mul, add): on this CPU 0.027 ms of a 0.19 ms step
            # (~14 %); a tiny model's GPU step is launch-bound, so the share is larger there.
            p.data += -lr * p.grad  # expect: TD305
        # The history wants a Python float every step: the host waits for the device each
        # step. Cause: keep the history as a device tensor (or read it every N steps).
        lossi.append(loss.log10().item())  # expect: TD201
        if i % 1000 == 0:
            # One more read every 1000 steps.
            print(f"{i:7d}/{args.steps:7d}: {loss.item():.4f}")  # trap: TD201
    print(f"mean log10 loss over the last 100 steps: {sum(lossi[-100:]) / 100:.4f}")


if __name__ == "__main__":
    main()
