"""Imitates a time-series example trained with a closure optimizer, in the shape of the
PyTorch examples' sine-wave sequence predictor: a recurrent model unrolled in Python
with `nn.LSTMCell` over the time steps, `torch.optim.LBFGS`, and a `closure()` that
zeroes the gradients, runs the forward and backward, prints the loss and returns it to
`optimizer.step(closure)`. Each optimizer step evaluates the closure up to `max_iter`
times, so the forward and backward run inside `optimizer.step`.

Planted: the per-time-step `LSTMCell` loop (TD301): 48 time steps x ~15 small ops, each
a kernel launch on a GPU, forward and backward, at every closure evaluation; `nn.LSTM`
over the whole sequence runs one fused kernel sequence instead.

Traps: the `loss.item()` printed inside the closure is a read LBFGS does anyway (it
converts the closure's loss to a float itself at every evaluation), so it adds no wait;
the print per closure evaluation costs microseconds; the syncs inside LBFGS's line
search belong to torch, not to the `optimizer.step(closure)` line; the bias
initialisation loop runs once, before training.
"""
# torchdoctor-example: planted
import argparse
import math

import torch
from torch import nn


def sine_waves(n: int, length: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    phase = torch.randint(-20, 20, (n, 1), generator=gen).float()
    t = torch.arange(length).float().unsqueeze(0)
    return torch.sin((t + phase) / 4.0 * math.pi / 5.0)


class SequencePredictor(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.hidden = hidden
        self.cell = nn.LSTMCell(1, hidden)
        self.head = nn.Linear(hidden, 1)

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(seq.size(0), self.hidden, device=seq.device)
        c = torch.zeros(seq.size(0), self.hidden, device=seq.device)
        outputs = []
        for x_t in seq.split(1, dim=1):
            # ~15 small ops per time step (two matmuls, gates, activations), forward and
            # backward, 48 steps per evaluation: launch-bound on a GPU. Cause: nn.LSTM.
            h, c = self.cell(x_t, (h, c))  # expect: TD301
            outputs.append(self.head(h))
        return torch.cat(outputs, dim=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--length", type=int, default=49)
    parser.add_argument("--max-iter", type=int, default=8)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = sine_waves(40, args.length, seed=2)
    train_in, train_target = data[4:, :-1].to(device), data[4:, 1:].to(device)
    test_in, test_target = data[:4, :-1].to(device), data[:4, 1:].to(device)

    model = SequencePredictor(args.hidden).to(device)
    for name, p in model.named_parameters():
        if "bias" in name:
            # Initialisation: runs once, before the first step.
            p.data.fill_(0.0)  # trap: TD305
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.8, max_iter=args.max_iter)

    for step in range(args.steps):
        def closure():
            optimizer.zero_grad()
            out = model(train_in)
            loss = criterion(out, train_target)
            # LBFGS calls float() on this loss after every evaluation: the wait happens
            # anyway, this read adds none. The print is microseconds per evaluation.
            print(f"step {step} loss: {loss.item():.6f}")  # trap: TD201, TD703
            loss.backward()
            return loss

        # LBFGS reads scalars in its line search and convergence tests: torch's own code.
        optimizer.step(closure)  # trap: TD201
        if step % 10 == 9:
            with torch.no_grad():
                test_loss = criterion(model(test_in), test_target)
            print(f"step {step} test loss: {test_loss.item():.6f}")


if __name__ == "__main__":
    main()
