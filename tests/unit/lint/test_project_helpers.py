"""A per-step call to a helper in another module of the user's project that reads a device value
on the host (a distributed-mean helper in `util/misc.py` ending in `.item()`) is a host sync at the
call: found by `lint` on the calling file, named with the helper's file and line."""

import textwrap

from torchdoctor.lint import lint_files

TRAIN = """
import torch
import util.misc as misc
from util.misc import all_reduce_mean, to_float

def train_one_epoch(model, loader, optimizer):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        value = misc.all_reduce_mean(loss.detach())
        same = all_reduce_mean(loss.detach())
        kept = misc.keep_on_device(loss.detach())
        misc.log_epoch(loader)
"""

MISC = """
import torch
import torch.distributed as dist

def all_reduce_mean(x):
    if dist.is_initialized():
        y = torch.tensor(x).cuda()
        dist.all_reduce(y)
        return y.item()
    return x

def keep_on_device(x):
    y = x.clone()
    return y * 2

def log_epoch(loader):
    for x, _ in loader:
        print(x.sum().item())

def to_float(t):
    return float(t)
"""


def _project(tmp_path, misc=MISC):
    (tmp_path / "util").mkdir()
    (tmp_path / "util" / "__init__.py").write_text("")
    (tmp_path / "util" / "misc.py").write_text(textwrap.dedent(misc))
    train = tmp_path / "engine.py"
    train.write_text(textwrap.dedent(TRAIN))
    return train


def test_a_project_helper_that_reads_the_device_is_a_sync_at_each_per_step_call(tmp_path):
    train = _project(tmp_path)
    syncs = {f.location.line: f for f in lint_files([train]) if f.code == "TD201"}
    assert sorted(syncs) == [12, 13]  # misc.all_reduce_mean and the from-imported name, nothing else
    assert "util/misc.py:9" in syncs[12].message and "y.item()" in syncs[12].message


def test_helpers_without_a_read_once_per_call_are_not_followed(tmp_path):
    train = _project(tmp_path)
    lines = {f.location.line for f in lint_files([train]) if f.code == "TD201"}
    assert 14 not in lines  # keep_on_device reads nothing
    assert 15 not in lines  # log_epoch reads inside its own loop: its file's own finding, not each call's


def test_no_project_module_no_finding(tmp_path):
    train = tmp_path / "engine.py"
    train.write_text(textwrap.dedent(TRAIN))  # util/misc.py is not there: nothing to follow
    assert not [f for f in lint_files([train]) if f.code == "TD201"]
