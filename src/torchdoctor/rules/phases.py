"""Rules for time outside the training step proper: evaluation, checkpoints, logging."""

from __future__ import annotations

from torchdoctor.findings import Finding
from torchdoctor.record import RunRecord
from torchdoctor.rules.base import MIN_REPORTED_SPEEDUP, Rule, amdahl, ms
from torchdoctor.rules.facts import RunFacts

MIN_LINE_SAMPLES = 10  # fewer stack samples than this are too noisy to use


class _PhaseShareRule(Rule):
    """A phase (eval, checkpoint, logging) taking a share of the post-warmup wall time.

    The estimate assumes the fix makes the phase `reduction_factor` times less frequent,
    which is what the fix text suggests; the measured share is in the evidence.
    """

    kind = ""
    step_attr = ""
    min_share = 0.05
    reduction_factor = 5
    what = ""

    def share(self, record: RunRecord, facts: RunFacts) -> float:
        return facts.window_share(self.step_attr)

    def check(self, record: RunRecord, facts: RunFacts) -> list[Finding]:
        share = self.share(record, facts)
        if share < self.min_share:
            return []
        sites = sorted((p for p in record.phases if p.kind == self.kind), key=lambda p: -p.total_s)
        site = sites[0] if sites else None
        wall = sum(s.duration_s for s in facts.window)
        saved_share = share * (1 - 1 / self.reduction_factor)
        speedup = amdahl(1.0, saved_share)
        if speedup < MIN_REPORTED_SPEEDUP:
            return []
        calls = site.calls if site else 0
        return [
            self.finding(
                title=f"{self.what} takes {share:.0%} of training wall time",
                message=(
                    f"After warmup, {ms(share * wall):.0f} ms of {ms(wall):.0f} ms went to "
                    f"{self.what.lower()}" + (f" ({calls} calls at this line in the whole run)." if site else ".")
                ),
                location=site.location if site else None,
                evidence={
                    "share_of_wall_time": round(share, 3),
                    "seconds_in_window": round(share * wall, 4),
                    "window_seconds": round(wall, 4),
                    "calls_at_line": calls,
                    # what `--set eval=off` / `checkpoint=off` measure: the phase gone entirely
                    "speedup_if_removed": round(amdahl(1.0, share), 3),
                },
                speedup=speedup,
                basis=f"Amdahl: the measured {self.kind} share made {self.reduction_factor}x less frequent",
            )
        ]


class FrequentEval(_PhaseShareRule):
    code = "TD701"
    slug = "frequent-eval"
    example = (
        "for step, (x, y) in enumerate(loader):\n"
        "    train_step(x, y)\n"
        "    val_acc = evaluate(model, val_loader)  # a full validation pass every step"
    )
    title = "Evaluation takes a large share of wall time"
    kind, step_attr, what = "eval", "eval_s", "Evaluation"
    min_share = 0.10
    rationale = "Every evaluation pass stops training; evaluating often on a large set dominates."
    fix = (
        "Evaluate less often or on a subset during training, and fully at the end:\n```python\n"
        "if step % eval_every == 0:        # e.g. every 1000 steps, not every 50\n"
        "    evaluate(model, val_subset)\n```"
    )


class FrequentCheckpoint(_PhaseShareRule):
    code = "TD702"
    slug = "frequent-checkpoint"
    example = (
        "for step, (x, y) in enumerate(loader):\n"
        "    train_step(x, y)\n"
        "    torch.save(model.state_dict(), \"ckpt.pt\")  # every step"
    )
    title = "Checkpoint saving takes a large share of wall time"
    kind, step_attr, what = "checkpoint", "checkpoint_s", "Checkpoint saving"
    rationale = "`torch.save` serializes and writes the whole state synchronously; training waits."
    fix = (
        "Save less often (by time or every N steps), and only what you need to resume:\n```python\n"
        "if step % save_every == 0:\n    torch.save({'model': model.state_dict(), "
        "'opt': opt.state_dict()}, path)\n```"
    )


class LoggingOverhead(_PhaseShareRule):
    code = "TD703"
    slug = "logging-overhead"
    example = "print(f\"step {step} loss {loss} grad {model.fc.weight.grad}\")  # every step"
    title = "Per-step logging costs measurable time"
    kind, step_attr, what = "logging", "logging_s", "Printing and logging"
    min_share = 0.03
    reduction_factor = 10
    rationale = (
        "Formatting tensors for print/logging every step is slow (and on a GPU it syncs); "
        "the console write itself can block."
    )
    fix = (
        "Log every N steps, and log Python floats, not tensors:\n```python\nif step % 50 == 0:\n"
        "    print(f\"step {step} loss {loss.item():.4f}\")\n```"
    )

    def share(self, record: RunRecord, facts: RunFacts) -> float:
        """The timed print/log calls miss the formatting of their arguments (an f-string
        with tensors is evaluated before print runs); the stack samples of the calling
        lines include it, so the larger of the two measurements is used."""
        timed = facts.window_share(self.step_attr)
        profile = record.line_profile
        if profile.total_samples < MIN_LINE_SAMPLES:
            return timed
        lines = {(p.location.path, p.location.line) for p in record.phases if p.kind == self.kind and p.location}
        sampled = sum(profile.share(path, line) or 0.0 for path, line in lines)
        return max(timed, sampled)
