"""TD204: a synchronize reached through a name the script binds to it."""
import time

import torch

use_gpu = torch.cuda.is_available()
wait_for_gpu = torch.cuda.synchronize if use_gpu else lambda: None
flush = torch.cuda.synchronize
peak_memory = torch.cuda.max_memory_allocated if use_gpu else lambda: 0
noop = print if use_gpu else lambda: None

net = torch.nn.Linear(8, 8)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)


def train(steps):
    barrier = (lambda: None) if not use_gpu else torch.cuda.synchronize
    for step in range(steps):
        started = time.perf_counter()
        net(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        wait_for_gpu()  # triggers: torch.cuda.synchronize when use_gpu
        flush()  # triggers: a plain alias
        barrier()  # triggers: the function-level alias, on the else branch
        peak_memory()  # no finding: not a sync
        noop()  # no finding: print, not a sync
        print(time.perf_counter() - started)


wait_for_gpu()  # no finding: once, outside any loop
train(10)
