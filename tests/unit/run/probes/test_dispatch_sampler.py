import time

import torch

from torchdoctor.run.probes.dispatch import DispatchSampler


def _loop(x, out):
    for i in range(8):
        out[i] = x[i]  # the loop line


def test_ops_are_counted_by_user_line_and_syncs_are_caught():
    sampler = DispatchSampler(time.perf_counter)
    sampler.install()
    x, out = torch.randn(8, 4), torch.zeros(8, 4)
    try:
        sampler.activate("train")
        _loop(x, out)
        value = x.sum().item()
        picked = x[x > 0]
        sampler.deactivate()
        _loop(x, out)  # not sampled
    finally:
        sampler.uninstall()
    by_line = {(k[1], k[2]): acc for k, acc in sampler.sites.items()}
    loop_line = _loop.__code__.co_firstlineno + 2
    site = by_line[(loop_line, "_loop")]  # two selects and a copy_ per iteration, sampled once
    assert (site.ops, site.op_counts["aten::select"], site.op_counts["aten::copy_"]) == (24, 16, 8)
    apis = {(c.api, c.kind) for c in sampler.api.values()}
    assert (".item()", "host-sync") in apis and ("__getitem__", "data-dependent") in apis
    assert isinstance(value, float) and picked.numel() >= 0


def test_optimizer_internal_scalar_reads_are_not_blamed_on_the_user():
    sampler = DispatchSampler(time.perf_counter)
    p = torch.nn.Parameter(torch.randn(3))
    opt = torch.optim.Adam([p], lr=0.1, foreach=False)
    p.grad = torch.ones(3)
    sampler.activate("train")
    try:
        opt.step()
    finally:
        sampler.deactivate()
    assert not [c for c in sampler.api.values() if c.kind == "host-sync"]
    assert sum(acc.internal_ops for acc in sampler.sites.values()) > 0


def test_work_outside_the_step_is_not_counted():
    sampler = DispatchSampler(time.perf_counter, outside_step=lambda: True)
    sampler.activate("train")
    try:
        torch.ones(3).add(1)
    finally:
        sampler.deactivate()
    assert sampler.sites == {}


def test_a_numpy_call_on_a_tensor_as_it_is_reads_a_host_tensor():
    """`.numpy()` raises on a CUDA tensor: `pred.detach().numpy()` in a script means the tensor
    is the host's in any run; `pred.detach().cpu().numpy()` copies a device tensor first."""
    sampler = DispatchSampler(time.perf_counter)
    sampler.install()
    model = torch.nn.Linear(4, 2)  # its output is a device tensor in a GPU run
    try:
        sampler.activate("train")
        pred = model(torch.randn(3, 4)).detach()
        pred.numpy()  # the numpy line
        pred.cpu().numpy()  # the copy line
        sampler.deactivate()
    finally:
        sampler.uninstall()
    placement = {c.api: c.placement for c in sampler.api.values()}
    assert placement[".numpy()"] == "host" and placement[".cpu()"] == "device"


def test_ops_outside_the_step_read_no_clock_and_leave_no_gap():
    """A DataLoader's batch runs inside a sampled step, hundreds of small ops that are not the
    step's: they are handed on before any clock is read, and the next op counts no gap."""
    reads = []

    def clock():
        reads.append(1)
        return time.perf_counter()

    loading = [True]
    sampler = DispatchSampler(clock, outside_step=lambda: loading[0])
    sampler.activate("train")
    try:
        torch.ones(3).add(1)
        assert reads == [] and sampler.sites == {} and sampler.last_end is None
        loading[0] = False
        torch.ones(3).add(1)
    finally:
        sampler.deactivate()
    assert reads and sum(acc.ops for acc in sampler.sites.values()) == 2  # ones, add
    assert {d for acc in sampler.sites.values() for d in acc.devices} == {"cpu"}
