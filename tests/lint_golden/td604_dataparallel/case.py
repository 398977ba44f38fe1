"""TD604: nn.DataParallel instead of DistributedDataParallel."""
import torch
from torch import nn
from torch.nn.parallel import DataParallel as DP

model = nn.DataParallel(nn.Linear(8, 8).cuda())  # triggers
other = DP(nn.Linear(8, 8).cuda())  # triggers: through an alias
if isinstance(model, nn.DataParallel):  # no finding: a type check, not a wrapper
    inner = model.module
