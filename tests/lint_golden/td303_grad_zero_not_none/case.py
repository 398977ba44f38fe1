"""TD303: gradients zeroed in place instead of set to None."""
import torch

model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
KEEP = False
for step in range(10):
    opt.zero_grad(set_to_none=False)  # triggers
    opt.zero_grad(False)  # triggers: positional
    model.zero_grad(set_to_none=KEEP)  # triggers: KEEP is False
    opt.zero_grad()  # no finding
    opt.zero_grad(set_to_none=True)  # no finding
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
