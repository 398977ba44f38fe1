"""`python3 dev.py gpu`: every CUDA path of torchdoctor checked on a real device in one bounded run.

plan.py      the steps: what each runs, its time budget, the files it needs and writes
orchestrate  runs the steps one by one, each stopped at its budget, and packs after each one
bundle.py    the at most 8 files a run leaves in --out, and --unpack
summary.py   SUMMARY.md: device, date, every number, what was skipped and why
wheels.py    --prepare: wheels for what the GPU machine lacks, and the command to run there
dryrun.py    --dry-run: the plan, with every script imported and every path checked
The step scripts (install, machine, tune_cuda, demo_cuda, record_fixtures, importcheck) run as
`python -m benchmarks.gpucheck.NAME` under the interpreter being checked; the modules above
run under any Python 3.10+ and never import torch.
"""
