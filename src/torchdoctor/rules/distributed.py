"""DDP's own settings and habits, measured in the run: TD601 grad-accum-no-sync, TD603
ddp-config, TD607 nccl-transport-disabled. The cross-rank rules (TD602, TD605, TD606) are in
rules/scaling.py.

Each reads the DDP probe's record of the lowest rank (the merged run's base); in a
single-process run they find nothing and say nothing.
"""

from __future__ import annotations

import statistics

from torchdoctor.model.paths import typed_path
from torchdoctor.comm.environment import crippling_settings, what_it_does
from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.location import Location
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.base import MB, MIN_REPORTED_SPEEDUP, Rule, amdahl, ms
from torchdoctor.rules.facts import RunFacts
from torchdoctor.rules.rank_facts import JobFacts, ddp_model, synced_per_step, world_size

# DDP's default bucket (bucket_cap_mb=25): the size its authors chose to overlap all-reduce
# with backward (Li et al., "PyTorch Distributed", VLDB 2020, §5.2 bucket size experiments).
DEFAULT_BUCKET_MB = 25.0
# Buckets whose latency is at least this share of the all-reduce's time are too small for the link.
LATENCY_SHARE = 0.2


class DistributedRule(Rule):
    """Silent on runs without several ranks: no finding, and no "not measured" line either."""

    def not_measurable(self, record: RunRecord, facts: RunFacts) -> str | None:
        return None

    @staticmethod
    def multi_rank(record: RunRecord) -> bool:
        return world_size(record) >= 2

    @staticmethod
    def reported(speedup: float | None, below: Severity | None,
                 unestimated: Severity | None = None) -> tuple[float | None, Severity | None]:
        """The finding's (speedup, severity): an estimate of MIN_REPORTED_SPEEDUP or more is shown
        and ranks the finding (severity None: from the estimate); one below is noise, not shown,
        and the finding ranks `below`; without an estimate it ranks `unestimated`."""
        if speedup is None:
            return None, unestimated
        if speedup >= MIN_REPORTED_SPEEDUP:
            return speedup, None
        return None, below


class GradAccumNoSync(DistributedRule):
    code = "TD601"
    slug = "grad-accum-no-sync"
    title = "DDP all-reduces gradients on every micro-batch of gradient accumulation"
    rationale = (
        "DistributedDataParallel averages gradients across ranks in every `backward()`. With "
        "gradient accumulation only the last micro-batch needs it; the others send the whole "
        "gradient over the network for nothing, which dominates on a slow link. `no_sync()` must "
        "wrap the forward as well as the backward: DDP decides at forward time whether the next "
        "backward all-reduces, so `no_sync()` around `backward()` alone changes nothing."
    )
    fix = (
        "Skip the all-reduce on the micro-batches that do not step (forward and backward inside):\n"
        "```python\nctx = model.no_sync() if (i + 1) % accum_steps else contextlib.nullcontext()\n"
        "with ctx:\n    loss = loss_fn(model(x), y) / accum_steps\n    loss.backward()\n"
        "if (i + 1) % accum_steps == 0:\n    optimizer.step(); optimizer.zero_grad()\n```\n"
        "Prove it first: `torchdoctor run --nproc-per-node N --set no_sync=true train.py`."
    )
    example = "loss.backward()  # DDP model, accumulating 8 micro-batches: 8 all-reduces per step"

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        model = ddp_model(record)
        if model is None and self.multi_rank(record) and facts.measured:
            return self._fsdp(record, facts)
        if model is None or not self.multi_rank(record) or not facts.measured:
            return []
        measured = {s.index for s in facts.measured}
        rows = [d for d in record.distributed.ddp_steps if d.step in measured]
        wasteful = [d for d in rows if d.synced_backwards > 1]
        if not rows or len(wasteful) * 2 < len(rows):
            return []
        reduces, backwards = synced_per_step(record)
        saved = self._wasted_exposed(facts.job, wasteful, reduces)
        speedup, severity = self.reported(amdahl(facts.step_s, saved) if saved is not None else None,
                                          below=Severity.LOW, unestimated=Severity.MEDIUM)
        backward_only = [u for u in record.distributed.no_sync if u.forwards_inside == 0 and u.backwards_inside > 0]
        location = backward_only[0].location if backward_only else model.backward_location
        how = (f"`no_sync()` at {backward_only[0].location} wraps only `backward()`: DDP decided to all-reduce "
               "when the forward ran outside it, so it skips nothing. " if backward_only else "")
        cost = (f"; the {reduces - 1:.0f} all-reduces that could be skipped left {ms(saved):.1f} ms of communication "
                f"exposed per step ({saved / facts.step_s:.0%} of the {ms(facts.step_s):.1f} ms step)"
                if saved is not None else "")
        return [self.finding(
            title=f"{reduces:.0f} gradient all-reduces per optimizer step, one per micro-batch",
            message=(f"{how}Each optimizer step ran {backwards:.0f} backward() calls and DDP all-reduced "
                     f"{model.grad_bytes / MB:.1f} MB of gradients after {reduces:.0f} of them; only the last is "
                     f"needed{cost}."),
            location=location,
            evidence={"backwards_per_step": round(backwards, 2), "all_reduces_per_step": round(reduces, 2),
                      "grad_mb": round(model.grad_bytes / MB, 2),
                      "wasted_exposed_ms": ms(saved) if saved is not None else None,
                      "no_sync_around_backward_only": str(backward_only[0].location) if backward_only else None},
            speedup=speedup, severity=severity,
            basis=("Amdahl on the exposed communication (all-reduce time after the last gradient was ready, from "
                   "DDP's own runtime statistics, of the rank nobody waited for) of the non-final all-reduces"
                   if saved is not None else "DDP's timings were not available for these steps"),
        )]


    def _fsdp(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        """FSDP reduce-scatters every micro-batch unless told not to (FSDP2
        `set_requires_gradient_sync(False)`, FSDP1 `no_sync()`)."""
        measured = {s.index: s for s in facts.measured}
        rows = [(d, measured[d.step]) for d in record.distributed.fsdp_steps if d.step in measured]
        wasteful = [(d, s) for d, s in rows if d.synced_backwards > 1 and s.micro_batches > 1]
        if not rows or len(wasteful) * 2 < len(rows):
            return []
        syncs = statistics.fmean(d.synced_backwards for d, _ in wasteful)
        backwards = statistics.fmean(s.micro_batches for _, s in wasteful)
        blocking = all(d.host_blocking for d, _ in wasteful)
        reduce_s = statistics.fmean(d.reduce_scatter_s for d, _ in wasteful)
        reduce_bytes = statistics.fmean(d.reduce_scatter_bytes for d, _ in wasteful)
        saved = reduce_s * (syncs - 1) / syncs if blocking else None
        speedup, severity = self.reported(amdahl(facts.step_s, saved) if saved else None,
                                          below=Severity.LOW, unestimated=Severity.MEDIUM)
        version = max((u.version for u in record.distributed.fsdp), default=2)
        fix = ("Reduce-scatter only on the last micro-batch:\n```python\nfor i, (x, y) in enumerate(micro_batches):\n"
               "    model.set_requires_gradient_sync(i == len(micro_batches) - 1)\n"
               "    loss = loss_fn(model(x), y) / len(micro_batches)\n    loss.backward()\noptimizer.step()\n```"
               if version == 2 else
               "Run the non-final micro-batches (forward and backward) under `no_sync()`:\n```python\n"
               "ctx = model.no_sync() if (i + 1) % accum_steps else contextlib.nullcontext()\nwith ctx:\n"
               "    loss = loss_fn(model(x), y) / accum_steps\n    loss.backward()\n```")
        cost = (f"; the {syncs - 1:.0f} that could be skipped took {ms(saved):.1f} ms of the {ms(facts.step_s):.1f} ms "
                f"step" if saved else "")
        return [self.finding(
            title=f"FSDP reduce-scattered gradients {syncs:.0f} times per optimizer step, once per micro-batch",
            message=(f"Each optimizer step ran {backwards:.0f} backward() calls and FSDP reduce-scattered "
                     f"{reduce_bytes / syncs / MB:.1f} MB of gradients after {syncs:.0f} of them; only the last is "
                     f"needed{cost}. Between syncs FSDP keeps the unsharded gradients (more memory), so the fix trades "
                     f"memory for communication."),
            location=record.distributed.fsdp_backward_location or record.run.loop_location,
            evidence={"backwards_per_step": round(backwards, 2), "reduce_scatters_per_step": round(syncs, 2),
                      "reduce_scatter_ms_per_step": ms(reduce_s), "fsdp_version": version,
                      "wasted_ms": ms(saved) if saved else None},
            speedup=speedup, severity=severity, fix=fix,
            basis=("Amdahl on the host time FSDP's reduce-scatters took (a CPU collective blocks the host), "
                   "(K-1)/K of it for K synced micro-batches" if saved else
                   "not estimated: on a GPU the host only issues the reduce-scatters; the trace shows their overlap"),
        )]

    @staticmethod
    def _wasted_exposed(jf: JobFacts | None, wasteful, reduces: float) -> float | None:
        """The exposed transfer of the non-final all-reduces per step: (K-1)/K of the exposed
        communication of the rank nobody waited for (the scaling verdict's basis), or of this
        rank's own when the other ranks' records are not here."""
        if jf is not None and jf.transfer_s > 0:
            return jf.transfer_s * (reduces - 1) / reduces
        own = [sum(b.exposed_s for b in d.backwards[:-1]) * (d.synced_backwards - 1) / (len(d.backwards) - 1)
               for d in wasteful if len(d.backwards) >= 2]
        return statistics.fmean(own) if own else None


class DdpConfig(DistributedRule):
    code = "TD603"
    slug = "ddp-config"
    title = "DDP settings that cost time"
    rationale = (
        "`find_unused_parameters=True` walks the autograd graph after every forward; buckets much "
        "smaller than the link needs pay the collective's latency many times; one bucket as large as "
        "the whole gradient cannot start before backward ends; `broadcast_buffers=True` sends buffers "
        "that never change before every forward. Each costs every step when not needed."
    )
    fix = (
        "Turn off what the model does not need and size the buckets for the link:\n```python\n"
        "model = DDP(model, find_unused_parameters=False, bucket_cap_mb=25, gradient_as_bucket_view=True,\n"
        "            broadcast_buffers=False)  # buffers that never change (forward_sync_buffers=False in\n"
        "                                      # PyTorch versions that deprecate broadcast_buffers)\n```\n"
        "Prove it: `--set find_unused_parameters=false`, `--set bucket_cap_mb=25`, `--set gradient_as_bucket_view=true`."
    )
    example = "model = DDP(model, find_unused_parameters=True)"

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        model = ddp_model(record)
        if model is None or not self.multi_rank(record) or not facts.step_s:
            return []
        step = facts.step_s
        out = []
        if model.find_unused_parameters and model.unused_parameter_bytes == 0 and model.unused_search_s > 0:
            speedup = amdahl(step, model.unused_search_s)
            out.append(self._finding(
                model, speedup, "find_unused_parameters=True, and DDP found no unused parameter",
                f"DDP searched the autograd graph for unused parameters after every forward "
                f"({ms(model.unused_search_s):.2f} ms per step, {model.unused_search_s / step:.1%} of it) and found "
                f"none: every parameter gets a gradient. Pass find_unused_parameters=False.",
                {"setting": "find_unused_parameters=True", "unused_parameter_bytes": 0,
                 "search_ms_per_step": ms(model.unused_search_s)},
                "Amdahl on the time of DDP's post-forward work (the unused-parameter search), measured per step"))
        if model.broadcast_buffers and model.buffers and model.buffers_changed is False and model.buffer_sync_s > 0:
            speedup = amdahl(step, model.buffer_sync_s)
            out.append(self._finding(
                model, speedup, f"broadcast_buffers=True for {model.buffers} buffer{'s' if model.buffers > 1 else ''} "
                                "that never changed",
                f"DDP broadcast {model.buffer_bytes / MB:.2f} MB of buffers from rank 0 before every forward "
                f"({ms(model.buffer_sync_s):.2f} ms per step); they did not change during the measured steps. "
                "Pass broadcast_buffers=False (forward_sync_buffers=False where PyTorch deprecates the former).",
                {"setting": "broadcast_buffers=True", "buffers": model.buffers,
                 "broadcast_ms_per_step": ms(model.buffer_sync_s)},
                "Amdahl on the measured time of DDP's buffer broadcast per step"))
        out += self._buckets(record, model, step)
        if not model.gradient_as_bucket_view and model.grad_bytes >= 100 * MB:
            out.append(self._finding(
                model, None, "gradient_as_bucket_view is off",
                f"DDP copies {model.grad_bytes / MB:.1f} MB of gradients into its buckets and back every step, "
                "and keeps a second copy in memory. gradient_as_bucket_view=True makes the gradients views "
                "of the buckets.",
                {"setting": "gradient_as_bucket_view=False", "grad_mb": round(model.grad_bytes / MB, 1)},
                "not measured separately: the copy runs inside backward", severity=Severity.LOW))
        return out

    def _buckets(self, record: RunRecord, model, step: float) -> list[Finding]:
        comm = record.distributed.comm
        if comm is None or comm.latency_s is None or not model.bucket_sizes:
            return []
        buckets = len(model.bucket_sizes)
        row = comm.at(model.grad_bytes)
        if row is None or not row.algbw_gbps:
            return []
        transfer = model.grad_bytes / (row.algbw_gbps * 1e9)
        latency = buckets * comm.latency_s
        default_buckets = max(1, -(-model.grad_bytes // int(DEFAULT_BUCKET_MB * MB)))
        if model.bucket_cap_mb < DEFAULT_BUCKET_MB and latency >= LATENCY_SHARE * (latency + transfer):
            saved = (buckets - default_buckets) * comm.latency_s
            speedup = amdahl(step, saved)
            if speedup < MIN_REPORTED_SPEEDUP:
                return []
            return [self._finding(
                model, speedup, f"{buckets} gradient buckets of {model.bucket_cap_mb:g} MB for this link",
                f"bucket_cap_mb={model.bucket_cap_mb:g} splits {model.grad_bytes / MB:.1f} MB of gradients into "
                f"{buckets} all-reduces, each paying this link's measured latency of {ms(comm.latency_s):.2f} ms: "
                f"{ms(latency):.1f} ms per backward against {ms(transfer):.1f} ms of transfer.",
                {"setting": f"bucket_cap_mb={model.bucket_cap_mb:g}", "buckets": buckets,
                 "latency_ms": ms(comm.latency_s), "transfer_ms": ms(transfer)},
                f"Amdahl on the latency of the {buckets - default_buckets} extra all-reduces (the communication "
                "check's small all-reduce time each)")]
        return []

    def _finding(self, model, speedup, title, message, evidence, basis, severity=None) -> Finding:
        shown, ranked = self.reported(speedup, below=Severity.LOW, unestimated=Severity.LOW)
        return self.finding(title=title, message=message, location=model.created_at, evidence=evidence,
                            speedup=shown, basis=basis, severity=severity if severity is not None else ranked)


class NcclTransportDisabled(DistributedRule):
    code = "TD607"
    slug = "nccl-transport-disabled"
    title = "NCCL transports turned off by environment variables"
    rationale = (
        "`NCCL_P2P_DISABLE=1`, `NCCL_SHM_DISABLE=1`, `NCCL_IB_DISABLE=1`, `NCCL_P2P_LEVEL=LOC` or "
        "`NCCL_NET=Socket` take NCCL's fast paths away: GPUs in one machine then exchange gradients "
        "through host memory or even TCP sockets over loopback, often ten times slower. They are "
        "workarounds for broken drivers that outlive the problem (e.g. "
        "`NCCL_SHM_DISABLE=1` under WSL2: 1 GB/s between two GPUs where PCIe gives 20+)."
    )
    fix = (
        "Remove the setting, then check the transport NCCL picks (`torchdoctor comm`, or "
        "`NCCL_DEBUG=INFO`):\n```python\n# os.environ[\"NCCL_SHM_DISABLE\"] = \"1\"   # delete this line\n```"
    )
    example = 'os.environ["NCCL_P2P_DISABLE"] = "1"'

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        info = record.distributed
        if info is None or not self.multi_rank(record) or "nccl" not in (info.identity.backend or ""):
            return []
        found = crippling_settings(record.environment.env_vars)
        if not found:
            return []
        listed = "; ".join(f"{k}={v} {what_it_does(k)}" for k, v in found.items())
        in_code = next((f for f in record.static_findings if f.code == self.code), None)
        where = f" It is set in code at {in_code.path}:{in_code.line}." if in_code else ""
        return [self.finding(
            title=f"{', '.join(f'{k}={v}' for k, v in found.items())} set for this run",
            message=f"The run's environment turns NCCL transports off: {listed}.{where}",
            location=_display(in_code, record.run.cwd) if in_code else None, evidence={"settings": found},
            speedup=None, severity=Severity.MEDIUM,
            basis="the size of the loss is in slow-interconnect (TD602) when the link check measured it")]


def _display(static, cwd: str) -> Location:
    """A static finding's place as the user would type it."""
    return Location(typed_path(static.path, cwd), static.line)
