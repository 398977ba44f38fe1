"""Hand-fixed version of checkpoint_every_step.py (the reference for `benchmarks/tune_accuracy.py`).

Planted TD702 (frequent-checkpoint): model and optimizer state (a 12.6 MB model, 38 MB
with Adam's moments) saved with `torch.save` after every step; training waits for each
serialization and write.

Fix: save every N steps or every few minutes of wall time (`--save_every 1000`), and at
the end of training.
"""
# torchdoctor-example: fixed
# torchdoctor-fixes: checkpoint_every_step.py
import argparse
import os
import tempfile

import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--save_every", type=int, default=50)
    parser.add_argument("--output_dir", default=None)
    args = parser.parse_args()
    output_dir = args.output_dir or tempfile.mkdtemp(prefix="ckpt_")

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 1024)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    for step in range(1, args.steps + 1):
        x = torch.randn(32, 512, device=device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % args.save_every == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
                       os.path.join(output_dir, "last.pt"))
    print(f"saved to {output_dir}")


if __name__ == "__main__":
    main()
