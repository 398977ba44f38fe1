"""The FSDP probe's hooks go in only where FSDP can run: torch imports torch.distributed.fsdp in
every script that uses an optimizer (with Dynamo), and hooking then (imports, a walk over every
object for units made before) cost each run's first steps a tenth of a second or more."""

import importlib

import pytest
import torch
import torch.distributed as dist

from torchdoctor.run.probes.fsdp import FsdpProbe
from torchdoctor.run.session import RunSession, SessionConfig

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="needs torch.distributed")


def test_the_probe_waits_for_a_process_group_before_hooking_fsdp():
    importlib.import_module("torch.distributed.fsdp")  # as an optimizer's first step imports it
    assert not dist.is_initialized()
    session = RunSession(SessionConfig(warmup=0, steps=5))
    probe = FsdpProbe(session)
    probe.install()
    try:
        session.subscribe(probe)
        session.on_optimizer_step()  # a step ends: the probe looks again
        assert not probe.hooked and len(probe.patches) == 1  # init_process_group's wrapper alone
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            assert probe.hooked and len(probe.patches) > 1  # hooked as the process group came up
        finally:
            dist.destroy_process_group()
    finally:
        probe.uninstall()
    assert not hasattr(dist.init_process_group, "__torchdoctor_patch__")


def test_an_fsdp1_wrapper_records_where_its_call_wrote_use_orig_params():
    """torch.compile traces FSDP1 only with use_orig_params=True: the fix goes on the line that writes
    the keyword (open_lm passes a flag there, six lines below the call's first line)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    from helpers.records import record as plain_record

    session = RunSession(SessionConfig(warmup=0, steps=5))
    probe = FsdpProbe(session)
    probe.install()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        first = __import__("sys")._getframe().f_lineno + 1
        model = FSDP(
            torch.nn.Linear(4, 4),
            use_orig_params=False,
            device_id=torch.device("cpu"),
        )
        record = plain_record()
        probe.contribute(record)
    finally:
        dist.destroy_process_group()
        probe.uninstall()
    assert model is not None
    (unit,) = record.distributed.fsdp
    assert unit.version == 1 and unit.use_orig_params is False
    assert unit.created_at.line in (first, first + 2) and unit.use_orig_params_at.line == first + 2
