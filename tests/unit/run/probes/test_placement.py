"""Where a tensor would live in a GPU run, told on a CPU run; which files are libraries."""

import os

import torch

from torchdoctor.run.probes.frames import USER, classify_file, library_of
from torchdoctor.run.probes.placement import on_device, parameter_storages, propagate


def call(name, *args, out, **kwargs):
    propagate(name, args, kwargs, out)
    return out


def test_moves_parameters_and_graphs_are_device_tensors_and_the_rest_host():
    layer = torch.nn.Linear(4, 2)
    host = torch.randint(0, 4, (8,))
    assert not on_device(host) and on_device(layer.weight)
    moved = call("to", host, "cpu", out=host.clone())  # `.to(device)`: device is "cpu" on this machine
    assert on_device(moved)
    assert not on_device(call("to", host, torch.float32, out=host.float()))  # a dtype alone moves nothing
    made = call("zeros", 3, device="cpu", out=torch.zeros(3))
    assert on_device(made)
    out = layer(torch.randn(2, 4))
    assert on_device(out)  # part of an autograd graph from the parameters
    summary = out.detach()
    call("detach", out, out=summary)
    assert on_device(summary)
    back = call("cpu", summary, out=summary.cpu())  # the same object on a CPU run
    assert not on_device(back)


def test_parameter_storages_are_the_leaves_backward_reaches():
    a, b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 1)
    loss = b(a(torch.randn(2, 3))).sum()
    found = parameter_storages(loss)
    assert found == {p.data_ptr() for p in [*a.parameters(), *b.parameters()]}


def test_installed_packages_are_libraries_not_standard_library(tmp_path):
    venv_file = os.path.join(os.sep, "v", "lib", "python3.11", "site-packages", "lightning", "pytorch", "loop.py")
    assert library_of(venv_file) == "lightning"
    assert library_of(str(tmp_path / "train.py")) is None
    import site

    installed = os.path.join(site.getsitepackages()[0], "somepackage", "mod.py")
    assert classify_file(installed) == USER and library_of(installed) == "somepackage"


def test_inputs_are_searched_as_deep_as_before_without_generators(monkeypatch):
    """propagate runs for every torch call in a sampled step (a DataLoader's every sample): its
    inputs are searched without a generator per level, as deep as ever (two levels of lists or
    dicts below the arguments)."""
    import torchdoctor.run.probes.placement as placement

    searched = []
    real = placement._tensors
    monkeypatch.setattr(placement, "_tensors", lambda *a: searched.append(a) or real(*a))
    weight, host = torch.nn.Linear(2, 2).weight, torch.zeros(2)
    assert not on_device(call("getitem", host, 0, out=torch.zeros(1)))
    assert searched == []  # host inputs: nothing marked, no generator made
    assert on_device(call("cat", [host, weight], out=torch.zeros(1)))
    assert on_device(call("f", host, out=torch.zeros(1), weight=weight))
    assert on_device(call("f", host, out=torch.zeros(1), weights=[weight]))
    assert not on_device(call("f", [[weight]], out=torch.zeros(1)))  # three levels down: not searched
    assert not on_device(call("f", host, out=torch.zeros(1), weights=[[weight]]))
