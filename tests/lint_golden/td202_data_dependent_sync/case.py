"""TD202: ops whose output size depends on tensor values, in forward or the step."""
import torch
from torch import nn


class MaskedLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(16, 4)

    def forward(self, x, target, observed, index):
        err = (self.net(x) - target) ** 2
        picked = err[index]  # no finding: `index` is passed an integer tensor
        valid = target > 0
        hits = torch.nonzero(valid)  # triggers
        where_one = torch.where(valid)  # triggers: torch.where(cond) is nonzero
        where_three = torch.where(valid, err, torch.zeros_like(err))  # no finding
        return err[observed].mean() + hits.float().sum() + picked.sum()  # triggers: boolean mask


model = MaskedLoss().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    x, target = torch.randn(8, 16, device="cuda"), torch.randn(8, 4, device="cuda")
    mask = torch.rand(8, 4, device="cuda") > 0.5
    loss = model(x, target, mask, torch.arange(8, device="cuda"))
    loss.backward()
    opt.step()
    labels = target.argmax(1)
    kept = torch.masked_select(target, mask)  # triggers
    classes = labels.unique()  # triggers
    if step % 20 == 0:
        seen = torch.unique(labels)  # no finding: every 20 steps
