"""TD603: DDP settings that cost time in every step."""
import torch
from torch.nn.parallel import DistributedDataParallel

net = torch.nn.Linear(16, 16).cuda()
a = DistributedDataParallel(net, device_ids=[0], find_unused_parameters=True)  # info: only forward at run time shows whether it is needed
b = DistributedDataParallel(net, device_ids=[0], find_unused_parameters=False)  # no finding
c = DistributedDataParallel(net, device_ids=[0], bucket_cap_mb=1)  # low: tiny buckets
d = DistributedDataParallel(net, device_ids=[0], bucket_cap_mb=100)  # no finding
