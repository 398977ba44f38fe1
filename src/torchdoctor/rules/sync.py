"""Host-device synchronization rules: the host stops and waits for the GPU."""

from __future__ import annotations

from collections import defaultdict

from torchdoctor.model.findings import Finding, Severity
from torchdoctor.model.record import ApiCall, RunRecord
from torchdoctor.rules.base import HAZARD_BASIS_CPU, Rule
from torchdoctor.rules.facts import RunFacts
from torchdoctor.rules.value_use import EXTERNAL, HOST_NEEDS_VALUE, OTHER, value_use

SYNC_BASIS_GPU = (
    "the stall length is on the GPU timeline, not the host clock: `torchdoctor trace` on this "
    "run's trace sizes it"
)


def _basis(facts: RunFacts) -> str:
    return SYNC_BASIS_GPU if facts.cuda_used else HAZARD_BASIS_CPU


REQUIRED_SYNC_FIX = (
    "The host needs this value, so the sync itself stays: make it rarer. Act on a batch at a time "
    "(vectorized environments; `torch.stack` the values and read them with one `.tolist()`), or keep "
    "the decision on the device (`torch.where`, a mask) instead of branching in Python:\n```python\n"
    "actions = policy(obs_batch).argmax(-1).tolist()   # one sync for the whole batch\n"
    "for env, a in zip(envs, actions):\n    env.step(a)\n```"
)


def syncing_calls(record: RunRecord, kinds: tuple[str, ...], phase: str) -> list[ApiCall]:
    """Calls that sync the device (or would in a GPU run) from the user's own code: host-only
    tensors and calls made inside installed libraries are not the user's syncs. A line whose read
    was of a device tensor in some steps reads the same value in the others: its reads placed on
    the host there count too (nanochat's `train_loss.item()`, out of a compiled model, was placed
    on the host in one sampled step of three, and the line fell under once a step)."""
    ours = [c for c in record.dispatch.api_calls if c.kind in kinds and c.phase == phase and c.library is None]
    device_lines = {(c.location.path, c.location.line, c.api) for c in ours if c.placement == "device"}
    return [c for c in ours if (c.location.path, c.location.line, c.api) in device_lines]


DECISION_READS_PER_STEP = 2  # an RL loop steps its environments several times per update
MANY_READS_PER_EVALUATION = 100  # an evaluation reading back fewer batches than this loses little to the syncs
REREAD_FIX = ("Nothing to gain from removing this read: the optimizer waits for the same value itself. "
              "Printing it every evaluation is cheap; print every N steps if the output is too long.")
# Optimizers whose step(closure) turns the closure's loss into a Python float itself.
READS_CLOSURE_LOSS = {"LBFGS"}


def _optimizer_reads_it(record: RunRecord, call: ApiCall) -> str | None:
    """The optimizer (`LBFGS`) whose closure holds this call and which reads the loss anyway."""
    for opt in record.optimizers:
        c = opt.closure
        if opt.class_name in READS_CLOSURE_LOSS and c is not None and (c.path, c.function) == (
                call.location.path, call.location.function):
            return opt.class_name
    return None


def _by_line(calls: list[ApiCall]) -> dict[tuple, list[ApiCall]]:
    grouped: dict[tuple, list[ApiCall]] = defaultdict(list)
    for call in calls:
        grouped[(call.location.path, call.location.line)].append(call)
    return grouped


def _decision(calls: list[ApiCall], windows: int) -> bool:
    """Every read at the line was of whole numbers without autograd history, several per step:
    not a loss, an activation or a per-step metric but a decision the host acts on (a sampled
    action, an argmax index), one per environment step. Records from before this was counted
    say nothing either way."""
    measured = [c for c in calls if "integer" in c.detail]
    reads = sum(c.count for c in measured)
    return (bool(measured) and reads >= DECISION_READS_PER_STEP * windows
            and all(c.detail["autograd"] == 0 and c.detail["integer"] == c.count for c in measured))


def _loop_holds_the_evaluation(record: RunRecord, call: ApiCall) -> bool:
    """The loop around the read also holds the `model.eval()` that began the evaluation (a loop
    over models, each evaluated once): a loop around evaluations, not over batches in one."""
    return any(p.kind == "eval" and p.inner_location is not None
               and (p.inner_location.path, p.inner_location.function) == (call.location.path, call.location.function)
               and call.loop_line < p.inner_location.line < call.location.line for p in record.phases)


def _every_window(calls: list[ApiCall], windows: int) -> bool:
    """At least once per sampled window: a per-step habit, not an every-N-steps log."""
    return windows > 0 and sum(c.count for c in calls) >= windows


class _PerLineSyncRule(Rule):
    """Shared shape: one finding per source line whose calls match `kinds` in `phase`."""

    kinds: tuple[str, ...] = ()
    phase = "train"
    noun = ""
    cpu_noun = ""  # the same words for a CPU run, where the sync is a GPU hazard
    unit, units, unit_key = "step", "steps", "step"  # words for one sampled window
    # whether the line's value may be one the host needs (it feeds a non-torch call, or the
    # optimizer reads it anyway): said, and ranked low, instead of "drop this sync"
    asks_if_needed = False

    def windows(self, record: RunRecord) -> int:
        return record.dispatch.sampled_steps

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        calls = syncing_calls(record, self.kinds, self.phase)
        findings = []
        windows = self.windows(record)
        for (_, line), group in sorted(_by_line(calls).items()):
            if not _every_window(group, windows):
                continue
            total = sum(c.count for c in group)
            apis = sorted({c.api for c in group})
            per = total / windows
            on_gpu = facts.cuda_used
            noun = self.noun if on_gpu else self.cpu_noun
            tensors = (f"{group[0].device} tensors" if on_gpu else
                       "tensors that would be on the GPU in a GPU run (from the model or moved with .to(device))")
            use = value_use(group[0].text)
            feeds_host = self.asks_if_needed and (use == EXTERNAL or (use == OTHER and _decision(group, windows)))
            reread = self.asks_if_needed and _optimizer_reads_it(record, group[0])
            why = (" The value is needed on the host right away (it feeds a non-torch call whose result the "
                   "script goes on with), so the sync is required: batching it, or keeping the work on the device, "
                   "is the fix."
                   if use == EXTERNAL and feeds_host else
                   " The value read has no autograd history (a sampled action, an argmax, `.data`) and the line "
                   "hands it to Python or NumPy: a decision the host program acts on, so the sync is the price of "
                   "acting on it; making the decisions in batches (vectorized environments) is what makes it rarer."
                   if feeds_host else
                   f" This is inside the closure of {reread}, which reads the closure's loss itself after every "
                   "evaluation: the device is waited for anyway, so this read adds no wait of its own."
                   if reread else f" {self.rationale}")
            fix = REQUIRED_SYNC_FIX if feeds_host else REREAD_FIX if reread else None
            required = feeds_host or bool(reread)
            findings.append(
                self.finding(
                    title=f"{', '.join(apis)} {noun} {per:.0f}x per {self.unit}"
                    + (f" ({HOST_NEEDS_VALUE})" if required else ""),
                    message=f"{', '.join(apis)} at this line ran {total} times in {windows} sampled {self.units} "
                            f"on {tensors}.{why}",
                    location=group[0].location,
                    evidence={
                        f"calls_per_{self.unit_key}": round(per, 2),
                        "apis": apis,
                        "device": group[0].device,
                        f"sampled_{self.unit_key}s": windows,
                        "value_needed_on_host": required,
                    },
                    speedup=None,
                    basis=_basis(facts),
                    # a required read is not a habit to drop: it is said, with the batching fix, as information
                    severity=Severity.INFO if required else Severity.MEDIUM,
                    fix=fix,
                )
            )
        return findings


class HostSync(_PerLineSyncRule):
    code = "TD201"
    slug = "host-sync"
    example = "running_loss += loss.item()  # every step: the host waits for the GPU to finish"
    title = "Host reads a device tensor every step"
    kinds = ("host-sync", "transfer-d2h")
    asks_if_needed = True
    noun = "syncs the device"
    cpu_noun = "would sync the GPU"
    rationale = (
        "`.item()`, `float()`, `bool()`, `.tolist()`, `.cpu()`, printing a tensor: the host must "
        "wait until the GPU has finished everything queued, so the GPU then idles while Python "
        "queues the next step."
    )
    fix = (
        "Keep the value on the device and read it rarely:\n```python\nrunning_loss += "
        "loss.detach()          # no sync\nif step % 100 == 0:\n    print(running_loss.item() "
        "/ 100)  # one sync per 100 steps\n    running_loss.zero_()\n```"
    )


class DataDependentSync(_PerLineSyncRule):
    code = "TD202"
    slug = "data-dependent-sync"
    example = "loss = err[mask].mean()  # output size depends on mask: the host waits to count it"
    title = "Op whose output shape depends on the data, every step"
    kinds = ("data-dependent",)
    noun = "needs the data's shape"
    cpu_noun = "would make the host wait for the GPU's data"
    rationale = (
        "`nonzero`, boolean-mask indexing, `masked_select`, `unique` produce a tensor whose size "
        "depends on values on the device, so the host waits for the device to know it."
    )
    fix = (
        "Use fixed-shape ops: mask by multiplication or `torch.where` instead of selecting:\n"
        "```python\nloss = (per_token_loss * mask).sum() / mask.sum()   # not per_token_loss[mask]\n"
        "x = torch.where(mask, x, torch.zeros_like(x))\n```"
    )


class EvalTransfer(_PerLineSyncRule):
    code = "TD203"
    slug = "eval-transfer"
    example = (
        "for x, y in val_loader:\n"
        "    preds.append(model(x).argmax(1).cpu().numpy())  # one blocking transfer per batch"
    )
    title = "Per-batch device→host transfers in evaluation"
    kinds = ("host-sync", "transfer-d2h")
    phase = "eval"
    noun = "moves results to the host"
    cpu_noun = "would move results from the GPU to the host"
    unit, units, unit_key = "eval batch", "eval batches", "eval_batch"
    rationale = (
        "Copying every batch's outputs to the host (`.cpu().numpy()`) and doing metric math "
        "there serializes the evaluation: the GPU waits for each copy and for numpy."
    )
    fix = (
        "Accumulate predictions on the device and transfer once after the loop:\n```python\n"
        "preds = []\nwith torch.no_grad():\n    for x, y in val_loader:\n        preds.append(model(x)"
        ".argmax(1))      # stays on the GPU\npreds = torch.cat(preds).cpu().numpy()   # one "
        "transfer\n```"
    )

    def windows(self, record: RunRecord) -> int:
        """Sampled eval batches from a DataLoader; without them (an evaluation loop over
        `get_batch()`, or a one-batch test set), the sampled evaluation itself: a line read
        twice or more in one evaluation is inside its loop (see `check`)."""
        batches = record.dispatch.eval_batches_sampled
        return batches if batches >= 2 else 1

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        if record.dispatch.eval_batches_sampled >= 2:
            return super().check(record, facts)
        # no batches counted: a read repeated within the sampled evaluation, or inside a loop of its
        # function (a one-batch test set runs it once), is per batch; one read after the loop is
        # the cheap pattern the fix recommends
        looped = {(c.location.path, c.location.line) for c in record.dispatch.api_calls
                  if c.loop_line is not None and not _loop_holds_the_evaluation(record, c)}
        found = [f for f in super().check(record, facts)
                 if f.evidence["calls_per_eval_batch"] >= 2 or (f.location.path, f.location.line) in looped]
        for f in found:
            f.title = f.title.replace("per eval batch", "in one evaluation")
            reads = f.evidence["calls_per_eval_batch"]  # per sampled evaluation, here
            if reads < 2:  # inside the loop, which ran once: a one-batch set
                f.severity = Severity.LOW
                f.message += (" The evaluation's loop ran once (one batch), so this costs one read per evaluation "
                              "now, and one per batch as the evaluation set grows.")
            else:
                f.message += " (The evaluation's batches did not come from a DataLoader, so they were not counted.)"
                if record.dispatch.eval_sample_cut:  # the reads of the part sampled: the evaluation made more
                    f.title = f.title.replace("x in one evaluation", "x in the first part of one evaluation")
                    f.message += (f" The doctor sampled the evaluation's first {reads:g} rounds only (its time bound): "
                                  "the evaluation as a whole reads more often.")
                if reads < MANY_READS_PER_EVALUATION:  # a few reads per evaluation (or seen): little to gain
                    f.severity = Severity.LOW
        return found


class ExplicitSync(Rule):
    code = "TD204"
    slug = "explicit-sync"
    example = (
        "optimizer.step()\n"
        "torch.cuda.synchronize()  # every step, to time it"
    )
    title = "Explicit device synchronization in the training loop"
    rationale = (
        "`torch.cuda.synchronize()` in the loop, or `CUDA_LAUNCH_BLOCKING=1`, make the host wait "
        "for every queued kernel, so host and device never overlap."
    )
    fix = (
        "Remove `torch.cuda.synchronize()` from the loop (time with CUDA events instead) and "
        "unset `CUDA_LAUNCH_BLOCKING` outside debugging:\n```python\nstart, end = "
        "torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)\n```"
    )

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        findings = []
        if record.environment.env_vars.get("CUDA_LAUNCH_BLOCKING", "0") not in ("", "0"):
            findings.append(
                self.finding(
                    title="CUDA_LAUNCH_BLOCKING=1 makes every kernel launch synchronous",
                    message="The environment of this run set CUDA_LAUNCH_BLOCKING=1 (a debugging switch).",
                    location=None,
                    evidence={"CUDA_LAUNCH_BLOCKING": record.environment.env_vars["CUDA_LAUNCH_BLOCKING"]},
                    speedup=None,
                    basis=_basis(facts),
                    severity=Severity.HIGH if facts.cuda_used else Severity.LOW,
                )
            )
        calls = syncing_calls(record, ("explicit-sync",), "train")
        windows = record.dispatch.sampled_steps
        for (_, line), group in sorted(_by_line(calls).items()):
            if _every_window(group, windows):
                per = sum(c.count for c in group) / windows
                findings.append(
                    self.finding(
                        title=f"torch.cuda.synchronize() {per:.0f}x per step",
                        message=f"torch.cuda.synchronize() at this line ran in every sampled step ({windows} sampled).",
                        location=group[0].location,
                        evidence={"calls_per_step": round(per, 2)},
                        speedup=None,
                        basis=_basis(facts),
                        severity=Severity.MEDIUM,
                    )
                )
        return findings
