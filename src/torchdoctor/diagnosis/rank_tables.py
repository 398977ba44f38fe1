"""The tables and notes a multi-rank run adds to its report: each rank side by side, the
communication check, and the scaling predictions behind TD606."""

from __future__ import annotations

from torchdoctor.diagnosis.comm import comm_table
from torchdoctor.model.findings import Table
from torchdoctor.model.record import RunRecord
from torchdoctor.rules.base import ms
from torchdoctor.rules.rank_facts import JobFacts, predict_fixes, scaling_base


def rank_tables(record: RunRecord, jf: JobFacts | None) -> list[Table]:
    """`jf`: the record's cross-rank numbers (RunFacts.job), None unless two ranks or more."""
    tables = []
    if record.ranks:
        tables.append(_ranks_table(record, jf))
    if jf is not None:
        tables.append(_scaling_table(record, jf))
    comm = record.distributed.comm if record.distributed else None
    if comm is not None and record.ranks:
        tables.append(comm_table(comm))
    return tables


def _ranks_table(record: RunRecord, jf) -> Table:
    rows = []
    for view in record.ranks:
        s = jf.ranks.get(view.rank) if jf else None
        rows.append([view.rank, view.host or "—", view.status, len(view.steps),
                     *( [ms(s.step_s), ms(s.data_wait_s), ms(s.compute_s), ms(s.exposed_s), ms(s.extra_s),
                         s.last_ready, ms(s.caused_wait_s)] if s else ["—"] * 7)])
    caption = ("Per measured step, means. Exposed communication: DDP's all-reduce after the rank's last gradient was "
               "ready, plus FSDP's all-gathers and reduce-scatters where they block the host (CPU), plus the collectives the script calls. 'Others waited' counts the steps at which this rank's last "
               "gradient was ready last, and how long the others waited for it then.")
    return Table(title="Ranks", columns=["rank", "host", "status", "steps", "step ms", "data wait ms", "compute ms",
                                         "exposed comm ms", "eval/ckpt/log ms", "others waited (steps)",
                                         "their wait ms"], rows=rows, caption=caption)


def _scaling_table(record: RunRecord, jf) -> Table:
    base = scaling_base(record, jf)
    rows = [[p.fix, p.knob or "—", ms(p.step_s), round(p.ratio, 2), p.basis] for p in predict_fixes(record, jf, base)]
    if base.measured is not None:
        one = base.measured
        how = (f"'now' is measured: the job's throughput over one rank alone ({one.source}, {one.steps} steps, "
               f"{one.seconds:.0f} s; its record: {one.run_dir})")
    else:
        how = ("'now' is modelled, not measured: one rank alone is taken as a rank's step without the job's "
               "communication, which assumes the ranks share no compute (--one-rank always measures it)")
    return Table(title=f"Scaling: {jf.world_size} ranks against one", rows=rows,
                 columns=["configuration", "prove with --set", "step ms", "throughput vs one rank", "how"],
                 caption=(f"Throughput of the whole job relative to one rank alone. {how}; the fixes are predicted "
                          "from the communication each removes."))


def rank_notes(record: RunRecord) -> list[str]:
    notes = list(record.distributed.notes) if record.distributed and record.ranks else []
    for view in record.ranks:
        if view.status == "lost" and view.error:
            notes.append(view.error + (f"; last seen at {view.last_position}" if view.last_position else ""))
    return notes
