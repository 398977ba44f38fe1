"""Hand-fixed version of zero_grad_dense.py (the reference for `benchmarks/tune_accuracy.py`).

Planted TD303 (grad-zero-not-none): `optimizer.zero_grad(set_to_none=False)` on a
model dominated by a 200k x 64 embedding table (12.8M values) of which a batch touches a
few hundred rows: every step writes 51 MB of zeros, and backward then adds the new
gradient into the zeroed one instead of just storing it.

Fix: `optimizer.zero_grad()` (set_to_none=True is the default). For a table this sparse
`nn.Embedding(..., sparse=True)` with a sparse-aware optimizer helps further.
"""
# torchdoctor-example: fixed
# torchdoctor-fixes: zero_grad_dense.py
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"


class BagOfIds(nn.Module):
    def __init__(self, num_ids=200_000, dim=64, classes=2):
        super().__init__()
        self.embedding = nn.Embedding(num_ids, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids):
        return self.head(self.embedding(ids).mean(dim=1))


torch.manual_seed(0)
model = BagOfIds().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
try:
    for step in range(60):
        ids = torch.randint(0, 200_000, (16, 8), device=device)
        y = torch.randint(0, 2, (16,), device=device)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(ids), y)
        loss.backward()
        opt.step()
        if step % 20 == 19:
            print(f"step {step + 1} loss {loss.item():.4f}")
except Exception as exc:  # a user's catch-all around the loop: the doctor must still stop it
    print("training failed:", exc)
