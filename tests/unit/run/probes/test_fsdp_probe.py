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
