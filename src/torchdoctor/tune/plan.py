"""Which trials a tune runs: the knobs that address the baseline's findings, the upper-bound
measurements, and the staged ladder of the first reference report."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field

from torchdoctor.model.findings import Report
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.facts import training_loader, waits_on_storage, workers_for_fix

FIX, UPPER_BOUND, LADDER, COMBINED = "fix", "upper bound", "ladder", "combined"
SCALING = "scaling"  # one rank beside N: compared like the others, never a fix to combine


@dataclass
class Trial:
    name: str
    knobs: dict[str, str]  # as given to --set
    kind: str
    addresses: list[str] = field(default_factory=list)  # finding codes this trial tests

    def settings(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.knobs.items()]


def _fixes_for(code: str, record: RunRecord, cuda: bool) -> dict[str, str] | None:
    loader = training_loader(record)
    if code == "TD101" and loader is not None:
        workers = workers_for_fix(record, loader)  # the count TD101's estimate assumed
        if workers <= loader.num_workers:
            return None  # no more workers can run at once here; data=cached measures the ceiling
        knobs = {"workers": str(workers), "persistent_workers": "true"}
        if loader.num_workers:
            knobs["prefetch_factor"] = "4"
        cores, threads = record.environment.cpu_count or 1, record.environment.num_threads or 1
        if not cuda and not waits_on_storage(loader) and threads + workers > cores:
            # On CPU the model's own threads take every core; computing workers then only contend.
            knobs["threads"] = str(max(1, cores - workers))
        return knobs
    if code == "TD102":
        return {"persistent_workers": "true"}
    table = {
        "TD103": {"pin_memory": "true"} if cuda else None,
        "TD104": {"non_blocking": "true"} if cuda else None,
        "TD302": {"foreach": "true"},
        # the fused kernels where torch has them for the looping optimizer, else foreach
        "TD306": {"fused": "true"} if any(o.implementation == "for-loop" and o.fused_available
                                          for o in record.optimizers) else {"foreach": "true"},
        "TD303": {"zero_grad": "none"},
        "TD402": {"amp": "bf16"} if cuda else None,
        "TD403": {"tf32": "true"} if cuda else None,
        "TD401": {"batch_size": str(loader.batch_size * 2)} if loader is not None and loader.batch_size else None,
        "TD301": {"compile": "true"} if cuda else None,  # on CPU compile time dwarfs a short trial
        "TD404": {"compile": "true"} if compile_works(record, cuda) else None,
        "TD601": {"no_sync": "true"},
        "TD602": {"comm_hook": "bf16" if cuda else "fp16"},
    }
    return table.get(code)


def compile_works(record: RunRecord, cuda: bool) -> bool:
    """Whether a compile trial can measure anything on this script here: the script does not
    compile already, and the backend has what it needs (a GPU, or a C++ compiler for the CPU's)."""
    if record.compile is not None and record.compile.compiled:
        return False
    if any(k.name == "compile" and not k.applied for k in record.knobs):
        return False  # refused in the baseline's own run: it would be refused again
    return cuda or any(shutil.which(c) for c in ("g++", "c++", "clang++"))


# TD603's finding names the setting it is about (evidence "setting"): the knob that undoes it
_DDP_SETTING_KNOBS = {"find_unused_parameters=True": {"find_unused_parameters": "false"},
                      "broadcast_buffers=True": {"broadcast_buffers": "false"},
                      "gradient_as_bucket_view=False": {"gradient_as_bucket_view": "true"}}


def _ddp_fixes(finding) -> dict[str, str] | None:
    setting = str(finding.evidence.get("setting", ""))
    if finding.code == "TD603":
        if setting.startswith("bucket_cap_mb="):
            return {"bucket_cap_mb": "25"}
        return _DDP_SETTING_KNOBS.get(setting)
    if finding.code == "TD606":  # the verdict's best fix that a knob can apply
        best = {"no_sync": {"no_sync": "true"}, "bf16": {"comm_hook": "bf16"}, "fp16": {"comm_hook": "fp16"},
                "broadcast_buffers": {"broadcast_buffers": "false"}}
        named = str(finding.evidence.get("best", ""))
        return next((knobs for key, knobs in best.items() if key in named), None)
    return None


_UPPER_BOUNDS = {"TD701": ("eval", "off"), "TD702": ("checkpoint", "off")}
DATA_CODES = ("TD101", "TD102", "TD105")  # causes data=cached bounds


def plan_trials(baseline: Report, record: RunRecord, cuda: bool) -> list[Trial]:
    """Single-knob trials, one per distinct knob set, in the baseline's ranking order."""
    trials: dict[tuple, Trial] = {}
    for finding in baseline.findings:
        knobs = _fixes_for(finding.code, record, cuda) or _ddp_fixes(finding)
        kind = FIX
        if knobs is None and finding.code in _UPPER_BOUNDS:
            name, value = _UPPER_BOUNDS[finding.code]
            knobs, kind = {name: value}, UPPER_BOUND
        if knobs is None:
            continue
        key = tuple(sorted(knobs.items()))
        trial = trials.setdefault(key, Trial(" ".join(f"{k}={v}" for k, v in knobs.items()), knobs, kind))
        if finding.code not in trial.addresses:
            trial.addresses.append(finding.code)
    planned = list(trials.values())
    data_codes = [f.code for f in baseline.findings if f.code in DATA_CODES]
    if record.loaders and data_codes:  # the ceiling of a data fix, when data is a finding
        planned.append(Trial("data=cached", {"data": "cached"}, UPPER_BOUND, data_codes))
        planned.append(Trial("data=loader-only", {"data": "loader-only"}, LADDER))
    if len(record.ranks) > 1:  # one rank beside N: the scaling verdict measured, not estimated
        verdict = [f.code for f in baseline.findings if f.code == "TD606"]
        planned.append(Trial("nproc=1", {"nproc": "1"}, SCALING, verdict))
    return planned


def parse_trials(texts: list[str]) -> list[Trial]:
    """`--trials "workers=4 persistent_workers=true" --trials foreach=true`: one trial each."""
    trials = []
    for text in texts:
        knobs = dict(part.split("=", 1) for part in text.replace(",", " ").split() if "=" in part)
        kind = LADDER if knobs.get("data") == "loader-only" else (
            UPPER_BOUND if knobs.get("data") == "cached" or "eval" in knobs or "checkpoint" in knobs else FIX)
        trials.append(Trial(" ".join(f"{k}={v}" for k, v in knobs.items()), knobs, kind))
    return trials


def combined_trial(winners: list[Trial]) -> Trial | None:
    """All fixes that helped on their own, together (later knobs win on a clash)."""
    if len(winners) < 2:
        return None
    knobs: dict[str, str] = {}
    addresses: list[str] = []
    for trial in winners:
        if trial.knobs.get("fused") == "true":
            knobs.pop("foreach", None)
        if trial.knobs.get("foreach") == "true":
            knobs.pop("fused", None)
        knobs.update(trial.knobs)
        addresses += [c for c in trial.addresses if c not in addresses]
    return Trial("combined: " + " ".join(f"{k}={v}" for k, v in knobs.items()), knobs, COMBINED, addresses)
