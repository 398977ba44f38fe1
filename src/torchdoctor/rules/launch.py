"""Launch-overhead rules: too many small ops issued from Python per step."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.paths import recorded_path
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.base import MIN_REPORTED_SPEEDUP, Rule, amdahl, ms, severity_for
from torchdoctor.rules.facts import RunFacts
from torchdoctor.rules.noise import machine_busy
from torchdoctor.rules.sync import syncing_calls
from torchdoctor.rules.value_use import CONTROL, EXTERNAL, value_use

# A loop TD301 speaks of: it goes round at least this many times each time it runs (a layer
# stack of 4-6 blocks does too, and is told apart by its parameters, below), issuing this many
# ops per step.
LOOP_MIN_ITERATIONS = 3
LOOP_MIN_OPS_PER_STEP = 12
# At this many ops per step a loop is worth changing whatever this machine's noise made of
# the estimate (the reference report's loop issued 768): at least medium.
LOOP_OPS_PER_STEP = 100
# A loop whose ops read each parameter about once each time it runs steps through different
# weights (a stack of layers: nothing to vectorize); one that reuses its weights every iteration (an
# RNN cell, an embedding per position) or reads none (slice writes) loops over data.
LAYER_STACK_MAX_REUSE = 1.5
# An optimizer over this many tensors pays per-tensor overhead on the single-tensor path.
FOREACH_MIN_TENSORS = 20
OPTIMIZER_MEDIUM_SHARE = 0.05
# A loop whose iterations each wait for a host read (at least this many per step, at most this
# many of the loop's ops per read) is paced by the host: sequential, not vectorizable.
PACED_MIN_READS = 10
PACED_MAX_OPS_PER_READ = 200
# Two or more parameter tensors updated in place from one line per step: a hand-written optimizer.
PER_PARAMETER_MIN_UPDATES = 2
# On CPU a loop line under 3 % of the step is not worth a finding (stack-sample noise).
LOOP_MIN_SHARE = 0.03
MIN_LINE_SAMPLES = 20  # fewer stack samples than this: fall back to the dispatch timing
MIN_SAMPLES_ON_LINES = 5  # ...and fewer than this on the lines themselves (a share of 2 samples is noise)
LINE_SAMPLER_BASIS = "its share of stack samples in measured steps times that step"
# The mean measured step this much above the median: slow steps pull it up (another process took
# the CPU for a while, a step did extra work), and the estimate says it is sized on the median.
MEAN_PULLED_UP = 1.1
DISPATCH_BASIS = "op and inter-op time in sampled steps, calibrated sampler cost removed"
# On a busy machine the op sampler's calibrated cost can take all the time it timed on a loop's
# lines (a loaded demo run: 5,376 ops, 0.47 ms of cost per op, 0.0 ms left) while the line sampler
# kept no whole step: that forward time is unmeasured, not zero.
FORWARD_NOT_TIMED = ("not timed: too few stack samples landed on its lines and the op sampler's calibrated cost "
                     "was all the time it timed there, so it counts as 0 and its saving is left out")


def _in_optimizer_class(record: RunRecord, loop) -> bool:
    """The loop is in a method of one of the run's optimizer classes (`MuonAdamW._compute_adamw`): its turns
    are the optimizer's parameters, each updated in turn by design, not elements to vectorize."""
    owner = (loop.location.function or "").partition(".")[0]
    return bool(owner) and any(o.class_name == owner for o in record.optimizers)


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
        "does almost no work (a prompt-writing loop over a batch of 32 launches hundreds per step)."
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
        for loop in record.dispatch.loops:
            per_step, turns = loop.ops / windows, loop.iterations / windows
            runs = max(1, loop.runs)
            if loop.library or loop.iterations / runs < LOOP_MIN_ITERATIONS or per_step < LOOP_MIN_OPS_PER_STEP:
                continue  # a framework's own loop (the user cannot rewrite it), or too few turns to matter
            if any((t.path, t.function, t.line) == (loop.location.path, loop.location.function, loop.header_line)
                   for t in record.run.training_loops):
                continue  # the training loop itself (it turns several times per step when steps are rarer)
            if loop.param_uses and loop.param_uses / runs / max(1, loop.params) < LAYER_STACK_MAX_REUSE:
                continue  # each turn reads other weights: a stack of layers, sequential by nature
            if _updates_parameters(record, loop, windows) or per_tensor_update(loop, windows):
                continue  # a hand-written optimizer or a target network's update: TD305 reports it
            if _in_optimizer_class(record, loop):
                continue  # an optimizer's own loop over its parameters (nanochat's MuonAdamW): no batch to index
            cost = LoopCost.of_loop(record, facts, loop, per_step)
            # a small loop on this CPU run is still a loop (each op a kernel launch on a GPU): said, low;
            # one whose time nothing measured is not sized at all (not "0 %"): said, low, as unmeasured
            untimed = not cost.forward_timed and not cost.backward_s
            small = not facts.cuda_used and not untimed and (cost.speedup < MIN_REPORTED_SPEEDUP
                                                             or cost.share < LOOP_MIN_SHARE)
            # ...but on a machine the run found busy a small share is that noise's, not the loop's
            # measure (a demo run whose other processes made its steps 80x the quiet ones timed the
            # prompt loop at 2.4 %, 49 % on a quiet machine): many ops per step keep it medium, unestimated
            busy_small = small and per_step >= LOOP_OPS_PER_STEP and machine_busy(record)
            pacer = _paced_by_host(record, per_step)
            paced = (f" Each iteration first waits for a value the host needs (`{pacer[0].text}`, {pacer[1]:.0f} "
                     "times per step): the loop is paced by the host and cannot be fused within it; batch across "
                     "independent sequences or environments instead." if pacer else "")
            callees = _callee_share(record, loop)
            findings.append(
                self.finding(
                    title=(f"A loop of {turns:.0f} turns issues {per_step:.0f} tiny ops per step "
                           "(its time not measured)" if untimed else
                           f"A loop of {turns:.0f} turns issues {per_step:.0f} tiny ops per step "
                           f"({cost.share:.0%} of step time)" if cost.share >= 0.01 else
                           f"A loop of {turns:.0f} turns issues {per_step:.0f} tiny ops per step "
                           f"({cost.share:.1%} of step time)"),
                    message=(
                        f"The loop at line {loop.header_line} went round {turns:.0f} times per step and issued "
                        f"{per_step:.0f} aten ops (median {loop.median_numel} elements each; "
                        f"{', '.join(list(loop.op_counts)[:3])}"
                        + (f"; {callees:.0%} of them inside the functions and modules it calls each turn" if callees >= 0.5 else "")
                        + (f"), taking {ms(cost.line_s):.1f} ms of a {ms(cost.step_s):.1f} ms step"
                           + (f", and their backward {ms(cost.backward_s):.1f} ms more." if cost.backward_s else ".")
                           if cost.forward_timed else
                           "); their forward time was not measured in this run"
                           + (f", their backward took {ms(cost.backward_s):.1f} ms of a {ms(cost.step_s):.1f} ms step."
                              if cost.backward_s else ", nor their backward."))
                        + (" On a GPU each op is also a kernel launch." if not facts.cuda_used else "")
                        + paced
                    ),
                    location=loop.location,
                    evidence={
                        "loop_line": loop.header_line,
                        "turns_per_step": round(turns, 1),
                        "ops_per_step": round(per_step, 1),
                        "line_ms_per_step": ms(cost.line_s),
                        "backward_ms_per_step": ms(cost.backward_s) if record.dispatch.backward_windows else None,
                        "share_of_step_time": round(cost.share, 3),
                        "step_ms": ms(cost.step_s),  # the median measured step the share and estimate divide by
                        "median_numel": loop.median_numel,
                        "top_ops": loop.op_counts,
                        "reads_per_parameter_per_step": round(loop.param_uses / windows / loop.params, 1)
                        if loop.params else None,
                        "sampled_steps": windows,
                        "line_samples": record.line_profile.total_samples,
                    },
                    speedup=None if pacer or small or untimed else cost.speedup,
                    basis=("not estimated: a loop paced by the host's reads cannot become one op" if pacer else
                           "not estimated: neither its forward nor its backward was timed in this run (too few stack "
                           "samples on its lines, the op sampler's calibrated cost all the time it timed there, no "
                           "backward window); its op count is what was measured" if untimed else
                           f"not estimated: {cost.share:.1%} of the step on a machine this run found busy (other "
                           f"processes took its CPUs): a share this small is within that noise; its {per_step:.0f} "
                           "ops per step are what is measured, and a loop issuing that many is worth changing (on a "
                           "GPU each is a kernel launch). Re-run on a quieter machine to size it" if busy_small else
                           f"not estimated: {cost.share:.1%} of the step on this CPU run, within its noise; on a "
                           "GPU each of its ops is a kernel launch" if small else
                           cost.basis(record, "replaced by one op per op kind at the loop's mean time per op (an "
                                              "upper bound: a loop that carries state from one turn to the next, "
                                              "an RNN, can be fused, not vectorized)")),
                    severity=(Severity.MEDIUM if busy_small and not pacer else
                              Severity.LOW if pacer or small or untimed else
                              _at_least_medium(cost.speedup) if per_step >= LOOP_OPS_PER_STEP else
                              severity_for(cost.speedup)),
                    fix=CALLS_FIX if callees >= 0.5 else None,
                )
            )
        return findings


def per_tensor_update(loop, windows: int) -> bool:
    """A loop that writes one more tensor in place each turn while reading a parameter each
    turn: a target network's or an EMA copy's update (`tgt.data.copy_(tau * p.data + ...)`)."""
    turns, per_run = loop.iterations / windows, loop.iterations / max(1, loop.runs)
    return (not loop.library and per_run >= LOOP_MIN_ITERATIONS and loop.written_tensors >= PER_PARAMETER_MIN_UPDATES
            and loop.written_tensors >= per_run / 2 and loop.param_uses / windows >= turns)


# Most of the loop's ops come from what it calls (a module, a library function, once per turn):
# the element-indexing recipe does not apply; one call on the whole batch does.
CALLS_FIX = (
    "Call it once on all the items instead of once per item: stack the inputs and make one call "
    "(modules and most functions take a batch dimension), or vectorize it with `torch.vmap`; a "
    "recurrent step that needs the previous output can be fused (`nn.GRU`/`nn.LSTM`, `torch.compile`):"
    "\n```python\n# before: outs = [cell(x[:, t]) for t in range(T)]\nouts = torch.vmap(cell, in_dims=1, "
    "out_dims=1)(x)   # or cell(x.flatten(0, 1)).view(B, T, -1) for a per-item function\n```"
)


def _callee_share(record: RunRecord, loop) -> float:
    """The share of the loop's ops issued by what it calls: inside torch (a module's internals) or
    in the user's functions it calls each turn (an RNN cell's forward), not by its own lines."""
    own = loop.location.function
    called = sum(s.ops - s.internal_ops for s in record.dispatch.sites if s.location.function != own and any(
        (s.location.path, s.location.line) == (loc.path, loc.line) for loc in loop.lines))
    return min(1.0, (loop.internal_ops + called) / max(1, loop.ops))


def _updates_parameters(record: RunRecord, loop, windows: int) -> bool:
    lines = {(loc.path, loc.line) for loc in loop.lines}
    return sum(s.param_updates for s in record.dispatch.sites
               if (s.location.path, s.location.line) in lines) / windows >= PER_PARAMETER_MIN_UPDATES


def _at_least_medium(speedup: float) -> Severity:
    return Severity.HIGH if severity_for(speedup) is Severity.HIGH else Severity.MEDIUM


def _paced_by_host(record: RunRecord, ops_per_step: float):
    """(call, per step) of a read the host needs (control flow, a Python environment) that
    repeats often enough in the step to pace this loop: an RL episode, a decode loop with a
    stopping test. None when the loop's ops run free of such reads."""
    windows = record.dispatch.sampled_steps
    best = None
    for call in syncing_calls(record, ("host-sync", "transfer-d2h"), "train"):
        per_step = call.count / windows
        if per_step >= PACED_MIN_READS and ops_per_step / per_step <= PACED_MAX_OPS_PER_READ \
                and value_use(call.text) in (CONTROL, EXTERNAL) and (best is None or per_step > best[1]):
            best = (call, per_step)
    return best


@dataclass
class LoopCost:
    """What one line's per-element ops cost per step, and what one op per op kind would save.

    Sized on the median measured step, not the mean: the line's forward and backward times are
    measured in one or two window steps, and a few measured steps that another process slowed
    (a busy machine) pull the mean up without the line's time growing with it. A loaded demo run
    timed the loop at 22 ms forward and 78 ms backward (the backward in a 227 ms step) while two
    steps of 3.5 and 5.7 s pulled its mean step to 849 ms, its median 290 ms: 12 % of the mean, a
    medium ranked below two mediums, where the median gives 34 % and the quiet README run 49 %."""

    line_s: float  # forward time per step
    backward_s: float  # backward time per step of the autograd nodes it created
    timing: str  # how line_s was measured
    speedup: float
    share: float
    step_s: float  # the step it is sized on: the median measured step
    mean_step_s: float  # the mean measured step, said when slow steps pull it above the median

    @classmethod
    def of(cls, record: RunRecord, facts: RunFacts, site, ops_per_step: float, sampled_lines: bool = True) -> "LoopCost":
        """One line's ops. `sampled_lines=False`: time the line by its ops alone (a loop whose
        time the line sampler splits between its `for` line and its body)."""
        backward = site.backward_s / record.dispatch.backward_windows if record.dispatch.backward_windows else 0.0
        return cls._of(record, facts, [site.location] if sampled_lines else [], site.time_s, backward,
                       len(site.op_counts), ops_per_step)

    @classmethod
    def of_loop(cls, record: RunRecord, facts: RunFacts, loop, ops_per_step: float) -> "LoopCost":
        """A loop's ops: its own lines, the lines it calls, and its header (the iteration itself)."""
        lines = {(loc.path, loc.line) for loc in loop.lines}
        d = record.dispatch
        backward = sum(s.backward_s for s in d.sites if (s.location.path, s.location.line) in lines)
        header = dataclasses.replace(loop.location, line=loop.header_line)
        return cls._of(record, facts, [*loop.lines, header], loop.time_s,
                       backward / d.backward_windows if d.backward_windows else 0.0, len(loop.op_counts), ops_per_step)

    @classmethod
    def _of(cls, record: RunRecord, facts: RunFacts, locations, ops_time_s: float, backward_s: float, op_kinds: int,
            ops_per_step: float) -> "LoopCost":
        windows = record.dispatch.sampled_steps
        profile = record.line_profile
        step_s = facts.median_step_s or facts.step_s
        wanted = {(loc.path, loc.line) for loc in locations}
        hits = [h for h in profile.lines if (h.location.path, h.location.line) in wanted]
        if profile.total_samples >= MIN_LINE_SAMPLES and sum(h.samples for h in hits) >= MIN_SAMPLES_ON_LINES:
            line_s, timing = sum(map(profile.line_share, hits)) * step_s, LINE_SAMPLER_BASIS
        else:  # too few stack samples landed there to size it (many short ops): the ops' own timing
            line_s, timing = min(ops_time_s / windows, step_s), DISPATCH_BASIS
            if line_s <= 0:
                line_s, timing = 0.0, FORWARD_NOT_TIMED
        # the node hooks that time backward slow it: never more than the clean steps' whole backward
        clean = [st.backward_s for st in facts.window if not st.sampled and st.backward_s > 0]
        if clean:
            backward_s = min(backward_s, statistics.median(clean))
        per_op = line_s / ops_per_step
        # the vectorized version: one op per op kind, forward and backward
        after = per_op * max(1, op_kinds) * (2 if backward_s else 1)
        saved = max(0.0, line_s + backward_s - after)
        return cls(line_s, backward_s, timing, amdahl(step_s, saved), min(1.0, (line_s + backward_s) / step_s),
                   step_s, facts.step_s)

    @property
    def forward_timed(self) -> bool:
        return self.timing != FORWARD_NOT_TIMED

    def basis(self, record: RunRecord, replacement: str) -> str:
        d = record.dispatch
        pulled = (f" (the mean step, {ms(self.mean_step_s):.1f} ms, is {self.mean_step_s / self.step_s:.1f}x it: "
                  "slow steps pull the mean up)" if self.mean_step_s > MEAN_PULLED_UP * self.step_s else "")
        return (f"Amdahl on the median measured step, {ms(self.step_s):.1f} ms{pulled}: the line's forward time "
                f"per step ({self.timing})"
                + (" plus the backward time of the autograd nodes it created (node hooks, "
                   f"{d.backward_windows} step)" if self.backward_s else "; its backward was not timed, "
                   "so this is a lower bound")
                + f", {replacement}")


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
        "opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)   # CUDA or CPU, fastest\n```\n"
        "On a CPU the default is the for-loop path too: there `fused=True` (Adam, AdamW, SGD, Adagrad) is the fix."
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


# TD306: optimizer.step() on torch's single-tensor (for-loop) path is worth a finding when it takes at
# least this share of the median measured step: below it even removing the whole update would gain
# little more than a CPU's run-to-run noise (rules/base.py: 5 % is about twice that noise).
FOR_LOOP_MIN_SHARE = 0.10
# What share of the for-loop step the fused kernels remove, assumed for the estimate. Source: one
# optimizer step timed alone on a shared 2-core CPU, torch 2.13, for-loop vs fused=True, best of 15,
# three shapes (200 tensors of 64x64, an 8-layer 512-wide MLP, six 2048x2048 + one 6282x768): fused
# took 0.02-0.28 of the for-loop time for Adam/AdamW/Adagrad (>= 72 % saved) and 0.34-0.80 for SGD
# (>= 20 % saved). The smallest saving seen is the one assumed; other optimizers get SGD's.
FUSED_SAVES = {"Adam": 0.7, "AdamW": 0.7, "Adagrad": 0.7}
FUSED_SAVES_OTHER = 0.2
# foreach on the CPU loops over the tensors in C++: 0.27-1.88 of the for-loop time in the same
# benchmark, sometimes slower. No estimate is made for it; `tune --set foreach=true` measures it.
SPREAD_QUANTILES = (0.1, 0.9)


class OptimizerForLoop(Rule):
    code = "TD306"
    slug = "optimizer-for-loop"
    example = ("optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)   # on a CPU: the for-loop path\n"
               "optimizer.step()   # a dozen ops per parameter tensor, one tensor at a time")
    title = "optimizer.step() runs the single-tensor (for-loop) implementation and takes much of the step"
    rationale = (
        "With `foreach` and `fused` left unset, torch.optim picks the multi-tensor (foreach) path only when every "
        "parameter is on a foreach device (CUDA); on a CPU Adam, AdamW, SGD and the others fall back to a Python "
        "loop over the parameter tensors, a dozen small ops each. The fused kernels (Adam, AdamW, SGD, Adagrad, "
        "on CPU and CUDA) do the whole update in one pass per tensor."
    )
    fix = (
        "Ask for the fused kernels (or foreach, for an optimizer that has no fused one):\n```python\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)    # Adam, AdamW, SGD, Adagrad\n"
        "opt = torch.optim.RMSprop(model.parameters(), lr=1e-3, foreach=True) # the others\n```\n"
        "The fused update computes the same formula in another order: results agree to rounding, not bit for bit."
    )

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        steps = [s for s in facts.measured if s.duration_s > 0 and s.split_timed]
        if not steps or not facts.step_s:
            return []
        looping = [o for o in record.optimizers if o.implementation == "for-loop" and o.foreach is None
                   and not o.fused and o.step_calls > 0]
        if not looping:
            return []  # foreach=False set by the script is TD302's; foreach/fused already on: nothing to do
        shares = sorted(s.optimizer_s / s.duration_s for s in steps)
        median, low, high = statistics.median(shares), _quantile(shares, SPREAD_QUANTILES[0]), \
            _quantile(shares, SPREAD_QUANTILES[1])
        if median < FOR_LOOP_MIN_SHARE:
            return []
        opt = max(looping, key=lambda o: o.params)
        optimizer_s = statistics.median(s.optimizer_s for s in steps)
        step_s = statistics.median(s.duration_s for s in steps)
        others = len(record.optimizers) - 1
        devices = "/".join(opt.param_devices) or "this device"
        knob = "fused" if opt.fused_available else "foreach"
        if opt.fused_available:
            saves = FUSED_SAVES.get(opt.class_name, FUSED_SAVES_OTHER)
            speedup = amdahl(step_s, optimizer_s * saves)
            basis = (f"Amdahl on the median measured step ({ms(step_s):.1f} ms): measured, optimizer.step() took "
                     f"{ms(optimizer_s):.1f} ms of it (median over {len(steps)} steps); assumed, fused=True removes "
                     f"{saves:.0%} of that (the smallest saving seen for {opt.class_name if opt.class_name in FUSED_SAVES else 'SGD'} "
                     f"on a CPU benchmark); removing all of it would give {amdahl(step_s, optimizer_s):.2f}x at most. "
                     "`torchdoctor tune --set fused=true` measures it")
            reported = speedup if speedup >= MIN_REPORTED_SPEEDUP else None
            # the severity holds at the low end of the measured share: a share the machine's noise
            # pushed up for a few steps does not make a medium (llm.c: 14-23 %, a tabular MLP: 5-12 %)
            floor = amdahl(step_s, low * step_s * saves)
        else:
            reported = None
            basis = (f"not estimated: {opt.class_name} has no fused kernels for these parameters, and foreach on a "
                     f"{devices} is sometimes no faster; removing the whole update would give "
                     f"{amdahl(step_s, optimizer_s):.2f}x at most. `torchdoctor tune --set foreach=true` measures it")
        fix = None if opt.fused_available else (
            f"`{opt.class_name}` has no fused kernels here; ask for the multi-tensor path and measure it:\n```python\n"
            f"opt = torch.optim.{opt.class_name}(model.parameters(), ..., foreach=True)\n```")
        # A script that takes the GPU when there is one, run here on a CPU with fused unset (or set
        # from the device, as litgpt's `fused=device.type == "cuda"`): on CUDA torch's default is already
        # the multi-tensor path, so the cost is this CPU run's, not the GPU run's: checked, not a cause.
        cpu_stand_in = (not facts.cuda_used and bool(record.sources_prefer_cuda) and not opt.fused
                        and set(opt.param_devices) <= {"cpu"})
        spread = (f"between {low:.0%} and {high:.0%} of a step ({SPREAD_QUANTILES[0]:.0%}-{SPREAD_QUANTILES[1]:.0%} "
                  f"of the {len(steps)} measured steps)")
        return [self.finding(
            title=(f"{opt.class_name}.step() runs the for-loop implementation: {median:.0%} of each step "
                   f"(fused=True available)" if opt.fused_available else
                   f"{opt.class_name}.step() runs the for-loop implementation: {median:.0%} of each step"),
            message=(f"{opt.class_name} was created {_flags(opt)}, so torch chose its single-tensor path "
                     f"for parameters on the {devices} ({opt.param_tensors} tensors, {opt.params:,} values): each "
                     f"step's update loops over the tensors in Python. Measured: optimizer.step() took a median "
                     f"{median:.0%} of the step ({ms(optimizer_s):.1f} of {ms(step_s):.1f} ms), {spread}"
                     + (f"; the time is that of all {others + 1} optimizers' steps" if others else "") + "."
                     + (f" Torch {record.environment.torch} has fused {opt.class_name} kernels for these parameters"
                        f" on the {devices} too: `fused=True`." if opt.fused_available else "")
                     + (" The script takes CUDA when it is there (its sources ask for it), where torch's default for "
                        "these flags is already the multi-tensor path: this cost is this CPU run's, not a cause of the "
                        "GPU run's time." if cpu_stand_in else "")),
            location=opt.created_at,
            evidence={"optimizer": opt.class_name, "implementation": opt.implementation,
                      "fused_available": opt.fused_available, "param_devices": opt.param_devices,
                      "param_tensors": opt.param_tensors, "optimizer_ms_per_step": ms(optimizer_s),
                      "step_ms": ms(step_s), "share_of_step_time": round(median, 3),
                      "share_low": round(low, 3), "share_high": round(high, 3), "measured_steps": len(steps),
                      "suggested": f"{knob}=True", "cpu_run_of_a_cuda_script": cpu_stand_in},
            speedup=reported,
            basis=basis,
            severity=(Severity.INFO if cpu_stand_in else severity_for(min(reported, floor)) if reported is not None
                      else Severity.MEDIUM if low >= 2 * FOR_LOOP_MIN_SHARE else Severity.LOW),
            fix=fix,
        )]


def _flags(opt) -> str:
    """How the script configured the update path: 'without foreach or fused', 'with fused=False (foreach unset)'."""
    if opt.fused is None:
        return "without foreach or fused"
    return f"with fused={opt.fused} (foreach unset)"


def _quantile(ordered: list[float], q: float) -> float:
    """The q-quantile of sorted values, interpolated."""
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


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
        return findings + self._zeroed_by_hand(record, facts)

    def _zeroed_by_hand(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        """`w1.grad.zero_()` written out in the loop: lint names the line (an in-place zero of a
        `.grad`), the op sampler timed it and the lines of the same zeroing just below it."""
        windows = record.dispatch.sampled_steps
        if not windows or not facts.step_s:
            return []
        findings = []
        for sf in record.static_findings:
            if sf.code != self.code or not sf.reached:
                continue
            sites = _zeroing_sites(record, sf.path, sf.line)
            if not sites:
                continue
            cost = sum(site.time_s for site in sites) / windows
            speedup = amdahl(facts.step_s, cost)
            findings.append(self.finding(
                title=f"Gradients zeroed in place by hand: {ms(cost):.2f} ms per step",
                message=(f"{len(sites)} line(s) of `.grad.zero_()` took {ms(cost):.2f} ms of each {ms(facts.step_s):.1f} ms "
                         f"step ({sum(s.ops for s in sites) / windows:.0f} fills per step, timed by the op sampler in "
                         f"{windows} steps); setting `.grad = None` skips the fills, and the next backward writes "
                         "fresh gradients."),
                location=sites[0].location,
                evidence={"zero_grad_ms_per_step": ms(cost), "lines": [s.location.line for s in sites],
                          "share_of_step_time": round(cost / facts.step_s, 3), "sampled_steps": windows},
                speedup=speedup if speedup >= MIN_REPORTED_SPEEDUP else None,
                basis=("Amdahl: the zeroing lines' op time per sampled step removed; an upper bound (backward then "
                       "allocates the gradients it writes)"),
                severity=severity_for(speedup) if speedup >= MIN_REPORTED_SPEEDUP else Severity.LOW,
                fix="Drop the gradients instead of zeroing them:\n```python\nw1.grad = None\nw2.grad = None\n```",
            ))
        return findings


ZERO_OPS = frozenset({"aten::zero_"})


def _zeroing_sites(record: RunRecord, path: str, line: int) -> list:
    """The user's op sites at `line` and the lines right after it that issue nothing but zero fills."""
    cwd = record.run.cwd
    by_line = {s.location.line: s for s in record.dispatch.sites if s.library is None and s.op_counts
               and set(s.op_counts) <= ZERO_OPS and recorded_path(s.location.path, cwd) == path}
    sites = []
    while line in by_line:
        sites.append(by_line[line])
        line += 1
    return sites


class PerParameterUpdate(Rule):
    code = "TD305"
    slug = "per-parameter-update"
    example = (
        "loss.backward()\n"
        "for p in model.parameters():\n"
        "    p.data.add_(p.grad, alpha=-lr)  # one op (a kernel launch on a GPU) per tensor"
    )
    title = "Parameters updated one tensor at a time by a hand-written loop"
    rationale = (
        "A hand-written update loop issues its ops once per parameter tensor: a model with 200 "
        "tensors launches 200 tiny kernels per step for what torch.optim's foreach or fused path "
        "does in a handful."
    )
    fix = (
        "Let torch.optim do the update (its multi-tensor path), or update every tensor at once:\n```python\n"
        "opt = torch.optim.SGD(model.parameters(), lr=lr, foreach=True)   # fused=True on CUDA\n"
        "# or, by hand:\nwith torch.no_grad():\n    params = [p for p in model.parameters() if p.grad is not None]\n"
        "    torch._foreach_add_(params, [p.grad for p in params], alpha=-lr)\n```"
    )

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        windows = record.dispatch.sampled_steps
        if not windows or not facts.step_s:
            return []
        # a loop that writes the trained parameters themselves is a hand-written optimizer: its
        # update line is said below; a loop that writes other tensors from them, a target network's
        findings = [self._shadow(record, facts, loop, windows) for loop in record.dispatch.loops
                    if per_tensor_update(loop, windows) and not _updates_parameters(record, loop, windows)]
        for site in record.dispatch.sites:
            updates = site.param_updates / windows
            if updates < PER_PARAMETER_MIN_UPDATES or site.library or any(
                    (site.location.path, site.location.line) == (f.location.path, f.location.line) for f in findings):
                continue
            cost = LoopCost.of(record, facts, site, max(1.0, site.ops / windows), sampled_lines=False)
            measurable = cost.speedup >= MIN_REPORTED_SPEEDUP
            findings.append(self.finding(
                title=f"{updates:.0f} parameter tensors updated one at a time ({cost.share:.1%} of step time)",
                message=(f"This line updated {updates:.0f} parameter tensors per step with in-place ops "
                         f"({', '.join(list(site.op_counts)[:3])}), {site.ops / windows:.0f} ops in all, taking "
                         f"{ms(cost.line_s):.2f} ms of a {ms(cost.step_s):.1f} ms step."
                         + ("" if facts.cuda_used else " On a GPU each op is also a kernel launch.")),
                location=site.location,
                evidence={"parameter_updates_per_step": round(updates, 1), "ops_per_step": round(site.ops / windows, 1),
                          "line_ms_per_step": ms(cost.line_s), "share_of_step_time": round(cost.share, 4),
                          "step_ms": ms(cost.step_s), "step_source": record.run.step_source},
                speedup=cost.speedup if measurable else None,
                basis=(cost.basis(record, "replaced by one foreach op per op kind") if measurable else
                       f"below this run's noise: the loop took {ms(cost.line_s):.2f} ms per step here; "
                       "on a GPU its cost is one kernel launch per tensor"),
                severity=_at_least_medium(cost.speedup),
            ))
        return findings

    def _shadow(self, record: RunRecord, facts: RunFacts, loop, windows: int) -> Finding:
        turns = loop.iterations / windows
        cost = LoopCost.of_loop(record, facts, loop, max(1.0, loop.ops / windows))
        measurable = cost.speedup >= MIN_REPORTED_SPEEDUP and cost.share >= LOOP_MIN_SHARE
        return self.finding(
            title=f"{loop.written_tensors} tensors updated one at a time from the parameters ({cost.share:.1%} of "
                  f"step time)",
            message=(f"The loop at line {loop.header_line} writes one tensor per turn ({turns:.0f} turns per step), "
                     f"each from a parameter: a target network's or an averaged copy's update, {loop.ops / windows:.0f} "
                     f"ops per step ({', '.join(list(loop.op_counts)[:3])}), taking {ms(cost.line_s):.2f} ms of a "
                     f"{ms(cost.step_s):.1f} ms step."
                     + ("" if facts.cuda_used else " On a GPU each op is also a kernel launch.")),
            location=loop.location,
            evidence={"tensors_written": loop.written_tensors, "turns_per_step": round(turns, 1),
                      "ops_per_step": round(loop.ops / windows, 1), "share_of_step_time": round(cost.share, 4),
                      "step_ms": ms(cost.step_s)},
            speedup=cost.speedup if measurable else None,
            basis=(cost.basis(record, "replaced by one foreach op per op kind") if measurable else
                   f"below this run's noise: {cost.share:.1%} of the step here; on a GPU its cost is a few kernel "
                   "launches per tensor"),
            severity=_at_least_medium(cost.speedup) if measurable else Severity.LOW,
            fix=("Update every tensor at once with the foreach ops (what torch.optim uses):\n```python\n"
                 "with torch.no_grad():\n    tgt, src = list(target.parameters()), list(online.parameters())\n"
                 "    torch._foreach_lerp_(tgt, src, tau)   # tgt += tau * (src - tgt), one op for all\n```\n"
                 "or keep the average with `torch.optim.swa_utils.AveragedModel(..., use_buffers=True)`."),
        )
