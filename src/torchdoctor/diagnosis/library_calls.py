"""Syncs made inside installed libraries (a framework's own loop, a model library): real
costs on a GPU, but not lines the user wrote. Listed apart from the findings, by library."""

from __future__ import annotations

from collections import defaultdict

from torchdoctor.model.record import RunRecord

SYNC_KINDS = ("host-sync", "transfer-d2h", "data-dependent", "explicit-sync")


def library_sync_note(record: RunRecord) -> str | None:
    d = record.dispatch
    calls = [c for c in d.api_calls if c.library and c.kind in SYNC_KINDS and c.placement == "device"
             and c.phase == "train"]
    if not calls or not d.sampled_steps:
        return None
    by_library: dict[str, list] = defaultdict(list)
    for call in calls:
        by_library[call.library].append(call)
    parts = []
    for library, group in sorted(by_library.items()):
        per_step = sum(c.count for c in group) / d.sampled_steps
        top = max(group, key=lambda c: c.count)
        parts.append(f"{library}: {per_step:.0f} per step, most from {top.api} in {top.location.function} "
                     f"({top.location.path.rsplit('/', 1)[-1]}:{top.location.line})")
    return ("Host syncs inside installed libraries, not your code (they cost the same on a GPU; a setting of the "
            "library may control them): " + "; ".join(parts) + ".")
