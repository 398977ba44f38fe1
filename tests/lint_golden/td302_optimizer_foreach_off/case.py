"""TD302: optimizers built with foreach=False."""
import argparse

import torch
from torch.optim import SGD as PlainSGD

parser = argparse.ArgumentParser()
parser.add_argument("--foreach", action="store_true")
args = parser.parse_args()
FOREACH = False
params = [torch.nn.Parameter(torch.randn(4)) for _ in range(100)]

a = torch.optim.AdamW(params, lr=1e-3, foreach=False)  # triggers
b = PlainSGD(params, lr=0.1, foreach=FOREACH)  # triggers: FOREACH is False
c = torch.optim.Adam(params, foreach=True)  # no finding
d = torch.optim.Adam(params)  # no finding: the default picks foreach on CUDA
e = torch.optim.Adam(params, foreach=args.foreach)  # info: the command line decides
f = torch.optim.lr_scheduler.StepLR(a, step_size=10)  # no finding: not an optimizer
