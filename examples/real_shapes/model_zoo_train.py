"""Imitates a small training script in a larger repository: it imports its model from the
repository's model module (`from _helpers_models import build_model`), a module that also
holds a legacy training loop, a legacy evaluation and a legacy pooling head, all full of
slow habits and none of them called. The script itself trains an MLP with AdamW, gradients
set to None, the running loss kept on the device and read every 50 steps.

Clean: nothing that runs here is a habit to fix.

Traps (in _helpers_models.py): every line of `legacy_train`, `legacy_evaluate` and
`LegacyAttentionPool.forward` carrying a `# trap:` never executes in this run. A static
finding on an imported but never-executed line must not become a finding of this run.
In this file: the log line reads the device-side running loss once per 50 steps.
"""
# torchdoctor-example: clean
# torchdoctor-helpers: _helpers_models.py
import argparse

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from _helpers_models import build_model, count_parameters


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8192, 48, generator=gen)
    y = (x[:, :8].sum(1) > 0).long() + (x[:, 8:16].sum(1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, drop_last=True,
                        pin_memory=device.type == "cuda")
    model = build_model("mlp", d_in=48, d_hidden=args.hidden, d_out=3).to(device)
    print(f"model: {count_parameters(model)} parameters")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # verdict: TD306

    step, running = 0, torch.zeros((), device=device)
    while step < args.steps:
        for xb, yb in loader:
            xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            running += loss.detach()
            step += 1
            if step % args.log_every == 0:
                # One read per 50 steps.
                print(f"step {step}: mean loss {running.item() / args.log_every:.4f}")  # trap: TD201
                running.zero_()
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
