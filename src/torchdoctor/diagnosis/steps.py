"""What a run's steps were, in words: why none was measured, and how a step was defined."""

from __future__ import annotations

from torchdoctor.model.record import RunRecord


def no_step_explanation(record: RunRecord) -> str:
    """Why a run has no training step to diagnose, from what it saw (never blaming the
    entry point when the script did train in this process)."""
    run = record.run
    calls = run.backward_calls
    seen = f"{calls} backward() call{'s' if calls != 1 else ''}, no optimizer step"
    if run.status == "time-limit":
        partial = record.unfinished_step
        doing = ""
        if partial is not None and partial.closure_calls:
            doing = (f": one optimizer.step(closure) was still running after {partial.duration_s:.1f} s and "
                     f"{partial.closure_calls} closure evaluations")
        elif calls:
            doing = f" ({seen} by then)"
        return (f"the time limit (--max-seconds {run.max_seconds:g}) was reached before the first training step "
                f"completed{doing}; raise --max-seconds")
    spawned = next((n.message for n in record.probe_notes if n.probe == "spawn"), None)
    if calls == 0 and spawned:  # the training ran in processes torchdoctor could not follow
        return f"{run.script} trained in processes it started itself, which are not measured: {spawned}"
    if run.status == "crashed":
        return f"{run.script} raised before its first training step completed ({seen if calls else 'no backward()'})"
    if calls == 0:
        return (f"{run.script} ran to its end without calling backward() or optimizer.step(): nothing was trained "
                "in this process; if the training runs elsewhere (another script or module, a subprocess, "
                "torch.multiprocessing.spawn workers), point torchdoctor at that entry point")
    if calls == 1:
        return (f"{run.script} called backward() once ({seen}): there is no repeating training step to time; "
                "let it train for a few steps")
    created = [o for o in record.optimizers if o.created_at is not None]
    where = f" ({created[0].class_name} at {created[0].created_at.path}:{created[0].created_at.line})" if created else ""
    return (f"{seen} in {run.script}: an optimizer was created{where} but never stepped, so no step could be "
            "timed; call its step(), or leave out the unused optimizer so that each backward() counts as a step")


def step_definition_note(record: RunRecord) -> str | None:
    """A note on how steps were counted, when it was not one optimizer.step() each."""
    if record.run.step_source == "backward":
        return ("No torch.optim optimizer was created: each backward() call counted as one training step "
                "(the parameters are updated by hand).")
    closures = sum(s.closure_calls for s in record.measured_steps)
    if closures:
        per = closures / max(1, len(record.measured_steps))
        return (f"optimizer.step(closure): forward and backward ran inside the closure ({per:.1f} evaluations "
                "per step); they are shown as forward and backward, the optimizer's own work as optimizer.")
    return None
