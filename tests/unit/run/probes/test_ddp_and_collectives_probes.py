"""The DDP and collectives probes, and the DDP knobs, on a one-rank DDP job run in this
process (gloo, a file store): what each optimizer step all-reduced, no_sync() call sites,
DDP's settings and timings, the script's own collectives by line."""

from pathlib import Path

import pytest
import torch.distributed as dist

from torchdoctor.run.probes.collectives import check_launch
from torchdoctor.run.runner import RunRequest, execute

SCRIPT = Path(__file__).with_name("ddp_probe_script.py")


def run(tmp_path, mode, knobs=None, steps=6, warmup=2):
    request = RunRequest(target=str(SCRIPT), args=[str(tmp_path / "store"), mode], warmup=warmup, steps=steps,
                         max_seconds=120, knobs=knobs or {})
    try:
        record = execute(request, tmp_path)
    finally:
        if dist.is_initialized():  # the step limit stopped the script before any teardown of its own
            dist.destroy_process_group()
    assert record.run.status == "step-limit", record.run.error
    return record


def measured(record):
    indices = {s.index for s in record.measured_steps}
    return [d for d in record.distributed.ddp_steps if d.step in indices]


def test_no_sync_around_backward_only_still_all_reduces_every_micro_batch(tmp_path):
    record = run(tmp_path, "backward-only")
    info = record.distributed
    assert all(d.synced_backwards == 4 and d.skipped_backwards == 0 for d in measured(record))
    [site] = info.no_sync
    assert site.location.line == 33 and site.forwards_inside == 0 and site.backwards_inside > 0
    [model] = info.ddp
    assert model.backward_location.line == 41 and model.forward_location.line == 39
    assert model.created_at.line == 28 and model.backend == "gloo" and model.world_size == 1
    assert model.broadcast_buffers and model.buffers == 1 and model.buffers_changed is False
    assert model.grad_bytes == (16 * 64 + 64 + 64 * 4 + 4) * 4 and model.bucket_cap_mb == 25.0
    # DDP's own timings of each synchronised backward, read from its logging data
    timed = [b for d in measured(record) for b in d.backwards]
    assert timed and all(b.compute_end >= b.compute_start and b.comm_end >= b.comm_start for b in timed)


def test_no_sync_around_forward_and_backward_skips_the_non_final_all_reduces(tmp_path):
    record = run(tmp_path, "proper")
    assert all(d.synced_backwards == 1 and d.skipped_backwards == 3 for d in measured(record))
    [site] = record.distributed.no_sync
    assert site.location.line == 33 and site.forwards_inside == site.entries and site.backwards_inside == site.entries


def test_collectives_the_script_calls_are_timed_by_line(tmp_path):
    record = run(tmp_path, "proper")
    [site] = [c for c in record.distributed.collectives if c.op == "all_reduce"]
    assert site.location.line == 46 and site.location.path.endswith("ddp_probe_script.py")
    assert site.calls == len(record.steps) and site.bytes == 4 * site.calls
    assert set(site.steps) == {str(s.index) for s in record.steps}
    assert record.distributed.identity.backend == "gloo" and record.distributed.identity.init_location.line == 27


def test_ddp_knobs_rewrite_the_constructor_and_skip_non_final_all_reduces(tmp_path):
    knobs = {"no_sync": True, "bucket_cap_mb": 1.0, "broadcast_buffers": False, "comm_hook": "fp16"}
    record = run(tmp_path, "plain", knobs=knobs)
    [model] = record.distributed.ddp
    assert model.bucket_cap_mb == 1.0 and not model.broadcast_buffers and model.comm_hook == "fp16_compress_hook"
    assert all(d.synced_backwards == 1 and d.skipped_backwards == 3 for d in measured(record))
    applied = {k.name: k.applied for k in record.knobs}
    assert applied == {"no_sync": True, "bucket_cap_mb": True, "broadcast_buffers": True, "comm_hook": True}


def test_a_comm_hook_ddp_refuses_here_is_reported_and_the_run_goes_on(tmp_path):
    record = run(tmp_path, "plain", knobs={"comm_hook": "bf16"}, steps=2, warmup=1)
    [outcome] = record.knobs
    assert not outcome.applied and "comm_hook=fp16" in outcome.detail
    assert record.distributed.ddp[0].comm_hook is None


def test_the_simulated_link_delays_ddp_all_reduces(tmp_path, monkeypatch):
    from torchdoctor.comm import slow_link

    monkeypatch.setenv(slow_link.ENV, "0.01")
    record = run(tmp_path, "proper", steps=3, warmup=1)
    [model] = record.distributed.ddp
    assert model.simulated_link_gbps == 0.01 and model.comm_hook is None  # DDP's default hook, not the script's
    transfer = slow_link.transfer_s(model.grad_bytes, 1, 0.01)
    timed = [b for d in measured(record) for b in d.backwards]
    assert timed and all(b.comm_end - b.comm_start >= transfer for b in timed)


@pytest.mark.parametrize("env, kwargs, message", [
    ({"WORLD_SIZE": "2", "RANK": "0"}, {"world_size": 4}, "started 2 ranks in all"),
    ({"WORLD_SIZE": "2", "RANK": "1"}, {"rank": 0}, "made this process rank 1"),
])
def test_init_arguments_that_contradict_the_launch_fail_at_once(monkeypatch, env, kwargs, message):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(RuntimeError, match=message):
        check_launch("gloo", kwargs.get("world_size", -1), kwargs.get("rank", -1), None)


def test_nccl_on_a_machine_without_cuda_is_refused_with_the_cpu_backend_named(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="Use the gloo backend on CPU"):
        check_launch("nccl", -1, -1, None)
