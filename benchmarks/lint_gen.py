"""Generated worst-case inputs for `benchmarks/lint_speed.py`: single Python files that stress
what a linter's analyses cost per line, each grown to a requested number of lines.

- `many_loaders`: a flat script (as a notebook exported to .py reads) where every few lines
  build a DataLoader, then iterate it in an epoch loop with batch transfers, `.item()` reads and
  a synchronize: every loader, loop and name sits in the one module scope.
- `one_name`: the same, but every loader, batch and loss reuses the same few names, so any
  analysis that follows a name visits every binding of it.
- `many_loops`: one long function holding thousands of training, evaluation, timing and
  element loops over the same tensors, with helpers called from each.
- `deep_nesting`: blocks nested as deep as the tokenizer allows (99 indents): loops, ifs,
  `with`, functions and classes inside each other, with calls and syncs at every level.
- `mixed_project`: a whole project in one file: argparse options, config dataclasses, models,
  datasets, trainers with loaders built in one method and iterated in another, evaluation in
  strides, helpers that step through a loss scaler.

    python benchmarks/lint_gen.py SHAPE LINES OUT.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HEADER = """import argparse
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
"""


def many_loaders(i: int) -> str:
    return f"""
loader_{i} = DataLoader(dataset_{i % 7}, batch_size={16 + i % 5}, num_workers={i % 3}, pin_memory={i % 2 == 0})
model_{i} = torch.nn.Linear(8, 8).to(device)
opt_{i} = torch.optim.SGD(model_{i}.parameters(), lr=0.1)
for epoch_{i} in range(3):
    for x_{i}, y_{i} in loader_{i}:
        x_{i} = x_{i}.to(device)
        y_{i} = y_{i}.to(device, non_blocking=True)
        loss_{i} = F.mse_loss(model_{i}(x_{i}), y_{i})
        loss_{i}.backward()
        opt_{i}.step()
        opt_{i}.zero_grad()
        torch.cuda.synchronize()
        print(loss_{i}.item())
"""


def one_name(i: int) -> str:
    return f"""
loader = DataLoader(dataset, batch_size={16 + i % 5}, num_workers={i % 3}, pin_memory=True)
it = iter(loader)
for step in range(100):
    x, y = next(it)
    x, y = x.to(device), y.to(device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        print(f"{{step}} {{loss.item():.3f}}")
with torch.no_grad():
    for x, y in loader:
        out = model(x.to(device))
        total = total + (out.argmax(1) == y.to(device)).sum().item()
"""


def many_loops_header() -> str:
    return HEADER + """

def helper_step(model, batch, optimizer):
    loss = model(batch).sum()
    loss.backward()
    optimizer.step()
    return loss


def train_everything(model, loader, optimizer, val_loader, scaler):
    x = torch.zeros(8, device=device)
"""


def many_loops(i: int) -> str:
    return f"""    for batch in loader:
        loss = helper_step(model, batch.to(device), optimizer)
        t0 = time.time()
        torch.cuda.synchronize()
        if loss.item() > {i}:
            print(time.time() - t0)
    with torch.no_grad():
        for j, (v, w) in enumerate(val_loader):
            acc = (model(v.cuda()) == w.cuda()).float().mean()
            print(float(acc))
    for k in range(x.shape[0]):
        x[k] = x[k] * {i}
    for _ in range(10):
        t1 = time.perf_counter()
        model(x)
        torch.cuda.synchronize()
    scaler(loss, optimizer, update_grad=(i + 1) % 4 == 0)
"""


def deep_nesting(i: int) -> str:
    lines = []
    depth = 0
    kinds = ("for", "if", "with", "def", "while", "class")
    for level in range(96):
        pad = " " * depth  # one space per level: the file stays under the 4 MiB size cap
        previous = f"a{level - 1}" if level else "x"
        kind = kinds[(level + i) % len(kinds)]
        if kind == "for":
            lines.append(f"{pad}for a{level} in train_loader:")
            lines.append(f"{pad} a{level} = a{level}.to(device)")
            lines.append(f"{pad} model(a{level}).sum().backward()")
        elif kind == "if":
            guard = f"step % {level + 2} == 0" if level % 4 == 1 else f"step > {level}"
            lines.append(f"{pad}if {previous}.sum() > 0 and {guard}:")
        elif kind == "with":
            lines.append(f"{pad}with torch.no_grad():")
            lines.append(f"{pad} torch.cuda.synchronize()")
        elif kind == "def":
            lines.append(f"{pad}def f{i}_{level}({previous}, train_loader=None):")
            lines.append(f"{pad} print({previous}.item())")
        elif kind == "while":
            lines.append(f"{pad}while {previous}.max() > 0:")
            lines.append(f"{pad} opt.step()")
        else:
            lines.append(f"{pad}class C{i}_{level}:")
            lines.append(f"{pad} a{level} = {level}")
        depth += 1
    lines.append(" " * depth + "pass")
    return "\n".join(lines) + "\n"


def mixed_project(i: int) -> str:
    return f'''

parser_{i} = argparse.ArgumentParser()
parser_{i}.add_argument("--sync-{i}", action="store_true")
parser_{i}.add_argument("--workers-{i}", type=int, default={i % 4})
args_{i} = parser_{i}.parse_args()


@dataclass
class Config{i}:
    log_every_step: bool = {i % 2 == 0}
    accum: int = 4


class Data{i}(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        if torch.is_tensor(index):
            index = index.item()
        return torch.randn(16), index % 10


class Net{i}(torch.nn.Module):
    def __init__(self, ngpu=1):
        super().__init__()
        self.ngpu = ngpu
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))

    def forward(self, x):
        if x.is_cuda and self.ngpu > 1:
            return torch.nn.parallel.data_parallel(self.body, x, range(self.ngpu))
        rows = [x[r] * 2 for r in range(x.size(0))]
        return self.body(torch.stack(rows))


class Trainer{i}:
    def __init__(self, model, dataset, cfg: Config{i}):
        self.model = model.to(device)
        self.cfg = cfg
        self.optimizer = torch.optim.AdamW(self.model.parameters(), foreach=False)
        self.loader = self._prepare(dataset)

    def _prepare(self, dataset):
        return DataLoader(dataset, batch_size=64, pin_memory=True, num_workers=args_{i}.workers_{i})

    def _step(self, x, y, scaler, it):
        loss = F.cross_entropy(self.model(x), y) / self.cfg.accum
        scaler(loss, self.optimizer, update_grad=(it + 1) % self.cfg.accum == 0)
        return loss

    def _epoch(self, scaler):
        end = time.time()
        for it, (x, y) in enumerate(self.loader):
            x, y = x.to(device), y.to(device)
            loss = self._step(x, y, scaler, it)
            if args_{i}.sync_{i}:
                torch.cuda.synchronize()
            if self.cfg.log_every_step:
                print(loss.item(), scaler.state_dict()["scale"], time.time() - end)
            end = time.time()

    def fit(self, epochs, scaler):
        for _ in range(epochs):
            self._epoch(scaler)

    @torch.no_grad()
    def evaluate(self, source, stride=32):
        self.model.eval()
        total = 0.0
        for start in range(0, source.size(0) - 1, stride):
            window = source[start:start + stride]
            total += F.cross_entropy(self.model(window[:, :-1]), window[:, -1].long()).item()
            hits = (self.model(window[:, :-1]).argmax(1) == window[:, -1]).cpu()
            for r in range(len(hits)):
                if not hits[r]:
                    total += 1
        return total


def main_{i}():
    trainer = Trainer{i}(Net{i}(), Data{i}(1000), Config{i}())
    trainer.fit(3, lambda loss, opt, update_grad=True: loss.backward())
    torch.cuda.synchronize()
    return trainer.evaluate(torch.randn(512, 17, device=device))
'''


SHAPES = {
    "many_loaders": (HEADER, many_loaders),
    "one_name": (HEADER + "model = torch.nn.Linear(8, 8).to(device)\noptimizer = torch.optim.SGD(model.parameters())\n"
                 "total = 0\n", one_name),
    "many_loops": (many_loops_header(), many_loops),
    "deep_nesting": (HEADER + "step = 0\nopt = None\nmodel = None\n", deep_nesting),
    "mixed_project": (HEADER, mixed_project),
}


def generate(shape: str, lines: int) -> str:
    """`shape`'s text, repeated block by block until it holds at least `lines` lines."""
    header, block = SHAPES[shape]
    parts, count, i = [header], header.count("\n"), 0
    while count < lines:
        text = block(i)
        parts.append(text)
        count += text.count("\n")
        i += 1
    return "".join(parts)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in SHAPES or not argv[1].isdigit():
        sys.stderr.write(f"usage: lint_gen.py {{{'|'.join(SHAPES)}}} LINES OUT.py\n")
        return 2
    Path(argv[2]).write_text(generate(argv[0], int(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
