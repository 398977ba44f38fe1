"""TD704: debugging aids left on in a training script."""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--debug", action="store_true")
args = parser.parse_args()

torch.autograd.set_detect_anomaly(True)  # triggers
torch.autograd.set_detect_anomaly(False)  # no finding
torch.autograd.set_detect_anomaly(args.debug)  # no finding: a flag already guards it
torch.use_deterministic_algorithms(True)  # low: slower kernels, often on purpose
torch.backends.cudnn.deterministic = True  # low

model = torch.nn.Linear(4, 1).double()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    with torch.autograd.detect_anomaly():  # triggers
        model(torch.randn(2, 4, dtype=torch.float64)).sum().backward()
    torch.autograd.gradcheck(model, (torch.randn(2, 4, dtype=torch.float64, requires_grad=True),))  # triggers
    opt.step()
