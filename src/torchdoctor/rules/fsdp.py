"""FSDP's units and communication, measured in the run (run/probes/fsdp.py): TD608 units too
small (all-gathers and reduce-scatters that each pay the collective's fixed cost), TD609
`reshard_after_forward` on a model whose gathered parameters fit (GPU memory figures), TD610
mixed precision off on a GPU that has it. Gradient accumulation that reduce-scatters every
micro-batch is TD601 (rules/distributed.py), the scaling verdict TD606 (rules/scaling.py).
"""

from __future__ import annotations

import statistics

from torchdoctor.model.distributed_record import FsdpStep, FsdpUnit
from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.location import Location
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.base import MB, MIN_REPORTED_SPEEDUP, Rule, amdahl, ms, severity_for
from torchdoctor.rules.facts import RunFacts

TENSOR_CORE_MAJOR = 7
FIT_SHARE = 0.8  # gathered parameters kept after forward must fit in this share of the device's free memory
MIN_EXPOSED_SHARE = 0.05  # FSDP communication under this share of the step is not worth a finding


def fsdp_units(record: RunRecord) -> list[FsdpUnit]:
    return list(record.distributed.fsdp) if record.distributed is not None else []


def measured_fsdp_steps(record: RunRecord, facts: RunFacts) -> list[FsdpStep]:
    measured = {s.index for s in facts.measured}
    info = record.distributed
    return [s for s in (info.fsdp_steps if info else []) if s.step in measured]


def _parent(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def mergeable(units: list[FsdpUnit]) -> dict[str, list[FsdpUnit]]:
    """Single layers sharded one by one inside a parent that is not a unit itself (the layers of
    one block): parent name -> its unit children, for parents with two or more. Blocks sharded
    side by side (`blocks.0`, `blocks.1` in a ModuleList) are not: they are the recommended units."""
    names = {u.module for u in units}
    by_parent: dict[str, list[FsdpUnit]] = {}
    for unit in units:
        if not unit.module or not unit.leaf:
            continue
        parent = _parent(unit.module)
        if parent in names or parent == "":
            continue
        by_parent.setdefault(parent, []).append(unit)
    return {p: us for p, us in by_parent.items() if len(us) >= 2}


class FsdpUnitGranularity(Rule):
    code = "TD608"
    slug = "fsdp-unit-granularity"
    title = "FSDP units too small: one all-gather per layer instead of per block"
    rationale = (
        "FSDP gathers each unit's parameters before its forward and again before its backward, and "
        "reduce-scatters its gradients after. Every collective pays a fixed cost (the link's latency, "
        "the launch, the copy-in and copy-out) whatever its size, and a unit too small has too little "
        "compute to hide the next one's gather behind. Sharding every layer on its own multiplies the "
        "collectives for the same bytes; the FSDP authors shard one transformer block per unit."
    )
    fix = (
        "Apply `fully_shard` to each block (the module that holds a layer's attention and MLP), then to "
        "the root, and leave FSDP's prefetching on:\n```python\nfor block in model.blocks:\n"
        "    fully_shard(block, mesh=mesh)\nfully_shard(model, mesh=mesh)\n```"
    )
    example = "for layer in model.modules():\n    if isinstance(layer, nn.Linear):\n        fully_shard(layer)  # a unit per Linear"

    def not_measurable(self, record, facts):
        return None

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        units = fsdp_units(record)
        groups = mergeable(units)
        steps = measured_fsdp_steps(record, facts)
        if not groups or not steps or not facts.step_s:
            return []
        merged_units = len(units) - sum(len(us) - 1 for us in groups.values())
        gathers = statistics.fmean(s.all_gathers for s in steps)
        reduces = statistics.fmean(s.reduce_scatters for s in steps)
        comm_s = statistics.fmean(s.all_gather_s + s.reduce_scatter_s for s in steps)
        blocking = all(s.host_blocking for s in steps)
        calls = gathers + reduces
        fewer = calls * (1 - merged_units / len(units))
        fixed_s, how = self._fixed_cost(record, steps)
        saved = fewer * fixed_s if fixed_s is not None and blocking else None
        share = comm_s / facts.step_s
        if blocking and share < MIN_EXPOSED_SHARE:
            return []
        speedup = amdahl(facts.step_s, saved) if saved else None
        if speedup is not None and speedup < MIN_REPORTED_SPEEDUP:
            speedup = None
        parents = sorted(groups, key=lambda p: -len(groups[p]))
        example = groups[parents[0]]
        where = next((u.created_at for u in example if u.created_at is not None), None)
        sizes = [u.unsharded_bytes for u in units if u.module]
        message = (f"{len(units)} FSDP units, {len(groups)} of the model's blocks sharded layer by layer "
                   f"({', '.join(parents[:3])}{', ...' if len(parents) > 3 else ''}: "
                   f"{', '.join(u.module.rsplit('.', 1)[-1] for u in example)}); the median unit holds "
                   f"{statistics.median(sizes) / MB:.2f} MB. Each step ran {gathers:.0f} all-gathers and {reduces:.0f} "
                   f"reduce-scatters")
        message += (f", {ms(comm_s):.1f} ms of a {ms(facts.step_s):.1f} ms step spent in them ({share:.0%})."
                    if blocking else " (on a GPU the host only issues them: their overlap is the trace's to tell).")
        if any(u.backward_prefetch == "off" for u in units):
            message += (" Backward prefetching is off (`backward_prefetch=None`): each unit's gather waits until "
                        "its backward starts.")
        if saved:
            message += (f" Sharding whole blocks leaves {merged_units} units and about {fewer:.0f} fewer collectives "
                        f"per step, at {ms(fixed_s):.2f} ms of fixed cost each ({how}).")
        fix = self.fix if all(u.version == 2 for u in units) else (
            "Wrap each block, not each layer, and prefetch the next unit's parameters during backward:\n```python\n"
            "model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({Block}),\n"
            "             backward_prefetch=BackwardPrefetch.BACKWARD_PRE)\n```")
        return [self.finding(
            title=f"{len(units)} FSDP units for {merged_units} blocks: {gathers:.0f} all-gathers per step", fix=fix,
            message=message, location=where,
            evidence={"units": len(units), "units_if_blocks": merged_units, "all_gathers_per_step": round(gathers, 1),
                      "reduce_scatters_per_step": round(reduces, 1), "comm_ms_per_step": ms(comm_s),
                      "share_of_step": round(share, 3), "median_unit_mb": round(statistics.median(sizes) / MB, 3),
                      "blocks": parents[:8], "fixed_cost_ms": ms(fixed_s) if fixed_s is not None else None},
            speedup=speedup, severity=severity_for(speedup) if speedup else (Severity.MEDIUM if blocking else Severity.LOW),
            basis=(f"model with measured inputs: {fewer:.0f} fewer collectives per step x each collective's fixed cost "
                   f"({how}); the bytes moved stay the same" if saved else
                   "not estimated: the collectives' fixed cost could not be measured in this run"),
        )]

    @staticmethod
    def _fixed_cost(record: RunRecord, steps: list[FsdpStep]) -> tuple[float | None, str]:
        """What one collective costs beyond its bytes: the run's mean time per collective minus
        its mean bytes at the link's measured bandwidth (the communication check after the
        script), never below the link's measured latency."""
        calls = sum(s.all_gathers + s.reduce_scatters for s in steps)
        if not calls:
            return None, ""
        per_call = sum(s.all_gather_s + s.reduce_scatter_s for s in steps) / calls
        per_bytes = sum(s.all_gather_bytes + s.reduce_scatter_bytes for s in steps) / calls
        comm = record.distributed.comm if record.distributed is not None else None
        point = comm.at(int(per_bytes)) if comm is not None else None
        if point is None or not point.algbw_gbps:
            return None, ""
        transfer = per_bytes / (point.algbw_gbps * 1e9)
        fixed = max(per_call - transfer, comm.latency_s or 0.0)
        return fixed, (f"{ms(per_call):.2f} ms per collective measured, less {per_bytes / MB:.2f} MB at the link's "
                       f"measured {point.algbw_gbps:.2f} GB/s")


class FsdpReshardAfterForward(Rule):
    code = "TD609"
    slug = "fsdp-reshard-after-forward"
    title = "FSDP gathers parameters twice per step though they would fit"
    needs_cuda = True
    rationale = (
        "With `reshard_after_forward=True` (FSDP2's default, FSDP1's FULL_SHARD) each unit frees its "
        "gathered parameters after forward and gathers them again for backward: one more all-gather per "
        "unit per step, to save memory. When the gathered parameters fit in the memory left, keeping them "
        "(`reshard_after_forward=False`, FSDP1's SHARD_GRAD_OP) removes those all-gathers."
    )
    fix = (
        "Keep the gathered parameters between forward and backward where memory allows (the root at "
        "least, whose parameters backward needs first):\n```python\nfully_shard(block, mesh=mesh, "
        "reshard_after_forward=False)\n```"
    )
    example = "fully_shard(block)  # reshard_after_forward=True: gather again in backward"

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        units = [u for u in fsdp_units(record) if u.reshard_after_forward]
        memory = record.cuda_memory
        if not units or memory is None or not memory.device_total_bytes:
            return []
        extra = sum(u.unsharded_bytes - u.sharded_bytes for u in units)
        room = memory.device_total_bytes * FIT_SHARE - memory.peak_reserved_bytes
        if extra <= 0 or extra > room:
            return []
        steps = measured_fsdp_steps(record, facts)
        gathers = statistics.fmean(s.all_gathers for s in steps) if steps else None
        root = next((u for u in units if not u.module), units[0])
        return [self.finding(
            title=f"{len(units)} units reshard after forward; keeping them needs {extra / MB:.0f} MB of the free memory",
            message=(f"{len(units)} FSDP units free their gathered parameters after forward and gather them again in "
                     f"backward" + (f" ({gathers:.0f} all-gathers per step)" if gathers else "") + f". Keeping them takes "
                     f"{extra / MB:.0f} MB more per rank; the peak reserved was {memory.peak_reserved_bytes / MB:.0f} MB of "
                     f"{memory.device_total_bytes / MB:.0f} MB."),
            location=root.created_at,
            evidence={"units": len(units), "extra_mb": round(extra / MB, 1), "peak_reserved_mb":
                      round(memory.peak_reserved_bytes / MB, 1), "device_mb": round(memory.device_total_bytes / MB, 1)},
            speedup=None, severity=Severity.MEDIUM,
            basis="not estimated: the backward all-gathers' exposed time needs the trace; `torchdoctor compare` a run "
                  "with `reshard_after_forward=False`",
        )]


class FsdpNoMixedPrecision(Rule):
    code = "TD610"
    slug = "fsdp-no-mixed-precision"
    title = "FSDP gathers and computes in fp32 on a GPU with tensor cores"
    needs_cuda = True
    rationale = (
        "Without a mixed-precision policy FSDP all-gathers fp32 parameters and reduce-scatters fp32 gradients: "
        "twice the bytes of bf16 on the link, and fp32 matmuls that tensor cores run several times slower."
    )
    fix = (
        "Give every unit a mixed-precision policy (parameters in bf16, gradients reduced in fp32):\n```python\n"
        "from torch.distributed.fsdp import MixedPrecisionPolicy\nmp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, "
        "reduce_dtype=torch.float32)\nfully_shard(block, mesh=mesh, mp_policy=mp)\n```"
    )
    example = "fully_shard(block, mesh=mesh)  # no mp_policy: fp32 all-gathers and matmuls"

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        units = fsdp_units(record)
        cap = record.environment.compute_capability or [0, 0]
        plain = [u for u in units if u.param_dtype in (None, "float32")]
        if not units or len(plain) < len(units) or cap[0] < TENSOR_CORE_MAJOR or record.dispatch.autocast_seen:
            return []
        root = next((u for u in units if not u.module), units[0])
        gathered = sum(u.unsharded_bytes for u in units)
        return [self.finding(
            title=f"{len(units)} FSDP units without mixed precision on a compute capability {cap[0]}.{cap[1]} GPU",
            message=(f"Every FSDP unit gathers its parameters as stored (fp32): {gathered / MB:.0f} MB per forward, and "
                     f"runs fp32 matmuls on a GPU with tensor cores; no autocast was seen either."),
            location=root.created_at,
            evidence={"units": len(units), "gathered_mb": round(gathered / MB, 1)},
            speedup=None, severity=Severity.MEDIUM,
            basis="precision gains depend on the model; `torchdoctor compare` a run with the policy",
        )]


def fsdp_root(record: RunRecord) -> Location | None:
    """Where the root unit was made (the verdicts' anchor in an FSDP job)."""
    units = fsdp_units(record)
    root = next((u for u in units if not u.module and u.created_at is not None), None)
    return root.created_at if root else next((u.created_at for u in units if u.created_at), None)
