"""The run stage: everything that executes inside the user's process.

`runner.execute` runs a script under a `probeset.ProbeSet` (the probes in `probes/`, the
`--set` knobs in `knobs/`) and returns a RunRecord; `inprocess` measures a `watch()` block or a
framework's fit the same way, and `ranks/` one process per rank. What follows the measuring
(evidence, diagnosis, the run directory) is `torchdoctor.pipeline`'s.
"""
