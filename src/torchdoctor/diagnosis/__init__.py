"""The diagnosis stage: findings from every engine -> one ranked Report.

`run.analyze` (RunRecord -> Report) runs the runtime rules and merges the evidence of the
other engines: the profiler trace's findings (`trace_evidence`) and what `lint` says about
the executed files (`lint_evidence`), both added to the record by `evidence`. `trace.trace_report`
and `comm.comm_report` build the reports of those commands.
"""
