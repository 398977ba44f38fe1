"""The diagnose stage: findings from every engine → one ranked Report.

`run.analyze` (RunRecord → Report) runs the runtime rules and merges the evidence of the
other engines: the profiler trace's findings (`trace_evidence`) and what `lint` says about
the executed files (`lint_evidence`). `trace.trace_report` and `tune.tune_report` build the
reports of those commands.
"""
