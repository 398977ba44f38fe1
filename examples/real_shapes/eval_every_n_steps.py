"""Imitates a fine-tuning script with a hand-written loop that evaluates by step count,
as many scripts do with an `--eval-steps` flag: `evaluate(model, val_loader, device)`
is called at step 0 (a baseline before training) and then every `eval_steps` steps, with
the validation set far larger than what is trained on between two evaluations. A
`LambdaLR` warm-up, a `tqdm`-free progress print and a best-score tracker complete it.

Planted: `--eval-steps 10` with 16 validation batches of 128: the forward passes over
2048 samples every 10 steps of 32 cost about half as much as the training itself
(TD701, ~30-35 % of the wall time on this CPU: 10 steps 165-265 ms, one evaluation
90-105 ms, measured twice on the busy machine). The
expected line is the loop's call `evaluate(...)`, the line that enters the phase, not
the `if step % ...` line that schedules it, nor `model.eval()` or any line inside
`evaluate`.

Traps: `model.eval()` inside `evaluate` is where the phase begins, not its cause; the
evaluation accumulates on the device and reads its totals once per evaluation; the
best-score bookkeeping reads Python floats.
"""
# torchdoctor-example: planted
import argparse

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


def make_split(n: int, seed: int, proj: torch.Tensor) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 500, (n, 24), generator=gen)
    labels = (proj[tokens].sum(dim=1) > 0).long()
    return TensorDataset(tokens, labels)


class BagClassifier(nn.Module):
    def __init__(self, vocab: int = 500, dim: int = 256, hidden: int = 1024):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, 2))

    def forward(self, tokens):
        return self.mlp(self.emb(tokens).mean(dim=1))


@torch.no_grad()
def evaluate(model, loader, device) -> dict:
    # Where the evaluation begins, not what schedules it.
    model.eval()  # trap: TD701
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    for tokens, labels in loader:
        tokens, labels = tokens.to(device), labels.to(device)
        logits = model(tokens)
        loss_sum += F.cross_entropy(logits, labels, reduction="sum")
        correct += (logits.argmax(dim=1) == labels).sum()
    model.train()
    n = len(loader.dataset)
    # Two reads per evaluation, after the batches.
    return {"loss": loss_sum.item() / n, "accuracy": correct.item() / n}  # trap: TD201, TD203


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--eval-batch-size", type=int, default=128)
    parser.add_argument("--eval-steps", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup-steps", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    proj = torch.randn(500, generator=torch.Generator().manual_seed(3))
    train_loader = DataLoader(make_split(4096, 1, proj), batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(make_split(2048, 2, proj), batch_size=args.eval_batch_size)
    model = BagClassifier().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / args.warmup_steps))

    best, step = 0.0, 0
    while step < args.max_steps:
        for tokens, labels in train_loader:
            if step % args.eval_steps == 0:
                # 2048 samples forward every 10 steps of 32 samples forward and backward:
                # ~30-35 % of the wall time. Cause: evaluate every few
                # hundred steps, or on a subset.
                metrics = evaluate(model, val_loader, device)  # expect: TD701
                best = max(best, metrics["accuracy"])
                print(f"step {step}: val loss {metrics['loss']:.4f}, acc {metrics['accuracy']:.3f} (best {best:.3f})")
            tokens, labels = tokens.to(device), labels.to(device)
            loss = F.cross_entropy(model(tokens), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step >= args.max_steps:
                break


if __name__ == "__main__":
    main()
