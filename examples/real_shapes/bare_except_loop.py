"""Imitates a research-repository train.py that guards its loop defensively: the batch
iterator is re-created on `StopIteration` inside a step-counted `while` loop, each step
runs inside a bare `except:` that logs "skipping batch" and carries on (meant for
corrupt samples and NaN losses), the loss is checked with `math.isfinite(loss.item())`
before the backward, and the whole run is wrapped in `try: ... except BaseException:`
that prints a summary instead of re-raising and then runs a final evaluation.
Both handlers also catch whatever a profiler raises to stop the script, so a doctor
must stop it by other means.

Planted: `math.isfinite(loss.item())` reads the loss on the host at every step (TD201);
on a GPU the host waits for each step to finish. Cause: check `torch.isfinite` on the
device every N steps, or check the gradient norm the clipping already computes.

Traps: the progress print reads the loss once per 50 steps; the final evaluation runs
once; none of the handlers runs in a normal run.
"""
# torchdoctor-example: planted
import argparse
import math
import sys

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


def build(args, device):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 32, generator=gen)
    y = torch.sin(x[:, :4].sum(dim=1, keepdim=True)) + 0.1 * torch.randn(4096, 1, generator=gen)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = nn.Sequential(nn.Linear(32, 1024), nn.SiLU(), nn.Linear(1024, 1024), nn.SiLU(), nn.Linear(1024, 1))
    model = model.to(device)
    return loader, model


def train(args, loader, model, optimizer, device) -> dict:
    stats = {"steps": 0, "skipped": 0}
    data_iter = iter(loader)
    step = 0
    while step < args.max_steps:
        try:
            try:
                xb, yb = next(data_iter)
            except StopIteration:
                data_iter = iter(loader)
                xb, yb = next(data_iter)
            xb, yb = xb.to(device), yb.to(device)
            loss = F.mse_loss(model(xb), yb)
            # One host read per step to skip bad batches: the host waits for the device
            # every step.
            if not math.isfinite(loss.item()):  # expect: TD201
                raise FloatingPointError(f"non-finite loss at step {step}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            stats["steps"] += 1
        except:  # noqa: E722 -- keep training past a bad batch
            stats["skipped"] += 1
            print(f"step {step}: skipping batch ({sys.exc_info()[0].__name__})")
        step += 1
        if step % args.log_every == 0:
            # Formatting a 0-d tensor reads it: once per 50 steps, a print a user wants.
            print(f"step {step}: last loss {loss.detach().float():.4f}")  # trap: TD201, TD703
    return stats


@torch.no_grad()
def final_eval(model, loader, device) -> float:
    model.eval()
    total = torch.zeros((), device=device)
    for xb, yb in loader:
        total += F.mse_loss(model(xb.to(device)), yb.to(device), reduction="sum")
    # Once, after training.
    return total.item() / len(loader.dataset)  # trap: TD201, TD203


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader, model = build(args, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    stats = {}
    try:
        stats = train(args, loader, model, optimizer, device)
    except BaseException as exc:  # noqa: BLE001 -- report and fall through to the evaluation
        print(f"training stopped early: {type(exc).__name__}: {exc}")
    print(f"trained {stats.get('steps', '?')} steps, skipped {stats.get('skipped', '?')}; "
          f"eval mse {final_eval(model, loader, device):.4f}")


if __name__ == "__main__":
    main()
