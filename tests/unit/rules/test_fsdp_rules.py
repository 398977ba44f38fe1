"""FSDP rules on hand-built records of a 2-rank job: TD608 units too small (layers of a block
sharded one by one; blocks side by side are fine), TD601 when every micro-batch reduce-scatters,
TD609 and TD610 judged only where a GPU's figures exist, FSDP's exposed time in the rank facts."""

from helpers.records import record

from torchdoctor.model.distributed_record import (CommResult, CommSize, DistributedInfo, FsdpStep, FsdpUnit,
                                                  RankIdentity)
from torchdoctor.model.findings import Severity
from torchdoctor.model.location import Location
from torchdoctor.model.record import CudaMemory, RankView
from torchdoctor.rules.distributed import GradAccumNoSync
from torchdoctor.rules.facts import RunFacts
from torchdoctor.rules.fsdp import FsdpNoMixedPrecision, FsdpReshardAfterForward, FsdpUnitGranularity, mergeable
from torchdoctor.rules.rank_facts import rank_steps

WRAP = Location("train.py", 30, "main")
MB = 1 << 20


def _unit(name, leaf=True, mb=1.0, **kw):
    return FsdpUnit(module=name, kind="Linear" if leaf else "Block", created_at=WRAP, leaf=leaf,
                    unsharded_bytes=int(mb * MB), sharded_bytes=int(mb * MB) // 2, **kw)


def _job(units, gathers, reduces, comm_s, step_s=0.1, syncs=1, micro=1, comm=True):
    rec = record(step_s=step_s, steps=8, warmup=2, micro_batches=micro)
    info = rec.distributed = DistributedInfo(identity=RankIdentity(rank=0, world_size=2), fsdp=units)
    info.fsdp_steps = [FsdpStep(step=s.index, all_gathers=gathers, all_gather_bytes=gathers * MB,
                                all_gather_s=comm_s * 0.7, reduce_scatters=reduces, reduce_scatter_bytes=reduces * MB,
                                reduce_scatter_s=comm_s * 0.3, synced_backwards=syncs, backward_passes=syncs)
                       for s in rec.steps]
    if comm:
        info.comm = CommResult(backend="gloo", world_size=2, latency_s=0.0002,
                               sizes=[CommSize(bytes=4 * MB, algbw_gbps=1.0, busbw_gbps=1.0)])
    return rec


def test_layers_sharded_one_by_one_are_found_and_sized_from_the_collectives_fixed_cost():
    units = [_unit("")] + [_unit(f"blocks.{b}.{n}") for b in range(4) for n in ("norm", "up", "down")]
    rec = _job(units, gathers=26, reduces=13, comm_s=0.06)
    (finding,) = FsdpUnitGranularity().check(rec, RunFacts.of(rec))
    assert finding.location == WRAP and finding.evidence["units_if_blocks"] == 5
    # 39 collectives -> 39 * 5/13 = 15: 24 fewer, each (60 ms / 39 - 1 MiB at 1 GB/s) of fixed cost
    fixed = 0.06 / 39 - MB / 1e9
    assert abs(finding.evidence["fixed_cost_ms"] - fixed * 1000) < 0.01
    assert finding.estimated_speedup is not None and finding.estimated_speedup > 1.05
    assert "fully_shard(block" in finding.fix


def test_blocks_sharded_side_by_side_are_the_recommended_units():
    units = [_unit("")] + [_unit(f"blocks.{b}", leaf=False, mb=2.0) for b in range(4)]
    assert mergeable(units) == {}
    rec = _job(units, gathers=9, reduces=5, comm_s=0.08)
    assert FsdpUnitGranularity().check(rec, RunFacts.of(rec)) == []


def test_fsdp1_with_prefetch_off_says_so_and_gets_its_own_fix():
    units = [_unit(f"{b}.{n}", version=1, backward_prefetch="off") for b in range(3) for n in (0, 2)]
    rec = _job(units, gathers=12, reduces=6, comm_s=0.05)
    (finding,) = FsdpUnitGranularity().check(rec, RunFacts.of(rec))
    assert "Backward prefetching is off" in finding.message and "ModuleWrapPolicy" in finding.fix


def test_accumulation_that_reduce_scatters_every_micro_batch_is_td601():
    units = [_unit("")] + [_unit(f"blocks.{b}", leaf=False) for b in range(2)]
    rec = _job(units, gathers=24, reduces=12, comm_s=0.1, step_s=0.3, syncs=4, micro=4)
    rec.distributed.fsdp_backward_location = Location("train.py", 65, "main")
    (finding,) = GradAccumNoSync().check(rec, RunFacts.of(rec))
    assert finding.location == Location("train.py", 65, "main")
    assert "set_requires_gradient_sync" in finding.fix
    # 3 of 4 reduce-scatters (30 ms each step) could be skipped
    assert finding.evidence["wasted_ms"] == 22.5 and finding.estimated_speedup > 1.05
    synced_once = _job(units, gathers=24, reduces=3, comm_s=0.1, step_s=0.3, syncs=1, micro=4)
    assert GradAccumNoSync().check(synced_once, RunFacts.of(synced_once)) == []


def test_gpu_only_fsdp_rules_are_not_measurable_on_cpu_and_judge_a_gpu_run():
    units = [_unit(""), _unit("blocks.0", leaf=False)]
    rec = _job(units, gathers=4, reduces=2, comm_s=0.01)
    for rule in (FsdpReshardAfterForward(), FsdpNoMixedPrecision()):
        assert "CUDA" in rule.not_measurable(rec, RunFacts.of(rec))
    gpu = _job(units, gathers=4, reduces=2, comm_s=0.01)
    gpu.environment.cuda_used, gpu.environment.compute_capability = True, [9, 0]
    gpu.cuda_memory = CudaMemory(device_total_bytes=80 << 30, peak_allocated_bytes=10 << 30,
                                 peak_reserved_bytes=12 << 30, alloc_retries=0, ooms=0)
    (reshard,) = FsdpReshardAfterForward().check(gpu, RunFacts.of(gpu))
    assert "reshard_after_forward=False" in reshard.fix
    (precision,) = FsdpNoMixedPrecision().check(gpu, RunFacts.of(gpu))
    assert precision.severity == Severity.MEDIUM and "MixedPrecisionPolicy" in precision.fix


def test_fsdp_communication_counts_as_exposed_in_the_rank_facts():
    rec = _job([_unit("")], gathers=2, reduces=1, comm_s=0.04)
    view = RankView(rank=0, steps=rec.steps, fsdp_steps=rec.distributed.fsdp_steps)
    steps = rank_steps(view)
    assert all(abs(s.exposed_s - 0.04) < 1e-9 for s in steps.values())
