"""Launch-overhead rules: too many small ops issued from Python per step."""

from __future__ import annotations

from torchdoctor.findings import Finding, Severity
from torchdoctor.record import RunRecord
from torchdoctor.rules.base import MIN_REPORTED_SPEEDUP, Rule, amdahl, ms, severity_for
from torchdoctor.rules.facts import RunFacts

# A line issuing this many aten ops per step is almost surely a Python loop over elements
# (the reference report's loop issued 768); a model's layer loop issues tens.
LOOP_OPS_PER_STEP = 100
# Ops issued by the line's own code (not by a module or optimizer it calls) per step:
# excludes `loss.backward()` and `optimizer.step()`, whose ops torch issues internally.
LOOP_DIRECT_OPS_PER_STEP = 20
# An optimizer over this many tensors pays per-tensor overhead on the single-tensor path.
FOREACH_MIN_TENSORS = 20
OPTIMIZER_MEDIUM_SHARE = 0.05
# On CPU a loop line under 3 % of the step is not worth a finding (stack-sample noise).
LOOP_MIN_SHARE = 0.03
MIN_LINE_SAMPLES = 20  # fewer stack samples than this: fall back to the dispatch timing
LINE_SAMPLER_BASIS = "its share of stack samples in measured steps times the mean step time"
DISPATCH_BASIS = "op and inter-op time in sampled steps, calibrated sampler cost removed"


class PythonLoopOps(Rule):
    code = "TD301"
    slug = "python-loop-ops"
    example = (
        "for i in range(batch_size):\n"
        "    for j in range(num_prompts):\n"
        "        embeds[i, positions[i, j]] = prompts[j]  # one tiny op per element"
    )
    title = "A Python loop issues many tiny ops per step"
    rationale = (
        "Each tensor op costs a few microseconds of Python and dispatch, and on a GPU a kernel "
        "launch; a loop over batch elements multiplies that by the batch size while each op "
        "does almost no work (the reference report's `_apply_prompt` launched 768 per step)."
    )
    fix = (
        "Replace the element loop by one indexed op over the whole batch (`index_copy_`, "
        "`index_put_`, `scatter_`, `torch.where`, `masked_fill`), e.g.:\n```python\n"
        "# before: for i in range(B): for j in range(P): emb[i, pos[i, j], :] = prompt[j, :]\n"
        "emb.index_copy_(1, positions, prompt.unsqueeze(0).expand(B, -1, -1))  # same positions per row\n"
        "emb[torch.arange(B)[:, None], pos] = prompt.expand(B, -1, -1)        # per-row positions\n```"
    )

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        windows = record.dispatch.sampled_steps
        if not windows or not facts.step_s:
            return []
        findings = []
        for site in record.dispatch.sites:
            per_step = site.ops / windows
            direct = (site.ops - site.internal_ops) / windows
            if per_step < LOOP_OPS_PER_STEP or direct < LOOP_DIRECT_OPS_PER_STEP:
                continue
            share = record.line_profile.share(site.location.path, site.location.line)
            if share is not None and record.line_profile.total_samples >= MIN_LINE_SAMPLES:
                line_s, timing = share * facts.step_s, LINE_SAMPLER_BASIS
            else:
                line_s, timing = site.time_s / windows, DISPATCH_BASIS
            per_op = line_s / per_step
            d = record.dispatch
            backward_s = site.backward_s / d.backward_windows if d.backward_windows else 0.0
            # the vectorized version: one op per op kind, forward and backward
            after = per_op * max(1, len(site.op_counts)) * (2 if backward_s else 1)
            saved = max(0.0, line_s + backward_s - after)
            speedup = amdahl(facts.step_s, saved)
            if speedup < MIN_REPORTED_SPEEDUP and not facts.cuda_used:
                continue
            share = min(1.0, (line_s + backward_s) / facts.step_s)
            if share < LOOP_MIN_SHARE and not facts.cuda_used:
                continue
            findings.append(
                self.finding(
                    title=f"{per_step:.0f} tiny ops per step from one line ({share:.0%} of step time)",
                    message=(
                        f"This line issued {per_step:.0f} aten ops per step (median {site.median_numel} "
                        f"elements each; {', '.join(list(site.op_counts)[:3])}), taking "
                        f"{ms(line_s):.1f} ms of a {ms(facts.step_s):.1f} ms step"
                        + (f", and their backward {ms(backward_s):.1f} ms more." if backward_s else ".")
                        + (" On a GPU each op is also a kernel launch." if not facts.cuda_used else "")
                    ),
                    location=site.location,
                    evidence={
                        "ops_per_step": round(per_step, 1),
                        "line_ms_per_step": ms(line_s),
                        "backward_ms_per_step": ms(backward_s) if d.backward_windows else None,
                        "share_of_step_time": round(share, 3),
                        "median_numel": site.median_numel,
                        "top_ops": site.op_counts,
                        "sampled_steps": windows,
                        "line_samples": record.line_profile.total_samples,
                    },
                    speedup=speedup,
                    basis=(
                        f"Amdahl: the line's forward time per step ({timing})"
                        + (" plus the backward time of the autograd nodes it created (node hooks, "
                           f"{d.backward_windows} step)" if backward_s else "; its backward was not timed, "
                           "so this is a lower bound")
                        + ", replaced by one op per op kind at the line's mean time per op"
                    ),
                    severity=severity_for(speedup) if speedup >= MIN_REPORTED_SPEEDUP else Severity.MEDIUM,
                )
            )
        return findings


class OptimizerForeachOff(Rule):
    code = "TD302"
    slug = "optimizer-foreach-off"
    example = "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)"
    title = "Optimizer updates parameters one tensor at a time"
    rationale = (
        "With `foreach=False` the optimizer runs a Python loop issuing several ops per "
        "parameter tensor; the foreach (or fused) path updates all tensors in a few ops."
    )
    fix = (
        "Let PyTorch pick the multi-tensor path (the default on CUDA) or ask for it:\n```python\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=3e-4)               # foreach by default on CUDA\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)   # CUDA, fastest\n```"
    )

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        findings = []
        for opt in record.optimizers:
            if opt.foreach is not False or opt.fused or opt.param_tensors < FOREACH_MIN_TENSORS:
                continue
            share = facts.mean("optimizer_s") / facts.step_s if facts.step_s else 0.0
            step_ops = [s for s in record.dispatch.sites if opt.step_location and
                        (s.location.path, s.location.line) == (opt.step_location.path, opt.step_location.line)]
            ops = step_ops[0].ops / max(1, record.dispatch.sampled_steps) if step_ops else None
            findings.append(
                self.finding(
                    title=f"{opt.class_name}(foreach=False) over {opt.param_tensors} tensors "
                          f"({share:.0%} of step time in optimizer.step)",
                    message=(
                        f"The optimizer was created with foreach=False; optimizer.step() took "
                        f"{ms(facts.mean('optimizer_s')):.1f} ms per step"
                        + (f" and issued {ops:.0f} ops" if ops else "") + "."
                    ),
                    location=opt.created_at,
                    evidence={
                        "param_tensors": opt.param_tensors,
                        "optimizer_ms_per_step": ms(facts.mean("optimizer_s")),
                        "share_of_step_time": round(share, 3),
                        "ops_per_step": round(ops, 1) if ops else None,
                    },
                    speedup=None,
                    basis=(
                        "the gain depends on tensor sizes and device; `torchdoctor tune --set "
                        "foreach=true` measures it (the step's measured share bounds it)"
                    ),
                    severity=Severity.MEDIUM if share >= OPTIMIZER_MEDIUM_SHARE else Severity.LOW,
                )
            )
        return findings


class GradZeroNotNone(Rule):
    code = "TD303"
    slug = "grad-zero-not-none"
    example = "optimizer.zero_grad(set_to_none=False)  # writes zeros into every gradient each step"
    title = "Gradients are zeroed instead of set to None"
    rationale = (
        "`zero_grad(set_to_none=False)` writes zeros into every gradient each step (a memset "
        "per parameter); with `None`, backward writes the gradient directly."
    )
    fix = "Use the default:\n```python\noptimizer.zero_grad()            # set_to_none=True\n```"

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        findings = []
        for opt in record.optimizers:
            if opt.zero_grad_set_to_none is not False or not facts.step_s:
                continue
            cost = facts.mean("zero_grad_s")
            speedup = amdahl(facts.step_s, cost)
            findings.append(
                self.finding(
                    title=f"zero_grad(set_to_none=False) costs {ms(cost):.2f} ms per step",
                    message=(
                        f"Zeroing {opt.params:,} gradient values took {ms(cost):.2f} ms of each "
                        f"{ms(facts.step_s):.1f} ms step."
                    ),
                    location=opt.zero_grad_location,
                    evidence={"zero_grad_ms_per_step": ms(cost), "params": opt.params,
                              "share_of_step_time": round(cost / facts.step_s, 3)},
                    speedup=speedup,
                    basis="Amdahl: the measured zero_grad time per step removed",
                    severity=severity_for(speedup) if speedup >= MIN_REPORTED_SPEEDUP else Severity.LOW,
                )
            )
        return findings


